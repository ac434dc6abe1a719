import { cursorCodec } from '../shared/cursor.ts';
import { parseVideoId } from '../shared/ids.ts';
import type { BenchContext } from './context.ts';
import { HttpClient } from './http-client.ts';
import { quantile } from './stats.ts';
import type { StackWorker } from './worker-client.ts';

export const READ_KINDS = ['firstPage', 'deepPage', 'since', 'score'] as const;
export type ReadKind = (typeof READ_KINDS)[number];

export const READ_LABEL: Record<ReadKind, string> = {
  firstPage: 'GET /v1/videos/:id/events (first page, 100)',
  deepPage: 'GET /v1/videos/:id/events?cursor= (deep page)',
  since: 'GET /v1/videos/:id/events?since= (last quarter)',
  score: 'GET /v1/visitors/:id/score',
};

export interface ReadLatencyResult {
  stored: number;
  loadSec: number;
  tableRows: number;
  parts: number;
  requests: number;
  p50: Record<ReadKind, number>;
  p99: Record<ReadKind, number>;
  max: Record<ReadKind, number>;
  items: Record<ReadKind, number>;
  /** Request kinds the API failed, with the first failure. */
  failures: Partial<Record<ReadKind, string>>;
  /** Status of page 2 fetched with the next_cursor of page 1. */
  secondPage: string;
  deepSql: { p50: number; p99: number; max: number; items: number };
}

const SIGNALS = `('heartbeat', 'seek')`;
const NAMES = `['heartbeat','heartbeat','heartbeat','heartbeat','video_play','video_pause','video_resume','seek','watched_25_percent','watched_50_percent','cta_shown','cta_clicked']`;
const UUID = /^[0-9a-f-]{36}$/;

/**
 * Read latency over `stored` events of one tenant, loaded straight into
 * ClickHouse (INSERT … SELECT FROM numbers(), through the visitor view like
 * projected rows) across 4 videos and 10,000 visitors over 30 days. The
 * videos are registered through the admin API since the API checks their
 * ownership in the config store. Requests are sequential, one at a time.
 */
export async function benchReadLatency(
  ctx: BenchContext,
  worker: StackWorker,
  opts: { tenantId: string; apiKey: string; videoIds: string[]; stored: number; requests: number; cursorSecret: string },
): Promise<ReadLatencyResult> {
  const tenant = opts.tenantId;
  const videos = opts.videoIds.map((v) => parseVideoId(v)!);
  if (!UUID.test(tenant) || !videos.every((v) => UUID.test(v))) throw new Error('unexpected id format');
  const spanMs = 30 * 24 * 3600 * 1000;
  const startMs = Date.now() - spanMs - 60_000;
  ctx.progress(`read latency: loading ${opts.stored.toLocaleString('en-US')} events into ClickHouse`);
  const load = await worker.rpc<{ ms: number }>(
    {
      op: 'command',
      sql: `
      INSERT INTO events (tenant_id, video_id, timestamp, event_id, event_name, session_id, visitor_id, current_time, duration,
                          watched_percentage, play_ms, focus_ms, seek_from, seek_to, utm_source, source, received_at)
      SELECT
        toUUID('${tenant}') AS tenant_id,
        [${videos.map((v) => `toUUID('${v}')`).join(', ')}][intDiv(number, 40) % ${videos.length} + 1] AS video_id,
        fromUnixTimestamp64Milli(toInt64(${startMs} + intDiv(number * ${spanMs}, ${opts.stored})), 'UTC') AS timestamp,
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
      FROM numbers(${opts.stored})`,
    },
    300_000,
  );
  const [stats] = await worker.query<{ rows: string; parts: string }>(
    `SELECT sum(rows) AS rows, count() AS parts FROM system.parts WHERE active AND database = currentDatabase() AND table = 'events'`,
  );

  // A deep page: the position half-way through the first video's listed events.
  const [{ listed }] = (await worker.query<{ listed: string }>(
    `SELECT count() AS listed FROM events WHERE tenant_id = '${tenant}' AND video_id = '${videos[0]}' AND event_name NOT IN ${SIGNALS}`,
  )) as [{ listed: string }];
  const [mid] = await worker.query<{ ts: string; id: string }>(
    `SELECT toUnixTimestamp64Milli(timestamp) AS ts, toString(event_id) AS id FROM events
     WHERE tenant_id = '${tenant}' AND video_id = '${videos[0]}' AND event_name NOT IN ${SIGNALS}
     ORDER BY timestamp, event_id LIMIT 1 OFFSET ${Math.floor(Number(listed) / 2)}`,
  );
  if (!mid) throw new Error('no mid-point row for the deep page');
  // Issued the way the API issues next_cursor (same codec and secret), rather
  // than by walking ~700 pages to get there.
  const deepCursor = cursorCodec('evt', opts.cursorSecret).encode([videos[0], Number(mid.ts), mid.id]);
  const since = encodeURIComponent(new Date(startMs + spanMs * 0.75).toISOString());

  const visitors = Math.min(10_000, Math.floor(opts.stored / 40));
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
    score: (i) => `/v1/visitors/vis_lt_${(i * 7919) % visitors}/score`,
  };
  const lat = Object.fromEntries(READ_KINDS.map((k) => [k, [] as number[]])) as Record<ReadKind, number[]>;
  const items = Object.fromEntries(READ_KINDS.map((k) => [k, 0])) as Record<ReadKind, number>;
  const failures: Partial<Record<ReadKind, string>> = {};
  try {
    for (const kind of READ_KINDS) {
      ctx.progress(`read latency: ${kind}`);
      for (let i = -10; i < opts.requests; i++) {
        const t = performance.now();
        const res = await client.request('GET', pathOf[kind](i + 10), { headers: auth });
        const ms = performance.now() - t;
        if (res.status !== 200) {
          // A broken request kind is reported, not fatal: the other figures still stand.
          failures[kind] = `HTTP ${res.status}: ${res.body.slice(0, 160)}`;
          ctx.progress(`read latency: ${kind} failed, ${failures[kind]}\n${worker.logTail(6)}`);
          break;
        }
        if (i < 0) continue; // warm-up
        lat[kind].push(ms);
        if (i === 0) {
          const body = JSON.parse(res.body) as { data?: unknown[] };
          items[kind] = body.data?.length ?? 1;
        }
      }
    }
  } finally {
    client.close();
  }

  // The deep page's SQL (as events.repository.ts builds it) sent straight to
  // ClickHouse over IPC: splits the deep page's time into ClickHouse and the
  // rest (HTTP, auth, cursor, JSON).
  ctx.progress('read latency: deep page SQL straight to ClickHouse');
  const deepSql = `
    SELECT event_name, visitor_id, toUnixTimestamp64Milli(timestamp) AS ts, toString(event_id) AS id
    FROM events FINAL
    WHERE tenant_id = '${tenant}' AND video_id = '${videos[0]}'
      AND event_name NOT IN ${SIGNALS}
      AND timestamp >= fromUnixTimestamp64Milli(0, 'UTC')
      AND (timestamp, event_id) > (fromUnixTimestamp64Milli(${Number(mid.ts)}, 'UTC'), toUUID('${mid.id}'))
    ORDER BY timestamp, event_id
    LIMIT 101`;
  const direct: number[] = [];
  let directItems = 0;
  for (let i = -10; i < opts.requests; i++) {
    const t = performance.now();
    const rows = await worker.query(deepSql);
    if (i >= 0) direct.push(performance.now() - t);
    directItems = rows.length;
  }

  const per = (f: (v: number[]) => number) => Object.fromEntries(READ_KINDS.map((k) => [k, f(lat[k])])) as Record<ReadKind, number>;
  return {
    stored: opts.stored,
    loadSec: load.ms / 1000,
    tableRows: Number(stats?.rows ?? 0),
    parts: Number(stats?.parts ?? 0),
    requests: opts.requests,
    p50: per((v) => quantile(v, 0.5)),
    p99: per((v) => quantile(v, 0.99)),
    max: per((v) => Math.max(...v)),
    items,
    failures,
    secondPage,
    deepSql: { p50: quantile(direct, 0.5), p99: quantile(direct, 0.99), max: Math.max(...direct), items: directItems },
  };
}
