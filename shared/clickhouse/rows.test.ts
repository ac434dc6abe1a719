import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { chInt, chNullableInt, parseRows } from './rows.ts';

describe('ClickHouse row parsing', () => {
  it('reads integers written as numbers or as strings of digits', () => {
    expect(chInt.parse(42)).toBe(42);
    expect(chInt.parse('1700000000000')).toBe(1_700_000_000_000);
    expect(chInt.parse('-3')).toBe(-3);
    expect(chNullableInt.parse(null)).toBeNull();
  });

  it('refuses what Number() would have turned into NaN, 0 or a rounded value', () => {
    for (const bad of ['', ' ', 'abc', '1.5', 1.5, '9007199254740993', null, undefined, true, '0x10']) {
      expect(chInt.safeParse(bad).success, String(bad)).toBe(false);
    }
  });

  it('names the query and the bad field', () => {
    const Row = z.object({ id: z.string(), n: chInt });
    expect(parseRows('q', Row, [{ id: 'a', n: '1' }])).toEqual([{ id: 'a', n: 1 }]);
    expect(() => parseRows('video stats', Row, [{ id: 'a', n: '1' }, { id: 'b' }])).toThrow(/video stats: row 1\.n/);
  });
});
