import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parseVideoId } from '../shared/ids.ts';
import { startHttpsReceiver, type HttpsReceiver } from './helpers/https-receiver.ts';
import { TestStack, eventually, type TestTenant } from './helpers/stack.ts';

/**
 * The visitor read model end to end: player events through the
 * derived-events service's state (derived.state.v1) and the
 * projector into ClickHouse, read by GET /v1/visitors, a visitor's timeline
 * and the admin leads list.
 */
describe('visitors API', () => {
  let s: TestStack;
  let rx: HttpsReceiver;
  let A: TestTenant;
  let B: TestTenant;
  let v2: string;
  /** Player time of the first event: every event is a whole second after it. */
  const base = Math.floor(Date.now() / 1000) * 1000 - 10 * 60_000;
  const at = (sec: number) => new Date(base + sec * 1000).toISOString();

  type Visitor = { visitor_id: string; score: number; score_version: number; factors: Record<string, number>; first_seen: string; last_seen: string; videos: string[]; lead_at: string | null };
  type Page<T> = { data: T[]; next_cursor: string | null };

  const visitors = async (tenant: TestTenant, query = ''): Promise<Page<Visitor>> => {
    const res = await s.api(`/visitors${query}`, tenant.apiKey);
    expect(res.status, res.text).toBe(200);
    return res.body;
  };
  const ids = (p: Page<Visitor>) => p.data.map((v) => v.visitor_id);

  /** Every item of a list, following next_cursor with `limit` per page. */
  const allPages = async <T>(path: string, token: string, limit: number, admin = false): Promise<{ items: T[]; pages: number }> => {
    const items: T[] = [];
    let cursor: string | null = null;
    let pages = 0;
    do {
      const sep = path.includes('?') ? '&' : '?';
      const url: string = `${path}${sep}limit=${limit}${cursor ? `&cursor=${encodeURIComponent(cursor)}` : ''}`;
      const res: { status: number; text: string; body: any } = admin ? await s.admin('GET', url) : await s.api(url, token);
      expect(res.status, res.text).toBe(200);
      items.push(...res.body.data);
      cursor = res.body.next_cursor;
      pages++;
    } while (cursor && pages < 50);
    return { items, pages };
  };

  beforeAll(async () => {
    rx = await startHttpsReceiver();
    s = await TestStack.start({ DERIVED_TICK_MS: '200', DERIVED_LATENESS_MS: '300', ...rx.env });
    A = await s.createTenant('visitors-a');
    B = await s.createTenant('visitors-b');
    v2 = await s.createVideo(A.id, 'Second video');
    const dest = await s.admin('POST', `/tenants/${A.id}/destinations`, { name: 'leads', url: rx.url('/leads'), events: ['high_intent_lead'] });
    expect(dest.status, dest.text).toBe(201);

    const ev = (visitor: string, video: string, event_name: string, sec: number, extra: Record<string, unknown> = {}) => ({
      event_name,
      video_id: video,
      visitor_id: visitor,
      session_id: `ses_${visitor.slice(4)}_${video.slice(4, 10)}`,
      occurred_at: at(sec),
      ...extra,
    });
    const full = { watched_percentage: 100, current_time: 108 };
    const batches = [
      // Score 0.
      [ev('vis_cold', A.videoId, 'video_play', 1)],
      // Two videos; watched half: 20.
      [ev('vis_multi', A.videoId, 'video_play', 2), ev('vis_multi', v2, 'video_play', 3), ev('vis_multi', v2, 'watched_50_percent', 4, { watched_percentage: 50 })],
      // 40 + 20 + 12.5 → 73: a lead at the threshold 70.
      [ev('vis_hot1', A.videoId, 'watched_90_percent', 5, full), ev('vis_hot1', A.videoId, 'heartbeat', 6, { play_ms: 5000, focus_ms: 5000 })],
      [ev('vis_hot1', A.videoId, 'cta_clicked', 7, { current_time: 110 })],
      // Two clicks: 85.
      [ev('vis_hot2', v2, 'watched_90_percent', 8, full), ev('vis_hot2', v2, 'heartbeat', 9, { play_ms: 5000, focus_ms: 5000 })],
      [ev('vis_hot2', v2, 'cta_clicked', 10, { current_time: 110 }), ev('vis_hot2', v2, 'cta_clicked', 11, { current_time: 111 })],
    ];
    for (const events of batches) expect((await s.collect(A.player_key, events)).status).toBe(202);
    // Tenant B has a visitor of the same id.
    expect((await s.collect(B.player_key, [ev('vis_hot1', B.videoId, 'video_play', 20)])).status).toBe(202);

    // Each visitor at its final score.
    await eventually(
      async () => {
        const scores = Object.fromEntries((await visitors(A)).data.map((v) => [v.visitor_id, v.score]));
        return JSON.stringify(scores) === JSON.stringify({ vis_hot2: 85, vis_hot1: 73, vis_multi: 20, vis_cold: 0 }) ? true : undefined;
      },
      60_000,
      250,
    );
    await eventually(async () => ((await visitors(B)).data.length === 1 ? true : undefined), 30_000, 250);
  }, 120_000);
  afterAll(async () => {
    await s?.stop();
    await rx?.close();
  });

  it('lists each visitor in its newest snapshot, most recently seen first', async () => {
    const page = await visitors(A);
    expect(ids(page)).toEqual(['vis_hot2', 'vis_hot1', 'vis_multi', 'vis_cold']);
    expect(page.next_cursor).toBeNull();
    const [hot2, hot1, multi, cold] = page.data;
    expect(hot1).toEqual({
      visitor_id: 'vis_hot1',
      score: 73,
      score_version: 1,
      factors: { watched_percent: 1, focus_time_ratio: 1, cta_clicks: 1, rewinds: 0 },
      first_seen: at(5),
      last_seen: at(7),
      videos: [A.videoId],
      lead_at: at(7),
    });
    expect(hot2).toMatchObject({ score: 85, factors: { cta_clicks: 2 }, videos: [v2], lead_at: at(10), last_seen: at(11) });
    // Its two sessions are on different partitions of the player-event log: the videos' order is the order they reached the service.
    expect(multi).toMatchObject({ score: 20, first_seen: at(2), last_seen: at(4), lead_at: null });
    expect([...multi!.videos].sort()).toEqual([A.videoId, v2].sort());
    expect(cold).toMatchObject({ score: 0, lead_at: null });
  });

  it('orders by score and filters by min_score, since and video_id', async () => {
    expect(ids(await visitors(A, '?order=score'))).toEqual(['vis_hot2', 'vis_hot1', 'vis_multi', 'vis_cold']);
    expect(ids(await visitors(A, '?min_score=70'))).toEqual(['vis_hot2', 'vis_hot1']);
    expect(ids(await visitors(A, '?min_score=21&order=score'))).toEqual(['vis_hot2', 'vis_hot1']);
    expect(ids(await visitors(A, `?since=${encodeURIComponent(at(4))}`))).toEqual(['vis_hot2', 'vis_hot1', 'vis_multi']);
    expect(ids(await visitors(A, `?video_id=${v2}`))).toEqual(['vis_hot2', 'vis_multi']);
    expect(ids(await visitors(A, `?video_id=${parseVideoId(v2)}&order=score`))).toEqual(['vis_hot2', 'vis_multi']);
    expect(ids(await visitors(A, `?video_id=${A.videoId}&min_score=50`))).toEqual(['vis_hot1']);
  });

  it('pages with opaque cursors tied to the order and filters', async () => {
    for (const order of ['score', 'last_seen']) {
      const { items, pages } = await allPages<Visitor>(`/visitors?order=${order}`, A.apiKey, 1);
      expect(items.map((v) => v.visitor_id)).toEqual(ids(await visitors(A, `?order=${order}`)));
      expect(pages).toBe(4);
    }
    const first = await visitors(A, '?order=score&limit=2');
    expect(ids(first)).toEqual(['vis_hot2', 'vis_hot1']);
    expect(first.next_cursor).toMatch(/^vsr_/);
    expect(ids(await visitors(A, `?order=score&limit=2&cursor=${first.next_cursor}`))).toEqual(['vis_multi', 'vis_cold']);
    // Another order, filter or tenant: refused.
    for (const [tenant, q] of [[A, '?order=last_seen'], [A, '?order=score&min_score=10'], [B, '?order=score']] as const) {
      const res = await s.api(`/visitors${q}&cursor=${first.next_cursor}`, tenant.apiKey);
      expect(res.status).toBe(422);
      expect(res.headers.get('content-type')).toContain('application/problem+json');
    }
    expect((await s.api('/visitors?min_score=101', A.apiKey)).status).toBe(422);
    expect((await s.api('/visitors?video_id=nope', A.apiKey)).status).toBe(422);
    expect((await s.api('/visitors?limit=1001', A.apiKey)).status).toBe(422);
  });

  it("never shows another tenant's visitors, even under the same id", async () => {
    const b = await visitors(B);
    expect(b.data).toEqual([expect.objectContaining({ visitor_id: 'vis_hot1', score: 0, videos: [B.videoId], lead_at: null })]);
    expect(ids(await visitors(B, `?video_id=${A.videoId}`))).toEqual([]);
    expect((await s.api('/visitors', 'sk_nope')).status).toBe(401);
  });

  it("lists a visitor's events across videos in time order, signals left out", async () => {
    const multi = await s.api('/visitors/vis_multi/events', A.apiKey);
    expect(multi.status, multi.text).toBe(200);
    expect(multi.body).toEqual({
      data: [
        { event: 'play', video_id: A.videoId, session_id: `ses_multi_${A.videoId.slice(4, 10)}`, timestamp: at(2) },
        { event: 'play', video_id: v2, session_id: `ses_multi_${v2.slice(4, 10)}`, timestamp: at(3) },
        { event: 'watched_50', video_id: v2, session_id: `ses_multi_${v2.slice(4, 10)}`, timestamp: at(4) },
      ],
      next_cursor: null,
    });
    // The derived lead is one of its events, at the time of the click that raised it.
    await expect
      .poll(async () => (await s.api('/visitors/vis_hot1/events', A.apiKey)).body.data.map((e: { event: string }) => e.event).sort(), { timeout: 20_000 })
      .toEqual(['cta_clicked', 'high_intent_lead', 'watched_90']);
    const whole = (await s.api('/visitors/vis_hot1/events', A.apiKey)).body.data;
    const { items, pages } = await allPages(`/visitors/vis_hot1/events`, A.apiKey, 1);
    expect(items).toEqual(whole);
    expect(pages).toBe(3);
    expect(whole.map((e: { timestamp: string }) => e.timestamp)).toEqual([at(5), at(7), at(7)]);
    // since, and its cursor tied to it.
    const later = await s.api(`/visitors/vis_multi/events?since=${encodeURIComponent(at(3))}&limit=1`, A.apiKey);
    expect(later.body.data).toEqual([expect.objectContaining({ timestamp: at(3) })]);
    expect((await s.api(`/visitors/vis_multi/events?limit=1&cursor=${later.body.next_cursor}`, A.apiKey)).status).toBe(422);
    // Tenant B sees only its own event of vis_hot1.
    expect((await s.api('/visitors/vis_hot1/events', B.apiKey)).body.data).toEqual([expect.objectContaining({ event: 'play', video_id: B.videoId })]);
  });

  it('answers 404 for a visitor the tenant never saw', async () => {
    for (const [tenant, visitor] of [[A, 'vis_never'], [B, 'vis_multi']] as const) {
      const res = await s.api(`/visitors/${visitor}/events`, tenant.apiKey);
      expect(res.status).toBe(404);
      expect(res.headers.get('content-type')).toContain('application/problem+json');
    }
    expect((await s.api('/visitors/not-a-visitor/events', A.apiKey)).status).toBe(422);
  });

  it("lists the tenant's leads, newest first, with the deliveries about them", async () => {
    type Lead = Visitor & { deliveries: { event_name: string; status: string; attempt_count: number }[] };
    const leads = await eventually(
      async () => {
        const res = await s.admin('GET', `/tenants/${A.id}/leads`);
        expect(res.status, res.text).toBe(200);
        const data = res.body.data as Lead[];
        return data.length === 2 && data.every((l) => l.deliveries.some((d) => d.status === 'succeeded')) ? data : undefined;
      },
      30_000,
      250,
    );
    expect(leads.map((l) => l.visitor_id)).toEqual(['vis_hot2', 'vis_hot1']);
    expect(leads[1]).toMatchObject({ score: 73, lead_at: at(7), videos: [A.videoId], factors: { cta_clicks: 1 } });
    for (const l of leads) expect(l.deliveries).toEqual([expect.objectContaining({ event_name: 'high_intent_lead', status: 'succeeded', attempt_count: 1 })]);
    const { items, pages } = await allPages<Lead>(`/tenants/${A.id}/leads`, '', 1, true);
    expect(items.map((l) => l.visitor_id)).toEqual(['vis_hot2', 'vis_hot1']);
    expect(pages).toBe(2);
    // The tenant's own threshold decides.
    expect((await s.admin('PATCH', `/tenants/${A.id}`, { high_intent_threshold: 80 })).status).toBe(200);
    expect((await s.admin('GET', `/tenants/${A.id}/leads`)).body.data.map((l: Lead) => l.visitor_id)).toEqual(['vis_hot2']);
    expect((await s.admin('GET', `/tenants/${B.id}/leads`)).body.data).toEqual([]);
    expect((await s.admin('GET', '/tenants/00000000-0000-4000-8000-000000000000/leads')).status).toBe(404);
    expect((await s.request('GET', `/admin/v1/tenants/${A.id}/leads`, { token: A.apiKey })).status).toBe(401);
  });
});
