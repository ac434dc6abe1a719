import { Readable } from 'node:stream';
import { drainStream } from '@clickhouse/client';
import { eventLoopSlices, type TimeSlices } from '../time-slices.ts';
import type { ClickHouseClient } from './clickhouse.ts';

const IDENTIFIER = /^[A-Za-z_][A-Za-z0-9_]*$/;

export interface InsertRowsOptions {
  /** Time between turns of the event loop while rows are serialized here (default: the process's eventLoopSlices). */
  slices?: TimeSlices;
}

/**
 * Inserts rows into `table` as JSONEachRow. The rows are serialized here in
 * the process's slices of the event loop, as the consumers decode
 * (time-slices.ts). The client's `insert` serializes every row in one go,
 * which for a full batch holds the event loop long enough to delay the
 * intake and API of the same process. A consumer that serializes its rows
 * as it decodes their records, overlapping the insert in progress, sends
 * them with insertLines.
 */
export async function insertRows(client: ClickHouseClient, table: string, rows: readonly object[], opts: InsertRowsOptions = {}): Promise<void> {
  const { slices = eventLoopSlices } = opts;
  checkNames(table);
  if (rows.length === 0) return;
  const lines: string[] = [];
  for (const row of rows) {
    if (slices.due) await slices.next();
    lines.push(JSON.stringify(row));
  }
  await insertLines(client, table, lines);
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

function checkNames(table: string, columns?: readonly string[]): void {
  if (!IDENTIFIER.test(table)) throw new Error(`not a table name: ${JSON.stringify(table)}`);
  const bad = columns?.find((c) => !IDENTIFIER.test(c));
  if (bad !== undefined) throw new Error(`not a column name: ${JSON.stringify(bad)}`);
}
