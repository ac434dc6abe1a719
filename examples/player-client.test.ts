// The example player's retry rules, pure; test/idempotent-intake.test.ts
// drives the same client against the real stack through a lossy proxy.
import { describe, expect, it } from 'vitest';
import { nextStep, retryAfterMs, type RetryPolicy } from './player-client.ts';

const policy: RetryPolicy = { maxAttempts: 4, baseDelayMs: 500, maxDelayMs: 3000 };
const top = () => 0.999999; // the highest wait full jitter can pick
const bottom = () => 0;

describe('example player: what follows an attempt', () => {
  it('is done on 2xx', () => {
    expect(nextStep({ status: 202 }, 1, policy)).toEqual({ kind: 'done' });
  });

  it.each([503, 429, 408, 500, 502, 504, 599])('resends after %i', (status) => {
    expect(nextStep({ status }, 1, policy, top)).toMatchObject({ kind: 'retry', reason: `status ${status}` });
  });

  it.each(['network', 'timeout'] as const)('resends after a %s failure (the events may have been recorded)', (error) => {
    expect(nextStep({ error }, 1, policy, top)).toMatchObject({ kind: 'retry', reason: error });
  });

  it.each([400, 401, 403, 404, 413, 415, 422])('does not resend a body refused with %i', (status) => {
    expect(nextStep({ status }, 1, policy)).toEqual({ kind: 'rejected', status });
  });

  it('backs off exponentially with full jitter up to the cap', () => {
    const waits = [1, 2, 3].map((attempt) => (nextStep({ status: 503 }, attempt, { ...policy, maxAttempts: 10 }, top) as { delayMs: number }).delayMs);
    expect(waits).toEqual([499, 999, 1999]);
    expect((nextStep({ status: 503 }, 8, { ...policy, maxAttempts: 10 }, top) as { delayMs: number }).delayMs).toBe(2999);
    expect((nextStep({ status: 503 }, 3, policy, bottom) as { delayMs: number }).delayMs).toBe(0);
  });

  it('never resends sooner than Retry-After', () => {
    expect(nextStep({ status: 503, retryAfter: '5' }, 1, policy, bottom)).toMatchObject({ kind: 'retry', delayMs: 5000 });
    const now = Date.UTC(2026, 0, 1);
    expect(nextStep({ status: 429, retryAfter: new Date(now + 7000).toUTCString() }, 1, policy, bottom, now)).toMatchObject({ delayMs: 7000 });
  });

  it('gives up after the last attempt (the collector queues the events again, ids unchanged)', () => {
    expect(nextStep({ status: 503 }, 4, policy)).toEqual({ kind: 'give_up', reason: 'status 503' });
    expect(nextStep({ error: 'timeout' }, 4, policy)).toEqual({ kind: 'give_up', reason: 'timeout' });
  });

  it('reads Retry-After as seconds or an HTTP date, and ignores anything else', () => {
    expect(retryAfterMs('3')).toBe(3000);
    expect(retryAfterMs(' 0 ')).toBe(0);
    expect(retryAfterMs('Wed, 21 Oct 2015 07:28:00 GMT', Date.parse('Wed, 21 Oct 2015 07:27:00 GMT'))).toBe(60_000);
    expect(retryAfterMs('Wed, 21 Oct 2015 07:28:00 GMT', Date.parse('Wed, 21 Oct 2015 08:00:00 GMT'))).toBe(0);
    expect(retryAfterMs('soon')).toBeUndefined();
    expect(retryAfterMs('-1')).toBeUndefined();
    expect(retryAfterMs(null)).toBeUndefined();
  });
});
