import { describe, expect, it } from 'vitest';
import { delayFor, retry, sleep, type Schedule } from './retry.ts';

/** A fake clock whose sleep moves time on at once and records each wait. */
function fakeClock() {
  let t = 0;
  const waits: number[] = [];
  return {
    waits,
    now: () => t,
    sleep: async (ms: number) => {
      waits.push(ms);
      t += ms;
    },
  };
}

/** A function that fails `failures` times with `err`, then answers 'ok'. */
function failing(failures: number, err: unknown = new Error('down')) {
  let calls = 0;
  const fn = async () => {
    calls++;
    if (calls <= failures) throw err;
    return 'ok';
  };
  return { fn, calls: () => calls };
}

describe('delayFor', () => {
  it('doubles from the initial wait up to the cap', () => {
    const s: Schedule = { initialMs: 250, maxMs: 10_000 };
    expect([1, 2, 3, 4, 5, 6, 7, 50, 5000].map((n) => delayFor(s, n))).toEqual([250, 500, 1000, 2000, 4000, 8000, 10_000, 10_000, 10_000]);
  });

  it('takes the factor of the schedule', () => {
    expect([1, 2, 3].map((n) => delayFor({ initialMs: 100, maxMs: 1e6, factor: 3 }, n))).toEqual([100, 300, 900]);
  });

  it('takes off up to the jitter share at random, never more', () => {
    const s: Schedule = { initialMs: 1000, maxMs: 1000, jitter: 0.5 };
    expect(delayFor(s, 1, () => 0)).toBe(1000);
    expect(delayFor(s, 1, () => 0.999)).toBeCloseTo(500.5);
    expect(delayFor({ ...s, jitter: 1 }, 1, () => 0.5)).toBe(500);
  });
});

describe('retry', () => {
  it('retries until the function succeeds, waiting by the schedule', async () => {
    const clock = fakeClock();
    const f = failing(3);
    const retries: number[] = [];
    await expect(retry(f.fn, { schedule: { initialMs: 100, maxMs: 250 }, ...clock, onRetry: (_e, n, ms) => retries.push(n, ms) })).resolves.toBe('ok');
    expect(f.calls()).toBe(4);
    expect(clock.waits).toEqual([100, 200, 250]);
    expect(retries).toEqual([1, 100, 2, 200, 3, 250]);
  });

  it('throws at once an error that is not retryable', async () => {
    const clock = fakeClock();
    const err = new Error('for good');
    const f = failing(5, err);
    await expect(retry(f.fn, { schedule: { initialMs: 100, maxMs: 100 }, ...clock, isRetryable: (e) => e !== err })).rejects.toBe(err);
    expect(f.calls()).toBe(1);
    expect(clock.waits).toEqual([]);
  });

  it('gives up with the last error once the next retry would start after giveUpAfterMs', async () => {
    const clock = fakeClock();
    const f = failing(100);
    await expect(retry(f.fn, { schedule: { initialMs: 100, maxMs: 1000, giveUpAfterMs: 1000 }, ...clock })).rejects.toThrow('down');
    // 100 + 200 + 400 = 700; the next wait (800) would end at 1500.
    expect(clock.waits).toEqual([100, 200, 400]);
    expect(f.calls()).toBe(4);
  });

  it('stops when its signal is aborted during a wait, throwing the last error', async () => {
    const controller = new AbortController();
    const f = failing(100);
    const started = Date.now();
    const done = retry(f.fn, { schedule: { initialMs: 60_000, maxMs: 60_000 }, signal: controller.signal });
    setTimeout(() => controller.abort(), 20);
    await expect(done).rejects.toThrow('down');
    expect(Date.now() - started).toBeLessThan(5000);
    expect(f.calls()).toBe(1);
  });

  it('makes no retry once its signal is aborted', async () => {
    const controller = new AbortController();
    controller.abort();
    const clock = fakeClock();
    const f = failing(1);
    await expect(retry(f.fn, { schedule: { initialMs: 100, maxMs: 100 }, signal: controller.signal, ...clock })).rejects.toThrow('down');
    expect(clock.waits).toEqual([]);
  });
});

describe('sleep', () => {
  it('waits the time given', async () => {
    const started = performance.now();
    await sleep(30);
    expect(performance.now() - started).toBeGreaterThanOrEqual(25);
  });

  it('ends early when its signal is aborted', async () => {
    const controller = new AbortController();
    const started = performance.now();
    setTimeout(() => controller.abort(), 10);
    await sleep(60_000, controller.signal);
    expect(performance.now() - started).toBeLessThan(5000);
  });
});
