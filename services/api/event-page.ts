/**
 * Keyset pages of events read without FINAL: a video's (events.repository.ts)
 * and a visitor's (visitors.repository.ts).
 *
 * A replayed batch (the projector re-inserting after a crash) leaves copies of
 * an event until a merge collapses them. The copies share the whole sort key
 * (tenant, video, timestamp, event_id), so in key order they are adjacent, and
 * they agree on every listed field. A page keeps the first of each run of
 * equal keys; the next page starts strictly after the last key read, so the
 * remaining copies of an event at a page boundary are never listed again.
 */

/** What identifies a listed event; a replay's copies share it. */
export interface EventKey {
  ts: number;
  event_id: string;
}

/**
 * Rows to read when `missing` distinct events are still needed: room for one
 * replayed copy of each, so a page inside a fully replayed range still needs
 * one query. More copies than that only cost another query.
 */
export function rowsToFetch(missing: number): number {
  return 2 * missing;
}

/** Appends `rows` (in key order, after `page`'s last key) to `page`, skipping each copy of the row before it. */
export function appendDistinct<T extends EventKey>(page: T[], rows: readonly T[]): void {
  for (const row of rows) {
    const last = page.at(-1);
    if (last && last.ts === row.ts && last.event_id === row.event_id) continue;
    page.push(row);
  }
}

/**
 * Reads pages of rows with `read` until `limit` distinct events are found or
 * the key range is exhausted (a read returning fewer rows than asked).
 * Each further read starts after the last row read, copies included.
 */
export async function readDistinct<T extends EventKey>(
  limit: number,
  after: { ts: number; id: string } | undefined,
  read: (after: { ts: number; id: string } | undefined, rows: number) => Promise<T[]>,
): Promise<T[]> {
  const page: T[] = [];
  let from = after;
  for (;;) {
    const want = rowsToFetch(limit - page.length);
    const rows = await read(from, want);
    appendDistinct(page, rows);
    const last = rows.at(-1);
    if (page.length >= limit || rows.length < want || !last) return page.slice(0, limit);
    from = { ts: last.ts, id: last.event_id };
  }
}

/** The `since` filter of a read keyed by timestamp, or nothing without one. */
export const sinceClause = (sinceMs: number | undefined): string =>
  sinceMs === undefined ? '' : "AND timestamp >= fromUnixTimestamp64Milli({since:Int64}, 'UTC')";

/**
 * The end of one read of such a page, after its WHERE's own conditions: the
 * since and keyset conditions, the key order and `LIMIT {rows}`, with the
 * parameters since, after_ts, after_id and rows. `timestamp >= after`
 * repeats the keyset condition in a form the primary key can use (a tuple
 * comparison is not), and the small max_block_size keeps each part's
 * in-order reader from fetching a whole default block for one page; that
 * setting is in the SQL rather than in clickhouse_settings, which chdb
 * applies with SET to the whole session.
 */
export function keysetTail(q: { sinceMs?: number | undefined; after?: { ts: number; id: string } | undefined }): string {
  return `${sinceClause(q.sinceMs)}
          ${
            q.after
              ? `AND timestamp >= fromUnixTimestamp64Milli({after_ts:Int64}, 'UTC')
          AND (timestamp, event_id) > (fromUnixTimestamp64Milli({after_ts:Int64}, 'UTC'), {after_id:UUID})`
              : ''
          }
        ORDER BY timestamp, event_id
        LIMIT {rows:UInt32}
        SETTINGS max_block_size = 1024`;
}
