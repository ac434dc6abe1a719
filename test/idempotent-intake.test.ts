import { randomBytes, randomUUID } from 'node:crypto';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { EventCollector, type CollectEvent, type PlayerEventInput } from '../examples/player-client.ts';
import { expectProblem, iso, type EventItem } from './helpers/contract.ts';
import { startHttpsReceiver, type HttpsReceiver } from './helpers/https-receiver.ts';
import { metricSample } from './helpers/prometheus-text.ts';
import { TestStack, eventually, type CollectEventInput, type TestTenant } from './helpers/stack.ts';

/**
 * Idempotent intake (docs/api.md, "Retries"): events that carry the player's
 * own event_id are recorded once however often the request is resent: after
 * a 503 that came after Kafka committed, after a timeout, in a later
 * projector batch or in the same one, with or without occurred_at.
 */

// Long enough that requests sent within a moment of each other share one
// projector batch (the "same batch" case checks that it really did).
const FLUSH_MS = 1500;
const rnd = () => randomBytes(4).toString('hex');

type Fault = 'pass' | 'lose_202_answer_503' | 'lose_202_answer_nothing';

/**
 * A reverse proxy in front of the real intake that forwards every request
 * and, when told to, loses the real answer: it answers 503 instead of the 202
 * it got (a load balancer giving up on a slow upstream), or nothing at all.
 * Either way the events were committed and the client does not know.
 */
async function startLossyProxy(target: string) {
  const faults: Fault[] = [];
  const seen: { fault: Fault; upstream: number }[] = [];
  const held = new Set<http.ServerResponse>();
  const server = http.createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', async () => {
      const fault = faults.shift() ?? 'pass';
      const up = await fetch(`${target}${req.url}`, {
        method: req.method,
        headers: { 'content-type': String(req.headers['content-type']), 'x-player-key': String(req.headers['x-player-key']) },
        body: Buffer.concat(chunks),
      });
      const text = await up.text();
      seen.push({ fault, upstream: up.status });
      if (fault === 'pass') {
        res.writeHead(up.status, { 'content-type': up.headers.get('content-type') ?? 'text/plain' }).end(text);
      } else if (fault === 'lose_202_answer_503') {
        res.writeHead(503, { 'content-type': 'text/plain', 'retry-after': '1' }).end('upstream timed out');
      } else {
        held.add(res); // never answered; the client's timeout ends it
      }
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    faults,
    seen,
    async close() {
      for (const res of held) res.destroy();
      server.closeAllConnections();
      await new Promise((r) => server.close(r));
    },
  };
}

describe('idempotent intake', () => {
  let s: TestStack;
  let rx: HttpsReceiver;
  let proxy: Awaited<ReturnType<typeof startLossyProxy>>;
  let A: TestTenant;

  beforeAll(async () => {
    rx = await startHttpsReceiver();
    s = await TestStack.start({
      PROJECTOR_FLUSH_MS: String(FLUSH_MS),
      ...rx.env,
    });
    proxy = await startLossyProxy(s.url);
    A = await s.createTenant('idempotent-a');
    // The first Kafka transaction of a fresh stack can be slow on a loaded machine.
    await eventually(async () => ((await s.collect(A.player_key, [{ event_name: 'player_loaded', video_id: A.videoId, visitor_id: 'vis_warmup' }])).status === 202 ? true : undefined), 60_000, 500);
  });
  afterAll(async () => {
    await proxy?.close();
    await s?.stop();
    await rx?.close();
  });

  const listed = async (t: TestTenant, visitor: string, videoId = t.videoId) => (await s.allEvents(videoId, t.apiKey)).filter((e) => e.visitor_id === visitor);
  const score = async (t: TestTenant, visitor: string) => {
    const res = await s.api(`/visitors/${visitor}/score`, t.apiKey);
    expect(res.status, res.text).toBe(200);
    return res.body as { score: number; factors: Record<string, number>; computed_at: string };
  };
  /** Waits until `visitor` has `n` listed events on the video. */
  const waitListed = (t: TestTenant, visitor: string, n: number, videoId = t.videoId) =>
    eventually(async () => {
      const got = await listed(t, visitor, videoId);
      return got.length >= n ? got : undefined;
    }, 30_000, 200);
  /**
   * Everything sent before on `session` has been projected once this returns:
   * a marker event on the same session shares the partition (key
   * tenant:session), so it is handled in the same projector batch or a later one.
   */
  const barrier = async (t: TestTenant, session: string) => {
    const marker = `vis_marker_${rnd()}`;
    const res = await s.collect(t.player_key, [{ event_name: 'player_loaded', video_id: t.videoId, session_id: session, visitor_id: marker }]);
    expect(res.status, res.text).toBe(202);
    await waitListed(t, marker, 1);
  };
  const projectorBatches = async () => {
    const m = await s.request('GET', '/metrics');
    const batches = metricSample(m.text, 'projector_batch_size_count');
    expect(batches, 'projector_batch_size_count is exported').not.toBeNaN();
    return batches;
  };

  /** One of each kind of event that feeds the list or the score, for one visitor (as the player observes them). */
  const playerEvents = (visitor: string): PlayerEventInput[] =>
    [
      { event_name: 'video_play', watched_percentage: 0 },
      { event_name: 'heartbeat', play_ms: 4000, focus_ms: 1000, watched_percentage: 10 },
      { event_name: 'cta_clicked', watched_percentage: 20 },
      { event_name: 'seek', from: 30, to: 5, watched_percentage: 25 },
      { event_name: 'watched_50_percent', watched_percentage: 50 },
    ].map((e, i) => ({ ...e, video_id: A.videoId, session_id: `ses_${visitor.slice(4)}`, visitor_id: visitor, current_time: i * 10, duration: 120 }));
  /** Those events with client ids, and with an occurred_at when given. */
  const session = (visitor: string, occurredAt?: (i: number) => string): CollectEventInput[] =>
    playerEvents(visitor).map((e, i) => ({ ...e, event_id: randomUUID(), ...(occurredAt ? { occurred_at: occurredAt(i) } : {}) }));
  /** The factors of the score of those events, counted once. */
  const ONCE = { watched_percent: 0.5, focus_time_ratio: 0.25, cta_clicks: 1, rewinds: 1 };
  const LISTED = ['play', 'cta_clicked', 'watched_50'];

  for (const variant of ['without occurred_at', 'with occurred_at'] as const) {
    it(`a request resent with the same event ids in a later projector batch is recorded once (${variant})`, async () => {
      const visitor = `vis_later_${variant.startsWith('with ') ? 'at' : 'rx'}_${rnd()}`;
      const base = Date.now() - 60_000;
      const events = session(visitor, variant === 'with occurred_at' ? (i) => iso(base + i) : undefined);
      const from = Date.now();
      expect((await s.collect(A.player_key, events)).status).toBe(202);
      const to = Date.now();
      // The first copy is projected (and its score computed) before the retry is sent.
      const first = await waitListed(A, visitor, LISTED.length);
      const firstScore = await eventually(async () => {
        const sc = await score(A, visitor);
        return sc.factors.rewinds === 1 ? sc : undefined;
      });

      // The retry: same events and ids (ids in upper case this time: case is ignored).
      const retry = events.map((e) => ({ ...e, event_id: String(e.event_id).toUpperCase() }));
      const again = await s.collect(A.player_key, retry);
      expect(again.status, again.text).toBe(202);
      expect(again.body).toEqual({ accepted: events.length });
      await barrier(A, `ses_${visitor.slice(4)}`);

      const after = await listed(A, visitor);
      expect(after.map((e) => e.event).sort()).toEqual([...LISTED].sort());
      expect(after).toEqual(first);
      for (const e of after) {
        const t = Date.parse(e.timestamp);
        if (variant === 'with occurred_at') expect(t).toBeLessThan(base + 10);
        else expect(t >= from && t <= to, `${e.event} at ${e.timestamp}: the first receipt time`).toBe(true);
      }
      const sc = await score(A, visitor);
      expect(sc.factors).toEqual(ONCE);
      expect(sc).toEqual(firstScore);
    });
  }

  it('the same request twice at once (a "503 after commit" and its retry) shares a projector batch and is recorded once', async () => {
    const visitor = `vis_same_${rnd()}`;
    const events = session(visitor);
    const before = await projectorBatches();
    // Both go through the intake and commit; the client saw one of the answers as lost.
    const [one, two] = await Promise.all([s.collect(A.player_key, events), s.collect(A.player_key, events)]);
    expect([one.status, two.status]).toEqual([202, 202]);
    await barrier(A, `ses_${visitor.slice(4)}`);
    // Both copies (and the marker) were inserted by one handler call, so the
    // repeat was found within the batch, not in ClickHouse.
    expect(await projectorBatches()).toBe(before + 1);
    const got = await listed(A, visitor);
    expect(got.map((e) => e.event).sort()).toEqual([...LISTED].sort());
    expect(new Set(got.map((e) => e.timestamp)).size).toBe(1); // one request, one receipt time
    expect((await score(A, visitor)).factors).toEqual(ONCE);
  });

  it('the example player resends after a 503 that came after the commit: each event recorded once', async () => {
    const visitor = `vis_player503_${rnd()}`;
    const retries: { reason: string; delayMs: number; ids: string[] }[] = [];
    const collector = new EventCollector({
      endpoint: `${proxy.url}/v1/collect`,
      playerKey: A.player_key,
      retry: { baseDelayMs: 200, maxAttempts: 4 },
      onRetry: ({ reason, delayMs, events }) => retries.push({ reason, delayMs, ids: events.map((e) => e.event_id) }),
    });
    const sent = playerEvents(visitor).map((e) => collector.track(e));
    proxy.faults.push('lose_202_answer_503');
    const result = await collector.flush();

    expect(result).toEqual({ accepted: sent.length, rejected: 0, pending: 0 });
    expect(proxy.seen.slice(-2)).toEqual([
      { fault: 'lose_202_answer_503', upstream: 202 }, // committed, answered 503
      { fault: 'pass', upstream: 202 },
    ]);
    expect(retries).toHaveLength(1);
    expect(retries[0]!.reason).toBe('status 503');
    expect(retries[0]!.delayMs).toBeGreaterThanOrEqual(1000); // Retry-After: 1
    expect(retries[0]!.ids).toEqual(sent.map((e) => e.event_id));
    await barrier(A, `ses_${visitor.slice(4)}`);
    const got = await listed(A, visitor);
    expect(got.map((e) => e.event).sort()).toEqual([...LISTED].sort());
    expect(got.map((e) => e.timestamp).sort()).toEqual(sent.filter((e) => e.event_name !== 'heartbeat' && e.event_name !== 'seek').map((e) => e.occurred_at).sort());
    expect((await score(A, visitor)).factors).toEqual(ONCE);
  });

  it('the example player resends after a timeout (no answer at all) with the same ids: each event recorded once', async () => {
    const visitor = `vis_playerto_${rnd()}`;
    const retries: string[] = [];
    const collector = new EventCollector({
      endpoint: `${proxy.url}/v1/collect`,
      playerKey: A.player_key,
      requestTimeoutMs: 3000,
      retry: { baseDelayMs: 200, maxAttempts: 4 },
      onRetry: ({ reason }) => retries.push(reason),
    });
    const sent: CollectEvent[] = playerEvents(visitor).map((e) => collector.track(e));
    proxy.faults.push('lose_202_answer_nothing');
    const result = await collector.flush();

    expect(result).toEqual({ accepted: sent.length, rejected: 0, pending: 0 });
    expect(retries).toEqual(['timeout']);
    expect(proxy.seen.slice(-2)).toEqual([
      { fault: 'lose_202_answer_nothing', upstream: 202 },
      { fault: 'pass', upstream: 202 },
    ]);
    await barrier(A, `ses_${visitor.slice(4)}`);
    expect((await listed(A, visitor)).map((e) => e.event).sort()).toEqual([...LISTED].sort());
    expect((await score(A, visitor)).factors).toEqual(ONCE);
  });

  it('a reused event id on another video is dropped: the first record wins', async () => {
    const visitor = `vis_reuse_${rnd()}`;
    const ses = `ses_${visitor.slice(4)}`;
    const other = await s.createVideo(A.id, 'Another video');
    const id = randomUUID();
    const ev = (videoId: string, event_name: string): CollectEventInput => ({ event_id: id, event_name, video_id: videoId, session_id: ses, visitor_id: visitor });
    expect((await s.collect(A.player_key, [ev(A.videoId, 'cta_clicked')])).status).toBe(202);
    const first = await waitListed(A, visitor, 1);
    expect((await s.collect(A.player_key, [ev(other, 'cta_clicked')])).status).toBe(202);
    expect((await s.collect(A.player_key, [ev(other, 'video_play')])).status).toBe(202);
    await barrier(A, ses);
    expect(await listed(A, visitor)).toEqual(first);
    expect(await listed(A, visitor, other)).toEqual([]);
    expect((await score(A, visitor)).factors.cta_clicks).toBe(1);
  });

  it('events without an event_id are still accepted, and each request of them is new events', async () => {
    const visitor = `vis_noid_${rnd()}`;
    const ses = `ses_${visitor.slice(4)}`;
    const plain: CollectEventInput[] = [{ event_name: 'cta_clicked', video_id: A.videoId, session_id: ses, visitor_id: visitor }];
    const mixed: CollectEventInput[] = [...plain, { ...plain[0]!, event_name: 'video_play', event_id: randomUUID() }];
    for (const body of [plain, plain, mixed]) {
      const res = await s.collect(A.player_key, body);
      expect(res.status, res.text).toBe(202);
      expect(res.body).toEqual({ accepted: body.length });
    }
    await barrier(A, ses);
    const got = await listed(A, visitor);
    expect(got.map((e) => e.event).sort()).toEqual(['cta_clicked', 'cta_clicked', 'cta_clicked', 'play']);
    expect((await score(A, visitor)).factors.cta_clicks).toBe(3);
  });

  it('refuses an invalid event_id with 422 and the problem shape, and records nothing of that request', async () => {
    const visitor = `vis_bad_${rnd()}`;
    const ses = `ses_${visitor.slice(4)}`;
    const good = (): CollectEventInput => ({ event_name: 'video_play', video_id: A.videoId, session_id: ses, visitor_id: visitor, event_id: randomUUID() });
    const bad: [unknown, RegExp][] = [
      ['not-a-uuid', /body\.events\.1\.event_id/],
      ['', /body\.events\.1\.event_id/],
      [42, /body\.events\.1\.event_id/],
      [null, /body\.events\.1\.event_id/],
      ['3f1c2b8e4b1a4c559a570d7f8f7d2c11', /body\.events\.1\.event_id/], // no dashes
      ['{3f1c2b8e-4b1a-4c55-9a57-0d7f8f7d2c11}', /body\.events\.1\.event_id/],
      ['3f1c2b8e-4b1a-0c55-9a57-0d7f8f7d2c11', /body\.events\.1\.event_id/], // version 0 is no UUID version
      ['00000000-0000-0000-0000-000000000000', /body\.events\.1\.event_id: must be a UUID .*not the nil or max UUID/],
      ['ffffffff-ffff-ffff-ffff-ffffffffffff', /body\.events\.1\.event_id: must be a UUID .*not the nil or max UUID/],
      ['FFFFFFFF-FFFF-FFFF-FFFF-FFFFFFFFFFFF', /body\.events\.1\.event_id/],
    ];
    for (const [eventId, detail] of bad) {
      const res = await s.collect(A.player_key, [good(), { ...good(), event_id: eventId }]);
      expectProblem(res, 422, detail);
      expect(res.body.errors.map((e: { path: string }) => e.path), JSON.stringify(eventId)).toEqual(['body.events.1.event_id']);
    }
    // Two events of one request cannot share an id (whatever its case).
    const dup = good();
    const res = await s.collect(A.player_key, [dup, good(), { ...good(), event_id: String(dup.event_id).toUpperCase() }]);
    expectProblem(res, 422, /body\.events\.2\.event_id: repeats the event_id of events\.0/);
    await barrier(A, ses);
    expect(await listed(A, visitor)).toEqual([]);
  });

  it('documents event_id in the OpenAPI document (optional, a UUID)', async () => {
    const o = await s.request('GET', '/v1/openapi.json');
    expect(o.status).toBe(200);
    const item = o.body.paths['/v1/collect'].post.requestBody.content['application/json'].schema.properties.events.items;
    expect(item.properties.event_id).toMatchObject({ type: 'string', format: 'uuid', description: expect.stringMatching(/retry/) });
    // The documented pattern is the one enforced: RFC 9562 versions 1–8, so neither nil nor max.
    const pattern = new RegExp(item.properties.event_id.pattern);
    expect(pattern.test(randomUUID())).toBe(true);
    expect(pattern.test(randomUUID().toUpperCase())).toBe(true);
    expect(pattern.test('00000000-0000-0000-0000-000000000000')).toBe(false);
    expect(pattern.test('ffffffff-ffff-ffff-ffff-ffffffffffff')).toBe(false);
    expect(item.required).not.toContain('event_id');
  });

  it('a webhook destination receives the retried events under the same delivery ids', async () => {
    const W = await s.createTenant('idempotent-webhooks');
    const dest = await s.admin('POST', `/tenants/${W.id}/destinations`, { name: 'retries', url: rx.url('/retries'), events: ['cta_clicked', 'video_play'] });
    expect(dest.status, dest.text).toBe(201);
    const visitor = `vis_hook_${rnd()}`;
    const ses = `ses_${visitor.slice(4)}`;
    const events: CollectEventInput[] = [
      { event_id: randomUUID(), event_name: 'cta_clicked', video_id: W.videoId, session_id: ses, visitor_id: visitor },
      { event_id: randomUUID(), event_name: 'video_play', video_id: W.videoId, session_id: ses, visitor_id: visitor, occurred_at: iso(Date.now() - 5000) },
    ];
    expect((await s.collect(W.player_key, events)).status).toBe(202);
    await expect.poll(() => rx.to('/retries').length, { timeout: 30_000 }).toBeGreaterThanOrEqual(2);
    expect((await s.collect(W.player_key, events)).status).toBe(202);
    await expect.poll(() => rx.to('/retries').length, { timeout: 30_000 }).toBeGreaterThanOrEqual(4);
    await s.fanoutIdle();
    const got = rx.to('/retries');
    expect(got).toHaveLength(4);
    const byEvent = new Map<string, typeof got>();
    for (const r of got) byEvent.set(String(r.headers['x-player-event']), [...(byEvent.get(String(r.headers['x-player-event'])) ?? []), r]);
    for (const name of ['cta_clicked', 'video_play']) {
      const [a, b] = byEvent.get(name)!;
      expect(a!.headers['x-player-delivery-id'], name).toBe(b!.headers['x-player-delivery-id']);
    }
    expect(new Set(got.map((r) => r.headers['x-player-delivery-id'])).size).toBe(2);
    // With occurred_at the resent delivery is byte for byte the first one.
    const [p1, p2] = byEvent.get('video_play')!;
    expect(p2!.rawBody.toString()).toBe(p1!.rawBody.toString());
    // And the reads count each event once.
    await barrier(W, ses);
    expect((await listed(W, visitor)).map((e: EventItem) => e.event).sort()).toEqual(['cta_clicked', 'play']);
  });
});
