import { readFileSync } from 'node:fs';
import { createHash, randomBytes, randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ACTIVE, SHORT, expectProblem, iso, randomVid, type EventItem } from './helpers/contract.ts';
import { metricSample, parsePrometheusText } from './helpers/prometheus-text.ts';
import { TestStack, eventually, type CollectEventInput, type TestTenant } from './helpers/stack.ts';

/**
 * Every endpoint and status code of the read side against one real stack:
 * management API, read API, intakes, rate limit, health, metrics, OpenAPI.
 */

const ISO_MS = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$/;
const rnd = () => randomBytes(4).toString('hex');

/** The same instant written with a non-UTC offset, e.g. 2024-01-01T02:00:00.000+02:00. */
function withOffset(ms: number, offsetMin: number): string {
  const local = new Date(ms + offsetMin * 60_000).toISOString().slice(0, -1);
  const sign = offsetMin >= 0 ? '+' : '-';
  const abs = Math.abs(offsetMin);
  return `${local}${sign}${String(Math.floor(abs / 60)).padStart(2, '0')}:${String(abs % 60).padStart(2, '0')}`;
}

async function pool<T>(n: number, concurrency: number, fn: (i: number) => Promise<T>): Promise<T[]> {
  const out = new Array<T>(n);
  let next = 0;
  await Promise.all(
    Array.from({ length: concurrency }, async () => {
      while (next < n) {
        const i = next++;
        out[i] = await fn(i);
      }
    }),
  );
  return out;
}

/** Deterministic Fisher–Yates shuffle (LCG), so a failure reproduces. */
function shuffled<T>(items: T[], seed = 42): T[] {
  const a = [...items];
  let x = seed;
  for (let i = a.length - 1; i > 0; i--) {
    x = (x * 1103515245 + 12345) % 2147483648;
    const j = x % (i + 1);
    [a[i], a[j]] = [a[j]!, a[i]!];
  }
  return a;
}


describe('read API, management API and intakes', () => {
  let s: TestStack;
  let A: TestTenant;
  let B: TestTenant;

  beforeAll(async () => {
    // Without the derived-events service: these tests compare the events
    // listed with exactly those sent (test/derived-events.test.ts covers
    // the events the service adds).
    s = await TestStack.start({ SERVICES: 'ingest,projector,fanout,api,admin' });
    A = await s.createTenant('tenant-a');
    B = await s.createTenant('tenant-b');
  });
  afterAll(async () => {
    await s?.stop();
  });

  const events = (t: TestTenant, videoId = t.videoId, query = '') => s.api(`/videos/${videoId}/events${query}`, t.apiKey);
  const score = (t: TestTenant, visitor: string) => s.api(`/visitors/${visitor}/score`, t.apiKey);

  // ───────────────────────────── management API ─────────────────────────────
  describe('management API /admin/v1', () => {
    it('creates, lists and gets tenants', async () => {
      const before = Date.now();
      const res = await s.admin('POST', '/tenants', { name: '  Acme  ' });
      expect(res.status, res.text).toBe(201);
      expect(res.body).toEqual({
        id: expect.stringMatching(/^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/),
        name: 'Acme',
        player_key: expect.stringMatching(/^pk_[A-Za-z0-9]{32}$/),
        created_at: expect.stringMatching(ISO_MS),
        allowed_origins: [],
        previous_player_key: null,
        previous_player_key_expires_at: null,
        suspended_at: null,
        high_intent_threshold: 70,
        limits: { player_key_events_per_minute: 0, client_address_requests_per_minute: 0 },
      });
      expect(Date.parse(res.body.created_at)).toBeGreaterThanOrEqual(before);
      expect(Date.parse(res.body.created_at)).toBeLessThanOrEqual(Date.now());

      const list = await s.admin('GET', '/tenants');
      expect(list.status).toBe(200);
      expect(list.body.next_cursor).toBeNull();
      expect(list.body.data).toContainEqual(res.body);
      expect(list.body.data.map((t: { id: string }) => t.id)).toEqual(expect.arrayContaining([A.id, B.id, res.body.id]));

      const one = await s.admin('GET', `/tenants/${res.body.id}`);
      expect(one.status).toBe(200);
      expect(one.body).toEqual(res.body);
    });

    it('refuses a missing or wrong admin token with 401 on every route', async () => {
      const routes: [string, string, unknown?][] = [
        ['POST', '/admin/v1/tenants', { name: 'x' }],
        ['GET', '/admin/v1/tenants'],
        ['GET', `/admin/v1/tenants/${A.id}`],
        ['PATCH', `/admin/v1/tenants/${A.id}`, { high_intent_threshold: 1 }],
        ['POST', `/admin/v1/tenants/${A.id}/api-keys`, { name: 'x' }],
        ['GET', `/admin/v1/tenants/${A.id}/api-keys`],
        ['DELETE', `/admin/v1/tenants/${A.id}/api-keys/${A.apiKeyId}`],
        ['POST', `/admin/v1/tenants/${A.id}/videos`, { title: 'x', duration_sec: 1 }],
        ['GET', `/admin/v1/tenants/${A.id}/videos`],
        ['PATCH', `/admin/v1/tenants/${A.id}/videos/${A.videoId}`, { pitch_at_sec: 1 }],
      ];
      for (const [method, path, body] of routes) {
        expectProblem(await s.request(method, path, { body }), 401);
        expectProblem(await s.request(method, path, { body, token: `${s.stack.adminToken}x` }), 401);
        // An API key is not an admin token.
        expectProblem(await s.request(method, path, { body, token: A.apiKey }), 401);
      }
      // The key was not revoked by the refused DELETE.
      expect((await s.api('/videos', A.apiKey)).status).toBe(200);
    });

    it('answers 404 for an unknown tenant and 422 for a bad body or parameter', async () => {
      const unknown = randomUUID();
      expectProblem(await s.admin('GET', `/tenants/${unknown}`), 404, /no such tenant/);
      expectProblem(await s.admin('POST', `/tenants/${unknown}/api-keys`, { name: 'k' }), 404);
      expectProblem(await s.admin('GET', `/tenants/${unknown}/api-keys`), 404);
      expectProblem(await s.admin('POST', `/tenants/${unknown}/videos`, { title: 't', duration_sec: 1 }), 404);
      expectProblem(await s.admin('GET', `/tenants/${unknown}/videos`), 404);
      expectProblem(await s.admin('DELETE', `/tenants/${unknown}/api-keys/${randomUUID()}`), 404);

      expectProblem(await s.admin('POST', '/tenants', {}), 422, /body\.name/);
      expectProblem(await s.admin('POST', '/tenants', { name: '   ' }), 422, /body\.name/);
      expectProblem(await s.admin('POST', '/tenants', { name: 42 }), 422, /body\.name/);
      expectProblem(await s.admin('POST', '/tenants', { name: 'x'.repeat(201) }), 422, /body\.name/);
      expectProblem(await s.admin('GET', '/tenants/not-a-uuid'), 422, /params\.tenant_id/);
      expectProblem(await s.admin('GET', '/tenants/not-a-uuid/videos'), 422, /params\.tenant_id/);
      expectProblem(await s.admin('DELETE', `/tenants/${A.id}/api-keys/nope`), 422, /params\.key_id/);
      expectProblem(await s.admin('POST', `/tenants/${A.id}/api-keys`, {}), 422, /body\.name/);
    });

    it('creates API keys shown once, lists them without the key or its hash, and records the last use', async () => {
      const t = await s.createTenant();
      const created = await s.admin('POST', `/tenants/${t.id}/api-keys`, { name: 'reporting' });
      expect(created.status, created.text).toBe(201);
      const key: string = created.body.key;
      expect(created.body).toEqual({
        id: expect.stringMatching(/^[0-9a-f-]{36}$/),
        name: 'reporting',
        key: expect.stringMatching(/^sk_[A-Za-z0-9]{40}$/),
        prefix: key.slice(0, 9),
        created_at: expect.stringMatching(ISO_MS),
      });
      expect(created.body.prefix).toMatch(/^sk_[A-Za-z0-9]{6}$/);
      // Two keys are never the same.
      const other = await s.admin('POST', `/tenants/${t.id}/api-keys`, { name: 'other' });
      expect(other.body.key).not.toBe(key);

      const list = await s.admin('GET', `/tenants/${t.id}/api-keys`);
      expect(list.status).toBe(200);
      expect(list.body.next_cursor).toBeNull();
      expect(list.body.data).toHaveLength(3); // the helper's key, 'reporting', 'other'
      const item = list.body.data.find((k: { id: string }) => k.id === created.body.id);
      expect(item).toEqual({
        id: created.body.id,
        name: 'reporting',
        prefix: created.body.prefix,
        created_at: created.body.created_at,
        last_used_at: null,
        revoked_at: null,
      });
      for (const k of list.body.data) expect(Object.keys(k).sort()).toEqual(['created_at', 'id', 'last_used_at', 'name', 'prefix', 'revoked_at']);
      // Neither the key, nor its secret part, nor its SHA-256 appears anywhere in the listing.
      for (const secret of [key, other.body.key, t.apiKey]) {
        expect(list.text).not.toContain(secret);
        expect(list.text).not.toContain(secret.slice(9));
        expect(list.text).not.toContain(createHash('sha256').update(secret).digest('hex'));
      }
      // Another tenant's listing does not show this tenant's keys.
      const listB = await s.admin('GET', `/tenants/${B.id}/api-keys`);
      expect(listB.body.data.map((k: { id: string }) => k.id)).not.toContain(created.body.id);

      const usedFrom = Date.now();
      expect((await s.api('/videos', key)).status).toBe(200);
      const usedTo = Date.now();
      const used = await eventually(async () => {
        const l = await s.admin('GET', `/tenants/${t.id}/api-keys`);
        const k = l.body.data.find((x: { id: string }) => x.id === created.body.id);
        return k.last_used_at ? k : undefined;
      });
      expect(used.last_used_at).toMatch(ISO_MS);
      expect(Date.parse(used.last_used_at)).toBeGreaterThanOrEqual(usedFrom);
      expect(Date.parse(used.last_used_at)).toBeLessThanOrEqual(usedTo);
      // The unused key stays unused.
      const l2 = await s.admin('GET', `/tenants/${t.id}/api-keys`);
      expect(l2.body.data.find((x: { id: string }) => x.id === other.body.id).last_used_at).toBeNull();
    });

    it('revokes a key with DELETE (200) and refuses it with 401 at once', async () => {
      const t = await s.createTenant();
      const k = await s.admin('POST', `/tenants/${t.id}/api-keys`, { name: 'to revoke' });
      expect((await s.api('/videos', k.body.key)).status).toBe(200);

      // Another tenant cannot revoke it.
      expectProblem(await s.admin('DELETE', `/tenants/${B.id}/api-keys/${k.body.id}`), 404, /no such API key/);
      expect((await s.api('/videos', k.body.key)).status).toBe(200);

      const before = Date.now();
      const del = await s.admin('DELETE', `/tenants/${t.id}/api-keys/${k.body.id}`);
      expect(del.status, del.text).toBe(200);
      expect(del.body).toMatchObject({ id: k.body.id, name: 'to revoke', prefix: k.body.prefix, revoked_at: expect.stringMatching(ISO_MS) });
      expect(del.body).not.toHaveProperty('key');
      expect(Date.parse(del.body.revoked_at)).toBeGreaterThanOrEqual(before);

      // Refused on the very next request, on every API-key route.
      expectProblem(await s.api('/videos', k.body.key), 401, /revoked/);
      expectProblem(await s.api(`/videos/${t.videoId}/events`, k.body.key), 401, /revoked/);
      expectProblem(await s.api('/visitors/vis_x/score', k.body.key), 401, /revoked/);
      expectProblem(
        await s.request('POST', '/api/public/conversion', { token: k.body.key, body: { visitor_id: 'vis_x', video_id: t.videoId } }),
        401,
        /revoked/,
      );
      // The tenant's other key still works.
      expect((await s.api('/videos', t.apiKey)).status).toBe(200);

      // Revoking again is idempotent: same revoked_at.
      const again = await s.admin('DELETE', `/tenants/${t.id}/api-keys/${k.body.id}`);
      expect(again.status).toBe(200);
      expect(again.body.revoked_at).toBe(del.body.revoked_at);
      const list = await s.admin('GET', `/tenants/${t.id}/api-keys`);
      expect(list.body.data.find((x: { id: string }) => x.id === k.body.id).revoked_at).toBe(del.body.revoked_at);
      expectProblem(await s.admin('DELETE', `/tenants/${t.id}/api-keys/${randomUUID()}`), 404);
    });

    it('creates and lists videos', async () => {
      const t = await s.createTenant();
      const res = await s.admin('POST', `/tenants/${t.id}/videos`, { title: 'Pitch deck', duration_sec: 754 });
      expect(res.status, res.text).toBe(201);
      expect(res.body).toEqual({
        id: expect.stringMatching(/^vid_[0-9a-f]{32}$/),
        title: 'Pitch deck',
        duration_sec: 754,
        created_at: expect.stringMatching(ISO_MS),
        pitch_at_sec: null,
        offer_window_sec: 60,
      });
      const list = await s.admin('GET', `/tenants/${t.id}/videos`);
      expect(list.status).toBe(200);
      expect(list.body.next_cursor).toBeNull();
      expect(list.body.data.map((v: { id: string }) => v.id)).toEqual([t.videoId, res.body.id]);
      expect(list.body.data[1]).toEqual(res.body);

      expectProblem(await s.admin('POST', `/tenants/${t.id}/videos`, { title: 'x', duration_sec: -1 }), 422, /duration_sec/);
      expectProblem(await s.admin('POST', `/tenants/${t.id}/videos`, { title: 'x', duration_sec: 1.5 }), 422, /duration_sec/);
      expectProblem(await s.admin('POST', `/tenants/${t.id}/videos`, { title: 'x', duration_sec: '60' }), 422, /duration_sec/);
      expectProblem(await s.admin('POST', `/tenants/${t.id}/videos`, { duration_sec: 60 }), 422, /title/);
      // Nothing was created by the refused calls.
      expect((await s.admin('GET', `/tenants/${t.id}/videos`)).body.data).toHaveLength(2);
    });
  });

  // ───────────────────────────── GET /v1/videos ─────────────────────────────
  describe('GET /v1/videos', () => {
    let V: TestTenant;
    let all: { id: string; title: string; duration_sec: number; created_at: string }[];

    beforeAll(async () => {
      V = await s.createTenant();
      for (let i = 1; i <= 6; i++) await s.createVideo(V.id, `video ${i}`, 60 * i);
      // The management API's view with the intent settings left out: the read API's video.
      const managed: (typeof all[number] & { pitch_at_sec: unknown; offer_window_sec: unknown })[] = (await s.admin('GET', `/tenants/${V.id}/videos`)).body.data;
      all = managed.map(({ pitch_at_sec: _p, offer_window_sec: _o, ...v }) => v);
      expect(all).toHaveLength(7);
    });

    it('returns the page envelope with every video by default', async () => {
      const res = await s.api('/videos', V.apiKey);
      expect(res.status).toBe(200);
      expect(res.headers.get('content-type')).toMatch(/^application\/json/);
      expect(res.body).toEqual({ data: all, next_cursor: null });
      for (const v of res.body.data) {
        expect(Object.keys(v).sort()).toEqual(['created_at', 'duration_sec', 'id', 'title']);
        expect(v.id).toMatch(/^vid_[0-9a-f]{32}$/);
        expect(v.created_at).toMatch(ISO_MS);
      }
    });

    it('paginates with limit and cursor without gaps or repeats', async () => {
      for (const limit of [1, 2, 3, 6, 7]) {
        const seen: string[] = [];
        let cursor: string | null = null;
        let pages = 0;
        do {
          const qs: string = `?limit=${limit}${cursor ? `&cursor=${encodeURIComponent(cursor)}` : ''}`;
          const res = await s.api(`/videos${qs}`, V.apiKey);
          expect(res.status, res.text).toBe(200);
          expect(res.body.data.length).toBeLessThanOrEqual(limit);
          seen.push(...res.body.data.map((v: { id: string }) => v.id));
          cursor = res.body.next_cursor;
          if (cursor) expect(cursor).toMatch(/^cur_/);
          pages++;
        } while (cursor);
        expect(seen, `limit ${limit}`).toEqual(all.map((v) => v.id));
        expect(pages).toBe(Math.ceil(7 / limit));
      }
      const max = await s.api('/videos?limit=1000', V.apiKey);
      expect(max.status).toBe(200);
      expect(max.body.data).toHaveLength(7);
    });

    it('refuses a missing or invalid key with 401', async () => {
      expectProblem(await s.request('GET', '/v1/videos'), 401);
      expectProblem(await s.api('/videos', 'sk_doesnotexist'), 401, /unknown API key/);
      expectProblem(await s.api('/videos', A.player_key), 401);
      expectProblem(await s.request('GET', '/v1/videos', { headers: { authorization: A.apiKey } }), 401); // no Bearer
      expectProblem(await s.request('GET', '/v1/videos', { headers: { authorization: `Basic ${A.apiKey}` } }), 401);
      const r = await s.request('GET', '/v1/videos');
      expect(r.headers.get('www-authenticate')).toMatch(/^Bearer/);
    });

    it('refuses a bad limit and a bad, tampered or foreign cursor with 422', async () => {
      for (const limit of ['0', '1001', 'abc', '-1', '1.5', '']) {
        expectProblem(await s.api(`/videos?limit=${limit}`, V.apiKey), 422, /querystring\.limit/);
      }
      const first = await s.api('/videos?limit=2', V.apiKey);
      const cursor: string = first.body.next_cursor;
      expect(cursor).toMatch(/^cur_[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+$/);
      const [body, mac] = cursor.slice(4).split('.') as [string, string];
      const payload = JSON.parse(Buffer.from(body, 'base64url').toString());
      payload[1] = Number(payload[1]) - 1;
      const forgedBody = Buffer.from(JSON.stringify(payload)).toString('base64url');
      const flipped = mac.slice(0, -1) + (mac.endsWith('A') ? 'B' : 'A');
      for (const bad of ['garbage', 'cur_', `cur_${forgedBody}.${mac}`, `cur_${body}.${flipped}`, `cur_${body}`, `${cursor}.x`, `evt_${body}.${mac}`]) {
        expectProblem(await s.api(`/videos?cursor=${encodeURIComponent(bad)}`, V.apiKey), 422, /query(string)?\.cursor/);
      }
      // A cursor of V's list is no cursor of A's list.
      expectProblem(await s.api(`/videos?cursor=${encodeURIComponent(cursor)}`, A.apiKey), 422, /does not belong/);
      // An over-long cursor.
      expectProblem(await s.api(`/videos?cursor=cur_${'a'.repeat(600)}`, V.apiKey), 422, /query(string)?\.cursor/);
      // The genuine cursor still works.
      expect((await s.api(`/videos?limit=2&cursor=${encodeURIComponent(cursor)}`, V.apiKey)).body.data).toEqual(all.slice(2, 4));
    });
  });

  // ───────────────────────── GET /v1/videos/:id/events ─────────────────────────
  describe('GET /v1/videos/:video_id/events', () => {
    const N = 2500;
    const DAY = 86_400_000;
    const STEP = 138_000; // 2,500 × 138 s ≈ 4 days
    const today = new Date();
    const midnight = Date.UTC(today.getUTCFullYear(), today.getUTCMonth(), today.getUTCDate());
    const start = midnight - 5 * DAY + 3_600_000 + 123;
    // Events 10k+1 and 10k+2 share the timestamp of event 10k: ties to break.
    const tsOf = (i: number) => start + (i % 10 === 1 || i % 10 === 2 ? i - (i % 10) : i) * STEP;
    const visitorOf = (i: number) => `vis_${String(i + 1).padStart(4, '0')}`;
    const sent = Array.from({ length: N }, (_, i) => ({
      event: SHORT[ACTIVE[i % ACTIVE.length]!]!,
      event_name: ACTIVE[i % ACTIVE.length]!,
      visitor_id: visitorOf(i),
      timestamp: iso(tsOf(i)),
    }));
    const key = (e: EventItem) => `${e.visitor_id}|${e.event}|${e.timestamp}`;
    const expectedSet = sent.map((e) => key(e)).sort();

    let P: TestTenant;
    let P2: string;
    let full: EventItem[];

    /**
     * Reads a whole list WITHOUT cursors: first pages of limit 1000 walked by
     * `since` = the last timestamp seen (inclusive, so a tie group at a page
     * end is read again and deduplicated; visitor ids are unique here). The
     * cursor path is tested separately against this reference.
     */
    const sinceWalk = async (t: TestTenant, videoId: string, from?: string): Promise<EventItem[]> => {
      const out: EventItem[] = [];
      const seen = new Set<string>();
      let since = from;
      for (;;) {
        const res = await events(t, videoId, `?limit=1000${since ? `&since=${encodeURIComponent(since)}` : ''}`);
        if (res.status !== 200) throw new Error(`events page: ${res.status} ${res.text}`);
        for (const e of res.body.data as EventItem[]) {
          if (!seen.has(key(e))) {
            seen.add(key(e));
            out.push(e);
          }
        }
        if (res.body.next_cursor === null) return out;
        since = res.body.data.at(-1).timestamp;
      }
    };

    /** Follows next_cursor to the end; fails on any non-200 page. */
    const cursorWalk = async (t: TestTenant, videoId: string, query: string): Promise<{ seq: EventItem[]; sizes: number[] }> => {
      const seq: EventItem[] = [];
      const sizes: number[] = [];
      let cursor: string | null = null;
      do {
        const qs = new URLSearchParams(query);
        if (cursor) qs.set('cursor', cursor);
        const res = await events(t, videoId, `?${qs}`);
        expect(res.status, res.text).toBe(200);
        sizes.push(res.body.data.length);
        seq.push(...res.body.data);
        cursor = res.body.next_cursor;
        if (cursor) expect(cursor).toMatch(/^evt_/);
      } while (cursor);
      return { seq, sizes };
    };

    beforeAll(async () => {
      P = await s.createTenant('paging');
      P2 = await s.createVideo(P.id, 'second');
      const batches = shuffled(sent.map((e, i) => ({ ...e, i })));
      for (let b = 0; b < N; b += 500) {
        const res = await s.collect(
          P.player_key,
          batches.slice(b, b + 500).map((e) => ({
            event_name: e.event_name,
            video_id: P.videoId,
            visitor_id: e.visitor_id,
            session_id: `ses_${e.i % 37}`,
            occurred_at: e.timestamp,
          })),
        );
        expect(res.status, res.text).toBe(202);
        expect(res.body).toEqual({ accepted: 500 });
      }
      // Player signals on the same video, in the same time range: never listed.
      const signals: CollectEventInput[] = [];
      for (let i = 0; i < 30; i++) {
        signals.push({ event_name: 'heartbeat', video_id: P.videoId, visitor_id: 'vis_sig_hb', session_id: 'ses_sig', play_ms: 1000, focus_ms: 500, occurred_at: iso(tsOf(i * 80)) });
        signals.push({ event_name: 'seek', video_id: P.videoId, visitor_id: 'vis_sig_seek', session_id: 'ses_sig', from: 50, to: 10, occurred_at: iso(tsOf(i * 80 + 3)) });
      }
      const sig = await s.collect(P.player_key, signals);
      expect(sig.status, sig.text).toBe(202);
      expect(sig.body).toEqual({ accepted: 60 });

      await eventually(async () => ((await sinceWalk(P, P.videoId)).length >= N ? true : undefined), 30_000, 200);
      // Every signal is projected too (they feed the score), so their absence from the list means something.
      await eventually(async () => {
        const hb = await score(P, 'vis_sig_hb');
        const sk = await score(P, 'vis_sig_seek');
        return hb.status === 200 && hb.body.factors.focus_time_ratio === 0.5 && sk.status === 200 && sk.body.factors.rewinds === 30 ? true : undefined;
      }, 15_000, 200);
      full = await sinceWalk(P, P.videoId);
    }, 120_000);

    it('lists exactly the events sent, by timestamp, with short names and without heartbeat/seek', async () => {
      expect(full).toHaveLength(N);
      expect(full.map(key).sort()).toEqual(expectedSet);
      for (const e of full) expect(Object.keys(e).sort()).toEqual(['event', 'timestamp', 'visitor_id']);
      for (let i = 1; i < full.length; i++) expect(full[i]!.timestamp >= full[i - 1]!.timestamp, `order at ${i}`).toBe(true);
      expect(full.some((e) => e.visitor_id.startsWith('vis_sig'))).toBe(false);
      expect(new Set(full.map((e) => e.event))).toEqual(new Set(Object.values(SHORT)));
      expect(full.filter((e) => e.visitor_id === 'vis_0010')).toEqual([{ event: 'watched_90', visitor_id: 'vis_0010', timestamp: iso(tsOf(9)) }]);
      expect(full.filter((e) => e.visitor_id === 'vis_0001')).toEqual([{ event: 'loaded', visitor_id: 'vis_0001', timestamp: iso(tsOf(0)) }]);
      // Tied timestamps really occur in the result.
      expect(full.filter((e) => e.timestamp === iso(tsOf(1230)))).toHaveLength(3);
      // Re-reading gives the same sequence, ties included.
      expect(await sinceWalk(P, P.videoId)).toEqual(full);
      const first = await events(P, P.videoId, '?limit=1000');
      expect(first.body.data).toEqual(full.slice(0, 1000));
      expect((await events(P, P.videoId, '?limit=1000')).body).toEqual(first.body);
    });

    it('returns 100 events by default, with an evt_ cursor, and the first n for limit=n', async () => {
      const first = await events(P);
      expect(first.status).toBe(200);
      expect(first.body.data).toEqual(full.slice(0, 100));
      expect(first.body.next_cursor).toMatch(/^evt_[A-Za-z0-9_-]+\.[A-Za-z0-9_-]{16}$/);
      for (const limit of [1, 3, 999, 1000]) {
        const res = await events(P, P.videoId, `?limit=${limit}`);
        expect(res.body.data).toEqual(full.slice(0, limit));
        expect(res.body.next_cursor).toMatch(/^evt_/);
      }
    });

    // Regression: at 60cc557 the SELECT aliased `toString(event_id) AS
    // event_id`, ClickHouse substituted the alias into the keyset WHERE
    // ((DateTime64, String) > (DateTime64, UUID): NO_COMMON_TYPE) and every
    // genuine cursor answered 500. Fixed in 8f5acb6; these tests keep it fixed.
    it('pages with limit 1000: 1000 + 1000 + 500, then null', async () => {
      const { seq, sizes } = await cursorWalk(P, P.videoId, 'limit=1000');
      expect(sizes).toEqual([1000, 1000, 500]);
      expect(seq).toEqual(full);
    });

    it('ends with next_cursor null on a last page that is exactly full (limit 500)', async () => {
      const { seq, sizes } = await cursorWalk(P, P.videoId, 'limit=500');
      expect(sizes).toEqual([500, 500, 500, 500, 500]);
      expect(seq).toEqual(full);
    });

    it('pages 100 at a time by default, in a stable order, with no gaps or repeats', async () => {
      const { seq, sizes } = await cursorWalk(P, P.videoId, '');
      expect(sizes).toEqual(Array.from({ length: 25 }, () => 100));
      expect(seq).toEqual(full);
      expect(new Set(seq.map(key)).size).toBe(N);
      // Re-reading gives the same sequence; a cursor can be replayed.
      expect((await cursorWalk(P, P.videoId, '')).seq).toEqual(full);
      const c = (await events(P)).body.next_cursor;
      const a = await events(P, P.videoId, `?limit=7&cursor=${encodeURIComponent(c)}`);
      const b = await events(P, P.videoId, `?limit=7&cursor=${encodeURIComponent(c)}`);
      expect(a.body).toEqual(b.body);
      expect(a.body.data).toEqual(full.slice(100, 107));
    });

    it('breaks timestamp ties the same way across page boundaries (limit 1)', async () => {
      const seq: EventItem[] = [];
      let cursor: string | null = null;
      for (let i = 0; i < 30; i++) {
        const qs: string = cursor ? `?limit=1&cursor=${encodeURIComponent(cursor)}` : '?limit=1';
        const res = await events(P, P.videoId, qs);
        expect(res.status, res.text).toBe(200);
        seq.push(...res.body.data);
        cursor = res.body.next_cursor;
      }
      expect(seq).toEqual(full.slice(0, 30));
    });

    it('follows `since` across cursor pages', async () => {
      const dayStart = midnight - 3 * DAY;
      const exp = full.filter((e) => Date.parse(e.timestamp) >= dayStart);
      expect(exp.length).toBeGreaterThan(1000);
      const { seq } = await cursorWalk(P, P.videoId, `since=${iso(dayStart).slice(0, 10)}`);
      expect(seq).toEqual(exp);
    });

    it('filters with since as a date (midnight UTC) and as an ISO timestamp, inclusive', async () => {
      const dayStart = midnight - 2 * DAY;
      const date = iso(dayStart).slice(0, 10);
      const expDate = full.filter((e) => Date.parse(e.timestamp) >= dayStart);
      expect(expDate.length).toBeGreaterThan(100);
      expect(expDate.length).toBeLessThan(1000);
      const byDate = await events(P, P.videoId, `?since=${date}&limit=1000`);
      expect(byDate.status).toBe(200);
      expect(byDate.body).toEqual({ data: expDate, next_cursor: null });
      expect((await events(P, P.videoId, `?since=${date}`)).body.data).toEqual(expDate.slice(0, 100));

      const t = tsOf(1830); // a tied group of three
      const expTs = full.filter((e) => Date.parse(e.timestamp) >= t);
      expect(expTs).toHaveLength(N - 1830);
      const byTs = await events(P, P.videoId, `?since=${encodeURIComponent(iso(t))}&limit=1000`);
      expect(byTs.body).toEqual({ data: expTs, next_cursor: null });
      expect(byTs.body.data.slice(0, 3).map((e: EventItem) => e.timestamp)).toEqual([iso(t), iso(t), iso(t)]);
      // The same instant with offsets, and one millisecond later.
      expect((await events(P, P.videoId, `?since=${encodeURIComponent(withOffset(t, 120))}&limit=1000`)).body.data).toEqual(expTs);
      expect((await events(P, P.videoId, `?since=${encodeURIComponent(withOffset(t, -330))}&limit=1000`)).body.data).toEqual(expTs);
      expect((await events(P, P.videoId, `?since=${encodeURIComponent(iso(t + 1))}&limit=1000`)).body.data).toEqual(expTs.slice(3));
      // Several days: the since-walk from an earlier date.
      const d3 = midnight - 3 * DAY;
      expect(await sinceWalk(P, P.videoId, iso(d3).slice(0, 10))).toEqual(full.filter((e) => Date.parse(e.timestamp) >= d3));

      // Before all, after all.
      expect((await events(P, P.videoId, `?since=${iso(start - DAY).slice(0, 10)}&limit=1000`)).body.data).toEqual(full.slice(0, 1000));
      const future = await events(P, P.videoId, `?since=${iso(Date.now() + DAY).slice(0, 10)}`);
      expect(future.body).toEqual({ data: [], next_cursor: null });

      for (const bad of ['yesterday', '2024-13-01', '2024-02-30', '2024-01-01T00:00:00', '1700000000000']) {
        expectProblem(await events(P, P.videoId, `?since=${encodeURIComponent(bad)}`), 422, /querystring\.since/);
      }
    });

    it('answers an empty page for a video without events', async () => {
      const res = await events(P, P2);
      expect(res.status).toBe(200);
      expect(res.body).toEqual({ data: [], next_cursor: null });
    });

    it('answers 404 for an unknown video, 403 for another tenant\'s, 401 without a valid key', async () => {
      expectProblem(await events(P, randomVid()), 404, /no such video/);
      expectProblem(await events(P, randomUUID()), 404);
      expectProblem(await events(P, A.videoId), 403, /another tenant/);
      expectProblem(await events(A, P.videoId), 403, /another tenant/);
      expectProblem(await s.request('GET', `/v1/videos/${P.videoId}/events`), 401);
      expectProblem(await s.api(`/videos/${P.videoId}/events`, `${P.apiKey}x`), 401);
      // The UUID form of the id is the same video.
      const uuid = P.videoId.slice(4).replace(/^(.{8})(.{4})(.{4})(.{4})(.{12})$/, '$1-$2-$3-$4-$5');
      const byUuid = await events(P, uuid, '?limit=5');
      expect(byUuid.status).toBe(200);
      expect(byUuid.body.data).toEqual(full.slice(0, 5));
    });

    it('refuses a malformed video id and malformed, tampered or foreign cursors with 422', async () => {
      for (const bad of ['abc', 'vid_', 'vid_xyz', `vid_${'A'.repeat(32)}`, `vid_${'a'.repeat(31)}`, `${P.videoId}0`]) {
        expectProblem(await events(P, bad), 422, /params\.video_id/);
      }
      const first = await events(P, P.videoId, '?limit=10');
      const cursor: string = first.body.next_cursor;
      const [body, mac] = cursor.slice(4).split('.') as [string, string];
      const payload = JSON.parse(Buffer.from(body, 'base64url').toString());
      payload[1] = Number(payload[1]) + 1;
      const forged = `evt_${Buffer.from(JSON.stringify(payload)).toString('base64url')}.${mac}`;
      const flipped = `evt_${body}.${mac.slice(0, -1)}${mac.endsWith('A') ? 'B' : 'A'}`;
      for (const bad of ['garbage', 'evt_', 'evt_abc', forged, flipped, `cur_${body}.${mac}`, `${cursor}.${mac}`, `evt_.${mac}`]) {
        expectProblem(await events(P, P.videoId, `?cursor=${encodeURIComponent(bad)}`), 422, /query(string)?\.cursor/);
      }
      // A genuine cursor of another video of the same tenant.
      expectProblem(await events(P, P2, `?cursor=${encodeURIComponent(cursor)}`), 422, /does not belong/);
      // A genuine cursor of another tenant's video on one's own video.
      expectProblem(await events(A, A.videoId, `?cursor=${encodeURIComponent(cursor)}`), 422, /does not belong/);
      // A videos-list cursor on the events list.
      const videosCursor = (await s.api('/videos?limit=1', P.apiKey)).body.next_cursor;
      expect(videosCursor).toMatch(/^cur_/);
      expectProblem(await events(P, P.videoId, `?cursor=${encodeURIComponent(videosCursor)}`), 422, /query(string)?\.cursor/);
      for (const limit of ['0', '1001', 'abc']) expectProblem(await events(P, P.videoId, `?limit=${limit}`), 422, /querystring\.limit/);
    });

    it('serves the next page for a genuine cursor', async () => {
      const cursor = (await events(P, P.videoId, '?limit=10')).body.next_cursor;
      const next = await events(P, P.videoId, `?limit=10&cursor=${encodeURIComponent(cursor)}`);
      expect(next.status, next.text).toBe(200);
      expect(next.body.data).toEqual(full.slice(10, 20));
    });
  });

  // ─────────────────────── GET /v1/visitors/:id/score ───────────────────────
  describe('GET /v1/visitors/:visitor_id/score', () => {
    const byHand = (watched: number, focus: number, cta: number, rewinds: number) =>
      Math.round(100 * (0.4 * watched + 0.2 * focus + (0.25 * Math.min(cta, 2)) / 2 + (0.15 * Math.min(rewinds, 3)) / 3));

    it('computes the score of a scripted session from its factors', async () => {
      const visitor = `vis_score_${rnd()}`;
      const T = Date.now() - 2 * 3_600_000;
      const at = (sec: number) => iso(T + sec * 1000);
      const ev = (sec: number, e: { event_name: string; [field: string]: unknown }): CollectEventInput => ({
        video_id: A.videoId,
        visitor_id: visitor,
        session_id: 'ses_scripted',
        occurred_at: at(sec),
        ...e,
      });
      const script: CollectEventInput[] = [
        ev(0, { event_name: 'video_play', watched_percentage: 0 }),
        ev(10, { event_name: 'heartbeat', play_ms: 10_000, focus_ms: 8_000, watched_percentage: 10 }),
        ev(20, { event_name: 'heartbeat', play_ms: 10_000, focus_ms: 10_000, watched_percentage: 20 }),
        ev(25, { event_name: 'seek', from: 30, to: 10, watched_percentage: 25 }), // rewind
        ev(30, { event_name: 'heartbeat', play_ms: 5_000, focus_ms: 1_000, watched_percentage: 30 }),
        ev(35, { event_name: 'seek', from: 10, to: 50, watched_percentage: 40 }), // forward
        ev(36, { event_name: 'seek', from: 50, to: 40, watched_percentage: 42 }), // rewind
        ev(37, { event_name: 'seek', from: 40, to: 40, watched_percentage: 42 }), // no move
        ev(40, { event_name: 'cta_shown', watched_percentage: 50 }),
        ev(41, { event_name: 'cta_clicked', watched_percentage: 50 }),
        ev(42, { event_name: 'cta_clicked', watched_percentage: 51 }),
        ev(43, { event_name: 'cta_clicked', watched_percentage: 52 }),
        ev(60, { event_name: 'watched_75_percent', watched_percentage: 76.5 }),
        ev(90, { event_name: 'session_ended', watched_percentage: 62 }), // the newest
      ];
      // Sent out of order, in two requests: the newest event is not the last one received.
      const order = [0, 1, 13, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12];
      const reordered = order.map((i) => script[i]!);
      expect((await s.collect(A.player_key, reordered.slice(0, 7))).status).toBe(202);
      expect((await s.collect(A.player_key, reordered.slice(7))).status).toBe(202);

      const factors = { watched_percent: 0.765, focus_time_ratio: 19_000 / 25_000, cta_clicks: 3, rewinds: 2 };
      const expected = byHand(0.765, 0.76, 3, 2);
      expect(expected).toBe(81); // 100 × (0.306 + 0.152 + 0.25 + 0.1) = 80.8
      const res = await eventually(async () => {
        const r = await score(A, visitor);
        return r.status === 200 && r.body.factors.cta_clicks === 3 && r.body.factors.rewinds === 2 && r.body.computed_at === at(90) && r.body.factors.focus_time_ratio === 0.76
          ? r
          : undefined;
      });
      expect(res.headers.get('content-type')).toMatch(/^application\/json/);
      expect(res.body).toEqual({ visitor_id: visitor, score: expected, factors, computed_at: at(90), score_version: 1 });
    });

    it('caps CTA clicks at 2 and rewinds at 3, and has focus 0 without heartbeats', async () => {
      const visitor = `vis_caps_${rnd()}`;
      const T = Date.now() - 3_600_000;
      const evs: CollectEventInput[] = [
        { event_name: 'video_play', video_id: A.videoId, visitor_id: visitor, watched_percentage: 0, occurred_at: iso(T) },
        { event_name: 'cta_clicked', video_id: A.videoId, visitor_id: visitor, watched_percentage: 33.33, occurred_at: iso(T + 1000) },
      ];
      for (let i = 0; i < 5; i++) evs.push({ event_name: 'seek', video_id: A.videoId, visitor_id: visitor, from: 100 - i, to: 10, occurred_at: iso(T + 2000 + i) });
      expect((await s.collect(A.player_key, evs)).status).toBe(202);
      const res = await eventually(async () => {
        const r = await score(A, visitor);
        return r.status === 200 && r.body.factors.rewinds === 5 && r.body.factors.cta_clicks === 1 ? r : undefined;
      });
      const expected = byHand(0.3333, 0, 1, 5);
      expect(expected).toBe(41); // 100 × (0.13332 + 0 + 0.125 + 0.15) = 40.832
      expect(res.body).toEqual({
        visitor_id: visitor,
        score: expected,
        factors: { watched_percent: 0.3333, focus_time_ratio: 0, cta_clicks: 1, rewinds: 5 },
        computed_at: iso(T + 2004),
        score_version: 1,
      });
    });

    it('answers 404 for an unknown visitor and for one only another tenant has seen, 422 for a malformed id, 401 without a key', async () => {
      const onlyB = `vis_onlyb_${rnd()}`;
      expect((await s.collect(B.player_key, [{ event_name: 'video_play', video_id: B.videoId, visitor_id: onlyB }])).status).toBe(202);
      await expect.poll(async () => (await score(B, onlyB)).status, { timeout: 10_000 }).toBe(200);
      const seenElsewhere = await score(A, onlyB);
      const neverSeen = await score(A, `vis_nobody_${rnd()}`);
      expectProblem(seenElsewhere, 404, /no events/);
      expectProblem(neverSeen, 404, /no events/);
      expect(seenElsewhere.body.detail).toBe(neverSeen.body.detail);
      for (const bad of ['abc', 'vis_', 'vis_a.b', `vis_${'a'.repeat(65)}`, 'VIS_abc', 'ses_abc', encodeURIComponent('vis_a b')]) {
        expectProblem(await score(A, bad), 422, /params\.visitor_id/);
      }
      expect((await score(A, `vis_${'a'.repeat(64)}`)).status).toBe(404);
      expectProblem(await s.request('GET', `/v1/visitors/${onlyB}/score`), 401);
      expectProblem(await s.api(`/visitors/${onlyB}/score`, 'sk_nope'), 401);
    });
  });

  // ───────────────────────────── tenant isolation ─────────────────────────────
  describe('tenant isolation', () => {
    it('keeps events, scores and video lists of A and B apart, both ways', async () => {
      const visA = `vis_a_${rnd()}`;
      const visB = `vis_b_${rnd()}`;
      const shared = `vis_shared_${rnd()}`;
      expect((await s.collect(A.player_key, [
        { event_name: 'video_play', video_id: A.videoId, visitor_id: visA },
        { event_name: 'watched_50_percent', video_id: A.videoId, visitor_id: shared, watched_percentage: 50 },
      ])).status).toBe(202);
      expect((await s.collect(B.player_key, [
        { event_name: 'video_play', video_id: B.videoId, visitor_id: visB },
        { event_name: 'cta_clicked', video_id: B.videoId, visitor_id: shared, watched_percentage: 10 },
      ])).status).toBe(202);
      await expect.poll(async () => [(await score(A, visA)).status, (await score(B, visB)).status], { timeout: 10_000 }).toEqual([200, 200]);
      await eventually(async () => {
        const a = await score(A, shared);
        const b = await score(B, shared);
        return a.status === 200 && b.status === 200 ? true : undefined;
      });

      expectProblem(await events(A, B.videoId), 403);
      expectProblem(await events(B, A.videoId), 403);
      expectProblem(await score(A, visB), 404);
      expectProblem(await score(B, visA), 404);

      // A visitor seen by both: each tenant sees only its own factors.
      const a = await score(A, shared);
      const b = await score(B, shared);
      expect(a.body.factors).toEqual({ watched_percent: 0.5, focus_time_ratio: 0, cta_clicks: 0, rewinds: 0 });
      expect(b.body.factors).toEqual({ watched_percent: 0.1, focus_time_ratio: 0, cta_clicks: 1, rewinds: 0 });

      // Each tenant's events list holds only its visitors.
      const evA = await s.allEvents(A.videoId, A.apiKey);
      const evB = await s.allEvents(B.videoId, B.apiKey);
      expect(evA.map((e) => e.visitor_id)).toContain(visA);
      expect(evA.map((e) => e.visitor_id)).not.toContain(visB);
      expect(evB.map((e) => e.visitor_id)).toContain(visB);
      expect(evB.map((e) => e.visitor_id)).not.toContain(visA);

      // GET /v1/videos lists only own videos.
      const extraB = await s.createVideo(B.id, 'B only');
      const listA = (await s.api('/videos', A.apiKey)).body.data.map((v: { id: string }) => v.id);
      const listB = (await s.api('/videos', B.apiKey)).body.data.map((v: { id: string }) => v.id);
      expect(listA).toEqual((await s.admin('GET', `/tenants/${A.id}/videos`)).body.data.map((v: { id: string }) => v.id));
      expect(listB).toEqual((await s.admin('GET', `/tenants/${B.id}/videos`)).body.data.map((v: { id: string }) => v.id));
      expect(listA).not.toContain(extraB);
      expect(listB).toContain(extraB);
      expect(listA.filter((id: string) => listB.includes(id))).toEqual([]);
    });

    it('refuses A\'s player key on B\'s video with 403, and accepts nothing of a mixed batch', async () => {
      const vis = `vis_mixed_${rnd()}`;
      expectProblem(await s.collect(A.player_key, [{ event_name: 'video_play', video_id: B.videoId, visitor_id: vis }]), 403, /another tenant/);
      expectProblem(await s.collect(B.player_key, [{ event_name: 'video_play', video_id: A.videoId, visitor_id: vis }]), 403, /another tenant/);
      expectProblem(
        await s.collect(A.player_key, [
          { event_name: 'video_view', video_id: A.videoId, visitor_id: vis, session_id: 'ses_mixed' },
          { event_name: 'video_play', video_id: B.videoId, visitor_id: vis, session_id: 'ses_mixed' },
        ]),
        403,
        /body\.events\.1\.video_id/,
      );
      // A marker on the same session (same partition, so ordered after anything the refused batch could have written).
      const marker = `vis_marker_${rnd()}`;
      expect((await s.collect(A.player_key, [{ event_name: 'video_pause', video_id: A.videoId, visitor_id: marker, session_id: 'ses_mixed' }])).status).toBe(202);
      await expect.poll(async () => (await score(A, marker)).status, { timeout: 10_000 }).toBe(200);
      expectProblem(await score(A, vis), 404);
      expectProblem(await score(B, vis), 404);
    });
  });

  // ─────────────────────────── POST /api/public/conversion ───────────────────────────
  describe('POST /api/public/conversion', () => {
    it('accepts a conversion (202) that becomes a `conversion` event', async () => {
      const visitor = `vis_conv_${rnd()}`;
      const occurred = iso(Date.now() - 60_000);
      const res = await s.request('POST', '/api/public/conversion', {
        token: A.apiKey,
        body: { visitor_id: visitor, video_id: A.videoId, value: 49.9, currency: 'EUR', external_lead_id: 'lead_42', session_id: 'ses_conv', occurred_at: occurred },
      });
      expect(res.status, res.text).toBe(202);
      expect(res.body).toEqual({ accepted: 1, event_id: expect.stringMatching(/^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/) });
      const found = await eventually(async () => {
        const all = await s.allEvents(A.videoId, A.apiKey);
        const mine = all.filter((e) => e.visitor_id === visitor);
        return mine.length > 0 ? mine : undefined;
      });
      expect(found).toEqual([{ event: 'conversion', visitor_id: visitor, timestamp: occurred }]);

      // Minimal body: no occurred_at (time of receipt), no value.
      const v2 = `vis_conv2_${rnd()}`;
      const t0 = Date.now();
      const min = await s.request('POST', '/api/public/conversion', { token: A.apiKey, body: { visitor_id: v2, video_id: A.videoId } });
      const t1 = Date.now();
      expect(min.status, min.text).toBe(202);
      expect(min.body.event_id).not.toBe(res.body.event_id);
      const [e2] = await eventually(async () => {
        const mine = (await s.allEvents(A.videoId, A.apiKey, `since=${encodeURIComponent(iso(t0))}`)).filter((e) => e.visitor_id === v2);
        return mine.length > 0 ? mine : undefined;
      });
      expect(e2!.event).toBe('conversion');
      expect(Date.parse(e2!.timestamp)).toBeGreaterThanOrEqual(t0);
      expect(Date.parse(e2!.timestamp)).toBeLessThanOrEqual(t1);
    });

    it('answers 401 without a key, 422 for a bad body, 403 for another tenant\'s video', async () => {
      const ok = { visitor_id: 'vis_c', video_id: A.videoId, currency: 'EUR', value: 10 };
      expectProblem(await s.request('POST', '/api/public/conversion', { body: ok }), 401);
      expectProblem(await s.request('POST', '/api/public/conversion', { body: ok, token: A.player_key }), 401);
      const post = (body: unknown) => s.request('POST', '/api/public/conversion', { token: A.apiKey, body });
      expectProblem(await post({ ...ok, currency: 'eur' }), 422, /body\.currency/);
      expectProblem(await post({ ...ok, currency: 'EURO' }), 422, /body\.currency/);
      expectProblem(await post({ ...ok, currency: 978 }), 422, /body\.currency/);
      expectProblem(await post({ video_id: A.videoId, currency: 'EUR' }), 422, /body\.visitor_id/);
      expectProblem(await post({ ...ok, visitor_id: 'lead-1' }), 422, /body\.visitor_id/);
      expectProblem(await post({ ...ok, value: -1 }), 422, /body\.value/);
      expectProblem(await post({ ...ok, value: '10' }), 422, /body\.value/);
      expectProblem(await post({ ...ok, video_id: 'vid_nope' }), 422, /body\.video_id/);
      expectProblem(await post({ ...ok, video_id: randomVid() }), 422, /unknown video/);
      expectProblem(await post({ ...ok, session_id: 'session-1' }), 422, /body\.session_id/);
      expectProblem(await post({ ...ok, occurred_at: iso(Date.now() + 10 * 60_000) }), 422, /future/);
      expectProblem(await post({ ...ok, video_id: B.videoId }), 403, /another tenant/);
      expectProblem(await s.request('POST', '/api/public/conversion', { token: B.apiKey, body: ok }), 403);
    });
  });

  // ───────────────────────────── rate limit ─────────────────────────────
  describe('rate limit', () => {
    it('allows 1000 requests a minute per key with RateLimit headers, then 429 with Retry-After; other keys unaffected', async () => {
      const k = await s.admin('POST', `/tenants/${A.id}/api-keys`, { name: 'rate' });
      const key: string = k.body.key;
      const started = Date.now();
      const results = await pool(1000, 20, async () => {
        const res = await fetch(`${s.url}/v1/videos`, { headers: { authorization: `Bearer ${key}` } });
        await res.arrayBuffer();
        return {
          status: res.status,
          limit: res.headers.get('ratelimit-limit'),
          remaining: res.headers.get('ratelimit-remaining'),
          reset: res.headers.get('ratelimit-reset'),
        };
      });
      // The whole burst must fit in one window for the assertions below to mean anything.
      expect(Date.now() - started).toBeLessThan(50_000);
      expect(results.filter((r) => r.status !== 200)).toEqual([]);
      for (const r of results) {
        expect(r.limit).toBe('1000');
        expect(r.reset).toMatch(/^\d+$/);
        expect(Number(r.reset)).toBeGreaterThanOrEqual(1);
        expect(Number(r.reset)).toBeLessThanOrEqual(60);
      }
      // Every request counted exactly once: remaining takes each value 999…0 once.
      expect(results.map((r) => Number(r.remaining)).sort((x, y) => x - y)).toEqual(Array.from({ length: 1000 }, (_, i) => i));

      const over = await s.api('/videos', key);
      expectProblem(over, 429);
      expect(over.headers.get('retry-after')).toMatch(/^\d+$/);
      expect(Number(over.headers.get('retry-after'))).toBeGreaterThanOrEqual(1);
      expect(Number(over.headers.get('retry-after'))).toBeLessThanOrEqual(60);
      expect(over.headers.get('ratelimit-remaining')).toBe('0');
      expect(over.headers.get('ratelimit-limit')).toBe('1000');
      // Every API-key route shares the key's budget.
      expectProblem(await s.api(`/videos/${A.videoId}/events`, key), 429);
      expectProblem(await s.api('/visitors/vis_x/score', key), 429);

      // Another key of the same tenant is unaffected.
      const other = await s.api('/videos', A.apiKey);
      expect(other.status).toBe(200);
      expect(Number(other.headers.get('ratelimit-remaining'))).toBeGreaterThan(0);
      // The player intake is not under the API-key limit.
      expect((await s.collect(A.player_key, [{ event_name: 'video_play', video_id: A.videoId }])).status).toBe(202);
    }, 90_000);
  });

  // ───────────────────────────── POST /v1/collect ─────────────────────────────
  describe('POST /v1/collect', () => {
    it('accepts a batch with X-Player-Key: 202 {accepted: n}, and stores it', async () => {
      const vis = `vis_collect_${rnd()}`;
      const T = Date.now() - 30_000;
      const res = await s.collect(A.player_key, [
        { event_name: 'player_loaded', video_id: A.videoId, visitor_id: vis, occurred_at: iso(T) },
        { event_name: 'video_view', video_id: A.videoId, visitor_id: vis, occurred_at: iso(T + 1) },
        { event_name: 'video_unmute', video_id: A.videoId, visitor_id: vis, occurred_at: iso(T + 2), utm_source: 'ads', utm_campaign: 'spring', ctwa_clid: 'c1', external_lead_id: 'l1' },
      ]);
      expect(res.status, res.text).toBe(202);
      expect(res.body).toEqual({ accepted: 3 });
      expect(res.headers.get('x-request-id')).toMatch(/^req_/);
      const mine = await eventually(async () => {
        const m = (await s.allEvents(A.videoId, A.apiKey)).filter((e) => e.visitor_id === vis);
        return m.length === 3 ? m : undefined;
      });
      expect(mine).toEqual([
        { event: 'loaded', visitor_id: vis, timestamp: iso(T) },
        { event: 'view', visitor_id: vis, timestamp: iso(T + 1) },
        { event: 'unmute', visitor_id: vis, timestamp: iso(T + 2) },
      ]);
    });

    it('accepts ?key= with a text/plain body (sendBeacon) and sends CORS headers', async () => {
      const vis = `vis_beacon_${rnd()}`;
      const res = await s.request('POST', `/v1/collect?key=${encodeURIComponent(A.player_key)}`, {
        rawBody: JSON.stringify({
          events: [{ event_name: 'session_ended', video_id: A.videoId, session_id: 'ses_b', visitor_id: vis, current_time: 12.5, duration: 120, watched_percentage: 10.4 }],
        }),
        headers: { 'content-type': 'text/plain;charset=UTF-8', origin: 'https://customer.example' },
      });
      expect(res.status, res.text).toBe(202);
      expect(res.body).toEqual({ accepted: 1 });
      expect(res.headers.get('access-control-allow-origin')).toBe('*');
      await eventually(async () => {
        const m = (await s.allEvents(A.videoId, A.apiKey)).filter((e) => e.visitor_id === vis);
        return m.length === 1 && m[0]!.event === 'session_ended' ? true : undefined;
      });
      // The header wins over the query when both are present.
      const both = await s.request('POST', `/v1/collect?key=pk_wrong`, {
        rawBody: JSON.stringify({ events: [{ event_name: 'video_play', video_id: A.videoId, session_id: 'ses_b', visitor_id: vis, current_time: 0, duration: 1, watched_percentage: 0 }] }),
        headers: { 'content-type': 'text/plain', 'x-player-key': A.player_key },
      });
      expect(both.status, both.text).toBe(202);
      // Malformed JSON in text/plain is a 400.
      expectProblem(
        await s.request('POST', `/v1/collect?key=${A.player_key}`, { rawBody: '{"events": [', headers: { 'content-type': 'text/plain' } }),
        400,
      );
    });

    it('answers a CORS preflight for /v1/collect, and none for the read API', async () => {
      const pre = await s.request('OPTIONS', '/v1/collect', {
        headers: { origin: 'https://customer.example', 'access-control-request-method': 'POST', 'access-control-request-headers': 'content-type,x-player-key' },
      });
      expect(pre.status).toBe(204);
      expect(pre.headers.get('access-control-allow-origin')).toBe('*');
      expect(pre.headers.get('access-control-allow-methods')).toMatch(/POST/);
      expect(pre.headers.get('access-control-allow-headers')?.toLowerCase()).toContain('x-player-key');
      const read = await s.request('GET', '/v1/videos', { token: A.apiKey, headers: { origin: 'https://customer.example' } });
      expect(read.status).toBe(200);
      expect(read.headers.get('access-control-allow-origin')).toBeNull();
    });

    it('answers 401 for a missing or unknown player key', async () => {
      const body = { events: [{ event_name: 'video_play', video_id: A.videoId, session_id: 'ses_x', visitor_id: 'vis_x', current_time: 0, duration: 1, watched_percentage: 0 }] };
      expectProblem(await s.request('POST', '/v1/collect', { body }), 401, /player key/);
      expectProblem(await s.request('POST', '/v1/collect', { body, headers: { 'x-player-key': 'pk_unknown' } }), 401, /unknown player key/);
      expectProblem(await s.request('POST', '/v1/collect?key=pk_unknown', { body }), 401, /unknown player key/);
      // An API key is not a player key.
      expectProblem(await s.request('POST', '/v1/collect', { body, headers: { 'x-player-key': A.apiKey } }), 401);
      expectProblem(await s.request('POST', '/v1/collect', { body, token: A.apiKey }), 401);
    });

    it('refuses occurred_at more than 5 minutes in the future (422), accepts 4 minutes', async () => {
      const vis = `vis_future_${rnd()}`;
      const far = await s.collect(A.player_key, [{ event_name: 'video_play', video_id: A.videoId, visitor_id: vis, occurred_at: iso(Date.now() + 6 * 60_000) }]);
      expectProblem(far, 422, /body\.events\.0\.occurred_at: more than 5 minutes in the future/);
      expect(far.body.errors).toEqual([{ path: 'body.events.0.occurred_at', message: 'more than 5 minutes in the future' }]);
      const offset = await s.collect(A.player_key, [{ event_name: 'video_play', video_id: A.videoId, visitor_id: vis, occurred_at: withOffset(Date.now() + 10 * 60_000, 60) }]);
      expectProblem(offset, 422, /future/);
      const near = await s.collect(A.player_key, [{ event_name: 'video_play', video_id: A.videoId, visitor_id: vis, occurred_at: iso(Date.now() + 4 * 60_000) }]);
      expect(near.status, near.text).toBe(202);
    });
  });

  // ───────────────────────── health, metrics, OpenAPI ─────────────────────────
  describe('operations endpoints', () => {
    it('serves /healthz and /readyz', async () => {
      const h = await s.request('GET', '/healthz');
      expect(h.status).toBe(200);
      expect(h.body).toEqual({ status: 'ok' });
      const r = await s.request('GET', '/readyz');
      expect(r.status).toBe(200);
      expect(r.body.status).toBe('ready');
      expect(r.body.checks).toMatchObject({ kafka: 'ok', clickhouse: 'ok', config_store: 'ok', projector: 'ok' });
      for (const [name, v] of Object.entries(r.body.checks)) expect(v, name).toBe('ok');
    });

    it('listens on HTTP_ACCEPTORS sockets of its port (4 by default), and answers through each', async () => {
      const port = Number(new URL(s.url).port);
      // /proc/net/tcp{,6}: local address as hex ip:port, state 0A = LISTEN.
      const listening = ['/proc/net/tcp', '/proc/net/tcp6'].flatMap((f) => {
        try {
          return readFileSync(f, 'utf8').split('\n').slice(1);
        } catch {
          return [];
        }
      }).filter((line) => {
        const [, local, , state] = line.trim().split(/\s+/);
        return state === '0A' && Number.parseInt(local?.split(':').pop() ?? '', 16) === port;
      });
      expect(listening).toHaveLength(4);
      // New connections land on any of them (the kernel spreads them); each is answered.
      const answers = await Promise.all(Array.from({ length: 40 }, () => fetch(`${s.url}/healthz`, { headers: { connection: 'close' } }).then((r) => r.status)));
      expect(answers).toEqual(Array(40).fill(200));
    });

    it('exposes Prometheus metrics', async () => {
      const m = await s.request('GET', '/metrics');
      expect(m.status).toBe(200);
      expect(m.headers.get('content-type')).toMatch(/^text\/plain/);
      for (const name of ['http_requests_total', 'kafka_consumer_lag', 'projector_batch_size', 'clickhouse_insert_duration_seconds']) {
        expect(m.text).toContain(`# TYPE ${name} `);
      }
      // Real samples, not only declarations: by now requests were served and events projected.
      expect(metricSample(m.text, 'http_requests_total', { method: 'GET', route: '/v1/videos', status: '200' })).toBeGreaterThan(0);
      expect(metricSample(m.text, 'http_requests_total', { method: 'GET', route: '/v1/videos', status: '429' })).toBeGreaterThan(0);
      const projectorLag = parsePrometheusText(m.text, 'kafka_consumer_lag').filter((x) => x.labels.group?.endsWith('projector'));
      expect(projectorLag.length, 'kafka_consumer_lag samples of the projector group').toBeGreaterThan(0);
      expect(projectorLag.every((x) => x.value >= 0)).toBe(true);
      expect(metricSample(m.text, 'projector_batch_size_count')).toBeGreaterThan(0);
      expect(metricSample(m.text, 'clickhouse_insert_duration_seconds_count', { table: 'events' })).toBeGreaterThan(0);
    });

    it('publishes an OpenAPI 3 document listing the public paths, and /docs as HTML', async () => {
      const o = await s.request('GET', '/v1/openapi.json');
      expect(o.status).toBe(200);
      expect(o.body.openapi).toMatch(/^3\./);
      for (const path of ['/v1/videos', '/v1/videos/{video_id}/events', '/v1/visitors/{visitor_id}/score', '/v1/collect', '/api/public/conversion']) {
        expect(Object.keys(o.body.paths), path).toContain(path);
      }
      expect(o.body.paths['/v1/videos'].get).toBeDefined();
      expect(o.body.paths['/v1/collect'].post).toBeDefined();
      expect(o.body.paths['/api/public/conversion'].post).toBeDefined();
      const params = o.body.paths['/v1/videos/{video_id}/events'].get.parameters.map((p: { name: string }) => p.name);
      expect(params).toEqual(expect.arrayContaining(['video_id', 'since', 'cursor', 'limit']));

      const d = await fetch(`${s.url}/docs`);
      expect(d.status).toBe(200);
      expect(d.headers.get('content-type')).toMatch(/^text\/html/);
      expect((await d.text()).toLowerCase()).toContain('<html');
    });

    it('answers an unknown route with a problem+json 404', async () => {
      expectProblem(await s.request('GET', '/v1/nope'), 404, /no route GET \/v1\/nope/);
      expectProblem(await s.request('DELETE', '/v1/videos', { token: A.apiKey }), 404);
    });
  });
});
