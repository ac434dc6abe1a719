import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { checkWithin } from './property.ts';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

describe('checkWithin', () => {
  it('returns only after the run in flight at the time limit has settled', async () => {
    let started = 0;
    let finished = 0;
    await checkWithin(fc.nat(), async () => {
      started++;
      await sleep(100);
      finished++;
    }, { numRuns: 1000, timeLimitMs: 350 });
    expect(started).toBeLessThan(1000); // the limit, not the number of runs, ended it
    expect(finished).toBe(started);
  });

  it('fails with the error of the run in flight at the time limit', async () => {
    // checkWithin's limit starts a little after this deadline. A run that
    // failed between the two would be a plain property failure (whose message
    // fast-check 4 leaves the error out of), so the run that passes the
    // deadline holds on until the limit has come.
    const deadline = Date.now() + 350;
    await expect(
      checkWithin(fc.nat(), async () => {
        await sleep(100);
        if (Date.now() <= deadline) return;
        await sleep(250);
        throw new Error('failed after the limit');
      }, { numRuns: 1000, timeLimitMs: 350 }),
    ).rejects.toThrow('failed after the limit');
  });

  it('fails as fc.assert does when a run fails before the limit', async () => {
    await expect(checkWithin(fc.nat(), async (n) => expect(n).toBeLessThan(0), { numRuns: 5 })).rejects.toThrow(/Property failed/);
  });
});
