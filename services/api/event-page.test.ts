import { describe, expect, it } from 'vitest';
import { appendDistinct, readDistinct, rowsToFetch, type EventKey } from './event-page.ts';

type Row = EventKey & { copy: number };
const id = (n: number) => `00000000-0000-4000-8000-${String(n).padStart(12, '0')}`;

/** Events 0..n-1, one ms apart except every 5th which ties with the one before, each stored `copies(i)` times. */
function stored(n: number, copies: (i: number) => number): Row[] {
  const rows: Row[] = [];
  for (let i = 0; i < n; i++) {
    const ts = 1_000 + (i % 5 === 4 ? i - 1 : i);
    for (let c = 0; c < copies(i); c++) rows.push({ ts, event_id: id(i), copy: c });
  }
  return rows.sort((a, b) => a.ts - b.ts || a.event_id.localeCompare(b.event_id) || a.copy - b.copy);
}

/** The keyset read of events.repository.ts over `table`, counting reads and rows asked for. */
function reader(table: Row[]) {
  const calls: { after?: { ts: number; id: string }; rows: number }[] = [];
  const read = async (after: { ts: number; id: string } | undefined, rows: number) => {
    calls.push({ after, rows });
    return table.filter((r) => !after || r.ts > after.ts || (r.ts === after.ts && r.event_id > after.id)).slice(0, rows);
  };
  return { read, calls };
}

/** Follows pages of `limit` the way the route does (limit + 1 rows, cursor = last listed). */
async function walk(table: Row[], limit: number): Promise<{ seq: string[]; reads: number }> {
  const { read, calls } = reader(table);
  const seq: string[] = [];
  let after: { ts: number; id: string } | undefined;
  for (;;) {
    const rows = await readDistinct(limit + 1, after, read);
    const items = rows.slice(0, limit);
    seq.push(...items.map((r) => r.event_id));
    const last = items.at(-1);
    if (rows.length <= limit || !last) return { seq, reads: calls.length };
    after = { ts: last.ts, id: last.event_id };
  }
}

describe('event page: copies left by a replay', () => {
  it('asks for twice the rows still missing', () => {
    expect(rowsToFetch(101)).toBe(202);
    expect(rowsToFetch(1)).toBe(2);
  });

  it('skips adjacent copies, also of the last row already on the page', () => {
    const page: Row[] = [{ ts: 1, event_id: id(1), copy: 0 }];
    appendDistinct(page, [
      { ts: 1, event_id: id(1), copy: 1 },
      { ts: 1, event_id: id(2), copy: 0 },
      { ts: 1, event_id: id(2), copy: 1 },
      { ts: 2, event_id: id(2), copy: 0 }, // same id, another time: another event
    ]);
    expect(page.map((r) => [r.ts, r.event_id, r.copy])).toEqual([
      [1, id(1), 0],
      [1, id(2), 0],
      [2, id(2), 0],
    ]);
  });

  it('lists every event once, in order, whatever the page size and number of copies', async () => {
    const expected = stored(60, () => 1).map((r) => r.event_id);
    const layouts: [string, (i: number) => number][] = [
      ['no copies', () => 1],
      ['every event twice', () => 2],
      ['three copies of some', (i) => (i % 3 === 0 ? 3 : 1)],
      ['seven copies of a run', (i) => (i >= 20 && i < 30 ? 7 : 1)],
    ];
    for (const [name, copies] of layouts) {
      const table = stored(60, copies);
      for (const limit of [1, 2, 3, 7, 59, 60, 100]) {
        expect((await walk(table, limit)).seq, `${name}, limit ${limit}`).toEqual(expected);
      }
    }
  });

  it('reads once per page when each event has at most one replayed copy', async () => {
    const { reads } = await walk(stored(60, () => 2), 10);
    expect(reads).toBe(6); // 11 distinct in 22 rows per page; the 6th read returns 20 rows, the end
  });

  it('reads again from after the last row read when copies fill the first read', async () => {
    const { read, calls } = reader(stored(10, () => 5));
    const rows = await readDistinct(3, undefined, read);
    expect(rows.map((r) => r.event_id)).toEqual([id(0), id(1), id(2)]);
    expect(calls[0]).toEqual({ after: undefined, rows: 6 });
    expect(calls[1]).toEqual({ after: { ts: 1_001, id: id(1) }, rows: 2 });
    expect(calls.length).toBe(2);
  });
});
