import { createRequire } from 'node:module';
import type { FastifyInstance, FastifyRequest } from 'fastify';
import fp from 'fastify-plugin';
import rateLimit, { type RateLimitPluginOptions } from '@fastify/rate-limit';
import { ApiError } from '../errors.ts';

/**
 * The per-API-key limit (spec 8: RATE_LIMIT_PER_MINUTE requests a minute per
 * key) on @fastify/rate-limit. Keyed by the API key the request was
 * authenticated with (req.principal, set by the API-key auth that runs
 * earlier); requests without an API key (player intake, management API,
 * dashboard) are not counted. Fixed one-minute windows.
 */
export interface RateLimitOptions {
  /** Requests a minute per API key. */
  max: number;
  /**
   * A store shared by the replicas (the plugin's `store` class or `redis`
   * client option); in memory when absent, so the limit then holds per process.
   */
  store?: RateLimitPluginOptions['store'];
  redis?: RateLimitPluginOptions['redis'];
}

type Counter = { current: number; ttl: number };
type CounterCallback = (err: Error | null, res?: Counter) => void;
interface LocalStoreLike {
  incr(key: string, cb: CounterCallback, timeWindow: number, max: number): void;
  read(key: string, cb: CounterCallback, timeWindow: number, max: number): void;
}
const LocalStore = createRequire(import.meta.url)('@fastify/rate-limit/store/LocalStore.js') as new (
  continueExceeding?: boolean,
  exponentialBackoff?: boolean,
  cache?: number,
) => LocalStoreLike;

/** Keys counted at once in memory (least recently used beyond that start afresh). */
const MEMORY_KEYS = 100_000;

/**
 * The plugin's in-memory store, answering a copy of the counter.
 *
 * NOTE: @fastify/rate-limit's LocalStore passes its live counter object to
 * the callback and the plugin reads it only after an await, so requests of
 * one key that arrive together all read the latest count: concurrent
 * requests would all see the remaining count of the last one, and the
 * request that reached the limit exactly could be refused along with the
 * one after it (the test beside this file).
 */
export class SnapshotLocalStore {
  readonly #inner: LocalStoreLike;

  constructor(opts: { continueExceeding?: boolean; exponentialBackoff?: boolean } = {}) {
    this.#inner = new LocalStore(opts.continueExceeding, opts.exponentialBackoff, MEMORY_KEYS);
  }

  incr(key: string, cb: CounterCallback, timeWindow: number, max: number): void {
    this.#inner.incr(key, (err, res) => cb(err, res && { current: res.current, ttl: res.ttl }), timeWindow, max);
  }

  read(key: string, cb: CounterCallback, timeWindow: number, max: number): void {
    this.#inner.read(key, (err, res) => cb(err, res && { current: res.current, ttl: res.ttl }), timeWindow, max);
  }

  child(opts: { continueExceeding?: boolean; exponentialBackoff?: boolean }): SnapshotLocalStore {
    return new SnapshotLocalStore(opts);
  }
}

/** Whole seconds for Retry-After, at least 1, from the milliseconds left in a window. */
export const retryAfterSeconds = (ms: number): string => String(Math.max(1, Math.ceil(ms / 1000)));

async function apiKeyRateLimitPlugin(app: FastifyInstance, opts: RateLimitOptions): Promise<void> {
  await app.register(rateLimit, {
    global: true,
    max: opts.max,
    timeWindow: 60_000,
    // NOTE: after the auth hooks (onRequest, and the conversion intake's
    // preValidation, which run first on a route), before validation: a
    // refused body still counts, as every request of the key does.
    hook: 'preValidation',
    ...(opts.redis ? { redis: opts.redis } : { store: opts.store ?? (SnapshotLocalStore as unknown as RateLimitPluginOptions['store']) }),
    allowList: (req: FastifyRequest) => !req.principal,
    // NOTE: the key is computed before allowList is asked, so it must not assume a principal.
    keyGenerator: (req: FastifyRequest) => (req.principal ? `key:${req.principal.keyId}` : 'none'),
    // IETF RateLimit draft headers on every limited response, Retry-After on a 429.
    enableDraftSpec: true,
    errorResponseBuilder: (_req, ctx) => {
      return new ApiError('rate_limited', `more than ${ctx.max} requests this minute for this API key`, { headers: { 'Retry-After': retryAfterSeconds(ctx.ttl) } });
    },
  });
}

export const apiKeyRateLimit = fp(apiKeyRateLimitPlugin, { name: 'api-key-rate-limit', fastify: '5.x' });
