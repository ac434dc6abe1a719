import type { FastifyRequest } from 'fastify';
import { afterEach, describe, expect, it } from 'vitest';
import { createLogger } from '../../logger.ts';
import { createMetrics } from '../../metrics.ts';
import { buildHttpApp, type App } from '../app.ts';
import { ApiError } from '../errors.ts';
import { failedAttemptLimit } from '../failed-attempts.ts';
import type { RateLimitOptions } from './rate-limit.ts';

/**
 * The per-API-key limit (@fastify/rate-limit) and the failed-attempt limit
 * on a real Fastify app through inject(): the problem+json body, Retry-After,
 * the RateLimit headers, and a pluggable store.
 */
const apps: App[] = [];
afterEach(async () => {
  for (const a of apps.splice(0)) await a.close();
});

async function appWith(rateLimit: RateLimitOptions): Promise<App> {
  const app = await buildHttpApp({ log: createLogger({ level: 'silent' }), metrics: createMetrics(), bodyLimit: 1024, version: 't', rateLimit });
  apps.push(app);
  // Stands in for API-key auth: the key is the bearer value itself.
  const auth = async (req: FastifyRequest) => {
    const key = /^Bearer (\S+)$/.exec(req.headers.authorization ?? '')?.[1];
    if (key) req.principal = { tenantId: 't', keyId: key };
  };
  app.get('/limited', { onRequest: auth }, async () => ({ ok: true }));
  return app;
}

describe('per-API-key rate limit', () => {
  it('allows max requests per key with RateLimit headers, then a problem+json 429 with Retry-After; other keys and keyless requests unaffected', async () => {
    const app = await appWith({ max: 3 });
    const hit = (key?: string) => app.inject({ url: '/limited', headers: key ? { authorization: `Bearer ${key}` } : {} });
    const ok = await Promise.all([hit('a'), hit('a'), hit('a')]);
    expect(ok.map((r) => r.statusCode)).toEqual([200, 200, 200]);
    expect(ok.map((r) => r.headers['ratelimit-remaining']).sort()).toEqual(['0', '1', '2']);
    for (const r of ok) {
      expect(r.headers['ratelimit-limit']).toBe('3');
      expect(Number(r.headers['ratelimit-reset'])).toBeGreaterThanOrEqual(1);
    }
    const over = await hit('a');
    expect(over.statusCode).toBe(429);
    expect(over.headers['content-type']).toMatch(/^application\/problem\+json/);
    expect(over.json()).toMatchObject({ type: 'urn:video-analytics:problem:rate_limited', status: 429, detail: expect.stringContaining('3 requests') });
    expect(Number(over.headers['retry-after'])).toBeGreaterThanOrEqual(1);
    expect(Number(over.headers['retry-after'])).toBeLessThanOrEqual(60);
    expect(over.headers['ratelimit-remaining']).toBe('0');

    const other = await hit('b');
    expect(other.statusCode).toBe(200);
    expect(other.headers['ratelimit-remaining']).toBe('2');
    const keyless = await hit();
    expect(keyless.statusCode).toBe(200);
    expect(keyless.headers['ratelimit-limit']).toBeUndefined();
  });

  it('counts in the store it is given (one shared by replicas)', async () => {
    const counts = new Map<string, number>();
    // The shape of @fastify/rate-limit's store interface, as a Redis-backed one would implement it.
    class SharedStore {
      incr(key: string, cb: (err: Error | null, res?: { current: number; ttl: number }) => void) {
        counts.set(key, (counts.get(key) ?? 0) + 1);
        cb(null, { current: counts.get(key)!, ttl: 60_000 });
      }
      child() {
        return this;
      }
    }
    const one = await appWith({ max: 2, store: SharedStore as never });
    const two = await appWith({ max: 2, store: SharedStore as never });
    const hit = (app: App) => app.inject({ url: '/limited', headers: { authorization: 'Bearer shared' } });
    expect((await hit(one)).statusCode).toBe(200);
    expect((await hit(two)).statusCode).toBe(200);
    // The third request of the key is refused by whichever replica gets it.
    expect((await hit(one)).statusCode).toBe(429);
    expect(counts.get('key:shared')).toBe(3);
  });
});

describe('failed-attempt limit', () => {
  it('refuses wrong credentials with 429 once over the limit, and still accepts the right one', async () => {
    const app = await appWith({ max: 1000 });
    const failures = failedAttemptLimit(app, { name: 'test-auth', max: 2, windowMs: 60_000 });
    app.get('/guarded', async (req) => {
      if (req.headers['x-secret'] === 'right') return { ok: true };
      return failures.refuse(req, new ApiError('unauthorized', 'wrong secret'));
    });
    const tryWith = (secret: string, ip = '10.0.0.1') => app.inject({ url: '/guarded', headers: { 'x-secret': secret }, remoteAddress: ip });
    expect((await tryWith('no')).statusCode).toBe(401);
    expect((await tryWith('no')).statusCode).toBe(401);
    const limited = await tryWith('no');
    expect(limited.statusCode).toBe(429);
    expect(limited.json()).toMatchObject({ status: 429 });
    expect(Number(limited.headers['retry-after'])).toBeGreaterThanOrEqual(1);
    // The right credential is never locked out, from the same address either.
    expect((await tryWith('right')).statusCode).toBe(200);
    // Another address has its own count.
    expect((await tryWith('no', '10.0.0.2')).statusCode).toBe(401);
  });
});
