import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { expectProblem } from './helpers/contract.ts';
import { metricSample } from './helpers/prometheus-text.ts';
import { TestStack, type TestTenant } from './helpers/stack.ts';

const KEY_EVENTS_PER_MINUTE = 50;
const ADDRESS_REQUESTS_PER_MINUTE = 10;
/** Long enough for the checks during the overlap on a loaded machine, short enough to wait out. */
const OVERLAP_S = 4;

/**
 * Abuse of the public player key is bounded and visible: per-key and
 * per-address limits, an allow-list of origins, rotation with an overlap and
 * suspension, each refusal counted in /metrics. The whole stack over real
 * HTTP; the stack trusts the loopback proxy (TRUST_PROXY), so each test
 * speaks from an address of its own through X-Forwarded-For.
 */
describe('hostile use of a player key', () => {
  let s: TestStack;
  let addresses = 0;
  /** A client address no other test used. */
  const freshAddress = () => `198.51.100.${++addresses}`;

  beforeAll(async () => {
    s = await TestStack.start({
      TRUST_PROXY: '127.0.0.1',
      PLAYER_KEY_EVENTS_PER_MINUTE: String(KEY_EVENTS_PER_MINUTE),
      CLIENT_ADDRESS_REQUESTS_PER_MINUTE: String(ADDRESS_REQUESTS_PER_MINUTE),
    });
  });
  afterAll(async () => {
    await s?.stop();
  });

  const play = (t: TestTenant, n = 1) =>
    Array.from({ length: n }, (_, i) => ({ event_name: 'video_play', video_id: t.videoId, visitor_id: `vis_${i}`, session_id: `ses_${i}` }));
  const collect = (key: string, events: object[], headers: Record<string, string>) =>
    s.request('POST', '/v1/collect', {
      headers: { 'x-player-key': key, ...headers },
      body: { events: events.map((e) => ({ current_time: 0, duration: 120, watched_percentage: 0, ...e })) },
    });
  const from = (ip: string, extra: Record<string, string> = {}) => ({ 'x-forwarded-for': ip, ...extra });
  const refused = async (limit: string): Promise<number> => {
    const text = (await s.request('GET', '/metrics')).text;
    return metricSample(text, 'intake_refused_total', { limit });
  };
  const expectRetryAfter = (res: { headers: Headers }) => {
    const seconds = Number(res.headers.get('retry-after'));
    expect(seconds).toBeGreaterThanOrEqual(1);
    expect(seconds).toBeLessThanOrEqual(60);
  };

  it('refuses a player key over its events a minute with 429 and Retry-After; another tenant is unaffected', async () => {
    const A = await s.createTenant('key-limit-a');
    const B = await s.createTenant('key-limit-b');
    const before = await refused('player_key_rate');
    expect((await collect(A.player_key, play(A, KEY_EVENTS_PER_MINUTE), from(freshAddress()))).status).toBe(202);
    // Events, not requests, are counted: one more event from another address is over.
    const over = await collect(A.player_key, play(A, 1), from(freshAddress()));
    expectProblem(over, 429, /events this minute for this player key/);
    expectRetryAfter(over);
    expect((await collect(B.player_key, play(B, 1), from(freshAddress()))).status).toBe(202);
    expect(await refused('player_key_rate')).toBe(before + 1);
  });

  it('refuses a client address over its requests a minute with 429, whichever key it sends; other addresses go on', async () => {
    const C = await s.createTenant('address-limit');
    const ip = freshAddress();
    const before = await refused('client_address_rate');
    for (let i = 0; i < ADDRESS_REQUESTS_PER_MINUTE; i++) expect((await collect(C.player_key, play(C), from(ip))).status).toBe(202);
    const over = await collect(C.player_key, play(C), from(ip));
    expectProblem(over, 429, /requests this minute from this client address/);
    expectRetryAfter(over);
    // Counted before the key is looked at: an unknown key from that address is refused the same way.
    expectProblem(await collect('pk_unknown', play(C), from(ip)), 429);
    expect((await collect(C.player_key, play(C), from(freshAddress()))).status).toBe(202);
    expect(await refused('client_address_rate')).toBe(before + 2);
  });

  it('refuses a browser whose Origin is not on the allow-list with 403; an allowed origin and a request without Origin pass', async () => {
    const T = await s.createTenant('origins');
    const set = await s.admin('PUT', `/tenants/${T.id}/allowed-origins`, { allowed_origins: ['https://Shop.Example.com:443', 'http://localhost:8080'] });
    expect(set.status, set.text).toBe(200);
    expect(set.body.allowed_origins).toEqual(['https://shop.example.com', 'http://localhost:8080']);
    expectProblem(await s.admin('PUT', `/tenants/${T.id}/allowed-origins`, { allowed_origins: ['https://shop.example.com/page'] }), 422, /allowed_origins/);
    const before = await refused('origin');

    const foreign = await collect(T.player_key, play(T), from(freshAddress(), { origin: 'https://copycat.example' }));
    expectProblem(foreign, 403, /origin/);
    expect(foreign.body.type).toBe('urn:video-analytics:problem:origin_not_allowed');
    expectProblem(await collect(T.player_key, play(T), from(freshAddress(), { origin: 'null' })), 403);
    // sendBeacon: the key in the query, text/plain, and the page's Origin all the same.
    const beacon = await s.request('POST', `/v1/collect?key=${T.player_key}`, {
      rawBody: JSON.stringify({ events: play(T).map((e) => ({ ...e, current_time: 0, duration: 120, watched_percentage: 0 })) }),
      headers: from(freshAddress(), { 'content-type': 'text/plain', origin: 'https://copycat.example' }),
    });
    expectProblem(beacon, 403);

    expect((await collect(T.player_key, play(T), from(freshAddress(), { origin: 'https://shop.example.com' }))).status).toBe(202);
    const allowedBeacon = await s.request('POST', `/v1/collect?key=${T.player_key}`, {
      rawBody: JSON.stringify({ events: play(T).map((e) => ({ ...e, current_time: 0, duration: 120, watched_percentage: 0 })) }),
      headers: from(freshAddress(), { 'content-type': 'text/plain', origin: 'http://localhost:8080' }),
    });
    expect(allowedBeacon.status, allowedBeacon.text).toBe(202);
    expect((await collect(T.player_key, play(T), from(freshAddress()))).status).toBe(202);
    expect(await refused('origin')).toBe(before + 3);

    // An empty list allows every origin again.
    expect((await s.admin('PUT', `/tenants/${T.id}/allowed-origins`, { allowed_origins: [] })).status).toBe(200);
    expect((await collect(T.player_key, play(T), from(freshAddress(), { origin: 'https://copycat.example' }))).status).toBe(202);
  });

  it('rotates a player key: both keys work during the overlap, the old one is refused 401 after it, in every process', async () => {
    const T = await s.createTenant('rotation');
    const old = T.player_key;
    // A second intake process on the same topics: it learns of the rotation from the config topic alone.
    const other = await TestStack.start({ SERVICES: 'ingest', TRUST_PROXY: '127.0.0.1' }, { dataDir: `${s.dataDir}-ingest`, topicPrefix: s.topicPrefix });
    try {
      const rotated = await s.admin('POST', `/tenants/${T.id}/player-key/rotate`, { overlap_seconds: OVERLAP_S });
      expect(rotated.status, rotated.text).toBe(200);
      const fresh: string = rotated.body.player_key;
      expect(fresh).toMatch(/^pk_[A-Za-z0-9]{32}$/);
      expect(fresh).not.toBe(old);
      expect(rotated.body.previous_player_key).toBe(old);
      const expiresAt = Date.parse(rotated.body.previous_player_key_expires_at);
      expect(expiresAt - Date.now()).toBeGreaterThan(0);
      expect(expiresAt - Date.now()).toBeLessThanOrEqual(OVERLAP_S * 1000);

      for (const key of [old, fresh]) expect((await collect(key, play(T), from(freshAddress()))).status).toBe(202);
      await expect.poll(() => otherCollect(other, fresh), { timeout: 10_000 }).toBe(202);
      expect(await otherCollect(other, old)).toBe(202);
      // The checks above ran during the overlap, or they prove nothing.
      expect(Date.now()).toBeLessThan(expiresAt);

      const before = await refused('retired_player_key');
      await new Promise((r) => setTimeout(r, Math.max(0, expiresAt - Date.now() + 50)));
      const retired = await collect(old, play(T), from(freshAddress()));
      expectProblem(retired, 401, /replaced/);
      expect(await otherCollect(other, old)).toBe(401);
      expect((await collect(fresh, play(T), from(freshAddress()))).status).toBe(202);
      expect(await refused('retired_player_key')).toBe(before + 1);
      // Once the overlap is over, the tenant no longer shows the old key.
      expect((await s.admin('GET', `/tenants/${T.id}`)).body.previous_player_key).toBeNull();

      // Without a body the overlap is the default 24 h.
      const again = await s.admin('POST', `/tenants/${T.id}/player-key/rotate`);
      expect(again.status, again.text).toBe(200);
      expect(Date.parse(again.body.previous_player_key_expires_at) - Date.now()).toBeGreaterThan(23.9 * 3600_000);
      expect((await collect(fresh, play(T), from(freshAddress()))).status).toBe(202);
    } finally {
      await other.stop();
    }

    async function otherCollect(stack: TestStack, key: string): Promise<number> {
      const res = await stack.request('POST', '/v1/collect', {
        headers: { 'x-player-key': key, 'x-forwarded-for': freshAddress() },
        body: { events: play(T).map((e) => ({ ...e, current_time: 0, duration: 120, watched_percentage: 0 })) },
      });
      return res.status;
    }
  });

  it('suspends a tenant: its player key and API keys are refused 403 on intake and reads; resume restores them', async () => {
    const T = await s.createTenant('suspension');
    const U = await s.createTenant('not-suspended');
    const conversion = (t: TestTenant) =>
      s.request('POST', '/api/public/conversion', { token: t.apiKey, body: { visitor_id: 'vis_1', video_id: t.videoId } });
    const before = await refused('suspended');

    const suspended = await s.admin('POST', `/tenants/${T.id}/suspend`);
    expect(suspended.status, suspended.text).toBe(200);
    expect(Date.parse(suspended.body.suspended_at)).toBeLessThanOrEqual(Date.now());

    const intake = await collect(T.player_key, play(T), from(freshAddress()));
    expectProblem(intake, 403, /suspended/);
    expect(intake.body.type).toBe('urn:video-analytics:problem:tenant_suspended');
    const read = await s.api('/videos', T.apiKey);
    expectProblem(read, 403, /suspended/);
    expect(read.body.type).toBe('urn:video-analytics:problem:tenant_suspended');
    expectProblem(await conversion(T), 403, /suspended/);
    // A wrong key learns nothing of the suspension.
    expectProblem(await s.api('/videos', 'sk_wrong'), 401);
    expect(await refused('suspended')).toBe(before + 1);

    expect((await collect(U.player_key, play(U), from(freshAddress()))).status).toBe(202);
    expect((await s.api('/videos', U.apiKey)).status).toBe(200);

    const resumed = await s.admin('POST', `/tenants/${T.id}/resume`);
    expect(resumed.status, resumed.text).toBe(200);
    expect(resumed.body.suspended_at).toBeNull();
    expect((await collect(T.player_key, play(T), from(freshAddress()))).status).toBe(202);
    expect((await s.api('/videos', T.apiKey)).status).toBe(200);
    expect((await conversion(T)).status).toBe(202);
  });

  it('lets a player key set only what a visitor may claim: no conversion, no tenant of its choosing', async () => {
    const A = await s.createTenant('claims-a');
    const B = await s.createTenant('claims-b');
    const conversion = await collect(A.player_key, [{ ...play(A)[0], event_name: 'conversion' }], from(freshAddress()));
    expectProblem(conversion, 422, /api\/public\/conversion/);
    const forged = await collect(A.player_key, [{ ...play(A)[0], visitor_id: 'vis_forged', tenant_id: B.id, source: 'server' }], from(freshAddress()));
    expect(forged.status, forged.text).toBe(202);
    await expect.poll(async () => (await s.allEvents(A.videoId, A.apiKey)).some((e) => e.visitor_id === 'vis_forged'), { timeout: 10_000 }).toBe(true);
    // The forged tenant_id did not reach B: B has never seen that visitor.
    expectProblem(await s.api('/visitors/vis_forged/score', B.apiKey), 404, /no events/);
  });

  it('documents the management endpoints in the OpenAPI document', async () => {
    const doc = (await s.request('GET', '/v1/openapi.json')).body;
    for (const path of ['/admin/v1/tenants/{tenant_id}/player-key/rotate', '/admin/v1/tenants/{tenant_id}/suspend', '/admin/v1/tenants/{tenant_id}/resume', '/admin/v1/tenants/{tenant_id}/allowed-origins']) {
      expect(Object.keys(doc.paths), path).toContain(path);
    }
    expect(Object.keys(doc.paths['/v1/collect'].post.responses)).toEqual(expect.arrayContaining(['401', '403', '429']));
  });

  it('names every refusal in /metrics and shows the limits with the tenant', async () => {
    for (const limit of ['player_key_rate', 'client_address_rate', 'origin', 'suspended', 'retired_player_key']) {
      expect(await refused(limit), limit).toBeGreaterThanOrEqual(1);
    }
    const T = await s.createTenant('limits');
    const got = await s.admin('GET', `/tenants/${T.id}`);
    expect(got.body).toMatchObject({
      allowed_origins: [],
      previous_player_key: null,
      suspended_at: null,
      limits: { player_key_events_per_minute: KEY_EVENTS_PER_MINUTE, client_address_requests_per_minute: ADDRESS_REQUESTS_PER_MINUTE },
    });
  });
});
