/**
 * `npm run bench:engine` (issue 9, item 4): the embedded engine's own time
 * for each read of the API, with no HTTP, no IPC and no other process.
 *
 * Loads BENCH_FLOOR_EVENTS (10,000,000) events into a fresh chdb in this
 * process with the project's migrations (the same DDL, views and synthetic
 * events as the read-latency phase of `npm run bench`), waits for the load's
 * merges, then sends these queries in turn, query by query, 200 rounds after
 * 10 of warm-up:
 *
 *   - `SELECT 1` and `SELECT {x:UInt32}`: a call into the engine, plain and
 *     through the parameter path the repositories use;
 *   - a count over one video's key range in `events`, and over one visitor's
 *     in `visitor_events`: the primary-key analysis and the parts, with no
 *     column read beyond the key's granules at the range's ends;
 *   - the first page, the deep page and the score exactly as the API sends
 *     them (services/api/events.repository.ts).
 *
 * Prints p50 / p99 of each, the rows read, and each read's p99 beside the
 * API's target of issue 9: what is left of the target for HTTP, auth and the
 * JSON of the answer once the engine has answered.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import { join } from 'node:path';
import { rowsToFetch } from '../services/api/event-page.ts';
import { eventPageQuery, visitorFactorsQuery } from '../services/api/events.repository.ts';
import { createClickHouse, migrate } from '../shared/clickhouse/clickhouse.ts';
import { createLogger } from '../shared/logger.ts';
import { runBench } from './harness.ts';
import { deepPageStart, loadEventsSql, READ_SPAN_MS, readVisitor, waitForMerges, type RowsOf } from './read-latency.ts';
import { fmtInt, fmtMs, fmtRatio, quantile, table } from './stats.ts';

const STORED = Number(process.env.BENCH_FLOOR_EVENTS ?? 10_000_000);
const ROUNDS = Number(process.env.BENCH_FLOOR_ROUNDS ?? 200);
const TENANT = '0e1f0000-0000-4000-8000-000000000001';
const VIDEOS = [1, 2, 3, 4].map((i) => `0e1f0000-0000-4000-8000-00000000010${i}`);

/** The API's p99 targets of issue 9 at 10M stored events (ms). */
const TARGET: Record<string, number> = { firstPage: 15, deepPage: 20, score: 10 };

function out(line = ''): void {
  process.stdout.write(`${line}\n`);
}

runBench(async () => {
  const started = performance.now();
  const dir = mkdtempSync(join(os.tmpdir(), 'va-engine-floor-'));
  try {
    const { client: ch, describe } = await createClickHouse({ dataDir: dir });
    await migrate(ch, createLogger({ level: 'silent' }));
    const rows: RowsOf = async (sql) => (await ch.query({ query: sql, format: 'JSONEachRow' })).json();
    const startMs = Date.now() - READ_SPAN_MS - 60_000;
    out('# The embedded engine\'s own time per read (no HTTP, no IPC)');
    out(`date        ${new Date().toISOString()}`);
    out(`machine     ${os.cpus().length} × ${os.cpus()[0]?.model.split(' ').slice(0, 2).join(' ')}, load avg ${os.loadavg().map((l) => l.toFixed(2)).join(' ')} (1/5/15 min, at start)`);
    out(`clickhouse  ${describe}, in this process`);
    const t0 = performance.now();
    // In tenths, as a 10M load through the API's stack arrives in parts.
    for (let i = 0; i < 10; i++) {
      const from = Math.floor((STORED * i) / 10);
      await ch.command({ query: loadEventsSql(TENANT, VIDEOS, STORED, startMs, READ_SPAN_MS, from, Math.floor((STORED * (i + 1)) / 10) - from) });
    }
    const loadSec = (performance.now() - t0) / 1000;
    await waitForMerges(rows);
    const parts = (await (
      await ch.query({ query: "SELECT table, count() AS parts FROM system.parts WHERE active AND table IN ('events', 'visitor_events') GROUP BY table", format: 'JSONEachRow' })
    ).json()) as { table: string; parts: string }[];
    out(`data        ${fmtInt(STORED)} events (4 videos, ${fmtInt(Math.min(10_000, STORED / 40))} visitors, 30 days) loaded in ${loadSec.toFixed(1)} s; active parts: ${parts.map((p) => `${p.table} ${p.parts}`).join(', ')}`);

    const after = await deepPageStart(rows, TENANT, VIDEOS[0]!);
    const visitorOf = (i: number) => readVisitor(i, STORED);
    const page = (i: number, a?: { ts: number; id: string }) =>
      eventPageQuery({ tenantId: TENANT, videoId: a ? VIDEOS[0]! : VIDEOS[i % 4]!, sinceMs: undefined, after: a }, rowsToFetch(101));
    const reads: { name: string; label: string; at: (i: number) => { query: string; query_params?: Record<string, unknown> } }[] = [
      { name: 'one', label: 'SELECT 1', at: () => ({ query: 'SELECT 1' }) },
      { name: 'oneParam', label: 'SELECT {x:UInt32} (the parameter path)', at: () => ({ query: 'SELECT {x:UInt32}', query_params: { x: 1 } }) },
      {
        name: 'videoCount',
        label: 'count() over a video\'s key range (events)',
        at: (i) => ({ query: 'SELECT count() FROM events WHERE tenant_id = {t:UUID} AND video_id = {v:UUID}', query_params: { t: TENANT, v: VIDEOS[i % 4] } }),
      },
      {
        name: 'visitorCount',
        label: 'count() over a visitor\'s key range (visitor_events)',
        at: (i) => ({ query: 'SELECT count() FROM visitor_events WHERE visitor_id = {v:String}', query_params: { v: visitorOf(i) } }),
      },
      { name: 'firstPage', label: 'first page, as the API sends it', at: (i) => page(i) },
      { name: 'deepPage', label: 'deep page, as the API sends it', at: (i) => page(i, after) },
      { name: 'score', label: 'score, as the API sends it', at: (i) => visitorFactorsQuery(TENANT, visitorOf(i)) },
    ];
    const lat = reads.map(() => [] as number[]);
    const rowsRead = reads.map(() => 0);
    for (let i = -10; i < ROUNDS; i++) {
      for (const [k, r] of reads.entries()) {
        const q = r.at(i + 10);
        const t = performance.now();
        const body = (await (await ch.query({ ...q, format: 'JSON' })).json()) as { statistics?: { rows_read?: number } };
        const ms = performance.now() - t;
        if (i < 0) continue;
        lat[k]!.push(ms);
        rowsRead[k] = body.statistics?.rows_read ?? Number.NaN;
      }
    }
    out(`## ${fmtInt(ROUNDS)} rounds after 10 of warm-up, the queries in turn`);
    const floor = quantile(lat[1]!, 0.5);
    out(
      table([
        ['query', 'p50', 'p99', 'rows read', 'p50 / SELECT {x}', 'API target (p99)', 'engine p99 / target'],
        ...reads.map((r, k) => [
          r.label,
          fmtMs(quantile(lat[k]!, 0.5)),
          fmtMs(quantile(lat[k]!, 0.99)),
          fmtInt(rowsRead[k]!),
          fmtRatio(quantile(lat[k]!, 0.5) / floor),
          TARGET[r.name] === undefined ? '' : fmtMs(TARGET[r.name]!),
          TARGET[r.name] === undefined ? '' : fmtRatio(quantile(lat[k]!, 0.99) / TARGET[r.name]!),
        ]),
      ]),
    );
    out(`load avg    ${os.loadavg().map((l) => l.toFixed(2)).join(' ')} (1/5/15 min, at the end)`);
    out(`duration    ${((performance.now() - started) / 1000).toFixed(0)} s`);
    await ch.close();
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
