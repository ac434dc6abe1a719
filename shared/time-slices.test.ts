import { setImmediate as nextTurn } from 'node:timers/promises';
import { describe, expect, it } from 'vitest';
import { TimeSlices } from './time-slices.ts';

/** Keeps the thread busy for `ms` (the work of one record, say). */
function busy(ms: number): void {
  const end = performance.now() + ms;
  while (performance.now() < end);
}

describe('TimeSlices', () => {
  it('shares one slice between concurrent loops: a turn of the event loop after every slice, not after each loop’s own', async () => {
    const slices = new TimeSlices(10);
    const trace: string[] = [];
    let ticking = true;
    // One mark per turn of the event loop (its check phase).
    const ticker = (async () => {
      while (ticking) {
        trace.push('|');
        await nextTurn();
      }
    })();
    const loop = async (name: string) => {
      for (let i = 0; i < 12; i++) {
        if (slices.due) await slices.next();
        busy(4);
        trace.push(name);
      }
    };
    await Promise.all([loop('a'), loop('b'), loop('c')]);
    ticking = false;
    await ticker;

    expect(trace.filter((t) => t !== '|')).toHaveLength(36);
    // A slice of 10 ms holds at most three 4-ms items (it is checked before
    // each); a slice per loop would put up to nine between two turns.
    const between = trace.join('').split('|').map((s) => s.length);
    expect(Math.max(...between)).toBeLessThanOrEqual(3);
    // Every loop got slices, not one loop all of them first.
    const firstOf = (name: string) => trace.indexOf(name);
    const lastOf = (name: string) => trace.lastIndexOf(name);
    expect(Math.max(firstOf('a'), firstOf('b'), firstOf('c'))).toBeLessThan(Math.min(lastOf('a'), lastOf('b'), lastOf('c')));
  });

  it('lets a loop run on while its slice lasts', async () => {
    const slices = new TimeSlices(60_000);
    await slices.next();
    let turns = 0;
    for (let i = 0; i < 1000; i++) if (slices.due) (await slices.next(), turns++);
    expect(turns).toBe(0);
    expect(new TimeSlices(0).due).toBe(true);
  });

  it('makes a slice as long as the rest of the loop took since the last one, between its bounds', async () => {
    let t = 1000;
    const slices = new TimeSlices(10, 40, () => t);
    const sliceAfter = async (otherMs: number): Promise<number> => {
      const turn = slices.next();
      t += otherMs; // the rest of the loop (requests, say) runs during the turn
      await turn;
      const start = t;
      while (!slices.due) t += 1;
      return t - start;
    };
    expect(await sliceAfter(30)).toBe(30);
    expect(await sliceAfter(2)).toBe(10);
    expect(await sliceAfter(100)).toBe(40);
    expect(await sliceAfter(17)).toBe(17);
  });
});
