import { Readable } from 'node:stream';
import { setImmediate as nextTurn } from 'node:timers/promises';
import { drainStream } from '@clickhouse/client';
import type { ClickHouseClient } from './clickhouse.ts';

/** Rows serialized in one turn of the event loop by `insertRows` (about 6 ms for `events` rows). */
export const ROWS_PER_TURN = 2000;

const TABLE_NAME = /^[A-Za-z_][A-Za-z0-9_]*$/;

/**
 * Inserts rows into `table` as JSONEachRow: each row's line from `lines`
 * when it is there (a consumer serializes rows as it decodes their records,
 * which overlaps the insert in progress), else serialized here,
 * ROWS_PER_TURN at a time with a turn of the event loop between. The
 * client's `insert` serializes every row in one go: for the 20,000 rows of a
 * full `events` batch that held the event loop for 50-90 ms
 * (docs/performance.md), and the intake and API of the same process waited
 * as long. The body goes as the client's raw values (`exec`); the server or
 * chdb parses it as one insert, all rows or none.
 */
export async function insertRows(client: ClickHouseClient, table: string, rows: readonly object[], lines?: ReadonlyMap<object, string>): Promise<void> {
  if (!TABLE_NAME.test(table)) throw new Error(`not a table name: ${JSON.stringify(table)}`);
  if (rows.length === 0) return;
  let body = '';
  let serializedHere = 0;
  for (const row of rows) {
    let line = lines?.get(row);
    if (line === undefined) {
      if (serializedHere > 0 && serializedHere % ROWS_PER_TURN === 0) await nextTurn();
      line = JSON.stringify(row);
      serializedHere++;
    }
    body += `${line}\n`;
  }
  const result = await client.exec({ query: `INSERT INTO ${table} FORMAT JSONEachRow`, values: Readable.from([body]) });
  await drainStream(result.stream);
}
