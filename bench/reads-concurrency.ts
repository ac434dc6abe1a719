/**
 * `BENCH_PHASES=reads-concurrency npm run bench`: each read of the API at
 * 1/4/16/64 connections, closed loop, against two stacks loaded with the
 * same events: one with the read cache and score batching off
 * (READ_CACHE_MAX_BYTES=0, READ_BATCH_MAX=1: the reads as they were
 * before issue 26) and one with the defaults, cell by cell in turn. Beside
 * each row: the HTTP layer's ceiling (GET /v1/videos, served from memory) and
 * the engine's own (the read's SQL straight to the ClickHouse client in the
 * stack's process, no HTTP). Then the mixed run: the intake at a fixed rate
 * alone, and again with every read at 64 connections (each kind on its own
 * share of them, from a process of their own); first with every service in
 * one process, then with the intake in a process of its own and the read
 * side's process at a lower CPU priority (BENCH_RC_READS_NICE, default 10).
 */
import { fork } from 'node:child_process';
import { join } from 'node:path';
import { rowsToFetch } from '../services/api/event-page.ts';
import { eventPageQuery, visitorFactorsQuery } from '../services/api/events.repository.ts';
import { timelineQuery, visitorListQuery } from '../services/api/visitors.repository.ts';
import { withBounds } from '../shared/clickhouse/bounded-reads.ts';
import { loadConfig } from '../shared/config.ts';
import { cursorCodec } from '../shared/cursor.ts';
import { parseVideoId } from '../shared/ids.ts';
import { metricSum } from '../test/helpers/prometheus-text.ts';
import { setupTenant, type BenchContext } from './context.ts';
import { cpuSeconds, reniceProcess } from './cpu.ts';
import { playerKeyKnown } from './freshness.ts';
import { HttpClient } from './http-client.ts';
import type { ReadLoadJob, ReadLoadResult } from './read-load.ts';
import { loadEventsSql, loadVisitorsSql, READ_SPAN_MS, waitForMerges, type RowsOf } from './read-latency.ts';
import { quantile } from './stats.ts';
import { playerEvent } from './workload.ts';
import type { QueryLoadResult } from './worker-protocol.ts';
import type { StackWorker } from './worker-client.ts';

export const RC_KINDS = ['firstPage', 'deepPage', 'since', 'score', 'visitors', 'timeline'] as const;
export type RcKind = (typeof RC_KINDS)[number];

export const RC_LABEL: Record<RcKind, string> = {
  firstPage: 'events, first page (4 videos)',
  deepPage: 'events, deep cursor (200 positions)',
  since: 'events, since= (4 videos)',
  score: 'score',
  visitors: 'visitor list (31 filters)',
  timeline: 'visitor timeline',
};

/** The intake's side of a mixed run; `refused` counts answers by status (or the client's error). */
export interface MixedIntake {
  p50: number;
  p99: number;
  sent: number;
  failed: number;
  refused: Record<string, number>;
}

/** The intake alone, then with every read, in one deployment of the stack. */
export interface MixedRun {
  deployment: string;
  alone: MixedIntake;
  withReads: MixedIntake;
  reads: Record<RcKind, Cell> & { all: Cell };
}

export interface RcOptions {
  stored: number;
  conns: number[];
  cellMs: number;
  warmMs: number;
  /** Visitors the score and timeline requests cycle over. */
  workingSet: number;
  mixedRate: number;
  mixedMs: number;
  /** Nice value of the read side's process in the split mixed run; 0 runs the one-process run only. */
  readsNice: number;
  /** SERVICES of both stacks. */
  services: string;
  adminToken: string;
  cursorSecret: string;
}

export interface Cell {
  rps: number;
  p50: number;
  p99: number;
  errors: number;
  firstError?: string;
  /** Share of the cell's reads the cache answered (the cached stack only). */
  hit?: number;
  /** CPU time of the stack's process (service and embedded engine) per answered request, ms. */
  cpuMs?: number;
}

export interface RcResult {
  stored: number;
  opts: RcOptions;
  /** kind → conns → cell */
  off: Record<RcKind, Record<number, Cell>>;
  on: Record<RcKind, Record<number, Cell>>;
  engine: Record<RcKind, Record<number, Cell>>;
  /** GET /v1/videos, run right before each row's cells: kind → conns → cell. */
  http: Record<RcKind, Record<number, Cell>>;
  /** Score reads each visitor once (no cache can help), 64 connections. */
  coldScore: { off: Cell; on: Cell };
  mixed: { rate: number; runs: MixedRun[] };
  rssMb: { off: number; on: number };
}

interface Target {
  worker: StackWorker;
  client: HttpClient;
  apiKey: string;
  playerKey: string;
  tenant: string;
  /** KAFKA_TOPIC_PREFIX of the stack's topics. */
  prefix: string;
  videoIds: string[];
}

/** A closed loop of `conns` connections for `ms`, each asking `pathOf(i)` in turn (i counts across connections). */
async function closedLoop(client: HttpClient, auth: Record<string, string>, pathOf: (i: number) => string, conns: number, ms: number, start = 0): Promise<Cell & { next: number }> {
  const lat: number[] = [];
  let errors = 0;
  let firstError: string | undefined;
  let i = start;
  const t0 = performance.now();
  const end = t0 + ms;
  const loop = async () => {
    while (performance.now() < end) {
      const path = pathOf(i++);
      const t = performance.now();
      try {
        const res = await client.request('GET', path, { headers: auth });
        if (res.status !== 200) {
          errors++;
          firstError ??= `HTTP ${res.status} ${path}: ${res.body.slice(0, 160)}`;
        } else lat.push(performance.now() - t);
      } catch (err) {
        errors++;
        firstError ??= String(err);
      }
    }
  };
  await Promise.all(Array.from({ length: conns }, loop));
  const seconds = (performance.now() - t0) / 1000;
  return { rps: lat.length / seconds, p50: quantile(lat, 0.5), p99: quantile(lat, 0.99), errors, firstError, next: i };
}

const cacheCounts = async (client: HttpClient) => {
  const text = (await client.request('GET', '/metrics')).body;
  const of = (outcome: string) => metricSum(text, 'read_cache_requests_total', { outcome });
  return { hit: of('hit'), all: of('hit') + of('miss') + of('joined') };
};

export async function benchReadsConcurrency(ctx: BenchContext, opts: RcOptions): Promise<RcResult> {
  const maxConns = Math.max(...opts.conns);
  const spanMs = READ_SPAN_MS;
  const startMs = Date.now() - spanMs - 60_000;
  const sinceMs = Math.floor(startMs + spanMs * 0.75);

  const prepare = async (name: string, extra: Record<string, string>): Promise<Target> => {
    const { worker, prefix } = await ctx.startWorker(name, opts.services, extra);
    const admin = new HttpClient(worker.ready.url, 2);
    const t = await setupTenant(admin, opts.adminToken, `bench reads concurrency ${name}`, 4, true);
    admin.close();
    const tenant = t.tenant.id;
    const videos = t.videoIds.map((v) => parseVideoId(v)!);
    ctx.progress(`reads-concurrency: loading ${opts.stored.toLocaleString('en-US')} events into "${name}"`);
    await worker.rpc({ op: 'command', sql: loadEventsSql(tenant, videos, opts.stored, startMs, spanMs) }, 600_000);
    const rows: RowsOf = (sql) => worker.query(sql);
    await waitForMerges(rows);
    await worker.rpc({ op: 'command', sql: loadVisitorsSql(tenant) }, 300_000);
    await waitForMerges(rows);
    return { worker, client: new HttpClient(worker.ready.url, maxConns + 2), apiKey: t.apiKey!, playerKey: t.tenant.player_key, tenant, prefix, videoIds: t.videoIds };
  };

  // The same events in both; the cursor secret is the run's, so a cursor made for one works on either.
  const off = await prepare('rc-off', { READ_CACHE_MAX_BYTES: '0', READ_BATCH_MAX: '1' });
  const on = await prepare('rc-on', {});
  const stacks = { off, on };

  // Deep cursors: 50 positions spread through each video's listed events, issued as the API issues them.
  const positions = new Map<string, { ts: number; id: string }[]>();
  for (const [k, vid] of off.videoIds.entries()) {
    const video = parseVideoId(vid)!;
    const rows = await off.worker.query<{ ts: string; id: string }>(
      `SELECT toUnixTimestamp64Milli(timestamp) AS ts, toString(event_id) AS id FROM events
       WHERE tenant_id = '${off.tenant}' AND video_id = '${video}' AND event_name NOT IN ('heartbeat', 'seek') AND cityHash64(event_id) % 997 = ${k}
       ORDER BY timestamp, event_id`,
    );
    // 50 of the sample, evenly through the video's history.
    const step = Math.max(1, Math.floor(rows.length / 50));
    positions.set(vid, rows.filter((_, j) => j % step === 0).slice(0, 50).map((r) => ({ ts: Number(r.ts), id: r.id })));
  }
  const codec = cursorCodec('evt', opts.cursorSecret);
  /** Deep cursors per stack: a cursor is bound to the video's UUID, which differs between the stacks. */
  const deepOf = (t: Target) =>
    t.videoIds.flatMap((vid, k) => positions.get(off.videoIds[k]!)!.map((p) => ({ vid, cursor: encodeURIComponent(codec.encode([parseVideoId(vid), p.ts, p.id])) })));
  const deep = { off: deepOf(off), on: deepOf(on) };
  const since = encodeURIComponent(new Date(sinceMs).toISOString());
  const visitorOf = (i: number) => `vis_lt_${(i * 7919) % opts.workingSet}`;
  const pathOf = (t: Target, which: 'off' | 'on'): Record<RcKind, (i: number) => string> => ({
    firstPage: (i) => `/v1/videos/${t.videoIds[i % t.videoIds.length]}/events`,
    deepPage: (i) => {
      const d = deep[which][i % deep[which].length]!;
      return `/v1/videos/${d.vid}/events?cursor=${d.cursor}`;
    },
    since: (i) => `/v1/videos/${t.videoIds[i % t.videoIds.length]}/events?since=${since}`,
    score: (i) => `/v1/visitors/${visitorOf(i)}/score`,
    visitors: (i) => `/v1/visitors?order=score&min_score=${30 + (i % 31)}`,
    timeline: (i) => `/v1/visitors/${visitorOf(i)}/events`,
  });
  const paths = { off: pathOf(off, 'off'), on: pathOf(on, 'on') };
  const auth = { off: { authorization: `Bearer ${off.apiKey}` }, on: { authorization: `Bearer ${on.apiKey}` } };

  const empty = () => Object.fromEntries(RC_KINDS.map((k) => [k, {} as Record<number, Cell>])) as Record<RcKind, Record<number, Cell>>;
  const result: RcResult = {
    stored: opts.stored,
    opts,
    off: empty(),
    on: empty(),
    engine: empty(),
    http: empty(),
    coldScore: undefined as never,
    mixed: undefined as never,
    rssMb: { off: 0, on: 0 },
  };

  const cell = async (which: 'off' | 'on', kind: RcKind, conns: number): Promise<Cell> => {
    const t = stacks[which];
    await closedLoop(t.client, auth[which], paths[which][kind], conns, opts.warmMs);
    const before = which === 'on' ? await cacheCounts(t.client) : undefined;
    const cpu0 = cpuSeconds(t.worker.pid);
    const c = await closedLoop(t.client, auth[which], paths[which][kind], conns, opts.cellMs);
    c.cpuMs = ((cpuSeconds(t.worker.pid) - cpu0) * 1000) / Math.max(1, c.rps * (opts.cellMs / 1000));
    if (before) {
      const after = await cacheCounts(t.client);
      c.hit = (after.hit - before.hit) / Math.max(1, after.all - before.all);
    }
    return c;
  };

  // The engine's own ceiling, in the stack without the cache (idle meanwhile): the API's SQL with its bounds.
  const bounds = loadConfig({});
  const bounded = (q: { query: string; query_params: Record<string, unknown> }) => ({ sql: withBounds(q.query, bounds), params: q.query_params });
  const offVideos = off.videoIds.map((v) => parseVideoId(v)!);
  const engineQueries: Record<RcKind, { sql: string; params?: Record<string, unknown> }[]> = {
    firstPage: offVideos.map((v) => bounded(eventPageQuery({ tenantId: off.tenant, videoId: v, sinceMs: undefined }, rowsToFetch(101)))),
    deepPage: offVideos.flatMap((v, k) => positions.get(off.videoIds[k]!)!.map((p) => bounded(eventPageQuery({ tenantId: off.tenant, videoId: v, sinceMs: undefined, after: p }, rowsToFetch(101))))),
    since: offVideos.map((v) => bounded(eventPageQuery({ tenantId: off.tenant, videoId: v, sinceMs }, rowsToFetch(101)))),
    score: Array.from({ length: opts.workingSet }, (_, i) => bounded(visitorFactorsQuery(off.tenant, visitorOf(i)))),
    visitors: Array.from({ length: 31 }, (_, i) => bounded(visitorListQuery({ tenantId: off.tenant, order: 'score', minScore: 30 + i, limit: 51 }))),
    timeline: Array.from({ length: opts.workingSet }, (_, i) => bounded(timelineQuery({ tenantId: off.tenant, visitorId: visitorOf(i) }, rowsToFetch(101)))),
  };
  const engineCell = async (kind: RcKind, conns: number): Promise<Cell> => {
    const r = await off.worker.rpc<QueryLoadResult>({ op: 'queryLoad', queries: engineQueries[kind], concurrency: conns, durationMs: opts.cellMs }, opts.cellMs + 120_000);
    return { rps: r.count / r.seconds, p50: r.p50, p99: r.p99, errors: r.errors, firstError: r.firstError };
  };
  const httpCell = async (conns: number): Promise<Cell> => {
    await closedLoop(on.client, auth.on, () => '/v1/videos', conns, opts.warmMs);
    const cpu0 = cpuSeconds(on.worker.pid);
    const c = await closedLoop(on.client, auth.on, () => '/v1/videos', conns, opts.cellMs);
    c.cpuMs = ((cpuSeconds(on.worker.pid) - cpu0) * 1000) / Math.max(1, c.rps * (opts.cellMs / 1000));
    return c;
  };
  // The machine is shared and its load moves within minutes: each row's four cells run back to back.
  for (const kind of RC_KINDS) {
    for (const conns of opts.conns) {
      ctx.progress(`reads-concurrency: ${kind} at ${conns} connections: HTTP ceiling, cache off, cache on, engine ceiling`);
      result.http[kind][conns] = await httpCell(conns);
      result.off[kind][conns] = await cell('off', kind, conns);
      result.on[kind][conns] = await cell('on', kind, conns);
      result.engine[kind][conns] = await engineCell(kind, conns);
    }
  }

  // Each visitor once: visitors the working set never asked for.
  ctx.progress('reads-concurrency: score, each visitor once, 64 connections');
  const coldPath = (i: number) => `/v1/visitors/vis_lt_${opts.workingSet + (i % (10_000 - opts.workingSet))}/score`;
  const coldMs = Math.min(opts.cellMs, 3000);
  result.coldScore = {
    off: await closedLoop(off.client, auth.off, coldPath, maxConns, coldMs),
    on: await closedLoop(on.client, auth.on, coldPath, maxConns, coldMs),
  };

  result.rssMb.off = (await off.worker.rpc<{ rss: number }>({ op: 'stats' })).rss / 2 ** 20;
  result.rssMb.on = (await on.worker.rpc<{ rss: number }>({ op: 'stats' })).rss / 2 ** 20;

  // Mixed: the intake at a fixed rate, alone, then with every read at the most connections, on the cached stack.
  // Its visitors are the reads' working set, so the projector keeps invalidating the scores and timelines read.
  const intake = async (url: string, ms: number, during?: () => Promise<ReadLoadResult>) => {
    const sender = new HttpClient(url, 256);
    const batch = 50;
    const intervalMs = (1000 * batch) / opts.mixedRate;
    const lat: number[] = [];
    let failed = 0;
    let sent = 0;
    let inflight = 0;
    const refused: Record<string, number> = {};
    const refuse = (why: string) => {
      failed++;
      refused[why] = (refused[why] ?? 0) + 1;
    };
    const bodies = Array.from({ length: 64 }, (_, b) =>
      JSON.stringify({
        events: Array.from({ length: batch }, (_, j) => ({ ...playerEvent(b * batch + j, on.videoIds), visitor_id: visitorOf(b * batch + j) })),
      }),
    );
    const t0 = performance.now();
    let n = 0;
    const reads = during?.();
    await new Promise<void>((resolve) => {
      const tick = () => {
        const now = performance.now();
        if (now - t0 >= ms) return resolve();
        // Open loop: every batch due by now is sent, whatever the answers' latency.
        while (t0 + n * intervalMs <= now) {
          const i = n++;
          if (inflight >= 2000) {
            refuse('not sent: 2,000 in flight');
            continue;
          }
          inflight++;
          sent++;
          const at = performance.now();
          sender.request('POST', '/v1/collect', { body: bodies[i % bodies.length]!, headers: { 'x-player-key': on.playerKey } }).then(
            (res) => {
              inflight--;
              if (res.status === 202) lat.push(performance.now() - at);
              else refuse(`HTTP ${res.status}`);
            },
            (err: unknown) => {
              inflight--;
              refuse(err instanceof Error ? err.message.slice(0, 60) : String(err));
            },
          );
        }
        setTimeout(tick, 1);
      };
      tick();
    });
    const r = reads ? await reads : undefined;
    // Every answer counts, the slow ones most: wait for those still in flight.
    for (const until = performance.now() + 60_000; inflight > 0 && performance.now() < until; ) await new Promise((res) => setTimeout(res, 20));
    if (inflight > 0) refused['no answer within 60 s'] = inflight;
    failed += inflight;
    sender.close();
    return { intake: { p50: quantile(lat, 0.5), p99: quantile(lat, 0.99), sent, failed, refused }, reads: r };
  };
  // The reads come from a process of their own: in this one their client would delay the intake's sender.
  const mixedPaths = Object.fromEntries(RC_KINDS.map((kind) => [kind, Array.from({ length: 1000 }, (_, i) => paths.on[kind](i))]));
  const readLoad = (ms: number) => {
    const child = fork(join(import.meta.dirname, 'read-load.ts'), [], { execPath: process.execPath, stdio: ['ignore', 'inherit', 'inherit', 'ipc'] });
    const job: ReadLoadJob = { url: on.worker.ready.url, headers: auth.on, paths: mixedPaths, conns: maxConns, ms };
    child.send(job);
    return new Promise<ReadLoadResult>((resolve, reject) => {
      child.once('message', (m) => resolve(m as ReadLoadResult));
      child.once('exit', (code) => reject(new Error(`read load process exited with ${code} before answering`)));
    });
  };
  const mixedRun = async (deployment: string, intakeUrl: string): Promise<MixedRun> => {
    ctx.progress(`reads-concurrency: mixed (${deployment}), intake alone at ${opts.mixedRate} events/s`);
    await intake(intakeUrl, 2000);
    const alone = await intake(intakeUrl, opts.mixedMs);
    ctx.progress(`reads-concurrency: mixed (${deployment}), intake at ${opts.mixedRate} events/s with every read at ${maxConns} connections`);
    const before = await cacheCounts(on.client);
    const withReads = await intake(intakeUrl, opts.mixedMs, () => readLoad(opts.mixedMs));
    const after = await cacheCounts(on.client);
    const r = withReads.reads!;
    const cellOf = (lat: number[], errors: number, firstError?: string): Cell => ({ rps: lat.length / r.seconds, p50: quantile(lat, 0.5), p99: quantile(lat, 0.99), errors, firstError });
    return {
      deployment,
      alone: alone.intake,
      withReads: withReads.intake,
      reads: {
        all: { ...cellOf(Object.values(r.lat).flat(), r.errors, r.firstError), hit: (after.hit - before.hit) / Math.max(1, after.all - before.all) },
        ...(Object.fromEntries(RC_KINDS.map((k) => [k, cellOf(r.lat[k] ?? [], 0)])) as Record<RcKind, Cell>),
      },
    };
  };
  const runs = [await mixedRun('one process', on.worker.ready.url)];
  if (opts.readsNice > 0) {
    // The deployment that keeps the intake's latency under reads on one machine: the intake in a
    // process of its own on the same topics, the read side (API and projector) at a lower CPU priority.
    const { worker: ingest } = await ctx.startWorker('rc-ingest', 'ingest', { KAFKA_TOPIC_PREFIX: on.prefix });
    try {
      await playerKeyKnown(ingest.ready.url, on.playerKey);
      reniceProcess(on.worker.pid!, opts.readsNice);
      runs.push(await mixedRun(`split: ingest alone, the read side at nice ${opts.readsNice}`, ingest.ready.url));
    } finally {
      await ingest.stop();
    }
  }
  result.mixed = { rate: opts.mixedRate, runs };
  off.client.close();
  on.client.close();
  return result;
}
