import { describe, expect, it } from 'vitest';
import { retryAfterSeconds } from '../../shared/http/plugins/rate-limit.ts';
import { WindowCounter, clientAddressKey } from './intake-limits.ts';

describe('WindowCounter', () => {
  it('takes units up to the limit in a window, refuses what does not fit without taking it, and starts afresh after the window', () => {
    const c = new WindowCounter({ max: 10, windowMs: 1000 });
    expect(c.take('a', 8, 0)).toEqual({ ok: true });
    expect(c.take('a', 3, 100)).toEqual({ ok: false, retryAfterMs: 900 });
    // The refused request took nothing: two more still fit.
    expect(c.take('a', 2, 200)).toEqual({ ok: true });
    expect(c.take('a', 1, 999)).toEqual({ ok: false, retryAfterMs: 1 });
    expect(c.take('b', 10, 999)).toEqual({ ok: true });
    expect(c.take('a', 10, 1000)).toEqual({ ok: true });
    expect(c.used('a', 1500)).toBe(10);
    expect(c.used('a', 2000)).toBe(0);
  });

  it('refuses a request larger than the whole budget', () => {
    expect(new WindowCounter({ max: 5 }).take('a', 6, 0).ok).toBe(false);
  });

  it('does not count with a limit of 0', () => {
    const c = new WindowCounter({ max: 0 });
    for (let i = 0; i < 100; i++) expect(c.take('a', 500, i).ok).toBe(true);
    expect(c.used('a', 0)).toBe(0);
  });

  it('forgets the oldest window beyond maxKeys, so memory stays bounded', () => {
    const c = new WindowCounter({ max: 1, maxKeys: 2 });
    c.take('a', 1, 0);
    c.take('b', 1, 1);
    c.take('c', 1, 2);
    expect(c.used('a', 3)).toBe(0);
    expect(c.used('b', 3)).toBe(1);
    expect(c.take('a', 1, 3).ok).toBe(true);
  });

  it('answers Retry-After in whole seconds, at least 1', () => {
    expect(retryAfterSeconds(1)).toBe('1');
    expect(retryAfterSeconds(1001)).toBe('2');
    expect(retryAfterSeconds(0)).toBe('1');
  });
});

describe('clientAddressKey', () => {
  it('counts IPv4 by address and IPv6 by its /64, an IPv4-mapped address as IPv4', () => {
    expect(clientAddressKey('198.51.100.7')).toBe('198.51.100.7');
    expect(clientAddressKey('2001:db8:1:2:aaaa::1')).toBe('2001:db8:1:2::/64');
    expect(clientAddressKey('2001:db8:1:2:ffff:ffff:ffff:ffff')).toBe('2001:db8:1:2::/64');
    expect(clientAddressKey('2001:db8:1:3::1')).not.toBe(clientAddressKey('2001:db8:1:2::1'));
    expect(clientAddressKey('::ffff:198.51.100.7')).toBe('198.51.100.7');
  });
});
