import { describe, expect, it } from 'vitest';
import { FixedWindowRateLimiter } from './rate-limit.ts';

describe('fixed-window rate limiter', () => {
  it('allows the limit, refuses the next, resets after the window', () => {
    let now = 1_000_000;
    const rl = new FixedWindowRateLimiter({ limit: 3, windowMs: 60_000, now: () => now });
    expect([1, 2, 3].map(() => rl.hit('k').allowed)).toEqual([true, true, true]);
    now += 45_500;
    const refused = rl.hit('k');
    expect(refused).toEqual({ allowed: false, limit: 3, remaining: 0, resetSeconds: 15 });
    expect(rl.hit('other').allowed).toBe(true);
    now += 14_500;
    expect(rl.hit('k')).toMatchObject({ allowed: true, remaining: 2, resetSeconds: 60 });
  });

  it('emits the RateLimit headers', () => {
    const rl = new FixedWindowRateLimiter({ limit: 1000, now: () => 0 });
    expect(rl.headers(rl.hit('k'))).toEqual({
      'RateLimit-Limit': '1000',
      'RateLimit-Remaining': '999',
      'RateLimit-Reset': '60',
      'RateLimit-Policy': '1000;w=60',
    });
  });
});
