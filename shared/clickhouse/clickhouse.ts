import { mkdirSync, readdirSync, readFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { createClient, type ClickHouseClient } from '@clickhouse/client';
import { createChdbConnection } from 'chdb/connection';
import type { Logger } from '../logger.ts';

export type { ClickHouseClient };

export interface ClickHouseTarget {
  /** A ClickHouse server; when absent, embedded chdb under `dataDir`. */
  url?: string;
  username?: string;
  password?: string;
  database?: string;
  dataDir: string;
}

/**
 * The one place a ClickHouse client is built: a server when a URL is given,
 * else embedded chdb (libchdb binds one data directory per process).
 */
export async function createClickHouse(target: ClickHouseTarget): Promise<{ client: ClickHouseClient; describe: string }> {
  if (target.url) {
    const url = new URL(target.url);
    if (target.database && target.database !== 'default') {
      // The client's database must exist before the client can use it.
      const bootstrap = createClient({ url: target.url, username: target.username, password: target.password });
      try {
        await bootstrap.command({ query: `CREATE DATABASE IF NOT EXISTS ${target.database}` });
      } finally {
        await bootstrap.close();
      }
    }
    const client = createClient({
      url: target.url,
      username: target.username,
      password: target.password,
      database: target.database,
      clickhouse_settings: { date_time_input_format: 'best_effort' },
    });
    return { client, describe: `ClickHouse server at ${url.protocol}//${url.host}` };
  }
  const path = resolve(target.dataDir, 'clickhouse');
  mkdirSync(path, { recursive: true });
  // NOTE: chdb builds against its own copy of client-common types; the
  // runtime contract is the same, so the cast only bridges two type copies.
  const client = createClient({ connection: createChdbConnection({ path }) as never });
  return { client, describe: `embedded ClickHouse (chdb) in ${path}` };
}

const MIGRATIONS_DIR = resolve(import.meta.dirname, '../../infra/clickhouse');

/**
 * Applies the numbered migrations of infra/clickhouse (NNN_name.sql) that the
 * database has not seen, in order, and records each in schema_migrations.
 */
export async function migrate(client: ClickHouseClient, log: Logger, dir = MIGRATIONS_DIR): Promise<number> {
  await client.command({
    query: `CREATE TABLE IF NOT EXISTS schema_migrations (version UInt32, name String, applied_at DateTime64(3, 'UTC') DEFAULT now64(3))
            ENGINE = ReplacingMergeTree ORDER BY version`,
  });
  const rs = await client.query({ query: 'SELECT version FROM schema_migrations FINAL', format: 'JSONEachRow' });
  const done = new Set((await rs.json<{ version: number }>()).map((r) => Number(r.version)));
  const files = readdirSync(dir)
    .filter((f) => /^\d{3}_[a-z0-9_]+\.sql$/.test(f))
    .sort();
  let applied = 0;
  for (const file of files) {
    const version = Number(file.slice(0, 3));
    if (done.has(version)) continue;
    const statements = readFileSync(join(dir, file), 'utf8')
      .split(/;\s*$/m)
      .map((s) => s.replace(/^\s*--.*$/gm, '').trim())
      .filter(Boolean);
    for (const query of statements) await client.command({ query });
    await client.insert({ table: 'schema_migrations', values: [{ version, name: file }], format: 'JSONEachRow' });
    log.info({ version, file }, 'clickhouse_migration_applied');
    applied++;
  }
  return applied;
}

/** ClickHouse DateTime64 text for a millisecond timestamp (the reference form; see chTime). */
export function chTimeOf(ms: number): string {
  return new Date(ms).toISOString().replace('T', ' ').replace('Z', '');
}

/**
 * The `YYYY-MM-DD hh:mm:ss.` of the last two whole seconds formatted. The
 * projector formats two times per event (timestamp, received_at), and a
 * batch's events share a few seconds: with these, most calls are one
 * division and one concatenation instead of a Date, an ISO string and two
 * replaces, on the projector's hot path.
 */
const secondPrefixes: [number, string][] = [
  [Number.NaN, ''],
  [Number.NaN, ''],
];

/** ClickHouse DateTime64(3) text for a millisecond timestamp: `YYYY-MM-DD hh:mm:ss.mmm` (UTC), as chTimeOf. */
export function chTime(ms: number): string {
  const sec = Math.floor(ms / 1000);
  const frac = ms - sec * 1000;
  // Fractions of a ms and years outside 1970–9999 take the reference path.
  if (!Number.isInteger(frac) || sec < 0 || sec >= 253402300800) return chTimeOf(ms);
  let prefix: string;
  if (secondPrefixes[0]![0] === sec) prefix = secondPrefixes[0]![1];
  else if (secondPrefixes[1]![0] === sec) prefix = secondPrefixes[1]![1];
  else {
    prefix = `${new Date(sec * 1000).toISOString().slice(0, 19).replace('T', ' ')}.`;
    secondPrefixes[1] = secondPrefixes[0]!;
    secondPrefixes[0] = [sec, prefix];
  }
  return prefix + (frac < 10 ? `00${frac}` : frac < 100 ? `0${frac}` : `${frac}`);
}
