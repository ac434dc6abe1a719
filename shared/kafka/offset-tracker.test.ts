import { describe, expect, it } from 'vitest';
import { OffsetTracker } from './offset-tracker.ts';

describe('offset tracker', () => {
  it('commits only past a contiguous prefix of finished offsets', () => {
    const t = new OffsetTracker();
    for (const o of ['10', '11', '12']) t.start('t', 0, o);
    expect(t.inFlight).toBe(3);
    expect(t.finish('t', 0, '11')).toBeUndefined(); // 10 still pending
    expect(t.finish('t', 0, '10')).toBe('12'); // 10 and 11 done: next to read is 12
    expect(t.finish('t', 0, '12')).toBe('13');
    expect(t.inFlight).toBe(0);
  });

  it('keeps partitions apart and never moves backwards', () => {
    const t = new OffsetTracker();
    t.start('t', 0, '5');
    t.start('t', 1, '7');
    expect(t.finish('t', 1, '7')).toBe('8');
    expect(t.finish('t', 1, '7')).toBeUndefined();
    expect(t.finish('t', 0, '5')).toBe('6');
  });
});
