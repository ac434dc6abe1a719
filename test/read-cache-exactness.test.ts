import { Kafka, logLevel } from 'kafkajs';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { createClickHouse, type ClickHouseClient } from '../shared/clickhouse/clickhouse.ts';
import { parseVideoId } from '../shared/ids.ts';
import { topicNames } from '../shared/kafka/topics.ts';
import { iso, type EventItem } from './helpers/contract.ts';
import { metricSum } from './helpers/prometheus-text.ts';
import { TestStack, eventually, type TestTenant } from './helpers/stack.ts';

/**
 * The read cache (services/api/read-cache.ts) under concurrency, through
 * real HTTP, a real broker and real embedded ClickHouse, with the projector
 * and the API in one process as deployed by default. Every read is bracketed
 * by two reads of ClickHouse itself: what the API answers must be at least
 * what ClickHouse held before the request was sent (no stale entry) and at
 * most what it held after the answer (no double count). Page walks must
 * neither skip an event ClickHouse held before the walk began, even one
 * that landed late inside an already cached page, nor list one twice.
 *
 * Then the projector is restarted with its group's offsets reset to the
 * start of the log, so it inserts every event a second time, with merges
 * stopped: the same checks hold while the replay runs, and afterwards every
 * answer is the one from before.
 */

const SCORE_VISITORS = 12;
const DAY = 86_400_000;

describe('read cache exactness under concurrency', () => {
  let s: TestStack;
  let T: TestTenant;
  let scoreVideo: string;
  let ch: ClickHouseClient;
  /** cta_clicked events answered 202, by visitor. */
  const acked = new Map<string, number>();
  /** Page events answered 202 (one visitor id each). */
  const ackedPageVisitors = new Set<string>();
  let pageSerial = 0;
  /** Findings of the readers: every violation, and how many checks ran. */
  const violations: string[] = [];
  const checks = { score: 0, walk: 0, hitsBefore: 0 };

  const env = {
    // The read path alone: no fan-out, and no derived events that would add rows for the same visitors.
    SERVICES: 'ingest,projector,api,admin',
    RATE_LIMIT_PER_MINUTE: '1000000',
  };
  const visitorOf = (i: number) => `vis_cx_${i}`;
  /** Visitors with events from before the run only: their scores are answered from the cache while the others change. */
  const quiet = ['vis_cq_0', 'vis_cq_1', 'vis_cq_2', 'vis_cq_3'];
  const clickhouseUrl = () => inject('clickhouseUrl');

  const scalar = async (sql: string): Promise<number> => {
    const rs = await ch.query({ query: sql, format: 'JSONEachRow' });
    return Number((await rs.json<{ n: string }>())[0]?.n ?? 0);
  };
  const ctaInClickHouse = (visitor: string) =>
    scalar(`SELECT countIf(event_name = 'cta_clicked') AS n FROM visitor_events FINAL WHERE visitor_id = '${visitor}' AND tenant_id = '${T.id}'`);
  const pageVisitorsInClickHouse = async (): Promise<Set<string>> => {
    const rs = await ch.query({
      query: `SELECT DISTINCT visitor_id AS v FROM events WHERE tenant_id = '${T.id}' AND video_id = '${parseVideoId(T.videoId)}' AND event_name NOT IN ('heartbeat', 'seek')`,
      format: 'JSONEachRow',
    });
    return new Set((await rs.json<{ v: string }>()).map((r) => r.v));
  };

  /** Sends events until `until` resolves: cta clicks of the score visitors, and page events at random past times. */
  const writer = async (stop: { done: boolean }) => {
    let i = 0;
    while (!stop.done) {
      const clicks = Array.from({ length: 3 }, (_, k) => visitorOf((i * 3 + k) % SCORE_VISITORS));
      const pageEvents = Array.from({ length: 4 }, () => `vis_cp_${pageSerial++}`);
      const now = Date.now();
      const res = await s.collect(T.player_key, [
        ...clicks.map((v) => ({ event_name: 'cta_clicked', video_id: scoreVideo, visitor_id: v, session_id: `ses_${v}` })),
        // Late events: anywhere in the last two days, so they land inside pages read and cached before.
        ...pageEvents.map((v, k) => ({ event_name: 'video_play', video_id: T.videoId, visitor_id: v, session_id: 'ses_p', occurred_at: iso(now - Math.floor(((i * 7 + k * 13) % 97) / 97 * 2 * DAY)) })),
      ]);
      if (res.status === 202) {
        for (const v of clicks) acked.set(v, (acked.get(v) ?? 0) + 1);
        for (const v of pageEvents) ackedPageVisitors.add(v);
      }
      i++;
      await new Promise((r) => setTimeout(r, 20));
    }
  };

  /** Reads one score between two reads of ClickHouse: floor ≤ answer ≤ ceiling. */
  const checkScore = async (visitor: string) => {
    const floor = await ctaInClickHouse(visitor);
    const res = await s.api(`/visitors/${visitor}/score`, T.apiKey);
    const ceiling = await ctaInClickHouse(visitor);
    const got = res.status === 404 ? 0 : res.body?.factors?.cta_clicks;
    checks.score++;
    if (res.status !== 200 && res.status !== 404) violations.push(`score ${visitor}: HTTP ${res.status} ${res.text.slice(0, 200)}`);
    else if (!(floor <= got && got <= ceiling)) violations.push(`score ${visitor}: cta_clicks ${got}, ClickHouse held ${floor} before and ${ceiling} after`);
  };

  /** Walks every page of the video with a small limit: no repeat, key order, ClickHouse's events before ⊆ walk ⊆ after. */
  const checkWalk = async (limit: number) => {
    const before = await pageVisitorsInClickHouse();
    const walk: EventItem[] = [];
    let cursor: string | null = null;
    do {
      const qs = new URLSearchParams({ limit: String(limit) });
      if (cursor) qs.set('cursor', cursor);
      const res = await s.api(`/videos/${T.videoId}/events?${qs}`, T.apiKey);
      if (res.status !== 200) {
        violations.push(`walk: HTTP ${res.status} ${res.text.slice(0, 200)}`);
        return;
      }
      walk.push(...res.body.data);
      cursor = res.body.next_cursor;
    } while (cursor);
    const after = await pageVisitorsInClickHouse();
    checks.walk++;
    const seen = new Set<string>();
    for (const [k, e] of walk.entries()) {
      if (seen.has(e.visitor_id)) violations.push(`walk (limit ${limit}): ${e.visitor_id} listed twice`);
      seen.add(e.visitor_id);
      if (k > 0 && e.timestamp < walk[k - 1]!.timestamp) violations.push(`walk (limit ${limit}): out of order at ${k}`);
      if (!after.has(e.visitor_id)) violations.push(`walk (limit ${limit}): ${e.visitor_id} not in ClickHouse`);
    }
    const skipped = [...before].filter((v) => !seen.has(v));
    if (skipped.length > 0) violations.push(`walk (limit ${limit}): skipped ${skipped.length} events ClickHouse held before the walk, e.g. ${skipped[0]}`);
  };

  /** `n` readers, each checking scores and walks in turn, until `stop`. */
  const readers = (n: number, stop: { done: boolean }) =>
    Promise.all(
      Array.from({ length: n }, async (_, r) => {
        for (let i = 0; !stop.done; i++) {
          if (r % 4 === 3) await checkWalk([7, 25, 100][i % 3]!);
          else if (i % 3 === 2) await checkScore(quiet[(r + i) % quiet.length]!);
          else await checkScore(visitorOf((r * 5 + i) % SCORE_VISITORS));
        }
      }),
    );

  const cacheHits = async () => {
    return metricSum((await s.request('GET', '/metrics')).text, 'read_cache_requests_total', { outcome: 'hit' });
  };

  /**
   * Writer and readers race for `ms`, and on until `enough()` (at most
   * `maxMs` in all): a loaded machine completes fewer walks in the same time.
   */
  const run = async (ms: number, readerCount: number, enough: () => boolean = () => true, maxMs = ms) => {
    const stop = { done: false };
    const w = writer(stop);
    const r = readers(readerCount, stop);
    await new Promise((res) => setTimeout(res, ms));
    // Not a failure by itself: the test's own checks of the counts say whether the run was enough.
    await eventually(async () => (enough() ? true : undefined), Math.max(0, maxMs - ms), 250).catch(() => undefined);
    stop.done = true;
    await Promise.all([w, r]);
  };

  beforeAll(async () => {
    s = await TestStack.start(env);
    T = await s.createTenant('cache exactness');
    scoreVideo = await s.createVideo(T.id, 'scores');
    const url = clickhouseUrl();
    ch = (await createClickHouse({ url, database: url ? s.topicPrefix.replace('.', '') : undefined, dataDir: s.dataDir })).client;
    const res = await s.collect(
      T.player_key,
      quiet.flatMap((v) => [1, 2].map(() => ({ event_name: 'cta_clicked', video_id: scoreVideo, visitor_id: v, session_id: `ses_${v}` }))),
    );
    expect(res.status, res.text).toBe(202);
    for (const v of quiet) {
      acked.set(v, 2);
      await eventually(async () => ((await s.api(`/visitors/${v}/score`, T.apiKey)).body?.factors?.cta_clicks === 2 ? true : undefined), 30_000, 100);
    }
  }, 120_000);

  afterAll(async () => {
    await s?.stop();
    await ch?.close().catch(() => undefined);
  });

  it('reads racing inserts: no stale score, no double count, no page skipped or repeated, and the cache does answer', async () => {
    await run(15_000, 16, () => checks.score > 30 && checks.walk > 5, 60_000);
    expect(violations).toEqual([]);
    expect(checks.score).toBeGreaterThan(30);
    expect(checks.walk).toBeGreaterThan(5);
    // Reads the cache answered: the exactness above is the cache's, not only the engine's.
    checks.hitsBefore = await cacheHits();
    expect(checks.hitsBefore).toBeGreaterThan(0);
    // Quiet now: every acknowledged event is readable, counted once.
    for (const [v, n] of acked) {
      await expect.poll(async () => (await s.api(`/visitors/${v}/score`, T.apiKey)).body?.factors?.cta_clicks, { timeout: 30_000 }).toBe(n);
    }
    await expect.poll(async () => (await s.allEvents(T.videoId, T.apiKey)).length, { timeout: 30_000 }).toBe(ackedPageVisitors.size);
  });

  it('a projector restart that replays the whole log: the same checks hold while it runs, and nothing is counted twice after', async () => {
    const reference = await s.allEvents(T.videoId, T.apiKey);
    const scores = new Map<string, unknown>();
    for (const v of acked.keys()) scores.set(v, (await s.api(`/visitors/${v}/score`, T.apiKey)).body);
    const distinct = await scalar(`SELECT count() AS n FROM events FINAL WHERE tenant_id = '${T.id}'`);
    // Copies stay unmerged, so every read below meets them.
    for (const table of ['events', 'visitor_events', 'visitor_timeline']) await ch.command({ query: `SYSTEM STOP MERGES ${table}` });

    const prefix = s.topicPrefix;
    const dataDir = s.dataDir;
    await s.stop({ keepData: true });
    const admin = new Kafka({ clientId: 'test-replay', brokers: inject('kafkaBrokers'), logLevel: logLevel.NOTHING }).admin();
    await admin.connect();
    await admin.resetOffsets({ groupId: `${prefix}projector`, topic: topicNames(prefix).playerEvents, earliest: true });
    await admin.disconnect();
    s = await TestStack.start(env, { dataDir, topicPrefix: prefix });

    const before = violations.length;
    await run(10_000, 12);
    expect(violations.slice(before)).toEqual([]);
    // The replay did insert every event again.
    await eventually(async () => ((await scalar(`SELECT count() AS n FROM events WHERE tenant_id = '${T.id}'`)) >= 2 * distinct ? true : undefined), 60_000, 200);
    await eventually(async () => ((await s.allEvents(T.videoId, T.apiKey)).length === ackedPageVisitors.size ? true : undefined), 30_000, 200);
    const walk = await s.allEvents(T.videoId, T.apiKey);
    // The events of before the restart, in the same order, among the ones sent since.
    expect(walk.filter((e) => reference.some((r) => r.visitor_id === e.visitor_id))).toEqual(reference);
    expect(new Set(walk.map((e) => e.visitor_id)).size).toBe(walk.length);
    for (const [v, n] of acked) {
      await expect.poll(async () => (await s.api(`/visitors/${v}/score`, T.apiKey)).body?.factors?.cta_clicks, { timeout: 30_000 }).toBe(n);
      expect((scores.get(v) as { factors: { cta_clicks: number } }).factors.cta_clicks).toBeLessThanOrEqual(n);
    }
  });
});
