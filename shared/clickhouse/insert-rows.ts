import { Readable } from 'node:stream';
import { drainStream } from '@clickhouse/client';
import { eventLoopSlices, type TimeSlices } from '../time-slices.ts';
import type { ClickHouseClient } from './clickhouse.ts';

const IDENTIFIER = /^[A-Za-z_][A-Za-z0-9_]*$/;

export interface InsertRowsOptions {
  /**
   * The row's columns, in the order of the values of each line: the rows go
   * as JSONCompactEachRow (one JSON array per row) instead of JSONEachRow
   * objects. The engine parses arrays faster than objects (no key lookups),
   * and an array is less work than JSON.stringify of an object. A row serialized here must have no other keys.
   */
  columns?: readonly string[];
  /** Time between turns of the event loop while rows are serialized here (default: the process's eventLoopSlices). */
  slices?: TimeSlices;
}

/**
 * Inserts rows into `table`: as JSONEachRow, or as JSONCompactEachRow in the
 * order of `columns` when given. The rows are serialized here in the
 * process's slices of the event loop, as the consumers decode
 * (time-slices.ts). The client's `insert` serializes every row in one go,
 * which for a full `events` batch holds the event loop long enough to delay
 * the intake and API of the same process. A consumer that serializes its rows as it decodes their
 * records, overlapping the insert in progress, sends them with insertLines.
 */
export async function insertRows(client: ClickHouseClient, table: string, rows: readonly object[], opts: InsertRowsOptions = {}): Promise<void> {
  const { columns, slices = eventLoopSlices } = opts;
  checkNames(table, columns);
  if (rows.length === 0) return;
  const serialize = columns ? compactLine(columns) : (row: object) => JSON.stringify(row);
  const lines: string[] = [];
  for (const row of rows) {
    if (slices.due) await slices.next();
    lines.push(serialize(row));
  }
  await insertLines(client, table, lines, columns);
}

/**
 * Inserts rows serialized ahead, one line each: JSONCompactEachRow arrays of
 * `columns`' values when given, else JSONEachRow objects. The body goes as
 * the client's raw values (`exec`); the server or chdb parses it as one
 * insert, all rows or none.
 */
export async function insertLines(client: ClickHouseClient, table: string, lines: readonly string[], columns?: readonly string[]): Promise<void> {
  checkNames(table, columns);
  if (lines.length === 0) return;
  let body = '';
  for (const line of lines) body += `${line}\n`;
  // NOTE: no bound on the partitions one insert touches. The engine's
  // default (100) guards against a wrong partition key; ours are months of
  // an event's time, and a batch replayed from an old log can span years.
  // Refused, such a batch could never be inserted, however often retried.
  const settings = 'SETTINGS max_partitions_per_insert_block = 0';
  const query = columns
    ? `INSERT INTO ${table} (${columns.join(', ')}) ${settings} FORMAT JSONCompactEachRow`
    : `INSERT INTO ${table} ${settings} FORMAT JSONEachRow`;
  const result = await client.exec({ query, values: Readable.from([body]) });
  await drainStream(result.stream);
}

function checkNames(table: string, columns: readonly string[] | undefined): void {
  if (!IDENTIFIER.test(table)) throw new Error(`not a table name: ${JSON.stringify(table)}`);
  const bad = columns?.find((c) => !IDENTIFIER.test(c));
  if (bad !== undefined) throw new Error(`not a column name: ${JSON.stringify(bad)}`);
}

/** A row as a JSON array of its `columns`' values; a key outside them is refused rather than dropped. */
function compactLine(columns: readonly string[]): (row: object) => string {
  const known = new Set(columns);
  return (row) => {
    const values = row as Record<string, unknown>;
    for (const key of Object.keys(values)) {
      if (!known.has(key)) throw new Error(`row has a column not in the insert's list: ${JSON.stringify(key)}`);
    }
    return JSON.stringify(columns.map((c) => values[c]));
  };
}
