import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { createClickHouse, type ClickHouseClient } from '../shared/clickhouse/clickhouse.ts';
import { iso, type EventItem } from './helpers/contract.ts';
import { TestStack, eventually, type CollectEventInput, type TestTenant } from './helpers/stack.ts';

/**
 * The read API stays exact while a replay's copies are unmerged: the events
 * page reads without FINAL and drops the copies itself (services/api/
 * event-page.ts), the score sums over FINAL. Here the copies are real rows:
 * after the events are projected once, merges are stopped and the tenant's
 * rows are inserted again, as the projector does when it re-inserts a batch
 * after a crash (same sort key, a later inserted_at), through the same
 * materialized views, some of them a third time.
 */

const N = 150;
const DAY = 86_400_000;

describe('reads with a replay\'s copies unmerged', () => {
  let s: TestStack;
  let T: TestTenant;
  let scoreVideo: string;
  let ch: ClickHouseClient;
  let reference: EventItem[];
  const scoresBefore = new Map<string, unknown>();

  const start = Date.now() - 3 * DAY;
  // Every 4th event shares the timestamp of the one before it: ties across page boundaries.
  const tsOf = (i: number) => start + (i % 4 === 3 ? i - 1 : i) * 60_000;
  const names = ['video_play', 'video_pause', 'video_resume', 'watched_25_percent', 'cta_shown'];
  const scoreVisitors = ['vis_exact_a', 'vis_exact_b'];

  const events = (query: string) => s.api(`/videos/${T.videoId}/events${query}`, T.apiKey);
  const score = (visitor: string) => s.api(`/visitors/${visitor}/score`, T.apiKey);

  /** Follows next_cursor from the first page; checks every page but the last is full. */
  const cursorWalk = async (query: string, limit: number): Promise<EventItem[]> => {
    const seq: EventItem[] = [];
    let cursor: string | null = null;
    for (;;) {
      const qs = new URLSearchParams(query);
      qs.set('limit', String(limit));
      if (cursor) qs.set('cursor', cursor);
      const res = await events(`?${qs}`);
      expect(res.status, res.text).toBe(200);
      seq.push(...res.body.data);
      cursor = res.body.next_cursor;
      if (!cursor) return seq;
      expect(res.body.data, `a page with a next_cursor is full (limit ${limit})`).toHaveLength(limit);
    }
  };

  const rawCount = async (sql: string): Promise<number> => {
    const rs = await ch.query({ query: sql, format: 'JSONEachRow' });
    return Number((await rs.json<{ n: string }>())[0]!.n);
  };

  beforeAll(async () => {
    s = await TestStack.start({
      // The copies below are inserted behind the projector's back, so no cache would hear of them: the
      // engine's own reads are what this file checks (test/read-cache-exactness.test.ts checks the cache
      // with a replay through the projector). Score reads are still batched.
      READ_CACHE_MAX_BYTES: '0',
      // The reference is taken once: a session ending on a slow machine (no event for a minute) would add
      // a derived event to the list after it.
      DERIVED_SESSION_IDLE_MS: '3600000',
    });
    T = await s.createTenant('exactness');
    scoreVideo = await s.createVideo(T.id, 'score');
    const listed: CollectEventInput[] = Array.from({ length: N }, (_, i) => ({
      event_name: names[i % names.length]!,
      video_id: T.videoId,
      visitor_id: `vis_${String(i).padStart(3, '0')}`,
      session_id: `ses_${i % 7}`,
      occurred_at: iso(tsOf(i)),
    }));
    // Per score visitor: one CTA click and one rewind, so a doubled row would show in the factors.
    const scored: CollectEventInput[] = scoreVisitors.flatMap((visitor, v) => {
      const at = (sec: number) => iso(start + v * 3_600_000 + sec * 1000);
      const ev = (sec: number, e: { event_name: string; [field: string]: unknown }): CollectEventInput => ({ ...e, video_id: scoreVideo, visitor_id: visitor, session_id: `ses_${visitor}`, occurred_at: at(sec) });
      return [
        ev(0, { event_name: 'video_play', watched_percentage: 0 }),
        ev(10, { event_name: 'heartbeat', play_ms: 10_000, focus_ms: 6_000, watched_percentage: 20 }),
        ev(20, { event_name: 'heartbeat', play_ms: 10_000, focus_ms: 9_000, watched_percentage: 35 + v }),
        ev(25, { event_name: 'seek', from: 30, to: 10, watched_percentage: 35 + v }),
        ev(30, { event_name: 'cta_clicked', watched_percentage: 40 + v }),
      ];
    });
    for (let b = 0; b < listed.length; b += 50) {
      const res = await s.collect(T.player_key, listed.slice(b, b + 50));
      expect(res.status, res.text).toBe(202);
    }
    expect((await s.collect(T.player_key, scored)).status).toBe(202);

    await eventually(async () => ((await s.allEvents(T.videoId, T.apiKey)).length === N ? true : undefined), 30_000, 100);
    for (const v of scoreVisitors) {
      const r = await eventually(async () => {
        const res = await score(v);
        return res.status === 200 && res.body.factors.cta_clicks === 1 && res.body.factors.rewinds === 1 ? res : undefined;
      }, 30_000, 100);
      scoresBefore.set(v, r.body);
    }
    reference = await s.allEvents(T.videoId, T.apiKey);

    const clickhouseUrl = inject('clickhouseUrl');
    // NOTE: a second client on the stack's data: chdb lets connections to one
    // directory coexist in a process (with a server, the stack's database).
    ch = (await createClickHouse({ url: clickhouseUrl, database: clickhouseUrl ? s.topicPrefix.replace('.', '') : undefined, dataDir: s.dataDir })).client;
    await ch.command({ query: 'SYSTEM STOP MERGES events' });
    await ch.command({ query: 'SYSTEM STOP MERGES visitor_events' });
    const replay = (where: string) =>
      ch.command({ query: `INSERT INTO events SELECT * REPLACE (now64(3) AS inserted_at) FROM events WHERE tenant_id = '${T.id}' ${where}` });
    await replay(''); // every event a second time
    await replay('AND cityHash64(event_id) % 3 = 0'); // about a third a third time
  }, 180_000);

  afterAll(async () => {
    await s?.stop();
    await ch?.close().catch(() => undefined);
  });

  it('really holds the copies, unmerged, in events and visitor_events', async () => {
    const where = `tenant_id = '${T.id}'`;
    const distinct = await rawCount(`SELECT uniqExact(event_id) AS n FROM events WHERE ${where}`);
    expect(distinct).toBe(N + 5 * scoreVisitors.length);
    expect(await rawCount(`SELECT count() AS n FROM events WHERE ${where}`)).toBeGreaterThan(2 * distinct);
    expect(await rawCount(`SELECT count() AS n FROM events FINAL WHERE ${where}`)).toBe(distinct);
    expect(await rawCount(`SELECT count() AS n FROM visitor_events WHERE ${where}`)).toBeGreaterThan(2 * distinct);
    expect(await rawCount(`SELECT count() AS n FROM visitor_events FINAL WHERE ${where}`)).toBe(distinct);
    // The first listed event, where every walk's first page boundary falls, has 2 or 3 rows.
    expect(await rawCount(`SELECT count() AS n FROM events WHERE ${where} AND visitor_id = 'vis_000'`)).toBeGreaterThanOrEqual(2);
  });

  it('lists each event once, in the same order as before the replay', async () => {
    expect(reference).toHaveLength(N);
    expect(await s.allEvents(T.videoId, T.apiKey)).toEqual(reference);
    const first = await events('');
    expect(first.body.data).toEqual(reference.slice(0, 100));
    expect(new Set(first.body.data.map((e: EventItem) => e.visitor_id)).size).toBe(100);
  });

  it('neither skips nor repeats an event across page boundaries that fall between copies', async () => {
    for (const limit of [1, 2, 3, 7, 100, 149, 150]) {
      expect(await cursorWalk('', limit), `limit ${limit}`).toEqual(reference);
    }
  });

  it('follows `since` across pages the same way', async () => {
    const since = tsOf(59); // the timestamp events 58 and 59 share
    const expected = reference.filter((e) => Date.parse(e.timestamp) >= since);
    expect(expected.length).toBeGreaterThan(80);
    for (const limit of [1, 4, 1000]) {
      expect(await cursorWalk(`since=${iso(since)}`, limit), `limit ${limit}`).toEqual(expected);
    }
  });

  it('does not inflate the score: factors and score as before the replay', async () => {
    for (const v of scoreVisitors) {
      const res = await score(v);
      expect(res.status, res.text).toBe(200);
      expect(res.body).toEqual(scoresBefore.get(v));
      expect(res.body.factors).toMatchObject({ cta_clicks: 1, rewinds: 1, focus_time_ratio: 0.75 });
    }
  });
});
