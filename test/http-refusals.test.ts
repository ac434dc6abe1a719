import { randomUUID } from 'node:crypto';
import type { InjectOptions, LightMyRequestResponse } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ADMIN_AUTH_FAILURES } from '../services/admin/admin.service.ts';
import { randomVid } from './helpers/contract.ts';
import { InjectStack } from './helpers/inject-app.ts';
import type { TestTenant } from './helpers/stack.ts';

/**
 * Every refusal and error shape of the HTTP surface, in one file to scan:
 * the public API (/v1/collect with the player key; the reads and
 * /api/public/conversion with an API key), the management API (/admin/v1,
 * admin token) and the dashboard's session routes (/dashboard). In process,
 * through app.inject() on the app the stack serves (test/helpers/inject-app.ts):
 * no port, no consumers, a closed intake producer.
 *
 * Each answer is held to the error contract: the status; Content-Type
 * application/problem+json; `type` urn:video-analytics:problem:<code> with the
 * code docs/api.md ("Errors") gives the status; the fields of the OpenAPI
 * document's Problem schema; X-Request-Id equal to request_id; and, for an
 * operation the document describes, that it lists this status. The many
 * variants of each refusal (every malformed field, property-based runs, the
 * exact 1 MiB boundary, a chunked body) are in test/bad-input.test.ts.
 *
 * There is no 405 in this API: a method a path does not have is a 404, like
 * a path that does not exist.
 */

type OpenApi = {
  paths: Record<string, Record<string, { responses: Record<string, { content?: Record<string, { schema?: { $ref?: string } }> }> }>>;
  components: { schemas: { Problem: { required: string[]; properties: Record<string, { type: string }> } } };
};

interface Refusal {
  status: number;
  code: string;
  detail?: RegExp;
  /** The problem's `errors`, exactly (messages as patterns). */
  errors?: { path: string; message: RegExp }[];
  /** Headers the answer must carry besides the problem's own. */
  headers?: Record<string, RegExp>;
  /** `METHOD /path/{param}` as in the OpenAPI document, when the operation is public. */
  documented?: string;
}

const MIB = 1024 * 1024;
const json = { 'content-type': 'application/json' };
const bearer = (token: string) => ({ authorization: `Bearer ${token}` });

describe('HTTP refusals (app.inject)', () => {
  let s: InjectStack;
  let A: TestTenant;
  let B: TestTenant;
  let openapi: OpenApi;

  beforeAll(async () => {
    s = await InjectStack.start();
    [A, B] = [await s.createTenant('refusals-a'), await s.createTenant('refusals-b')];
    openapi = (await s.app.inject({ url: '/v1/openapi.json' })).json();
  });
  afterAll(async () => {
    await s?.stop();
  });

  const send = (opts: InjectOptions) => s.app.inject(opts);

  /** Checks one answer against the error contract and `want`; returns the problem body. */
  function refused(res: LightMyRequestResponse, want: Refusal): Record<string, any> {
    expect(res.statusCode, res.body).toBe(want.status);
    expect(res.headers['content-type'], res.body).toMatch(/^application\/problem\+json(;|$)/);
    const body = res.json();
    expect(body).toMatchObject({
      type: `urn:video-analytics:problem:${want.code}`,
      title: expect.stringMatching(/\S/),
      status: want.status,
      detail: expect.any(String),
      request_id: expect.stringMatching(/^req_[A-Za-z0-9_-]+$/),
    });
    expect(res.headers['x-request-id']).toBe(body.request_id);
    if (want.detail) expect(body.detail).toMatch(want.detail);
    conformsToProblemSchema(body);
    if (want.errors) {
      expect(body.errors).toHaveLength(want.errors.length);
      want.errors.forEach((e, i) => expect(body.errors[i]).toEqual({ path: e.path, message: expect.stringMatching(e.message) }));
    }
    for (const [name, value] of Object.entries(want.headers ?? {})) expect(res.headers[name], name).toMatch(value);
    if (want.documented) expectDocumented(want.documented, want.status);
    return body;
  }

  function conformsToProblemSchema(body: Record<string, unknown>): void {
    const schema = openapi.components.schemas.Problem;
    for (const field of schema.required) expect(body, `Problem.${field}`).toHaveProperty(field);
    const typeOf = (v: unknown) => (Array.isArray(v) ? 'array' : Number.isInteger(v) ? 'integer' : typeof v);
    for (const [field, value] of Object.entries(body)) {
      const declared = schema.properties[field];
      if (declared) expect(typeOf(value), `Problem.${field}`).toBe(declared.type);
    }
  }

  function expectDocumented(operation: string, status: number): void {
    const [method, path] = operation.split(' ') as [string, string];
    const responses = openapi.paths[path]?.[method.toLowerCase()]?.responses;
    expect(responses, `${operation} in the OpenAPI document`).toBeDefined();
    expect(Object.keys(responses!), `${operation} lists ${status}`).toContain(String(status));
    // Documented under the media type the answer is sent with.
    const content = responses![String(status)]!.content ?? {};
    expect(Object.keys(content), `${operation} ${status} media type`).toEqual(['application/problem+json']);
    expect(content['application/problem+json']?.schema?.$ref).toBe('#/components/schemas/Problem');
  }

  const event = (videoId: string, over: Record<string, unknown> = {}) => ({
    event_name: 'video_play',
    video_id: videoId,
    session_id: 'ses_refusals',
    visitor_id: 'vis_refusals',
    current_time: 0,
    duration: 120,
    watched_percentage: 0,
    ...over,
  });
  const collect = (body: unknown, headers: Record<string, string> = { 'x-player-key': A.player_key }) =>
    send({ method: 'POST', url: '/v1/collect', headers: { ...json, ...headers }, payload: JSON.stringify(body) });

  // ─────────────────────────── /v1/collect: player key ───────────────────────────
  describe('POST /v1/collect (player key)', () => {
    const doc = 'POST /v1/collect';

    it('401 unauthorized: no player key, an unknown one in the header or in ?key= (sendBeacon)', async () => {
      refused(await collect({ events: [event(A.videoId)] }, {}), { status: 401, code: 'unauthorized', detail: /X-Player-Key/, documented: doc });
      refused(await collect({ events: [event(A.videoId)] }, { 'x-player-key': 'pk_unknown' }), { status: 401, code: 'unauthorized', detail: /unknown player key/ });
      const beacon = await send({ method: 'POST', url: '/v1/collect?key=pk_unknown', headers: { 'content-type': 'text/plain' }, payload: JSON.stringify({ events: [event(A.videoId)] }) });
      refused(beacon, { status: 401, code: 'unauthorized', detail: /unknown player key/ });
    });

    it('400 invalid_json: a body that is not JSON, as application/json or as a text/plain beacon, or empty', async () => {
      const asJson = await send({ method: 'POST', url: '/v1/collect', headers: { ...json, 'x-player-key': A.player_key }, payload: '{"events": [' });
      refused(asJson, { status: 400, code: 'invalid_json', documented: doc });
      const asBeacon = await send({ method: 'POST', url: `/v1/collect?key=${A.player_key}`, headers: { 'content-type': 'text/plain' }, payload: '{"events": [' });
      refused(asBeacon, { status: 400, code: 'invalid_json', detail: /not valid JSON/ });
      refused(await send({ method: 'POST', url: '/v1/collect', headers: { ...json, 'x-player-key': A.player_key }, payload: '' }), { status: 400, code: 'invalid_json' });
    });

    it('413 payload_too_large: over COLLECT_MAX_BODY_BYTES (1 MiB), with or without a key', async () => {
      const big = `{"events":[],"pad":"${'x'.repeat(MIB)}"}`;
      refused(await send({ method: 'POST', url: '/v1/collect', headers: { ...json, 'x-player-key': A.player_key }, payload: big }), { status: 413, code: 'payload_too_large', documented: doc });
      refused(await send({ method: 'POST', url: '/v1/collect', headers: json, payload: big }), { status: 413, code: 'payload_too_large' });
    });

    it('415 unsupported_media_type: neither JSON nor text/plain', async () => {
      const xml = await send({ method: 'POST', url: '/v1/collect', headers: { 'content-type': 'application/xml', 'x-player-key': A.player_key }, payload: '<events/>' });
      refused(xml, { status: 415, code: 'unsupported_media_type', documented: doc });
    });

    it('422 validation_failed: the schema (a field out of range, an id repeated within the request)', async () => {
      refused(await collect({ events: [event(A.videoId, { current_time: -1 })] }), {
        status: 422,
        code: 'validation_failed',
        detail: /^body\.events\.0\.current_time: /,
        errors: [{ path: 'body.events.0.current_time', message: />=0/ }],
        documented: doc,
      });
      const id = randomUUID();
      refused(await collect({ events: [event(A.videoId, { event_id: id }), event(A.videoId, { event_id: id.toUpperCase() })] }), {
        status: 422,
        code: 'validation_failed',
        errors: [{ path: 'body.events.1.event_id', message: /repeats the event_id of events\.0/ }],
      });
    });

    it('422 validation_failed: semantic checks after the schema (an unknown video, occurred_at ahead of the clock)', async () => {
      refused(await collect({ events: [event(A.videoId), event(randomVid())] }), {
        status: 422,
        code: 'validation_failed',
        detail: /^body\.events\.1\.video_id: unknown video$/,
        errors: [{ path: 'body.events.1.video_id', message: /^unknown video$/ }],
      });
      const ahead = new Date(Date.now() + 3_600_000).toISOString();
      refused(await collect({ events: [event(A.videoId, { occurred_at: ahead })] }), {
        status: 422,
        code: 'validation_failed',
        errors: [{ path: 'body.events.0.occurred_at', message: /^more than 5 minutes in the future$/ }],
      });
    });

    it("403 forbidden: another tenant's video", async () => {
      refused(await collect({ events: [event(B.videoId)] }), { status: 403, code: 'forbidden', detail: /^body\.events\.0\.video_id: the video belongs to another tenant$/, documented: doc });
    });

    it('404 not_found: a method the path does not have (no 405)', async () => {
      refused(await send({ method: 'GET', url: '/v1/collect', headers: { 'x-player-key': A.player_key } }), { status: 404, code: 'not_found', detail: /no route GET \/v1\/collect/ });
    });

    it('503 unavailable: Kafka did not take the events (Retry-After: 5), counted by reason', async () => {
      const rejected = async () => (await s.main.metrics.ingestRejected.get()).values.find((v) => v.labels.reason === 'kafka_unavailable')?.value ?? 0;
      const before = await rejected();
      const res = await collect({ events: [event(A.videoId)] });
      refused(res, { status: 503, code: 'unavailable', detail: /nothing was accepted/, headers: { 'retry-after': /^5$/ }, documented: doc });
      expect(await rejected()).toBe(before + 1);
    });

    it('503 unavailable: intake stopped for shutdown (Retry-After: 1), after the credential is checked', async () => {
      const stopping = await s.extraApp({ SERVICES: ['ingest'] });
      for (const svc of stopping.services) await svc.stop();
      const post = (headers: Record<string, string>) =>
        stopping.app.inject({ method: 'POST', url: '/v1/collect', headers: { ...json, ...headers }, payload: JSON.stringify({ events: [event(A.videoId)] }) });
      refused(await post({ 'x-player-key': A.player_key }), { status: 503, code: 'unavailable', detail: /shutting down/, headers: { 'retry-after': /^1$/ } });
      refused(await post({}), { status: 401, code: 'unauthorized' });
    });
  });

  // ─────────────────── /api/public/conversion: API key ───────────────────
  describe('POST /api/public/conversion (API key)', () => {
    const doc = 'POST /api/public/conversion';
    const convert = (body: unknown, headers: Record<string, string> = bearer(A.apiKey)) =>
      send({ method: 'POST', url: '/api/public/conversion', headers: { ...json, ...headers }, payload: JSON.stringify(body) });

    it('401 unauthorized: no API key, or an unknown one, with WWW-Authenticate', async () => {
      refused(await convert({ visitor_id: 'vis_1', video_id: A.videoId }, {}), { status: 401, code: 'unauthorized', headers: { 'www-authenticate': /^Bearer$/ }, documented: doc });
      refused(await convert({ visitor_id: 'vis_1', video_id: A.videoId }, bearer('sk_unknown')), {
        status: 401,
        code: 'unauthorized',
        detail: /unknown API key/,
        headers: { 'www-authenticate': /^Bearer error="invalid_token"$/ },
      });
    });

    it('400 invalid_json, 422 validation_failed (schema, unknown video), 403 forbidden (another tenant\'s video)', async () => {
      refused(await send({ method: 'POST', url: '/api/public/conversion', headers: { ...json, ...bearer(A.apiKey) }, payload: '{' }), { status: 400, code: 'invalid_json', documented: doc });
      refused(await convert({ visitor_id: 'vis_1', video_id: A.videoId, value: 'ten' }), {
        status: 422,
        code: 'validation_failed',
        errors: [{ path: 'body.value', message: /expected number/ }],
        documented: doc,
      });
      refused(await convert({ visitor_id: 'vis_1', video_id: randomVid() }), { status: 422, code: 'validation_failed', errors: [{ path: 'body.video_id', message: /^unknown video$/ }] });
      refused(await convert({ visitor_id: 'vis_1', video_id: B.videoId }), { status: 403, code: 'forbidden', detail: /another tenant/, documented: doc });
    });
  });

  // ─────────────────────────── /v1 reads: API key ───────────────────────────
  describe('GET /v1/… (API key)', () => {
    const get = (url: string, headers: Record<string, string> = bearer(A.apiKey)) => send({ method: 'GET', url, headers });

    it('401 unauthorized: no header, a Bearer without a key, an unknown key, a revoked key', async () => {
      refused(await get('/v1/videos', {}), { status: 401, code: 'unauthorized', detail: /Authorization: Bearer/, headers: { 'www-authenticate': /^Bearer$/ }, documented: 'GET /v1/videos' });
      refused(await get('/v1/videos', { authorization: 'Bearer' }), { status: 401, code: 'unauthorized' });
      refused(await get(`/v1/videos/${A.videoId}/events`, bearer('sk_unknown')), { status: 401, code: 'unauthorized', headers: { 'www-authenticate': /invalid_token/ }, documented: 'GET /v1/videos/{video_id}/events' });
      const k = await s.newApiKey(A.id);
      expect((await get('/v1/videos', bearer(k.key))).statusCode).toBe(200);
      expect((await s.admin('DELETE', `/tenants/${A.id}/api-keys/${k.id}`)).statusCode).toBe(200);
      refused(await get('/v1/videos', bearer(k.key)), { status: 401, code: 'unauthorized', detail: /^the API key was revoked$/ });
    });

    it("403 forbidden: another tenant's video, on the events and on the analytics routes", async () => {
      refused(await get(`/v1/videos/${B.videoId}/events`), { status: 403, code: 'forbidden', detail: /another tenant/, documented: 'GET /v1/videos/{video_id}/events' });
      refused(await get(`/v1/videos/${B.videoId}/stats`), { status: 403, code: 'forbidden', documented: 'GET /v1/videos/{video_id}/stats' });
    });

    it('404 not_found: an unknown video, a visitor without events, an unknown route, a method the path does not have', async () => {
      refused(await get(`/v1/videos/${randomVid()}/events`), { status: 404, code: 'not_found', detail: /^no such video$/, documented: 'GET /v1/videos/{video_id}/events' });
      refused(await get('/v1/visitors/vis_never_seen/score'), { status: 404, code: 'not_found', detail: /^no events for this visitor$/, documented: 'GET /v1/visitors/{visitor_id}/score' });
      refused(await get('/v1/nope'), { status: 404, code: 'not_found', detail: /^no route GET \/v1\/nope$/ });
      refused(await send({ method: 'POST', url: '/v1/videos', headers: bearer(A.apiKey) }), { status: 404, code: 'not_found' });
    });

    it('422 validation_failed: a malformed path id, a query parameter out of range, a forged cursor', async () => {
      refused(await get('/v1/videos/vid_123/events'), { status: 422, code: 'validation_failed', errors: [{ path: 'params.video_id', message: /vid_<32 hex>/ }], documented: 'GET /v1/videos/{video_id}/events' });
      refused(await get('/v1/videos?limit=0'), { status: 422, code: 'validation_failed', errors: [{ path: 'querystring.limit', message: /1/ }], documented: 'GET /v1/videos' });
      refused(await get(`/v1/videos/${A.videoId}/events?cursor=evt_a.b`), { status: 422, code: 'validation_failed', detail: /cursor/ });
    });

    it('400 bad_request: a malformed percent-escape in the path', async () => {
      refused(await get('/v1/visitors/vis_%zz/score'), { status: 400, code: 'bad_request', documented: 'GET /v1/visitors/{visitor_id}/score' });
    });

    it('429 rate_limited: over RATE_LIMIT_PER_MINUTE for one key, reads and conversions together, before validation; Retry-After', async () => {
      const limited = await s.extraApp({ RATE_LIMIT_PER_MINUTE: 2, SERVICES: ['ingest', 'api'] });
      const k = await s.newApiKey(A.id);
      const hit = (key: string) => limited.app.inject({ method: 'GET', url: '/v1/videos', headers: bearer(key) });
      const ok = [await hit(k.key), await hit(k.key)];
      expect(ok.map((r) => [r.statusCode, r.headers['ratelimit-limit'], r.headers['ratelimit-remaining']])).toEqual([
        [200, '2', '1'],
        [200, '2', '0'],
      ]);
      const over = refused(await hit(k.key), { status: 429, code: 'rate_limited', detail: /more than 2 requests/, headers: { 'retry-after': /^\d+$/, 'ratelimit-remaining': /^0$/ }, documented: 'GET /v1/videos' });
      expect(Number((await hit(k.key)).headers['retry-after'])).toBeLessThanOrEqual(60);
      expect(over.detail).toContain('this API key');
      // The same key on the conversion intake, with a body that would be a 422: the limit comes first.
      const conversion = await limited.app.inject({ method: 'POST', url: '/api/public/conversion', headers: { ...json, ...bearer(k.key) }, payload: JSON.stringify({ value: 'ten' }) });
      refused(conversion, { status: 429, code: 'rate_limited', headers: { 'retry-after': /^\d+$/ }, documented: 'POST /api/public/conversion' });
      // Another key of the same tenant has its own count.
      expect((await hit(A.apiKey)).statusCode).toBe(200);
    });
  });

  // ─────────────────────────── /admin/v1: admin token ───────────────────────────
  describe('/admin/v1 (admin token)', () => {
    const admin = (method: InjectOptions['method'], path: string, body?: unknown, headers: Record<string, string> = bearer(s.adminToken)) =>
      send({ method, url: `/admin/v1${path}`, headers: { ...(body === undefined ? {} : json), ...headers }, ...(body === undefined ? {} : { payload: JSON.stringify(body) }) });

    it('401 unauthorized: no token (WWW-Authenticate) or a wrong one', async () => {
      refused(await admin('GET', '/tenants', undefined, {}), { status: 401, code: 'unauthorized', detail: /ADMIN_TOKEN/, headers: { 'www-authenticate': /^Bearer$/ }, documented: 'GET /admin/v1/tenants' });
      refused(await admin('POST', '/tenants', { name: 'x' }, bearer(`${s.adminToken}x`)), { status: 401, code: 'unauthorized', documented: 'POST /admin/v1/tenants' });
    });

    it('400 invalid_json, 413 payload_too_large, 415 unsupported_media_type', async () => {
      const post = (payload: string, contentType: string) =>
        send({ method: 'POST', url: '/admin/v1/tenants', headers: { 'content-type': contentType, ...bearer(s.adminToken) }, payload });
      refused(await post('{"name": ', 'application/json'), { status: 400, code: 'invalid_json', documented: 'POST /admin/v1/tenants' });
      refused(await post(JSON.stringify({ name: 'x'.repeat(MIB) }), 'application/json'), { status: 413, code: 'payload_too_large', documented: 'POST /admin/v1/tenants' });
      refused(await post('name=x', 'application/x-www-form-urlencoded'), { status: 415, code: 'unsupported_media_type', documented: 'POST /admin/v1/tenants' });
    });

    it('422 validation_failed: a bad name, a malformed path id', async () => {
      refused(await admin('POST', '/tenants', { name: 'a\r\nX-Injected: 1' }), {
        status: 422,
        code: 'validation_failed',
        errors: [{ path: 'body.name', message: /control characters/ }],
        documented: 'POST /admin/v1/tenants',
      });
      refused(await admin('GET', '/tenants/not-a-uuid'), { status: 422, code: 'validation_failed', errors: [{ path: 'params.tenant_id', message: /UUID/i }], documented: 'GET /admin/v1/tenants/{tenant_id}' });
    });

    it('422 validation_failed: a destination URL that is not https or carries credentials, a config on a webhook, the destination limit', async () => {
      const doc = 'POST /admin/v1/tenants/{tenant_id}/destinations';
      for (const [url, message] of [
        ['http://example.com/hook', /^must be an https:\/\/ URL$/],
        ['https://user:pw@example.com/hook', /^must not carry credentials$/],
        ['https://exa mple.com/', /^must be an https:\/\/ URL$/],
      ] as const) {
        const res = await admin('POST', `/tenants/${A.id}/destinations`, { name: 'bad', url });
        refused(res, { status: 422, code: 'validation_failed', errors: [{ path: 'body.url', message }], documented: doc });
        expect(res.body).not.toContain('pw@');
      }
      refused(await admin('POST', `/tenants/${A.id}/destinations`, { name: 'w', url: 'https://example.com/', config: { webhook_secret: 's' } }), {
        status: 422,
        code: 'validation_failed',
        errors: [{ path: 'body.config', message: /only integrations have a config/ }],
      });
      const small = await s.extraApp({ MAX_DESTINATIONS_PER_TENANT: 1, SERVICES: ['admin'] });
      const create = () =>
        small.app.inject({ method: 'POST', url: `/admin/v1/tenants/${B.id}/destinations`, headers: { ...json, ...bearer(s.adminToken) }, payload: JSON.stringify({ name: 'one', url: 'https://example.com/b' }) });
      expect((await create()).statusCode).toBe(201);
      refused(await create(), { status: 422, code: 'validation_failed', detail: /at most 1 destinations/, errors: [{ path: 'tenant_id', message: /^destination limit reached$/ }], documented: doc });
    });

    it('404 not_found: an unknown tenant, API key, destination, delivery or route', async () => {
      const nobody = randomUUID();
      refused(await admin('GET', `/tenants/${nobody}`), { status: 404, code: 'not_found', detail: /^no such tenant$/, documented: 'GET /admin/v1/tenants/{tenant_id}' });
      refused(await admin('DELETE', `/tenants/${A.id}/api-keys/${randomUUID()}`), { status: 404, code: 'not_found', detail: /^no such API key$/, documented: 'DELETE /admin/v1/tenants/{tenant_id}/api-keys/{key_id}' });
      refused(await admin('GET', `/tenants/${A.id}/destinations/${randomUUID()}`), { status: 404, code: 'not_found', detail: /^no such destination$/, documented: 'GET /admin/v1/tenants/{tenant_id}/destinations/{destination_id}' });
      refused(await admin('GET', `/tenants/${A.id}/deliveries/${randomUUID()}`), { status: 404, code: 'not_found', detail: /^no such delivery$/, documented: 'GET /admin/v1/tenants/{tenant_id}/deliveries/{delivery_id}' });
      refused(await admin('GET', '/nope'), { status: 404, code: 'not_found' });
    });

    it('429 rate_limited: too many wrong admin tokens from one address, here and at the dashboard sign-in together; the right token still works', async () => {
      const from = { remoteAddress: '198.51.100.23' };
      const wrong = `${s.adminToken}-wrong`;
      for (let i = 0; i < ADMIN_AUTH_FAILURES.max; i++) {
        const res =
          i % 2 === 0
            ? await send({ method: 'GET', url: '/admin/v1/tenants', headers: bearer(wrong), ...from })
            : await send({ method: 'POST', url: '/dashboard/session', headers: json, payload: JSON.stringify({ token: wrong }), ...from });
        expect(res.statusCode).toBe(401);
      }
      refused(await send({ method: 'GET', url: '/admin/v1/tenants', headers: bearer(wrong), ...from }), {
        status: 429,
        code: 'rate_limited',
        detail: /too many failed attempts/,
        headers: { 'retry-after': /^[1-9]\d*$/ },
        documented: 'GET /admin/v1/tenants',
      });
      refused(await send({ method: 'POST', url: '/dashboard/session', headers: json, payload: JSON.stringify({ token: wrong }), ...from }), { status: 429, code: 'rate_limited' });
      expect((await send({ method: 'GET', url: '/admin/v1/tenants', headers: bearer(s.adminToken), ...from })).statusCode).toBe(200);
      // A missing token is not a guess: still 401, not 429.
      refused(await send({ method: 'GET', url: '/admin/v1/tenants', ...from }), { status: 401, code: 'unauthorized' });
    });
  });

  // ─────────────────────────── /dashboard: session ───────────────────────────
  describe('/dashboard (session cookie and CSRF token)', () => {
    let cookie: Record<string, string>;
    let csrf: string;

    beforeAll(async () => {
      const res = await send({ method: 'POST', url: '/dashboard/session', headers: json, payload: JSON.stringify({ token: s.adminToken }) });
      expect(res.statusCode).toBe(200);
      const session = res.cookies.find((c) => c.name === 'va_session');
      expect(session?.value).toBeTruthy();
      cookie = { va_session: session!.value };
      csrf = res.json().csrf_token;
    });

    const api = (method: InjectOptions['method'], path: string, opts: { body?: string; csrf?: string; cookies?: Record<string, string>; headers?: Record<string, string> } = {}) =>
      send({
        method,
        url: `/dashboard/api${path}`,
        cookies: opts.cookies ?? cookie,
        headers: { ...(opts.body === undefined ? {} : json), ...(opts.csrf ? { 'x-csrf-token': opts.csrf } : {}), ...opts.headers },
        ...(opts.body === undefined ? {} : { payload: opts.body }),
      });

    it('401 unauthorized: a wrong or empty token at sign-in; no session, even with the admin token as a bearer', async () => {
      const signIn = (token: unknown) => send({ method: 'POST', url: '/dashboard/session', headers: json, payload: JSON.stringify({ token }), remoteAddress: '198.51.100.40' });
      refused(await signIn('wrong'), { status: 401, code: 'unauthorized', detail: /^wrong admin token$/ });
      refused(await signIn(''), { status: 401, code: 'unauthorized' });
      refused(await send({ method: 'GET', url: '/dashboard/session' }), { status: 401, code: 'unauthorized', detail: /sign in/ });
      refused(await api('GET', '/tenants', { cookies: {} }), { status: 401, code: 'unauthorized' });
      refused(await api('GET', '/tenants', { cookies: {}, headers: bearer(s.adminToken) }), { status: 401, code: 'unauthorized' });
      // Under /dashboard/api the session comes before the route: an unknown path is 401 without one.
      refused(await api('GET', '/nope', { cookies: {} }), { status: 401, code: 'unauthorized' });
    });

    it('400 invalid_json and 415 unsupported_media_type at sign-in', async () => {
      refused(await send({ method: 'POST', url: '/dashboard/session', headers: json, payload: '{"token": ' }), { status: 400, code: 'invalid_json' });
      refused(await send({ method: 'POST', url: '/dashboard/session', headers: { 'content-type': 'application/xml' }, payload: '<token/>' }), { status: 415, code: 'unsupported_media_type' });
    });

    it("403 forbidden: a state-changing call without the session's CSRF token, or with a wrong one", async () => {
      refused(await api('POST', '/tenants', { body: JSON.stringify({ name: 'csrf' }) }), { status: 403, code: 'forbidden' });
      refused(await api('POST', '/tenants', { body: JSON.stringify({ name: 'csrf' }), csrf: 'not-the-token' }), { status: 403, code: 'forbidden' });
      refused(await send({ method: 'DELETE', url: '/dashboard/session', cookies: cookie }), { status: 403, code: 'forbidden' });
      // The same call with the session's token goes through.
      expect((await api('POST', '/tenants', { body: JSON.stringify({ name: 'csrf' }), csrf })).statusCode).toBe(201);
    });

    it('400 invalid_json, 422 validation_failed and 404 not_found under the session, as under /admin/v1', async () => {
      refused(await api('POST', '/tenants', { body: '{', csrf }), { status: 400, code: 'invalid_json' });
      refused(await api('POST', '/tenants', { body: JSON.stringify({ name: '' }), csrf }), { status: 422, code: 'validation_failed', errors: [{ path: 'body.name', message: /1 character/ }] });
      refused(await api('GET', `/tenants/${randomUUID()}`), { status: 404, code: 'not_found', detail: /^no such tenant$/ });
      refused(await api('GET', '/nope'), { status: 404, code: 'not_found', detail: /^no route GET \/dashboard\/api\/nope$/ });
      refused(await send({ method: 'GET', url: '/dashboard/assets/nope.js' }), { status: 404, code: 'not_found', detail: /^no such asset$/ });
    });
  });
});
