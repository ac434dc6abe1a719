import { describe, expect, it } from 'vitest';
import { probe } from './ops.routes.ts';

/** A call whose answers the test releases one at a time, counting how often it was made. */
function controlled() {
  const waiting: ((answer: string) => void)[] = [];
  let calls = 0;
  return {
    call: () => {
      calls++;
      return new Promise<string>((resolve) => waiting.push(resolve));
    },
    answer: (a: string) => waiting.shift()!(a),
    get calls() {
      return calls;
    },
  };
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

describe('probe', () => {
  it('makes one call at a time: a check while one is pending waits on it', async () => {
    const c = controlled();
    const p = probe('dep', c.call, { timeoutMs: 1000 });
    const first = p.check();
    const second = p.check();
    c.answer('ok');
    expect(await Promise.all([first, second])).toEqual(['ok', 'ok']);
    expect(c.calls).toBe(1);
    const third = p.check();
    c.answer('error: down');
    expect(await third).toBe('error: down');
    expect(c.calls).toBe(2);
  });

  it('without a grace, a slow answer is an error', async () => {
    const c = controlled();
    const p = probe('dep', c.call, { timeoutMs: 20 });
    const first = p.check();
    c.answer('ok');
    await first;
    expect(await p.check()).toBe('error: timed out after 20 ms');
  });

  it('within the grace, a slow answer repeats the last one; past it, it is an error', async () => {
    const c = controlled();
    const p = probe('dep', c.call, { timeoutMs: 20, graceMs: 300 });
    expect(await p.check()).toBe('error: timed out after 20 ms'); // nothing answered yet
    c.answer('ok');
    await sleep(0);
    const slow = p.check();
    expect(await slow).toBe('ok');
    expect(c.calls).toBe(2);
    await sleep(320);
    expect(await p.check()).toBe('error: timed out after 20 ms');
    expect(c.calls).toBe(2); // still the one pending call
    c.answer('ok'); // the slow call answers at last: the grace starts again from it
    await sleep(0);
    expect(await p.check()).toBe('ok');
    expect(c.calls).toBe(3);
  });

  it('turns a rejection into an error with its message', async () => {
    const p = probe('dep', () => Promise.reject(new Error('connect ECONNREFUSED')));
    expect(await p.check()).toBe('error: connect ECONNREFUSED');
  });
});
