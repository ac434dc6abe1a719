import { Readable } from 'node:stream';
import { drainStream } from '@clickhouse/client';
import type { ClickHouseClient } from './clickhouse.ts';

/** Rows serialized in one turn of the event loop by `insertRows` (about 6 ms for `events` rows). */
export const ROWS_PER_TURN = 2000;

const TABLE_NAME = /^[A-Za-z_][A-Za-z0-9_]*$/;

/** Each serialized row's JSONEachRow line, kept as long as the row itself. */
const lines = new WeakMap<object, string>();

/**
 * Serializes an insert row now, for a later `insertRows`. A consumer does it
 * as it decodes a record, which overlaps the insert in progress, rather than
 * between two inserts. The row must not be changed afterwards: a changed
 * copy (a new object) is serialized when it is inserted.
 */
export function serializeRow<T extends object>(row: T): T {
  lines.set(row, JSON.stringify(row));
  return row;
}

/**
 * Inserts rows into `table` as JSONEachRow: each row's line from
 * `serializeRow`, or serialized here, ROWS_PER_TURN at a time with a turn of
 * the event loop between. The client's `insert` serializes every row in one
 * go: for the 20,000 rows of a full `events` batch that held the event loop
 * for 50-90 ms (docs/performance.md), and the intake and API of the same
 * process waited as long. The body goes as the client's raw values (`exec`);
 * the server or chdb parses it as one insert, all rows or none.
 */
export async function insertRows(client: ClickHouseClient, table: string, rows: readonly object[]): Promise<void> {
  if (!TABLE_NAME.test(table)) throw new Error(`not a table name: ${JSON.stringify(table)}`);
  if (rows.length === 0) return;
  const parts: string[] = [];
  let part = '';
  let serializedHere = 0;
  for (const row of rows) {
    let line = lines.get(row);
    if (line === undefined) {
      line = JSON.stringify(row);
      if (++serializedHere % ROWS_PER_TURN === 0) {
        parts.push(part);
        part = '';
        await new Promise((resolve) => setImmediate(resolve));
      }
    }
    part += `${line}\n`;
  }
  parts.push(part);
  const result = await client.exec({ query: `INSERT INTO ${table} FORMAT JSONEachRow`, values: Readable.from(parts.filter((p) => p.length > 0)) });
  await drainStream(result.stream);
}
