import { copyFileSync, mkdirSync, mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { visitorFactorsQuery } from '../../services/api/events.repository.ts';
import { createLogger } from '../logger.ts';
import { createClickHouse, migrate, type ClickHouseClient } from './clickhouse.ts';

const ALL = resolve(import.meta.dirname, '../../infra/clickhouse');
/** The migration files, in order. */
const FILES = readdirSync(ALL).filter((f) => /^\d{3}_.*\.sql$/.test(f)).sort();
const log = createLogger({ level: 'silent' });

/** 5,000 events of 7 visitors with fixed ids: run twice, the second run is a replay. */
const INSERT_EVENTS = `INSERT INTO events (tenant_id, video_id, timestamp, event_id, event_name, session_id, visitor_id, current_time, duration,
          watched_percentage, play_ms, focus_ms, received_at)
  SELECT toUUID('11111111-1111-4111-8111-111111111111'), toUUID('22222222-2222-4222-8222-222222222222'),
         fromUnixTimestamp64Milli(toInt64(1700000000000 + number), 'UTC'), toUUID(concat('00000000-0000-4000-8000-', leftPad(toString(number), 12, '0'))),
         ['heartbeat', 'cta_clicked', 'video_play'][number % 3 + 1], 'ses', concat('vis_', toString(number % 7)),
         0, 600, number % 100, 5000, 4000, fromUnixTimestamp64Milli(toInt64(1700000000000 + number), 'UTC')
  FROM numbers(5000)`;

describe('migrate (embedded ClickHouse)', () => {
  let dir: string;
  let ch: ClickHouseClient;

  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'va-migrate-'));
    ch = (await createClickHouse({ dataDir: join(dir, 'db') })).client;
  });

  afterAll(async () => {
    await ch?.close();
    rmSync(dir, { recursive: true, force: true });
  });

  const showCreate = async (table: string) => (await (await ch.query({ query: `SHOW CREATE TABLE ${table}`, format: 'JSONEachRow' })).json<{ statement: string }>())[0]!.statement;
  const factors = async (visitor: string) => {
    const q = visitorFactorsQuery('11111111-1111-4111-8111-111111111111', visitor);
    return (await ch.query({ ...q, format: 'JSONEachRow' })).json();
  };

  it('gives a database holding events before 007 a block per granule in visitor_events, and keeps its rows and scores', async () => {
    // The database as a deployment before 007 left it, with events in it.
    const before = join(dir, 'before-007');
    mkdirSync(before);
    for (const f of FILES.filter((f) => f < '007')) copyFileSync(join(ALL, f), join(before, f));
    expect(await migrate(ch, log, before)).toBe(6);
    await ch.command({ query: INSERT_EVENTS });
    expect(await showCreate('visitor_events')).not.toContain('min_compress_block_size');
    const scoresBefore = await Promise.all(['vis_0', 'vis_3', 'vis_6'].map(factors));
    expect(scoresBefore.map((rows) => rows.length)).toEqual([1, 1, 1]);

    expect(await migrate(ch, log)).toBe(FILES.length - 6);
    expect(await showCreate('visitor_events')).toContain('min_compress_block_size = 1');
    expect(await showCreate('visitor_events')).toContain('index_granularity = 1024');
    expect(await Promise.all(['vis_0', 'vis_3', 'vis_6'].map(factors))).toEqual(scoresBefore);
    const [{ n }] = (await (await ch.query({ query: 'SELECT count() AS n FROM visitor_events FINAL', format: 'JSONEachRow' })).json()) as [{ n: string }];
    expect(Number(n)).toBe(5000);
    // A replay's copies, written after the migration and merged with the old part, read the same.
    await ch.command({ query: INSERT_EVENTS });
    await ch.command({ query: 'OPTIMIZE TABLE visitor_events FINAL' });
    expect(await Promise.all(['vis_0', 'vis_3', 'vis_6'].map(factors))).toEqual(scoresBefore);
  });

  it('applies nothing twice', async () => {
    expect(await migrate(ch, log)).toBe(0);
    const rs = await ch.query({ query: 'SELECT version FROM schema_migrations FINAL ORDER BY version', format: 'JSONEachRow' });
    const versions = (await rs.json<{ version: number }>()).map((r) => Number(r.version));
    expect(versions).toEqual(FILES.map((f) => Number(f.slice(0, 3))));
  });
});
