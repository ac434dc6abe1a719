import type { FastifyInstance, FastifyRequest } from 'fastify';
import { ApiError } from './errors.ts';

export interface FailedAttemptLimit {
  /**
   * Counts one failed attempt of the request's client and throws: 429 with
   * Retry-After once the client is over the limit, else `refusal`.
   */
  refuse(req: FastifyRequest, refusal: ApiError): Promise<never>;
}

/**
 * A limit on failed credential checks per client address (req.ip, which
 * honours TRUST_PROXY), on @fastify/rate-limit's store (`createRateLimit`),
 * so a shared store limits across replicas too.
 *
 * Only failures count, and only a wrong credential is refused once a client
 * is over the limit: the right one is always accepted, so nobody can lock the
 * admin out by failing on purpose (from the admin's address, or from the
 * proxy's when TRUST_PROXY is not set). What bounds guessing is the token
 * itself (a generated admin token has 256 bits; a configured one at least 16
 * characters); the limit turns a guessing run into 429s that show in the
 * request metrics.
 */
export function failedAttemptLimit(app: Pick<FastifyInstance, 'createRateLimit'>, opts: { name: string; max: number; windowMs: number }): FailedAttemptLimit {
  const limiter = app.createRateLimit({
    max: opts.max,
    timeWindow: opts.windowMs,
    keyGenerator: (req) => `${opts.name}:${req.ip}`,
    // Every client counts (the API-key limit's allowList would skip requests without an API key).
    allowList: () => false,
  });
  return {
    async refuse(req, refusal) {
      const result = await limiter(req);
      if (!result.isAllowed && result.isExceeded) {
        const retryAfter = String(Math.max(1, result.ttlInSeconds));
        throw new ApiError('rate_limited', `too many failed attempts from this address; wait ${retryAfter} s`, { headers: { 'Retry-After': retryAfter } });
      }
      throw refusal;
    },
  };
}
