import { randomBytes } from 'node:crypto';
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ACTIVE, NOT_FROM_PLAYER, SHORT, SIGNALS, expectProblem, iso, randomVid, type EventItem, type Res } from './helpers/contract.ts';
import { checkWithin } from './helpers/property.ts';
import { TestStack, eventually, type TestTenant } from './helpers/stack.ts';

/**
 * Every kind of bad input is refused with the right 4xx and the problem+json
 * shape; property-based runs check that nothing makes the service answer 5xx
 * or lose an event it acknowledged.
 */

const toUuid = (vid: string) => vid.slice(4).replace(/^(.{8})(.{4})(.{4})(.{4})(.{12})$/, '$1-$2-$3-$4-$5');

const COLLECTABLE = [...ACTIVE, ...SIGNALS];


const check = <T>(arb: fc.Arbitrary<T>, predicate: (v: T) => Promise<void>, numRuns = 200) => checkWithin(arb, predicate, { numRuns });

describe('bad input', () => {
  let s: TestStack;
  let A: TestTenant;
  let B: TestTenant;

  beforeAll(async () => {
    // Without the derived-events service: these tests compare the events
    // listed with exactly those sent (test/derived-events.test.ts covers
    // the events the service adds).
    s = await TestStack.start({ SERVICES: 'ingest,projector,fanout,api,admin' });
    A = await s.createTenant('bad-input-a');
    B = await s.createTenant('bad-input-b');
    // Warm up the intake: the first Kafka transaction of a fresh stack can be slow on a loaded machine.
    await eventually(async () => {
      const r = await s.collect(A.player_key, [{ event_name: 'player_loaded', video_id: A.videoId, visitor_id: 'vis_warmup' }]);
      return r.status === 202 ? true : undefined;
    }, 60_000, 500);
  });
  afterAll(async () => {
    await s?.stop();
  });

  const okEvent = (over: Record<string, unknown> = {}) => ({
    event_name: 'video_play',
    video_id: A.videoId,
    session_id: 'ses_bad',
    visitor_id: 'vis_bad',
    current_time: 0,
    duration: 120,
    watched_percentage: 0,
    ...over,
  });
  const postRaw = (rawBody: string | undefined, contentType: string | undefined, path = '/v1/collect', headers: Record<string, string> = { 'x-player-key': A.player_key }) =>
    s.request('POST', path, { rawBody, headers: { ...(contentType ? { 'content-type': contentType } : {}), ...headers } });
  const collect = (body: unknown) => s.request('POST', '/v1/collect', { body, headers: { 'x-player-key': A.player_key } });
  const newKey = async (t: TestTenant) => (await s.admin('POST', `/tenants/${t.id}/api-keys`, { name: `k-${randomBytes(2).toString('hex')}` })).body.key as string;

  // ───────────────────────────── refusals ─────────────────────────────
  describe('refusals', () => {
    it('malformed JSON → 400', async () => {
      for (const raw of ['{', '{"events": [}', 'nul', '{"events": [{"event_name": "video_play",}]}', "{'events': []}", '\u0000', '{"a":1}x']) {
        expectProblem(await postRaw(raw, 'application/json'), 400, /JSON/i);
        expectProblem(await postRaw(raw, 'text/plain', `/v1/collect?key=${A.player_key}`, {}), 400, /JSON/i);
      }
      expectProblem(await postRaw('', 'application/json'), 400);
      expectProblem(await postRaw('{', 'application/json', '/api/public/conversion', { authorization: `Bearer ${A.apiKey}` }), 400);
      expectProblem(await postRaw('{', 'application/json', '/admin/v1/tenants', { authorization: `Bearer ${s.stack.adminToken}` }), 400);
      // Prototype poisoning is refused, not merged, at any depth and on both
      // media types alike (the beacon's text/plain included), with a detail
      // that names the key rather than calling the JSON malformed.
      const poisoned = [
        '{"__proto__": {"polluted": true}, "events": []}',
        '{"events": [{"event_name": "video_play", "x_extra": {"__proto__": 0}}]}',
        '{"events": [], "\\u005f_proto__": {"polluted": true}}',
        '{"events": [{"constructor": {"prototype": {"polluted": true}}}]}',
      ];
      for (const raw of poisoned) {
        for (const res of [
          await postRaw(raw, 'application/json'),
          await postRaw(raw, 'text/plain', `/v1/collect?key=${A.player_key}`, {}),
        ]) {
          expectProblem(res, 400, /"__proto__" key or a "constructor" key holding "prototype"/);
          expect(res.body.type).toMatch(/bad_request$/);
        }
      }
      expectProblem(await postRaw('{', 'application/json', '/admin/v1/tenants', { authorization: `Bearer ${s.stack.adminToken}` }), 400, /not valid JSON/);
      expect(({} as Record<string, unknown>).polluted).toBeUndefined();
      // "constructor" alone, without "prototype", is an ordinary unknown key.
      expectProblem(await postRaw(JSON.stringify({ events: [okEvent({ x_extra: { constructor: 1 }, current_time: '1' })] }), 'application/json'), 422, /current_time/);
    });

    it('wrong types and shapes → 422 naming the field', async () => {
      const cases: [unknown, RegExp][] = [
        [null, /body/],
        [[], /body/],
        ['events', /body/],
        [{}, /body\.events/],
        [{ events: 'x' }, /body\.events/],
        [{ events: {} }, /body\.events/],
        [{ events: [null] }, /body\.events\.0/],
        [{ events: ['video_play'] }, /body\.events\.0/],
        [{ events: [okEvent({ current_time: '1' })] }, /body\.events\.0\.current_time/],
        [{ events: [okEvent({ current_time: -1 })] }, /body\.events\.0\.current_time/],
        [{ events: [okEvent({ duration: null })] }, /body\.events\.0\.duration/],
        [{ events: [okEvent({ watched_percentage: 100.01 })] }, /body\.events\.0\.watched_percentage/],
        [{ events: [okEvent({ watched_percentage: true })] }, /body\.events\.0\.watched_percentage/],
        [{ events: [okEvent({ session_id: 5 })] }, /body\.events\.0\.session_id/],
        [{ events: [okEvent({ event_name: 7 })] }, /body\.events\.0\.event_name/],
        [{ events: [okEvent({ utm_source: 'x'.repeat(513) })] }, /body\.events\.0\.utm_source/],
        [{ events: [okEvent({ utm_campaign: null })] }, /body\.events\.0\.utm_campaign/],
        [{ events: [okEvent({ occurred_at: 1700000000000 })] }, /body\.events\.0\.occurred_at/],
        [{ events: [okEvent({ occurred_at: '2024-01-01' })] }, /body\.events\.0\.occurred_at/],
        [{ events: [okEvent({ occurred_at: 'yesterday' })] }, /body\.events\.0\.occurred_at/],
        [{ events: [okEvent({ event_name: 'heartbeat' })] }, /body\.events\.0\.play_ms/],
        [{ events: [okEvent({ event_name: 'heartbeat', play_ms: 1.5, focus_ms: 1 })] }, /body\.events\.0\.play_ms/],
        [{ events: [okEvent({ event_name: 'heartbeat', play_ms: 1000, focus_ms: 1001 })] }, /body\.events\.0\.focus_ms: cannot exceed play_ms/],
        [{ events: [okEvent({ event_name: 'heartbeat', play_ms: 3_600_001, focus_ms: 0 })] }, /body\.events\.0\.play_ms/],
        [{ events: [okEvent({ event_name: 'seek', from: 10 })] }, /body\.events\.0\.to: required for seek/],
        [{ events: [okEvent({ event_name: 'seek', from: -1, to: 3 })] }, /body\.events\.0\.from/],
        [{ events: [okEvent(), okEvent({ visitor_id: 1 })] }, /body\.events\.1\.visitor_id/],
      ];
      for (const [body, detail] of cases) {
        const res = await collect(body);
        expectProblem(res, 422, detail);
        expect(res.body.errors, JSON.stringify(body).slice(0, 200)).toEqual(expect.arrayContaining([{ path: expect.any(String), message: expect.any(String) }]));
      }
      // Conversion intake.
      const conv = (body: unknown) => s.request('POST', '/api/public/conversion', { token: A.apiKey, body });
      expectProblem(await conv({ visitor_id: 'vis_x', video_id: A.videoId, value: 'ten' }), 422, /body\.value/);
      expectProblem(await conv([]), 422);
    });

    it('oversized body → 413 above COLLECT_MAX_BODY_BYTES (1 MiB), accepted at exactly 1 MiB', async () => {
      const LIMIT = 1024 * 1024;
      const events = Array.from({ length: 500 }, (_, i) => okEvent({ visitor_id: `vis_big_${i}`, utm_source: 'u'.repeat(400), utm_campaign: 'c'.repeat(400), ctwa_clid: 'k'.repeat(400), external_lead_id: 'l'.repeat(400) }));
      const json = JSON.stringify({ events });
      expect(json.length).toBeGreaterThan(LIMIT / 2);
      expect(json.length).toBeLessThan(LIMIT);
      const exactly = json + ' '.repeat(LIMIT - json.length); // trailing whitespace is valid JSON
      expect(Buffer.byteLength(exactly)).toBe(LIMIT);

      const ok = await postRaw(exactly, 'application/json');
      expect(ok.status, ok.text).toBe(202);
      expect(ok.body).toEqual({ accepted: 500 });
      expectProblem(await postRaw(`${exactly} `, 'application/json'), 413);
      expectProblem(await postRaw(`${exactly} `, 'text/plain', `/v1/collect?key=${A.player_key}`, {}), 413);
      // Way over, and the limit holds before authentication too.
      expectProblem(await postRaw('x'.repeat(5 * LIMIT), 'application/json'), 413);
      expectProblem(await postRaw(`${exactly} `, 'application/json', '/v1/collect', {}), 413);
      // The limit also holds for a chunked body without Content-Length.
      const chunks = [exactly.slice(0, LIMIT / 2), exactly.slice(LIMIT / 2), '  '];
      const stream = new ReadableStream<Uint8Array>({
        pull(ctrl) {
          const c = chunks.shift();
          if (c === undefined) ctrl.close();
          else ctrl.enqueue(new TextEncoder().encode(c));
        },
      });
      const chunked = await fetch(`${s.url}/v1/collect`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', 'x-player-key': A.player_key },
        body: stream,
        duplex: 'half',
      } as RequestInit);
      const text = await chunked.text();
      expectProblem({ status: chunked.status, headers: chunked.headers, body: JSON.parse(text), text }, 413);
      // Still serving.
      expect((await collect({ events: [okEvent()] })).status).toBe(202);
    });

    // Regression: before 94b4c2f the group-commit producer grouped requests by
    // message count only, so concurrent valid batches of one partition added
    // up past the broker's message.max.bytes (1 MiB) and every request of the
    // group was answered 503 "the event log is unavailable … retry later".
    it('accepts concurrent large batches that each fit the body limit', async () => {
      const body = (tag: string) =>
        JSON.stringify({
          events: Array.from({ length: 400 }, (_, i) =>
            okEvent({ visitor_id: `vis_cc_${tag}_${i}`, session_id: 'ses_same_partition', utm_source: 'u'.repeat(400), utm_campaign: 'c'.repeat(400), ctwa_clid: 'k'.repeat(400), external_lead_id: 'l'.repeat(400) }),
          ),
        });
      const bodies = ['a', 'b', 'c', 'd', 'e', 'f'].map(body);
      for (const b of bodies) expect(b.length).toBeLessThan(800_000); // each ~0.7 MiB, well under the 1 MiB body limit
      const res = await Promise.all(bodies.map((b) => postRaw(b, 'application/json')));
      expect(res.map((r) => r.status)).toEqual([202, 202, 202, 202, 202, 202]);
      for (const r of res) expect(r.body).toEqual({ accepted: 400 });
    });

    it('0 and 501 events → 422; 500 → 202', async () => {
      expectProblem(await collect({ events: [] }), 422, /body\.events/);
      const many = (n: number) => ({ events: Array.from({ length: n }, (_, i) => okEvent({ visitor_id: `vis_n${i}` })) });
      expectProblem(await collect(many(501)), 422, /body\.events/);
      const ok = await collect(many(500));
      expect(ok.status).toBe(202);
      expect(ok.body).toEqual({ accepted: 500 });
    });

    it('unknown event names, and those the service raises itself → 422 with a message', async () => {
      for (const name of ['video_started', 'VIDEO_PLAY', 'video_play ', '', 'watched_100_percent', 'play', 'watched_90']) {
        const res = await collect({ events: [okEvent({ event_name: name })] });
        expectProblem(res, 422, /body\.events\.0\.event_name: unknown event name; expected one of player_loaded, /);
        expect(res.body.errors).toEqual([{ path: 'body.events.0.event_name', message: expect.stringContaining('unknown event name') }]);
      }
      for (const name of NOT_FROM_PLAYER.filter((n) => n !== 'conversion')) {
        const res = await collect({ events: [okEvent(), okEvent({ event_name: name })] });
        expectProblem(res, 422, new RegExp(`body\\.events\\.1\\.event_name: ${name} is not accepted from the player: the service derives it`));
      }
      const conv = await collect({ events: [okEvent({ event_name: 'conversion' })] });
      expect(conv.body.detail).toContain('use /api/public/conversion');
    });

    it('malformed or unknown ids in the collect body → 422, another tenant\'s video → 403', async () => {
      for (const video_id of ['vid_123', `vid_${'A'.repeat(32)}`, `vid_${'g'.repeat(32)}`, '', 'not-a-uuid', 12, null]) {
        expectProblem(await collect({ events: [okEvent({ video_id })] }), 422, /body\.events\.0\.video_id/);
      }
      expectProblem(await collect({ events: [okEvent({ video_id: randomVid() })] }), 422, /body\.events\.0\.video_id: unknown video/);
      expectProblem(await collect({ events: [okEvent({ video_id: B.videoId })] }), 403, /body\.events\.0\.video_id/);
      for (const visitor_id of ['visitor', 'vis_', 'vis_a b', 'vis_a/b', `vis_${'x'.repeat(65)}`, 'VIS_abc', 'ses_abc']) {
        expectProblem(await collect({ events: [okEvent({ visitor_id })] }), 422, /body\.events\.0\.visitor_id/);
      }
      for (const session_id of ['session', 'ses_', 'ses_ä', `ses_${'x'.repeat(65)}`, 'vis_abc']) {
        expectProblem(await collect({ events: [okEvent({ session_id })] }), 422, /body\.events\.0\.session_id/);
      }
      // The UUID form of a video id is accepted, also in capitals.
      expect((await collect({ events: [okEvent({ video_id: toUuid(A.videoId) })] })).status).toBe(202);
      expect((await collect({ events: [okEvent({ video_id: toUuid(A.videoId).toUpperCase() })] })).status).toBe(202);
    });

    it('malformed ids in paths and malformed cursors → 422', async () => {
      for (const id of ['abc', 'vid_', 'vid_1', `vid_${'A'.repeat(32)}`, encodeURIComponent('vid_ '), '00000000-0000-0000-0000-00000000000g']) {
        expectProblem(await s.api(`/videos/${id}/events`, A.apiKey), 422, /params\.video_id/);
      }
      for (const id of ['abc', 'vis_', encodeURIComponent('vis_a b'), encodeURIComponent('vis_é'), `vis_${'x'.repeat(65)}`, 'vis_a.b']) {
        expectProblem(await s.api(`/visitors/${id}/score`, A.apiKey), 422, /params\.visitor_id/);
      }
      for (const cursor of ['x', 'evt_', 'evt_.', 'evt_a.b', 'evt_a.b.c', `evt_${'A'.repeat(40)}.${'A'.repeat(16)}`, 'cur_abc.def', 'evt_%%%', 'evt_W10.AAAAAAAAAAAAAAAA', 'x'.repeat(513)]) {
        expectProblem(await s.api(`/videos/${A.videoId}/events?cursor=${encodeURIComponent(cursor)}`, A.apiKey), 422, /cursor/);
        expectProblem(await s.api(`/videos?cursor=${encodeURIComponent(cursor)}`, A.apiKey), 422, /cursor/);
      }
      expectProblem(await s.api(`/videos/${A.videoId}/events?cursor=a&cursor=b`, A.apiKey), 422, /cursor/);
      expectProblem(await s.api(`/videos?limit=1&limit=2`, A.apiKey), 422, /limit/);
      // 68 characters, the longest valid visitor id, reach the route.
      expect((await s.api(`/visitors/vis_${'x'.repeat(64)}/score`, A.apiKey)).status).toBe(404);
    });

    it('other refusals keep the shape: 415 content type, 404 route, 401 auth', async () => {
      expectProblem(await postRaw('<events/>', 'application/xml'), 415);
      expectProblem(await postRaw('events=1', 'application/x-www-form-urlencoded'), 415);
      expectProblem(await s.request('GET', '/nope'), 404);
      expectProblem(await s.request('POST', '/v1/videos'), 404);
      expectProblem(await s.request('GET', '/v1/videos', { headers: { authorization: 'Bearer' } }), 401);
      expectProblem(await s.request('GET', '/v1/videos', { headers: { authorization: `Bearer ${A.apiKey} extra` } }), 401);
    });

    // Regression: before 94b4c2f these were answered by Fastify's own
    // handlers (400/414 application/json {"code":"FST_ERR_BAD_URL"|…}), without
    // problem+json and without X-Request-Id.
    it('a malformed percent-escape in the path → 400 problem+json', async () => {
      for (const path of ['/v1/videos/vid_%E0%A4%A/events', '/v1/visitors/vis_%zz/score', '/v1/visitors/%/score', '/admin/v1/tenants/%C0']) {
        const res = await s.request('GET', path, { token: A.apiKey });
        expectProblem(res, 400);
        expect(res.body.type).toBe('urn:video-analytics:problem:bad_request');
      }
    });

    it('over-long path parameters → problem+json (422 up to 512 characters, 400 beyond)', async () => {
      expectProblem(await s.api(`/visitors/vis_${'x'.repeat(100)}/score`, A.apiKey), 422, /params\.visitor_id/);
      expectProblem(await s.api(`/videos/vid_${'a'.repeat(500)}/events`, A.apiKey), 422, /params\.video_id/);
      expectProblem(await s.api(`/visitors/vis_${'x'.repeat(600)}/score`, A.apiKey), 400);
      expectProblem(await s.api(`/videos/${'v'.repeat(2000)}/events`, A.apiKey), 400);
    });
  });

  // ─────────────────── occurred_at more than 30 days ago ───────────────────
  // Regression: before 94b4c2f an occurred_at before 1970 was accepted (202)
  // and projected (it counted in the score) but never listed, because the
  // events list filtered on an implicit since=1970. Since then the window
  // has narrowed to 30 days before receipt: one request of events a month
  // apart each could span more month partitions than one insert may touch.
  describe('occurred_at more than 30 days before receipt', () => {
    it('is refused with 422 (collect and conversion), and nothing of the batch is stored', async () => {
      const vis = `vis_old_${randomBytes(3).toString('hex')}`;
      const video = await s.createVideo(A.id, 'old');
      const DAY = 86_400_000;
      const inside = Date.now() - 30 * DAY + 60_000;
      const old = await s.collect(A.player_key, [
        { event_name: 'video_view', video_id: video, visitor_id: vis, session_id: 'ses_old', occurred_at: iso(inside) },
        { event_name: 'video_play', video_id: video, visitor_id: vis, session_id: 'ses_old', occurred_at: iso(Date.now() - 30 * DAY - 1000) },
      ]);
      expectProblem(old, 422, /body\.events\.1\.occurred_at: more than 30 days in the past/);
      expect(old.body.errors).toEqual([{ path: 'body.events.1.occurred_at', message: 'more than 30 days in the past' }]);
      for (const at of ['1969-12-31T23:59:59.999Z', '1970-01-01T00:00:00.000Z', '0001-01-01T00:00:00Z', '2000-01-01T00:30:00+01:00', iso(Date.now() - 31 * DAY)]) {
        expectProblem(await s.collect(A.player_key, [{ event_name: 'video_play', video_id: video, visitor_id: vis, occurred_at: at }]), 422, /more than 30 days in the past/);
      }
      expectProblem(
        await s.request('POST', '/api/public/conversion', { token: A.apiKey, body: { visitor_id: vis, video_id: video, occurred_at: iso(Date.now() - 31 * DAY) } }),
        422,
        /body\.occurred_at: more than 30 days in the past/,
      );
      // Just inside the window is accepted (also written with an offset), and listed.
      const ok = await s.collect(A.player_key, [
        { event_name: 'video_pause', video_id: video, visitor_id: vis, session_id: 'ses_old', occurred_at: iso(inside) },
        { event_name: 'video_resume', video_id: video, visitor_id: vis, session_id: 'ses_old', occurred_at: `${iso(inside + 3_600_000).slice(0, 23)}+01:00` },
      ]);
      expect(ok.status, ok.text).toBe(202);
      const list = await eventually(async () => {
        const r = await s.api(`/videos/${video}/events?since=${iso(inside - DAY)}`, A.apiKey);
        return r.body.data.length >= 2 ? r.body : undefined;
      });
      expect(list.data.map((e: EventItem) => [e.event, e.timestamp]).sort()).toEqual([
        ['pause', iso(inside)],
        ['resume', iso(inside)],
      ]);
      // Nothing of the refused batch got in (same session, so same partition, ordered before the accepted one).
      const sc = await s.api(`/visitors/${vis}/score`, A.apiKey);
      expect(sc.body.computed_at).toBe(iso(inside));
    });
  });

  // ───────────────────────────── properties ─────────────────────────────
  describe('properties (fast-check)', () => {
    /** Never 5xx; a refusal always has the problem shape. */
    const refusedWell = (res: Res, allowed: number[]) => {
      expect(res.status, res.text).toBeLessThan(500);
      expect(allowed, `${res.status} ${res.text}`).toContain(res.status);
      if (res.status >= 400) expectProblem(res);
    };

    it('arbitrary JSON bodies to POST /v1/collect: never 5xx, always problem+json', async () => {
      const body = fc.oneof(
        fc.jsonValue(),
        fc.record({ events: fc.jsonValue() }),
        fc.record({ events: fc.array(fc.jsonValue(), { maxLength: 5 }) }),
        fc.record({ events: fc.array(fc.dictionary(fc.constantFrom(...Object.keys(okEvent()), 'occurred_at', 'play_ms', 'from'), fc.jsonValue()), { maxLength: 3 }) }),
      );
      await check(fc.tuple(body, fc.boolean()), async ([b, beacon]) => {
        const res = beacon
          ? await postRaw(JSON.stringify(b) ?? 'null', 'text/plain', `/v1/collect?key=${A.player_key}`, {})
          : await postRaw(JSON.stringify(b) ?? 'null', 'application/json');
        refusedWell(res, [400, 422]);
      });
    });

    it('arbitrary raw bodies and content types: never 5xx, always problem+json', async () => {
      const ct = fc.constantFrom('application/json', 'text/plain', 'application/json; charset=utf-8', 'text/plain;charset=UTF-8', 'application/octet-stream', 'multipart/form-data', 'foo', undefined);
      await check(fc.tuple(fc.string({ unit: 'binary', maxLength: 300 }), ct), async ([raw, type]) => {
        const res = await postRaw(raw, type);
        refusedWell(res, [400, 415, 422]);
      });
    });

    it('arbitrary event objects (valid and invalid fields mixed): exactly the status the contract gives, and nothing refused is stored', async () => {
      const M = await s.createTenant('mixed');
      const ownUuid = toUuid(M.videoId);
      const otherUuid = toUuid(B.videoId);

      // ── the oracle: the contract as this test reads it ──
      const num = (v: unknown, min: number, max: number) => typeof v === 'number' && Number.isFinite(v) && v >= min && v <= max;
      const int = (v: unknown, min: number, max: number) => num(v, min, max) && Number.isInteger(v);
      const opt = (v: unknown, ok: (x: unknown) => boolean) => v === undefined || ok(v);
      const attr = (v: unknown) => typeof v === 'string' && v.length <= 512;
      const ISO_RE = /^\d{4}-(0[1-9]|1[0-2])-(0[1-9]|[12]\d|3[01])T([01]\d|2[0-3]):[0-5]\d:[0-5]\d(\.\d+)?(Z|[+-]([01]\d|2[0-3]):[0-5]\d)$/;
      const normVideo = (v: unknown): string | undefined => {
        if (typeof v !== 'string') return undefined;
        if (/^vid_[0-9a-f]{32}$/.test(v)) return toUuid(v);
        if (/^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i.test(v)) return v.toLowerCase();
        return undefined;
      };
      const schemaOk = (e: Record<string, unknown>): boolean => {
        const base =
          typeof e.event_name === 'string' && COLLECTABLE.includes(e.event_name) &&
          normVideo(e.video_id) !== undefined &&
          typeof e.session_id === 'string' && /^ses_[A-Za-z0-9_-]{1,64}$/.test(e.session_id) &&
          typeof e.visitor_id === 'string' && /^vis_[A-Za-z0-9_-]{1,64}$/.test(e.visitor_id) &&
          num(e.current_time, 0, 1e7) && num(e.duration, 0, 1e7) && num(e.watched_percentage, 0, 100) &&
          opt(e.occurred_at, (v) => typeof v === 'string' && ISO_RE.test(v)) &&
          opt(e.play_ms, (v) => int(v, 0, 3_600_000)) && opt(e.focus_ms, (v) => int(v, 0, 3_600_000)) &&
          opt(e.from, (v) => num(v, 0, 1e7)) && opt(e.to, (v) => num(v, 0, 1e7)) &&
          opt(e.utm_source, attr) && opt(e.utm_campaign, attr) && opt(e.ctwa_clid, attr) && opt(e.external_lead_id, attr);
        if (!base) return false;
        if (e.event_name === 'heartbeat') return e.play_ms !== undefined && e.focus_ms !== undefined && (e.focus_ms as number) <= (e.play_ms as number);
        if (e.event_name === 'seek') return e.from !== undefined && e.to !== undefined;
        return true;
      };
      // A "__proto__" key, or "constructor" holding "prototype", anywhere in the body (x_extra's JSON values can hold them).
      const poisoned = (v: unknown): boolean =>
        v !== null &&
        typeof v === 'object' &&
        Object.entries(v).some(
          ([k, x]) => k === '__proto__' || (k === 'constructor' && x !== null && typeof x === 'object' && Object.hasOwn(x, 'prototype')) || poisoned(x),
        );
      const oracle = (events: Record<string, unknown>[], now: number): number => {
        if (poisoned(events)) return 400;
        if (events.length < 1 || events.length > 500 || !events.every(schemaOk)) return 422;
        for (const e of events) {
          const v = normVideo(e.video_id)!;
          if (v === otherUuid) return 403;
          if (v !== ownUuid) return 422;
          if (typeof e.occurred_at === 'string' && Date.parse(e.occurred_at) < now - 30 * 86_400_000) return 422;
          if (typeof e.occurred_at === 'string' && Date.parse(e.occurred_at) > now + 5 * 60_000) return 422;
        }
        return 202;
      };

      // ── the generator: each field valid, invalid or absent ──
      const ABSENT = fc.constant(undefined);
      const field = (valid: fc.Arbitrary<unknown>, invalid: fc.Arbitrary<unknown>, required: boolean) =>
        required
          ? fc.oneof({ arbitrary: valid, weight: 40 }, { arbitrary: invalid, weight: 1 }, { arbitrary: ABSENT, weight: 1 })
          : fc.oneof({ arbitrary: ABSENT, weight: 10 }, { arbitrary: valid, weight: 10 }, { arbitrary: invalid, weight: 1 });
      const junk = fc.oneof(fc.constant(null), fc.boolean(), fc.string({ maxLength: 8 }), fc.array(fc.integer(), { maxLength: 2 }), fc.constant({}));
      const badNumber = fc.oneof(junk, fc.constantFrom(-1, -0.001, 1e7 + 1, 1e300, -1e300));
      const dec = (max: number) => fc.integer({ min: 0, max: max * 100 }).map((n) => n / 100);
      // Mostly within the 30 days before receipt (accepted), some before (refused); a minute
      // either side of the bound now and then (the time of receipt is a little after the test's).
      const MONTH_MS = 30 * 86_400_000;
      const pastMs = fc.oneof(
        { arbitrary: fc.integer({ min: -MONTH_MS + 60_000, max: -60_000 }), weight: 12 },
        { arbitrary: fc.integer({ min: -20 * 365 * 86_400_000, max: -MONTH_MS - 60_000 }), weight: 1 },
        { arbitrary: fc.constantFrom(-MONTH_MS + 60_000, -MONTH_MS - 60_000), weight: 1 },
      ).map((ago) => Date.now() + ago);
      const pastIso = pastMs.chain((ms) =>
        fc.constantFrom(new Date(ms).toISOString(), new Date(ms).toISOString().replace('Z', '+00:00'), `${new Date(ms + 7_200_000).toISOString().slice(0, 19)}+02:00`),
      );
      const idTail = fc.stringMatching(/^[A-Za-z0-9_-]{1,20}$/);
      const event = fc.record(
        {
          event_name: field(fc.constantFrom(...COLLECTABLE), fc.oneof(fc.constantFrom(...NOT_FROM_PLAYER, 'VIDEO_PLAY', 'video_started', ''), fc.string({ maxLength: 12 }), junk), true),
          video_id: fc.oneof(
            { arbitrary: fc.constantFrom(M.videoId, M.videoId, M.videoId, ownUuid, ownUuid.toUpperCase()), weight: 40 },
            { arbitrary: fc.constantFrom(B.videoId, otherUuid), weight: 4 }, // another tenant's: 403
            { arbitrary: fc.constant(undefined).map(randomVid), weight: 1 }, // well-formed, unknown: 422
            { arbitrary: fc.oneof(fc.constantFrom('vid_', `vid_${'A'.repeat(32)}`, 'nope'), junk), weight: 1 },
            { arbitrary: ABSENT, weight: 1 },
          ),
          session_id: field(idTail.map((t) => `ses_${t}`), fc.oneof(fc.constantFrom('ses_', 'ses_a b', `ses_${'x'.repeat(65)}`, 'vis_abc'), junk), true),
          visitor_id: field(fc.constantFrom('vis_m1', 'vis_m2', 'vis_m3', 'vis_m-4', 'vis_m_5'), fc.oneof(fc.constantFrom('vis_', 'vis_ä', `vis_${'y'.repeat(65)}`), junk), true),
          current_time: field(dec(1e5), badNumber, true),
          duration: field(dec(1e5), badNumber, true),
          watched_percentage: field(dec(100), fc.oneof(badNumber, fc.constant(100.5)), true),
          occurred_at: field(
            pastIso,
            fc.oneof(
              fc.integer({ min: 30 * 60_000, max: 365 * 86_400_000 }).map((d) => new Date(Date.now() + d).toISOString()), // future: valid format, refused
              fc.constantFrom('2024-01-01', 'yesterday', '2024-01-01 10:00:00Z', '2024-13-01T00:00:00Z', '+275760-09-13T00:00:00.000Z'),
              junk,
            ),
            false,
          ),
          play_ms: field(fc.integer({ min: 0, max: 3_600_000 }), fc.oneof(badNumber, fc.constant(1.5), fc.constant(3_600_001)), false),
          focus_ms: field(fc.integer({ min: 0, max: 3_600_000 }), fc.oneof(badNumber, fc.constant(0.5)), false),
          from: field(dec(1e5), badNumber, false),
          to: field(dec(1e5), badNumber, false),
          utm_source: field(fc.string({ maxLength: 20 }), fc.oneof(fc.constant('u'.repeat(513)), junk.filter((j) => typeof j !== 'string')), false),
          utm_campaign: field(fc.string({ maxLength: 20 }), fc.constant(null), false),
          ctwa_clid: field(fc.string({ maxLength: 20 }), fc.constant(42), false),
          external_lead_id: field(fc.string({ maxLength: 20 }), fc.constant(['x']), false),
          x_extra: field(fc.jsonValue({ maxDepth: 1 }), fc.constant(JSON.parse('{"__proto__":{"polluted":true}}')), false), // unknown keys are ignored; prototype keys are refused (400)
        },
      ).map((e) => Object.fromEntries(Object.entries(e).filter(([, v]) => v !== undefined)) as Record<string, unknown>);

      const accepted: { e: Record<string, unknown>; from: number; to: number }[] = [];
      const statuses = new Map<number, number>();
      await check(fc.tuple(fc.array(event, { minLength: 0, maxLength: 4 }), fc.boolean()), async ([events, beacon]) => {
        const from = Date.now();
        const body = JSON.stringify({ events });
        const res = beacon
          ? await s.request('POST', `/v1/collect?key=${M.player_key}`, { rawBody: body, headers: { 'content-type': 'text/plain' } })
          : await s.request('POST', '/v1/collect', { rawBody: body, headers: { 'content-type': 'application/json', 'x-player-key': M.player_key } });
        const to = Date.now();
        const expected = oracle(events, from);
        statuses.set(res.status, (statuses.get(res.status) ?? 0) + 1);
        expect(res.status, `expected ${expected} for ${body.slice(0, 500)}\n→ ${res.text.slice(0, 500)}`).toBe(expected);
        if (res.status === 202) {
          expect(res.body).toEqual({ accepted: events.length });
          for (const e of events) accepted.push({ e, from, to });
        } else {
          expectProblem(res);
        }
      });
      // The generator really exercised both outcomes (typically ~30 × 202 and ~170 × 422; 403 is rarer and tested on its own).
      expect(statuses.get(202) ?? 0).toBeGreaterThan(5);
      expect(statuses.get(422) ?? 0).toBeGreaterThan(10);

      // Nothing accepted is lost and nothing refused is stored: the list is exactly the accepted non-signal events.
      const listed = accepted.filter(({ e }) => !SIGNALS.includes(e.event_name as string));
      expect(listed.length).toBeLessThan(1000); // one page, no cursor needed
      const got = await eventually(async () => {
        const res = await s.api(`/videos/${M.videoId}/events?limit=1000`, M.apiKey);
        return res.status === 200 && res.body.data.length >= listed.length ? (res.body.data as EventItem[]) : undefined;
      }, 20_000, 200);
      expect(got).toHaveLength(listed.length);
      const pool = [...got];
      const take = (pred: (x: EventItem) => boolean) => {
        const i = pool.findIndex(pred);
        return i >= 0 ? pool.splice(i, 1)[0] : undefined;
      };
      // Exact timestamps first, then the ones stamped at receipt (bounded by the request's window).
      const byExact = [...listed].sort((a, b) => Number(b.e.occurred_at !== undefined) - Number(a.e.occurred_at !== undefined));
      for (const { e, from, to } of byExact) {
        const short = SHORT[e.event_name as string]!;
        const hit =
          e.occurred_at !== undefined
            ? take((x) => x.visitor_id === e.visitor_id && x.event === short && x.timestamp === iso(Date.parse(e.occurred_at as string)))
            : take((x) => x.visitor_id === e.visitor_id && x.event === short && Date.parse(x.timestamp) >= from && Date.parse(x.timestamp) <= to);
        expect(hit, `lost: ${JSON.stringify(e)}`).toBeDefined();
      }
      expect(pool).toEqual([]);
    }, 120_000);

    it('a valid sample: every accepted event is listed, and every signal counted in the score', async () => {
      const L = await s.createTenant('lossless');
      const key = await newKey(L);
      const valid = fc.record({
        event_name: fc.constantFrom(...COLLECTABLE),
        current_time: fc.integer({ min: 0, max: 10_000 }),
        watched_percentage: fc.integer({ min: 0, max: 10_000 }).map((n) => n / 100),
        play_ms: fc.integer({ min: 0, max: 60_000 }),
        focus_frac: fc.integer({ min: 0, max: 100 }),
        from: fc.integer({ min: 0, max: 600 }),
        to: fc.integer({ min: 0, max: 600 }),
        ago: fc.option(fc.integer({ min: 60_000, max: 29 * 86_400_000 }), { nil: undefined }),
      });
      type Sent = { visitor: string; events: Record<string, unknown>[]; from: number; to: number };
      const sent: Sent[] = [];
      let run = 0;
      await check(fc.array(valid, { minLength: 1, maxLength: 4 }), async (items) => {
        const visitor = `vis_loss_${run++}`;
        const base = Date.now();
        const events = items.map((it) => {
          const e: Record<string, unknown> = {
            event_name: it.event_name,
            video_id: L.videoId,
            session_id: `ses_${visitor}`,
            visitor_id: visitor,
            current_time: it.current_time,
            duration: 10_000,
            watched_percentage: it.watched_percentage,
          };
          if (it.ago !== undefined) e.occurred_at = iso(base - it.ago);
          if (it.event_name === 'heartbeat') Object.assign(e, { play_ms: it.play_ms, focus_ms: Math.floor((it.play_ms * it.focus_frac) / 100) });
          if (it.event_name === 'seek') Object.assign(e, { from: it.from, to: it.to });
          return e;
        });
        const from = Date.now();
        const res = await s.request('POST', '/v1/collect', { body: { events }, headers: { 'x-player-key': L.player_key } });
        expect(res.status, res.text).toBe(202);
        expect(res.body).toEqual({ accepted: events.length });
        sent.push({ visitor, events, from, to: Date.now() });
      });
      const listedCount = sent.reduce((n, x) => n + x.events.filter((e) => !SIGNALS.includes(e.event_name as string)).length, 0);
      expect(listedCount).toBeLessThan(1000);
      const got = await eventually(async () => {
        const res = await s.api(`/videos/${L.videoId}/events?limit=1000`, key);
        return res.status === 200 && res.body.data.length >= listedCount ? (res.body.data as EventItem[]) : undefined;
      }, 20_000, 200);
      expect(got).toHaveLength(listedCount);
      const byVisitor = new Map<string, EventItem[]>();
      for (const e of got) byVisitor.set(e.visitor_id, [...(byVisitor.get(e.visitor_id) ?? []), e]);

      const round4 = (x: number) => Math.round(x * 10_000) / 10_000;
      for (const { visitor, events, from, to } of sent) {
        const mine = byVisitor.get(visitor) ?? [];
        const exp = events.filter((e) => !SIGNALS.includes(e.event_name as string));
        expect(mine.map((x) => x.event).sort(), visitor).toEqual(exp.map((e) => SHORT[e.event_name as string]).sort());
        for (const e of exp) {
          const short = SHORT[e.event_name as string];
          const match = e.occurred_at
            ? mine.some((x) => x.event === short && x.timestamp === e.occurred_at)
            : mine.some((x) => x.event === short && Date.parse(x.timestamp) >= from && Date.parse(x.timestamp) <= to);
          expect(match, `${visitor}: ${JSON.stringify(e)}`).toBe(true);
        }
        // Every event, signals included, feeds the score.
        const play = events.reduce((n, e) => n + ((e.play_ms as number | undefined) ?? 0), 0);
        const focus = events.reduce((n, e) => n + ((e.focus_ms as number | undefined) ?? 0), 0);
        const factors = {
          watched_percent: round4(Math.max(...events.map((e) => e.watched_percentage as number)) / 100),
          focus_time_ratio: play > 0 ? round4(focus / play) : 0,
          cta_clicks: events.filter((e) => e.event_name === 'cta_clicked').length,
          rewinds: events.filter((e) => e.event_name === 'seek' && (e.to as number) < (e.from as number)).length,
        };
        const sc = await s.api(`/visitors/${visitor}/score`, key);
        expect(sc.status, sc.text).toBe(200);
        expect(sc.body.factors, visitor).toEqual(factors);
        const stamped = events.map((e) => (e.occurred_at ? Date.parse(e.occurred_at as string) : undefined));
        const newest = Math.max(...stamped.map((t) => t ?? -Infinity));
        const computed = Date.parse(sc.body.computed_at);
        if (stamped.every((t) => t !== undefined)) expect(computed, visitor).toBe(newest);
        else expect(computed >= from && computed <= to, `${visitor} computed_at ${sc.body.computed_at}`).toBe(true); // receipt beats any past occurred_at
        const raw = 0.4 * factors.watched_percent + 0.2 * factors.focus_time_ratio + (0.25 * Math.min(factors.cta_clicks, 2)) / 2 + (0.15 * Math.min(factors.rewinds, 3)) / 3;
        expect(Math.abs(sc.body.score - Math.round(100 * raw)), visitor).toBeLessThanOrEqual(Math.abs(((100 * raw) % 1) - 0.5) < 1e-6 ? 1 : 0);
      }
    }, 120_000);

    it('arbitrary path segments and queries on GET /v1/videos/:id/events: never 5xx, problem+json on refusal', async () => {
      const key = await newKey(A);
      const segment = fc.oneof(
        fc.constantFrom(A.videoId, toUuid(A.videoId), B.videoId, randomVid(), 'vid_', '..', '.', '%20'),
        fc.string({ maxLength: 30 }).map(encodeURIComponent),
        fc.string({ unit: 'grapheme', maxLength: 10 }).map(encodeURIComponent),
        fc.webSegment(),
        fc.string({ unit: fc.constantFrom('a', '0', '%', 'E', 'z', '_', '-'), minLength: 1, maxLength: 12 }), // raw, possibly malformed escapes
        fc.integer({ min: 90, max: 700 }).map((n) => `vid_${'a'.repeat(n)}`),
      ).filter((x) => x.length > 0 && x !== '.' && x !== '..');
      const value = fc.oneof(
        fc.string({ maxLength: 20 }),
        fc.integer({ min: -5, max: 2000 }).map(String),
        fc.integer({ min: Date.UTC(1, 0, 1), max: Date.UTC(9999, 11, 31) }).chain((ms) => fc.constantFrom(new Date(ms).toISOString(), new Date(ms).toISOString().slice(0, 10))),
        fc.constantFrom('evt_', 'evt_a.b', 'cur_x.y', '1e3', ' 5', '0x10', 'NaN', 'Infinity', '-0', '9'.repeat(30)),
      );
      const query = fc.dictionary(fc.oneof(fc.constantFrom('since', 'cursor', 'limit'), fc.string({ maxLength: 6 })), value, { maxKeys: 4 });
      await check(fc.tuple(segment, query), async ([seg, q]) => {
        const res = await s.api(`/videos/${seg}/events?${new URLSearchParams(q)}`, key);
        refusedWell(res, [200, 400, 403, 404, 422]);
        if (res.status === 200) {
          expect(Object.keys(res.body).sort()).toEqual(['data', 'next_cursor']);
          expect(res.body.data.length).toBeLessThanOrEqual(1000);
        }
      });
    }, 120_000);

    it('arbitrary raw query strings (unencoded, malformed escapes): never 5xx', async () => {
      const key = await newKey(A);
      const raw = fc.string({ unit: fc.constantFrom(...'abc019=&%+;,.-_~!*\'()[]{}|^`"<>\\/?:@$ '.split('')), maxLength: 40 });
      await check(raw, async (qs) => {
        const res = await s.api(`/videos/${A.videoId}/events?${qs}`, key);
        refusedWell(res, [200, 422]);
        const list = await s.api(`/videos?${qs}`, key);
        refusedWell(list, [200, 422]);
      }, 150);
    }, 120_000);

    it('arbitrary visitor path segments on GET /v1/visitors/:id/score: never 5xx, problem+json on refusal', async () => {
      const key = await newKey(A);
      const seen = `vis_seen_${randomBytes(3).toString('hex')}`;
      expect((await s.collect(A.player_key, [{ event_name: 'video_play', video_id: A.videoId, visitor_id: seen }])).status).toBe(202);
      await expect.poll(async () => (await s.api(`/visitors/${seen}/score`, key)).status, { timeout: 10_000 }).toBe(200);
      const segment = fc.oneof(
        fc.constantFrom(seen, 'vis_bad_input', 'vis_', 'vis'),
        fc.stringMatching(/^vis_[A-Za-z0-9_-]{1,64}$/),
        fc.string({ maxLength: 40 }).map((x) => encodeURIComponent(`vis_${x}`)),
        fc.string({ unit: 'grapheme', maxLength: 10 }).map(encodeURIComponent),
        fc.webSegment(),
        fc.string({ unit: fc.constantFrom('v', 'i', 's', '_', '%', '2', '0', 'G'), minLength: 1, maxLength: 12 }), // raw, possibly malformed escapes
        fc.integer({ min: 60, max: 700 }).map((n) => `vis_${'x'.repeat(n)}`),
      ).filter((x) => x.length > 0 && x !== '.' && x !== '..');
      const decodes = (x: string) => {
        try {
          return decodeURIComponent(x);
        } catch {
          return undefined;
        }
      };
      await check(segment, async (seg) => {
        const res = await s.api(`/visitors/${seg}/score`, key);
        refusedWell(res, [200, 400, 404, 422]);
        const decoded = decodes(seg);
        // Only a malformed escape or a segment longer than the router takes (512) is a 400; everything else reaches validation.
        if (decoded === undefined || seg.length > 512) {
          expect(res.status, seg).toBe(400);
        } else if (/^vis_[A-Za-z0-9_-]{1,64}$/.test(decoded)) {
          expect([200, 404], seg).toContain(res.status);
          if (res.status === 200) {
            expect(res.body).toMatchObject({ visitor_id: decoded, score: expect.any(Number) });
            expect(res.body.score).toBeGreaterThanOrEqual(0);
            expect(res.body.score).toBeLessThanOrEqual(100);
          }
        } else {
          expect(res.status, seg).toBe(422);
        }
      });
    }, 120_000);

    it('arbitrary limit and cursor on GET /v1/videos: never 5xx, 200 exactly for limit 1–1000 without cursor', async () => {
      const key = await newKey(A);
      const limit = fc.option(
        fc.oneof(fc.integer({ min: -10, max: 1100 }).map(String), fc.string({ maxLength: 8 }), fc.constantFrom('1.0', '1e2', ' 7', '0x10', '', 'null', '1000', '1001')),
        { nil: undefined },
      );
      const cursor = fc.option(fc.oneof(fc.string({ maxLength: 40 }), fc.constantFrom('cur_', 'cur_a.b', 'evt_a.b'), fc.base64String().map((b) => `cur_${b}.${b}`)), { nil: undefined });
      await check(fc.tuple(limit, cursor), async ([l, c]) => {
        const q = new URLSearchParams();
        if (l !== undefined) q.set('limit', l);
        if (c !== undefined) q.set('cursor', c);
        const res = await s.api(`/videos?${q}`, key);
        refusedWell(res, [200, 422]);
        const n = l === undefined ? 100 : l.trim() === '' ? NaN : Number(l);
        const limitOk = Number.isInteger(n) && n >= 1 && n <= 1000;
        // An empty cursor is no cursor.
        if (c === undefined || c === '') expect(res.status, `limit=${JSON.stringify(l)}`).toBe(limitOk ? 200 : 422);
        else expect(res.status, `cursor=${JSON.stringify(c)}`).toBe(422);
      });
    }, 120_000);
  });
});
