import { rowsToFetch } from '../services/api/event-page.ts';
import { eventPageQuery, visitorFactorsQuery } from '../services/api/events.repository.ts';
import { cursorCodec } from '../shared/cursor.ts';
import { parseVideoId } from '../shared/ids.ts';
import { sleep, type BenchContext } from './context.ts';
import { HttpClient } from './http-client.ts';
import { quantile } from './stats.ts';
import type { StackWorker } from './worker-client.ts';

export const READ_KINDS = ['firstPage', 'deepPage', 'since', 'score', 'visitors', 'timeline'] as const;
export type ReadKind = (typeof READ_KINDS)[number];

export const READ_LABEL: Record<ReadKind, string> = {
  firstPage: 'GET /v1/videos/:id/events (first page, 100)',
  deepPage: 'GET /v1/videos/:id/events?cursor= (deep page)',
  since: 'GET /v1/videos/:id/events?since= (last quarter)',
  score: 'GET /v1/visitors/:id/score',
  visitors: 'GET /v1/visitors?order=score&min_score=40 (first page, 50)',
  timeline: 'GET /v1/visitors/:id/events (first page, 100)',
};

/**
 * The visitor read model (visitors) as the derived-events service's
 * snapshots would fill it, computed from the loaded events in one
 * INSERT … SELECT: the read path is what is measured, not the service
 * (which bench phase 6 measures).
 */
export function loadVisitorsSql(tenant: string): string {
  return `
      INSERT INTO visitors
      SELECT tenant_id, visitor_id,
             toUInt8(round(100 * (0.40 * least(1, max_w / 100) + 0.20 * if(play > 0, least(1, focus / play), 0)
                                 + 0.25 * least(clicks, 2) / 2 + 0.15 * least(rewinds, 3) / 3))) AS score,
             1 AS score_version,
             least(1, max_w / 100) AS watched_percent,
             if(play > 0, least(1, focus / play), 0) AS focus_time_ratio,
             clicks AS cta_clicks, rewinds,
             first_seen, last_seen, videos, NULL AS lead_at, 1 AS version
      FROM (
        SELECT tenant_id, visitor_id, max(watched_percentage) AS max_w, sum(play_ms) AS play, sum(focus_ms) AS focus,
               countIf(event_name = 'cta_clicked') AS clicks, countIf(event_name = 'seek' AND seek_to < seek_from) AS rewinds,
               min(timestamp) AS first_seen, max(timestamp) AS last_seen, groupUniqArray(20)(video_id) AS videos
        FROM events WHERE tenant_id = '${tenant}'
        GROUP BY tenant_id, visitor_id
      )`;
}

/** The SQL of a read, as the API sent it before reads stopped using FINAL for pages, and now. */
export const SQL_SHAPES = ['before', 'now'] as const;
export type SqlShape = (typeof SQL_SHAPES)[number];

export interface SqlFigure {
  kind: ReadKind;
  shape: SqlShape;
  p50: number;
  p99: number;
  max: number;
  /** Rows ClickHouse read for the query (FORMAT JSON statistics), the last time it ran. */
  rowsRead: number;
  rowsReadMax: number;
  /** Rows it returned. */
  rows: number;
}

export interface ReadLatencyResult {
  stored: number;
  loadSec: number;
  tableRows: number;
  parts: number;
  /** Active parts of `events` right after the load, and when the phase ended. */
  loadedParts: number;
  partsAfter: number;
  /** Time waited for the load's merges to settle before the requests. */
  settleSec: number;
  /** Active parts of `visitor_events` when the requests began. */
  visitorParts: number;
  requests: number;
  p50: Record<ReadKind, number>;
  p99: Record<ReadKind, number>;
  max: Record<ReadKind, number>;
  items: Record<ReadKind, number>;
  /** Request kinds the API failed, with the first failure. */
  failures: Partial<Record<ReadKind, string>>;
  /** Status of page 2 fetched with the next_cursor of page 1. */
  secondPage: string;
  /** Each read's SQL straight to ClickHouse, before and now, interleaved. */
  sql: SqlFigure[];
}

const SIGNALS = `('heartbeat', 'seek')`;
const NAMES = `['heartbeat','heartbeat','heartbeat','heartbeat','video_play','video_pause','video_resume','seek','watched_25_percent','watched_50_percent','cta_shown','cta_clicked']`;
const UUID = /^[0-9a-f-]{36}$/;

/** Options of one read-latency target: its tenant, API key, videos and how many events to store. */
export interface ReadOptions {
  tenantId: string;
  apiKey: string;
  videoIds: string[];
  stored: number;
  requests: number;
  cursorSecret: string;
}

/** A loaded target, ready for its requests; `finish` runs its SQL comparison and sums up. */
interface PreparedReads {
  worker: StackWorker;
  client: HttpClient;
  auth: Record<string, string>;
  pathOf: Record<ReadKind, (i: number) => string>;
  lat: Record<ReadKind, number[]>;
  items: Record<ReadKind, number>;
  failures: Partial<Record<ReadKind, string>>;
  finish: () => Promise<ReadLatencyResult>;
}

/**
 * The read phases' synthetic events: `stored` events of one tenant over
 * `videos` and 10,000 visitors (40 in a row per video and visitor), spread
 * evenly over `spanMs` from `startMs`, with the player's mix of names.
 * Straight into `events`, so they reach visitor_events through its view like
 * projected rows. `from`/`count` load a slice (numbers(from, count)).
 */
export function loadEventsSql(tenant: string, videos: string[], stored: number, startMs: number, spanMs: number, from = 0, count = stored): string {
  return `
      INSERT INTO events (tenant_id, video_id, timestamp, event_id, event_name, session_id, visitor_id, current_time, duration,
                          watched_percentage, play_ms, focus_ms, seek_from, seek_to, utm_source, source, received_at)
      SELECT
        toUUID('${tenant}') AS tenant_id,
        [${videos.map((v) => `toUUID('${v}')`).join(', ')}][intDiv(number, 40) % ${videos.length} + 1] AS video_id,
        fromUnixTimestamp64Milli(toInt64(${startMs} + intDiv(number * ${spanMs}, ${stored})), 'UTC') AS timestamp,
        generateUUIDv4(number) AS event_id,
        ${NAMES}[intHash32(number) % 12 + 1] AS event_name,
        concat('ses_lt_', toString(intDiv(number, 40) % 50000)) AS session_id,
        concat('vis_lt_', toString(intDiv(number, 40) % 10000)) AS visitor_id,
        toFloat64(number % 600) AS current_time,
        600. AS duration,
        least(100., (number % 600) / 6.) AS watched_percentage,
        if(event_name = 'heartbeat', 5000, 0) AS play_ms,
        if(event_name = 'heartbeat', 4000 + number % 1000, 0) AS focus_ms,
        if(event_name = 'seek', 120., NULL) AS seek_from,
        if(event_name = 'seek', if(number % 2 = 0, 60., 180.), NULL) AS seek_to,
        if(number % 7 = 0, 'newsletter', NULL) AS utm_source,
        'player' AS source,
        timestamp AS received_at
      FROM numbers(${from}, ${count})`;
}

/** Runs SQL and returns its rows: the stack worker's `query`, or a client of the bench's own. */
export type RowsOf = <T>(sql: string) => Promise<T[]>;

/** The read phases' events span 30 days up to a minute before the load. */
export const READ_SPAN_MS = 30 * 24 * 3600 * 1000;

/** The visitor of request `i` over `stored` loaded events: spread over every visitor loadEventsSql made. */
export function readVisitor(i: number, stored: number): string {
  return `vis_lt_${(i * 7919) % Math.min(10_000, Math.floor(stored / 40))}`;
}

/**
 * Waits until no merge has run for 3 s in a row, or 3 minutes: a load's
 * background merges (10M events load as 10 parts) take the same 2 CPUs as
 * the requests. Returns the seconds waited, for the report.
 */
export async function waitForMerges(rows: RowsOf): Promise<number> {
  const started = performance.now();
  for (let quiet = 0; quiet < 3 && performance.now() - started < 180_000; ) {
    const [m] = await rows<{ n: string }>(`SELECT count() AS n FROM system.merges WHERE database = currentDatabase()`);
    quiet = Number(m?.n ?? 0) === 0 ? quiet + 1 : 0;
    await sleep(1000);
  }
  return (performance.now() - started) / 1000;
}

/** Where the deep page starts: half-way through the video's listed events. */
export async function deepPageStart(rows: RowsOf, tenant: string, video: string): Promise<{ ts: number; id: string }> {
  const [{ listed }] = (await rows<{ listed: string }>(
    `SELECT count() AS listed FROM events WHERE tenant_id = '${tenant}' AND video_id = '${video}' AND event_name NOT IN ${SIGNALS}`,
  )) as [{ listed: string }];
  const [mid] = await rows<{ ts: string; id: string }>(
    `SELECT toUnixTimestamp64Milli(timestamp) AS ts, toString(event_id) AS id FROM events
     WHERE tenant_id = '${tenant}' AND video_id = '${video}' AND event_name NOT IN ${SIGNALS}
     ORDER BY timestamp, event_id LIMIT 1 OFFSET ${Math.floor(Number(listed) / 2)}`,
  );
  if (!mid) throw new Error('no mid-point row for the deep page');
  return { ts: Number(mid.ts), id: mid.id };
}

/**
 * Read latency over `stored` events of one tenant, loaded straight into
 * ClickHouse (INSERT … SELECT FROM numbers(), through the visitor view like
 * projected rows) across 4 videos and 10,000 visitors over 30 days. The
 * videos are registered through the admin API since the API checks their
 * ownership in the config store. Requests are sequential, one at a time.
 */
export async function benchReadLatency(ctx: BenchContext, worker: StackWorker, opts: ReadOptions): Promise<ReadLatencyResult> {
  const [result] = await benchReadGrowth(ctx, [{ worker, opts }]);
  return result!;
}

/**
 * The same over several stacks at once, each with its own data size (e.g.
 * 1M and 10M events, each stack in its own process with its own chdb):
 * every stack is loaded and settled first, then the requests go to them in
 * turn, request by request, so the machine's load of the moment falls on
 * every size alike and the ratios between sizes are the data's growth, not
 * the minute they were measured in. One result per target, in order.
 */
export async function benchReadGrowth(ctx: BenchContext, targets: { worker: StackWorker; opts: ReadOptions }[]): Promise<ReadLatencyResult[]> {
  const prepared: PreparedReads[] = [];
  for (const t of targets) prepared.push(await prepareReads(ctx, t.worker, t.opts));
  const requests = Math.min(...targets.map((t) => t.opts.requests));
  try {
    for (const kind of READ_KINDS) {
      ctx.progress(`read latency: ${kind}${prepared.length > 1 ? `, ${prepared.length} stacks in turn` : ''}`);
      for (let i = -10; i < requests; i++) {
        for (const p of prepared) {
          if (p.failures[kind]) continue;
          const t = performance.now();
          const res = await p.client.request('GET', p.pathOf[kind](i + 10), { headers: p.auth });
          const ms = performance.now() - t;
          if (res.status !== 200) {
            // A broken request kind is reported, not fatal: the other figures still stand.
            p.failures[kind] = `HTTP ${res.status}: ${res.body.slice(0, 160)}`;
            ctx.progress(`read latency: ${kind} failed, ${p.failures[kind]}\n${p.worker.logTail(6)}`);
            continue;
          }
          if (i < 0) continue; // warm-up
          p.lat[kind].push(ms);
          if (i === 0) {
            const body = JSON.parse(res.body) as { data?: unknown[] };
            p.items[kind] = body.data?.length ?? 1;
          }
        }
      }
    }
  } finally {
    for (const p of prepared) p.client.close();
  }
  const results: ReadLatencyResult[] = [];
  for (const p of prepared) results.push(await p.finish());
  return results;
}

async function prepareReads(ctx: BenchContext, worker: StackWorker, opts: ReadOptions): Promise<PreparedReads> {
  const tenant = opts.tenantId;
  const videos = opts.videoIds.map((v) => parseVideoId(v)!);
  if (!UUID.test(tenant) || !videos.every((v) => UUID.test(v))) throw new Error('unexpected id format');
  const spanMs = READ_SPAN_MS;
  const startMs = Date.now() - spanMs - 60_000;
  ctx.progress(`read latency: loading ${opts.stored.toLocaleString('en-US')} events into ClickHouse`);
  const load = await worker.rpc<{ ms: number }>(
    {
      op: 'command',
      sql: loadEventsSql(tenant, videos, opts.stored, startMs, spanMs),
    },
    Math.max(300_000, opts.stored / 10_000),
  );
  const partsOf = async (table: string) =>
    Number(
      (await worker.query<{ parts: string }>(`SELECT count() AS parts FROM system.parts WHERE active AND database = currentDatabase() AND table = '${table}'`))[0]
        ?.parts ?? 0,
    );
  const loadedParts = await partsOf('events');
  ctx.progress(`read latency: waiting for the load's merges to settle (${loadedParts} parts of events)`);
  const rows: RowsOf = (sql) => worker.query(sql);
  const settleSec = await waitForMerges(rows);
  const [stats] = await worker.query<{ rows: string; parts: string }>(
    `SELECT sum(rows) AS rows, count() AS parts FROM system.parts WHERE active AND database = currentDatabase() AND table = 'events'`,
  );
  const visitorParts = await partsOf('visitor_events');
  ctx.progress('read latency: filling the visitor read model from the loaded events');
  await worker.rpc({ op: 'command', sql: loadVisitorsSql(tenant) }, 300_000);
  await waitForMerges(rows);

  const cursorAt = await deepPageStart(rows, tenant, videos[0]!);
  // Issued the way the API issues next_cursor (same codec and secret), rather
  // than by walking ~700 pages to get there.
  const deepCursor = cursorCodec('evt', opts.cursorSecret).encode([videos[0], cursorAt.ts, cursorAt.id]);
  const since = encodeURIComponent(new Date(startMs + spanMs * 0.75).toISOString());

  const visitorOf = (i: number) => readVisitor(i, opts.stored);
  const client = new HttpClient(worker.ready.url, 1);

  // The second page through the next_cursor the API itself issued: tells a
  // broken cursor from a broken deep cursor.
  const auth0 = { authorization: `Bearer ${opts.apiKey}` };
  const page1 = await client.request('GET', `/v1/videos/${opts.videoIds[0]}/events`, { headers: auth0 });
  const next = (JSON.parse(page1.body) as { next_cursor: string | null }).next_cursor;
  const page2 = next ? await client.request('GET', `/v1/videos/${opts.videoIds[0]}/events?cursor=${encodeURIComponent(next)}`, { headers: auth0 }) : undefined;
  const secondPage = page2 ? `HTTP ${page2.status}` : 'no next_cursor';
  const auth = { authorization: `Bearer ${opts.apiKey}` };
  const pathOf: Record<ReadKind, (i: number) => string> = {
    firstPage: (i) => `/v1/videos/${opts.videoIds[i % opts.videoIds.length]}/events`,
    deepPage: () => `/v1/videos/${opts.videoIds[0]}/events?cursor=${encodeURIComponent(deepCursor)}`,
    since: (i) => `/v1/videos/${opts.videoIds[i % opts.videoIds.length]}/events?since=${since}`,
    score: (i) => `/v1/visitors/${visitorOf(i)}/score`,
    visitors: () => '/v1/visitors?order=score&min_score=40',
    timeline: (i) => `/v1/visitors/${visitorOf(i)}/events`,
  };
  const lat = Object.fromEntries(READ_KINDS.map((k) => [k, [] as number[]])) as Record<ReadKind, number[]>;
  const items = Object.fromEntries(READ_KINDS.map((k) => [k, 0])) as Record<ReadKind, number>;
  const failures: Partial<Record<ReadKind, string>> = {};
  const finish = async (): Promise<ReadLatencyResult> => {
    // Each read's SQL sent straight to ClickHouse over IPC (no HTTP), as the
    // API sent it before (FINAL over the video's key range) and now
    // (events.repository.ts itself), interleaved query by query so both shapes
    // see the same machine, with the rows ClickHouse read, which noise does not
    // change. A page of 100 asks for 101 events: FINAL read 101 rows, the read
    // without FINAL asks for 202 (room for a replay's copy of each).
    ctx.progress('read latency: each read\'s SQL straight to ClickHouse, before and now, interleaved');
    const video0 = videos[0]!;
    const sinceMs = Math.floor(startMs + spanMs * 0.75);
    const finalPage = (where: string) => ({
      sql: `
      SELECT event_name, visitor_id, toUnixTimestamp64Milli(timestamp) AS ts, toString(event_id) AS id_text
      FROM events FINAL
      WHERE tenant_id = '${tenant}' AND video_id = '${video0}'
        AND event_name NOT IN ${SIGNALS}
        ${where}
      ORDER BY timestamp, event_id
      LIMIT 101`,
    });
    const nowPage = (q: { sinceMs?: number; after?: { ts: number; id: string } }) => {
      const { query, query_params } = eventPageQuery({ tenantId: tenant, videoId: video0, sinceMs: q.sinceMs, after: q.after }, rowsToFetch(101));
      return { sql: query, params: query_params };
    };
    const shapes: { kind: ReadKind; shape: SqlShape; at: (i: number) => { sql: string; params?: Record<string, unknown> } }[] = [
      { kind: 'firstPage', shape: 'before', at: () => finalPage('') },
      { kind: 'firstPage', shape: 'now', at: () => nowPage({}) },
      {
        kind: 'deepPage',
        shape: 'before',
        at: () => finalPage(`AND (timestamp, event_id) > (fromUnixTimestamp64Milli(${cursorAt.ts}, 'UTC'), toUUID('${cursorAt.id}'))`),
      },
      { kind: 'deepPage', shape: 'now', at: () => nowPage({ after: cursorAt }) },
      { kind: 'since', shape: 'before', at: () => finalPage(`AND timestamp >= fromUnixTimestamp64Milli(${sinceMs}, 'UTC')`) },
      { kind: 'since', shape: 'now', at: () => nowPage({ sinceMs }) },
      // The score's SQL did not change (FINAL over one visitor's key range): its rows read, beside the pages'.
      {
        kind: 'score',
        shape: 'now',
        at: (i) => {
          const { query, query_params } = visitorFactorsQuery(tenant, visitorOf(i));
          return { sql: query, params: query_params };
        },
      },
    ];
    const sqlLat = shapes.map(() => [] as number[]);
    const sqlStats = shapes.map(() => ({ rowsRead: 0, rowsReadMax: 0, rows: 0 }));
    for (let i = -10; i < opts.requests; i++) {
      for (const [k, shape] of shapes.entries()) {
        const { sql, params } = shape.at(i + 10);
        const t = performance.now();
        const stats = await worker.queryStats(sql, params);
        const ms = performance.now() - t;
        if (i < 0) continue;
        sqlLat[k]!.push(ms);
        const st = sqlStats[k]!;
        st.rowsRead = stats.rowsRead;
        st.rowsReadMax = Math.max(st.rowsReadMax, stats.rowsRead);
        st.rows = stats.rows;
      }
    }
    const partsAfter = await partsOf('events');

    const per = (f: (v: number[]) => number) => Object.fromEntries(READ_KINDS.map((k) => [k, f(lat[k])])) as Record<ReadKind, number>;
    return {
      stored: opts.stored,
      loadSec: load.ms / 1000,
      tableRows: Number(stats?.rows ?? 0),
      parts: Number(stats?.parts ?? 0),
      loadedParts,
      settleSec,
      visitorParts,
      partsAfter,
      requests: opts.requests,
      p50: per((v) => quantile(v, 0.5)),
      p99: per((v) => quantile(v, 0.99)),
      max: per((v) => Math.max(...v)),
      items,
      failures,
      secondPage,
      sql: shapes.map((shape, k) => ({
        kind: shape.kind,
        shape: shape.shape,
        p50: quantile(sqlLat[k]!, 0.5),
        p99: quantile(sqlLat[k]!, 0.99),
        max: Math.max(...sqlLat[k]!),
        ...sqlStats[k]!,
      })),
    };
  };
  return { worker, client, auth, pathOf, lat, items, failures, finish };
}
