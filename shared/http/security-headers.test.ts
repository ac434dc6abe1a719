import { afterEach, describe, expect, it } from 'vitest';
import { ApiError } from './errors.ts';
import { createLogger } from '../logger.ts';
import { createMetrics } from '../metrics.ts';
import { buildHttpApp, type App } from './app.ts';

/**
 * The security headers every response carries (the dashboard's policy, see
 * CSP_DIRECTIVES in app.ts), whatever answered: a route, an error, a refusal
 * before routing, an unknown path. The values are helmet 8's for the app's
 * options, written out so that a change to them is a visible decision.
 */
const EXPECTED: Record<string, string> = {
  'content-security-policy':
    "default-src 'self';script-src 'self';style-src 'self' 'unsafe-inline';img-src 'self' data:;connect-src 'self';frame-ancestors 'none';base-uri 'none';form-action 'self';object-src 'none'",
  'cross-origin-opener-policy': 'same-origin',
  'cross-origin-resource-policy': 'same-origin',
  'origin-agent-cluster': '?1',
  'referrer-policy': 'no-referrer',
  'x-content-type-options': 'nosniff',
  'x-dns-prefetch-control': 'off',
  'x-download-options': 'noopen',
  'x-frame-options': 'DENY',
  'x-permitted-cross-domain-policies': 'none',
  'x-xss-protection': '0',
};

describe('security headers', () => {
  const apps: App[] = [];
  afterEach(async () => {
    for (const a of apps.splice(0)) await a.close();
  });
  const app = async () => {
    const a = await buildHttpApp({ log: createLogger({ level: 'silent' }), metrics: createMetrics(), bodyLimit: 1024, version: 't' });
    apps.push(a);
    a.get('/ok', async () => ({ ok: true }));
    a.get('/refused', async () => {
      throw new ApiError('unauthorized', 'no key');
    });
    a.get('/broken', async () => {
      throw new Error('boom');
    });
    a.post('/echo', async (req) => req.body);
    return a;
  };
  const pick = (headers: Record<string, unknown>) => Object.fromEntries(Object.keys(EXPECTED).map((k) => [k, headers[k]]));

  it('are sent on a success, an error, a refusal, a malformed body and an unknown path', async () => {
    const a = await app();
    for (const [req, status] of [
      [{ url: '/ok' }, 200],
      [{ url: '/refused' }, 401],
      [{ url: '/broken' }, 500],
      [{ url: '/echo', method: 'POST', headers: { 'content-type': 'application/json' }, payload: '{"a":' }, 400],
      [{ url: '/nowhere' }, 404],
    ] as const) {
      const res = await a.inject(req as never);
      expect(res.statusCode, JSON.stringify(req)).toBe(status);
      expect(pick(res.headers), JSON.stringify(req)).toEqual(EXPECTED);
      expect(res.headers['strict-transport-security'], 'HSTS belongs to the TLS proxy').toBeUndefined();
      expect(res.headers['cross-origin-embedder-policy']).toBeUndefined();
    }
  });

  it('leave /docs its own policy (it serves its own scripts)', async () => {
    const a = await app();
    await a.ready();
    const res = await a.inject({ url: '/docs/' });
    expect(res.statusCode).toBe(200);
    expect(res.headers['content-security-policy']).not.toBe(EXPECTED['content-security-policy']);
    expect(res.headers['x-content-type-options']).toBe('nosniff');
  });
});
