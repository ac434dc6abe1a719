/**
 * Child process of the benchmark: runs the service stack (startStack) in a
 * process of its own, so the load generator in the parent does not share the
 * service's event loop, and answers ClickHouse requests over IPC. Its own
 * ClickHouse client opens the stack's data directory: chdb lets connections
 * to the same directory coexist in one process (but binds one directory per
 * process, which is why the parent cannot open it).
 */
import { readFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { monitorEventLoopDelay, PerformanceObserver } from 'node:perf_hooks';
import { createClickHouse, type ClickHouseClient } from '../shared/clickhouse/clickhouse.ts';
import { loadConfig } from '../shared/config.ts';
import { createLogger } from '../shared/logger.ts';
import { startStack, type Stack } from '../services/stack.ts';
import { EVENT_COLUMNS } from '../services/projector/event-rows.ts';
import { InspectorProfiler } from './inspector-profiler.ts';
import type { ProcessStats, QueryLoadResult, QueryStats, WatchResult, WorkerReady, WorkerRequest, WorkerResponse, RawInsertResult } from './worker-protocol.ts';

const REPO_ROOT = resolve(import.meta.dirname, '..');
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

const send = (msg: WorkerReady | WorkerResponse | { type: 'failed'; error: string }) => process.send?.(msg);

// Event-loop delay of the service's own loop, read by the bench through op 'stats'.
const eld = monitorEventLoopDelay({ resolution: 10 });
eld.enable();
// Garbage-collection pauses since the last reset (what of the delay is GC), read with it.
const noPauses = () => ({ count: 0, totalMs: 0, maxMs: 0, over50: 0 });
const gc = noPauses();
new PerformanceObserver((list) => {
  for (const e of list.getEntries()) {
    gc.count++;
    gc.totalMs += e.duration;
    if (e.duration > gc.maxMs) gc.maxMs = e.duration;
    if (e.duration > 50) gc.over50++;
  }
}).observe({ entryTypes: ['gc'] });

async function main(): Promise<void> {
  const config = loadConfig(process.env);
  const log = createLogger({ level: config.LOG_LEVEL, service: 'bench-stack' });
  const usesClickHouse = config.SERVICES.includes('projector') || config.SERVICES.includes('api');
  const ch: ClickHouseClient | undefined = usesClickHouse ? (await createClickHouse({ dataDir: config.DATA_DIR })).client : undefined;

  // NOTE: the watch starts before the stack so that the projector's whole
  // run, start-up included, is on the timeline.
  const target = Number(process.env.BENCH_WATCH_TARGET ?? 0);
  const watch = target > 0 && ch ? watchCount(ch, target, Number(process.env.BENCH_WATCH_TIMEOUT_MS ?? 180_000)) : undefined;

  const startedAt = Date.now();
  const stack: Stack = await startStack(config, log);
  const readyAt = Date.now();
  let clickhouseVersion = 'not used';
  if (ch) {
    const rs = await ch.query({ query: 'SELECT version() AS v', format: 'JSONEachRow' });
    const chdbPkg = JSON.parse(readFileSync(join(REPO_ROOT, 'node_modules/chdb/package.json'), 'utf8')) as { version: string };
    clickhouseVersion = `ClickHouse ${(await rs.json<{ v: string }>())[0]?.v} (chdb ${chdbPkg.version}, embedded)`;
  }
  send({ type: 'ready', url: stack.url, adminToken: stack.adminToken!, startedAt, readyAt, clickhouseVersion });

  let stopping: Promise<void> | undefined;
  const stop = () =>
    (stopping ??= (async () => {
      await stack.stop().catch((err: unknown) => log.error({ err }, 'bench_stack_stop_failed'));
      await ch?.close().catch(() => undefined);
    })());
  // An orphaned worker would keep chdb and Kafka clients open forever.
  process.on('disconnect', () => void stop().finally(() => process.exit(0)));

  process.on('message', (raw: unknown) => {
    const req = raw as WorkerRequest;
    const reply = (r: Omit<WorkerResponse, 'type' | 'id'>) => send({ type: 'response', id: req.id, ...r });
    handle(req)
      .then((result) => reply({ ok: true, result }))
      .catch((err: unknown) => reply({ ok: false, error: err instanceof Error ? err.message : String(err) }));
  });

  const profiler = new InspectorProfiler();
  async function handle(req: WorkerRequest): Promise<unknown> {
    switch (req.op) {
      case 'query': {
        const rs = await need(ch).query({ query: req.sql, format: 'JSONEachRow' });
        return rs.json();
      }
      case 'queryStats': {
        const rs = await need(ch).query({ query: req.sql, query_params: req.params, format: 'JSON' });
        const j = (await rs.json()) as unknown as { rows: number; statistics: { rows_read: number; elapsed: number } };
        const r: QueryStats = { rows: j.rows, rowsRead: j.statistics.rows_read, elapsedMs: j.statistics.elapsed * 1000 };
        return r;
      }
      case 'command': {
        const started = performance.now();
        await need(ch).command({ query: req.sql });
        return { ms: performance.now() - started };
      }
      case 'queryLoad':
        return queryLoad(need(ch), req.queries, req.concurrency, req.durationMs);
      case 'awaitWatch':
        if (!watch) throw new Error('no count watch was requested (BENCH_WATCH_TARGET)');
        return watch;
      case 'rawInsert':
        return rawInsert(need(ch), req.batchSize, req.rounds);
      case 'stats': {
        const ns = 1e6;
        const r: ProcessStats = {
          eldP50: eld.percentile(50) / ns,
          eldP99: eld.percentile(99) / ns,
          eldMax: eld.max / ns,
          maxRss: process.resourceUsage().maxRSS * 1024,
          rss: process.memoryUsage.rss(),
          gc: { ...gc },
        };
        if (req.reset) {
          eld.reset();
          Object.assign(gc, noPauses());
        }
        return r;
      }
      case 'profileStart':
        await profiler.start();
        return { started: true };
      case 'profileStop':
        return profiler.stop();
      case 'stop':
        await stop();
        setImmediate(() => process.exit(0));
        return { stopped: true };
    }
  }
}

function need(ch: ClickHouseClient | undefined): ClickHouseClient {
  if (!ch) throw new Error('this worker runs no service that uses ClickHouse');
  return ch;
}

/** The engine's own ceiling for a read: `concurrency` loops of queries, no HTTP and no IPC per query. */
async function queryLoad(ch: ClickHouseClient, queries: { sql: string; params?: Record<string, unknown> }[], concurrency: number, durationMs: number): Promise<QueryLoadResult> {
  const lat: number[] = [];
  let errors = 0;
  let firstError: string | undefined;
  let next = 0;
  const started = performance.now();
  const end = started + durationMs;
  const loop = async () => {
    while (performance.now() < end) {
      const q = queries[next++ % queries.length]!;
      const t = performance.now();
      try {
        const rs = await ch.query({ query: q.sql, query_params: q.params, format: 'JSONEachRow' });
        await rs.json();
        lat.push(performance.now() - t);
      } catch (err) {
        errors++;
        firstError ??= err instanceof Error ? err.message : String(err);
      }
    }
  };
  await Promise.all(Array.from({ length: concurrency }, loop));
  const seconds = (performance.now() - started) / 1000;
  lat.sort((a, b) => a - b);
  const q = (p: number) => (lat.length ? lat[Math.min(lat.length - 1, Math.max(0, Math.ceil(p * lat.length) - 1))]! : Number.NaN);
  return { count: lat.length, seconds, p50: q(0.5), p99: q(0.99), errors, firstError };
}

/** Polls `SELECT count() FROM events` (metadata only, cheap) until it reaches `target`. */
async function watchCount(ch: ClickHouseClient, target: number, timeoutMs: number): Promise<WatchResult> {
  const watchStartedAt = Date.now();
  const timeline: [number, number][] = [];
  let firstRowAt: number | undefined;
  for (;;) {
    let count = 0;
    try {
      const rs = await ch.query({ query: 'SELECT count() AS c FROM events', format: 'JSONEachRow' });
      count = Number((await rs.json<{ c: string | number }>())[0]?.c ?? 0);
    } catch {
      // The table does not exist until the stack has migrated.
    }
    const now = Date.now();
    timeline.push([now, count]);
    if (count > 0 && firstRowAt === undefined) firstRowAt = now;
    if (count >= target || now - watchStartedAt > timeoutMs) {
      return { watchStartedAt, firstRowAt, doneAt: now, count, reached: count >= target, timeline };
    }
    await sleep(50);
  }
}

/**
 * The raw chdb insert rate for the rows the projector wrote: read back
 * (in time order, as they arrive from Kafka), then inserted with the
 * client's `insert` in batches of `batchSize` into scratch tables of the same
 * DDL: as the projector sends them (JSONCompactEachRow, EVENT_COLUMNS) with
 * the visitor materialized view attached (the work the projector's insert
 * does) and without it, and as JSONEachRow objects with the view (the
 * format of the runs before 2026-11-23).
 */
async function rawInsert(ch: ClickHouseClient, batchSize: number, rounds: number): Promise<RawInsertResult> {
  const rs = await ch.query({ query: `SELECT ${EVENT_COLUMNS.join(', ')} FROM events ORDER BY timestamp, event_id`, format: 'JSONEachRow' });
  const rows = await rs.json<Record<string, unknown>>();
  // JSON output quotes 64-bit integers; the projector sends numbers.
  for (const r of rows) {
    r.play_ms = Number(r.play_ms);
    r.focus_ms = Number(r.focus_ms);
  }
  const arrays = rows.map((r) => EVENT_COLUMNS.map((c) => r[c]));
  const ddl = readFileSync(join(REPO_ROOT, 'infra/clickhouse/002_visitor_events.sql'), 'utf8');
  const mv = /CREATE MATERIALIZED VIEW[\s\S]*?FROM events\s*;/.exec(ddl)?.[0];
  if (!mv) throw new Error('could not find the visitor materialized view in 002_visitor_events.sql');
  await ch.command({ query: 'CREATE TABLE IF NOT EXISTS bench_raw_events AS events' });
  await ch.command({ query: 'CREATE TABLE IF NOT EXISTS bench_raw_visitor_events AS visitor_events' });
  await ch.command({ query: 'CREATE TABLE IF NOT EXISTS bench_raw_events_plain AS events' });
  await ch.command({
    query: mv
      .replace('visitor_events_mv', 'bench_raw_visitor_events_mv')
      .replace(/TO visitor_events\b/, 'TO bench_raw_visitor_events')
      .replace(/FROM events\s*;$/, 'FROM bench_raw_events'),
  });

  const run = async (table: string, truncate: string[], format: 'JSONCompactEachRow' | 'JSONEachRow'): Promise<number> => {
    for (const t of truncate) await ch.command({ query: `TRUNCATE TABLE ${t}` });
    const started = performance.now();
    for (let i = 0; i < rows.length; i += batchSize) {
      if (format === 'JSONEachRow') await ch.insert({ table, values: rows.slice(i, i + batchSize), format });
      else await ch.insert({ table, values: arrays.slice(i, i + batchSize), format, columns: [...EVENT_COLUMNS] });
    }
    return rows.length / ((performance.now() - started) / 1000);
  };
  const withMv: number[] = [];
  const withMvObjects: number[] = [];
  const plain: number[] = [];
  const withView = ['bench_raw_events', 'bench_raw_visitor_events'];
  for (let r = 0; r < rounds; r++) {
    withMv.push(await run('bench_raw_events', withView, 'JSONCompactEachRow'));
    withMvObjects.push(await run('bench_raw_events', withView, 'JSONEachRow'));
    plain.push(await run('bench_raw_events_plain', ['bench_raw_events_plain'], 'JSONCompactEachRow'));
  }
  const rs2 = await ch.query({ query: 'SELECT count() AS c FROM bench_raw_visitor_events', format: 'JSONEachRow' });
  const mvRows = Number((await rs2.json<{ c: string }>())[0]?.c ?? 0);
  return { rows: rows.length, batchSize, withMv, withMvObjects, plain, mvRows };
}

main().catch((err: unknown) => {
  send({ type: 'failed', error: err instanceof Error ? (err.stack ?? err.message) : String(err) });
  process.stderr.write(`bench stack worker failed: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`);
  setTimeout(() => process.exit(1), 100);
});
