import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { chTime, chTimeOf, createClickHouse, type ClickHouseClient } from './clickhouse.ts';
import { loopTurns, mostPerTurn } from '../../test/helpers/loop-turns.ts';
import { TimeSlices } from '../time-slices.ts';
import { insertLines, insertRows } from './insert-rows.ts';

describe('chTime', () => {
  it('formats every millisecond as the reference (Date.toISOString) does, in any order of calls', () => {
    const ms = fc.oneof(
      fc.integer({ min: 0, max: 253_402_300_799_999 }),
      fc.integer({ min: 1_700_000_000_000, max: 1_700_000_010_000 }), // a few seconds: the cached prefixes are hit
      fc.double({ min: -1e13, max: 3e14, noNaN: true }), // fractions, negatives, years past 9999: the reference path
    );
    fc.assert(
      fc.property(fc.array(ms, { minLength: 1, maxLength: 50 }), (list) => {
        for (const m of list) expect(chTime(m)).toBe(chTimeOf(m));
      }),
      { numRuns: 500 },
    );
  });

  it('pads the fraction and keeps the second of the call, not of the cache', () => {
    expect(chTime(1_700_000_000_005)).toBe('2023-11-14 22:13:20.005');
    expect(chTime(1_700_000_001_050)).toBe('2023-11-14 22:13:21.050');
    expect(chTime(1_700_000_000_999)).toBe('2023-11-14 22:13:20.999');
    expect(chTime(1_700_000_002_000)).toBe('2023-11-14 22:13:22.000');
    expect(chTime(0)).toBe('1970-01-01 00:00:00.000');
  });
});

describe('insertRows (embedded ClickHouse)', () => {
  let dir: string;
  let ch: ClickHouseClient;

  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'va-insert-rows-'));
    ch = (await createClickHouse({ dataDir: dir })).client;
    await ch.command({
      query: `CREATE TABLE t (id UInt32, name String, note Nullable(String), at DateTime64(3, 'UTC')) ENGINE = MergeTree ORDER BY id`,
    });
  });

  afterAll(async () => {
    await ch?.close();
    rmSync(dir, { recursive: true, force: true });
  });

  const read = async () => {
    const rs = await ch.query({ query: 'SELECT id, name, note, toString(at) AS at FROM t WHERE id < 1000 ORDER BY id', format: 'JSONEachRow' });
    return rs.json<{ id: number; name: string; note: string | null; at: string }>();
  };

  it('inserts every row as it is, text that needs escaping included', async () => {
    await insertRows(ch, 't', [
      { id: 1, name: 'tab\there "quoted" \\ ünïcode', note: null, at: chTime(1_700_000_000_123) },
      { id: 2, name: 'line', note: 'x\ny', at: chTime(1_700_000_000_000) },
      { id: 3, name: '', note: '', at: chTime(1_700_000_000_999) },
    ]);
    expect(await read()).toEqual([
      { id: 1, name: 'tab\there "quoted" \\ ünïcode', note: null, at: '2023-11-14 22:13:20.123' },
      { id: 2, name: 'line', note: 'x\ny', at: '2023-11-14 22:13:20.000' },
      { id: 3, name: '', note: '', at: '2023-11-14 22:13:20.999' },
    ]);
  });

  it('insertLines inserts lines serialized ahead as they are, in either format', async () => {
    const row = (id: number, name: string) => ({ id, name, note: null, at: chTime(1_700_000_000_000 + id) });
    await insertLines(ch, 't', [JSON.stringify(row(4, 'as decoded')), JSON.stringify({ ...row(5, 'x'), name: 'the line, not its row' })]);
    await insertLines(ch, 't', [JSON.stringify([6, 'compact', 'n', chTime(1_700_000_000_006)])], ['id', 'name', 'note', 'at']);
    expect((await read()).filter((r) => r.id >= 4)).toEqual([
      { id: 4, name: 'as decoded', note: null, at: '2023-11-14 22:13:20.004' },
      { id: 5, name: 'the line, not its row', note: null, at: '2023-11-14 22:13:20.005' },
      { id: 6, name: 'compact', note: 'n', at: '2023-11-14 22:13:20.006' },
    ]);
  });

  it('serializes rows in slices of the event loop, with turns between them, and inserts the batch whole', async () => {
    const n = 400;
    const turns = loopTurns();
    const serializedIn: number[] = [];
    const rows = Array.from({ length: n }, (_, i) => ({
      toJSON: () => {
        serializedIn.push(turns.count);
        const until = performance.now() + 0.05; // 0.05 ms of work per row
        while (performance.now() < until);
        return { id: 1000 + i, name: `r${i}`, note: null, at: chTime(1_700_000_000_000 + i) };
      },
    }));
    // 2-ms slices: about 40 rows between turns; all 400 in one turn without them.
    await insertRows(ch, 't', rows, { slices: new TimeSlices(2) }).finally(() => turns.stop());
    expect(serializedIn).toHaveLength(n);
    expect(mostPerTurn(serializedIn)).toBeLessThan(n / 4);
    const rs = await ch.query({ query: 'SELECT toString(count()) AS c, toString(min(id)) AS lo, toString(max(id)) AS hi, toString(uniqExact(name)) AS u FROM t WHERE id >= 1000', format: 'JSONEachRow' });
    expect((await rs.json())[0]).toEqual({ c: String(n), lo: '1000', hi: String(1000 + n - 1), u: String(n) });
  });

  it('sends nothing for no rows and refuses a table name that is not an identifier', async () => {
    await insertRows(ch, 't', []);
    expect(await read()).toHaveLength(6);
    await insertLines(ch, 't', []);
    await expect(insertRows(ch, 't; DROP TABLE t', [{ id: 9 }])).rejects.toThrow(/not a table name/);
    await expect(insertLines(ch, 't; DROP TABLE t', ['{"id":9}'])).rejects.toThrow(/not a table name/);
    expect(await read()).toHaveLength(6);
  });

  it('with columns, sends each line as an array of their values in their order', async () => {
    const columns = ['id', 'name', 'note', 'at'] as const;
    const asLine = (r: { id: number; name: string; note: string | null; at: string }) => JSON.stringify(columns.map((c) => r[c]));
    const first = { id: 20, name: 'tab\there "quoted" \\ ünïcode', note: null, at: chTime(1_700_000_000_020) };
    const second = { id: 21, name: 'line', note: 'x\ny', at: chTime(1_700_000_000_021) };
    // Keys in another order than the columns: the values still go in the columns' order.
    const reordered = { at: chTime(1_700_000_000_022), note: 'n', name: 'reordered', id: 22 };
    await insertLines(ch, 't', [asLine(first), asLine(second), asLine(reordered)], columns);
    expect((await read()).filter((r) => r.id >= 20)).toEqual([
      { id: 20, name: 'tab\there "quoted" \\ ünïcode', note: null, at: '2023-11-14 22:13:20.020' },
      { id: 21, name: 'line', note: 'x\ny', at: '2023-11-14 22:13:20.021' },
      { id: 22, name: 'reordered', note: 'n', at: '2023-11-14 22:13:20.022' },
    ]);
  });

  it('with columns, refuses a column that is not an identifier, inserting nothing', async () => {
    const before = (await read()).length;
    await expect(insertLines(ch, 't', ['[31]'], ['id) SELECT 1 --'])).rejects.toThrow(/not a column name/);
    expect(await read()).toHaveLength(before);
  });

  it('inserts a batch spanning more month partitions than the engine allows by default (a replay of years)', async () => {
    await ch.command({ query: `CREATE TABLE monthly (id UInt32, at DateTime64(3, 'UTC')) ENGINE = MergeTree PARTITION BY toYYYYMM(at) ORDER BY id` });
    const lines = Array.from({ length: 150 }, (_, i) => JSON.stringify([i, chTime(Date.UTC(2005, i, 15))]));
    await insertLines(ch, 'monthly', lines, ['id', 'at']);
    const [row] = await (await ch.query({ query: 'SELECT count() AS n, uniqExact(toYYYYMM(at)) AS months FROM monthly', format: 'JSONEachRow' })).json<{ n: string; months: string }>();
    expect({ n: Number(row!.n), months: Number(row!.months) }).toEqual({ n: 150, months: 150 });
  });

  it('fails the call when ClickHouse refuses a row, inserting none of the batch', async () => {
    await expect(insertRows(ch, 't', [{ id: 10, name: 'ok', note: null, at: chTime(0) }, { id: 'eleven', name: 'bad' }])).rejects.toThrow();
    expect((await read()).map((r) => r.id)).toEqual([1, 2, 3, 4, 5, 6, 20, 21, 22]);
  });
});
