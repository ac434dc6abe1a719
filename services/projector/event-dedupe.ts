import type { ClickHouseClient } from '../../shared/clickhouse/clickhouse.ts';
import { chTime } from '../../shared/clickhouse/clickhouse.ts';
import type { Logger } from '../../shared/logger.ts';

/**
 * Retries of player events whose time is their time of receipt.
 *
 * A player may send its own event_id and resend it when a request failed or
 * timed out. An event with an occurred_at comes back with the same sort key
 * (tenant_id, video_id, timestamp, event_id) and `events` collapses the
 * copies by itself. An event without one is stamped with the time the
 * request arrived, so the retry would sort elsewhere and be listed twice.
 * For those rows alone the projector asks `event_ids` (migration 006) where
 * the id was first recorded, once per batch, and:
 *
 * - same video: the row takes the first record's timestamp, so it has the
 *   first record's key and collapses into it (a faithful retry is identical);
 * - another video: the id was reused for a different event, a client bug
 *   the stateless intake cannot refuse. The first record wins and the row is
 *   dropped (and logged), so reads, the score and webhook receivers, which
 *   drop a repeated delivery id, all keep the same one event.
 *
 * NOTE: a repeat on the same video is re-timed and inserted, never dropped.
 * An insert is not atomic with its materialized views, so after a failed
 * insert `event_ids` may name an id whose `events` row never landed; the
 * batch's retry then finds its own rows there and must still insert them.
 */

/** The columns of an `events` row this step reads. */
export interface DedupeRow {
  tenant_id: string;
  event_id: string;
  video_id: string;
  /** ClickHouse DateTime64 text, as event-rows.ts writes it. */
  timestamp: string;
  received_at: string;
  event_id_from_client: boolean;
}

/** Where an id was first recorded. */
export interface FirstRecord {
  video_id: string;
  /** ClickHouse DateTime64 text. */
  timestamp: string;
}

export interface DedupeOutcome<R> {
  rows: R[];
  /** Repeats on the same video, given the first record's timestamp. */
  retimed: number;
  /** Repeats on another video, dropped: the first record wins. */
  dropped: { row: R; first: FirstRecord }[];
}

const keyOf = (r: Pick<DedupeRow, 'tenant_id' | 'event_id'>) => `${r.tenant_id.toLowerCase()}:${r.event_id.toLowerCase()}`;

/**
 * Whether a row (or its record: the same times in milliseconds) can be a
 * retry that would not collapse by itself: the player chose its id, and its
 * time is the time of receipt (ingest stamps an event without occurred_at
 * with exactly received_at).
 */
export function needsLookup(row: { event_id_from_client?: boolean | null; timestamp: string | number; received_at: string | number }): boolean {
  return row.event_id_from_client === true && row.timestamp === row.received_at;
}

/** The ids to look up: tenants and event ids of the rows that need it, without repeats. */
export function lookupKeys(rows: readonly DedupeRow[]): { tenantIds: string[]; eventIds: string[] } {
  const tenants = new Set<string>();
  const ids = new Set<string>();
  for (const r of rows) {
    if (!needsLookup(r)) continue;
    tenants.add(r.tenant_id.toLowerCase());
    ids.add(r.event_id.toLowerCase());
  }
  return { tenantIds: [...tenants], eventIds: [...ids] };
}

/**
 * The pure core: applies the first records found in `event_ids` (keyed
 * `tenant:event_id`, lower case) to a batch. Within the batch the first
 * occurrence of an id is the first record (per partition the batch is in
 * offset order, and a retry has the key tenant:session of the original, so it
 * lands on the same partition after it). Rows that do not need a lookup pass
 * unchanged, in order.
 */
export function applyFirstRecords<R extends DedupeRow>(rows: readonly R[], recorded: ReadonlyMap<string, FirstRecord>): DedupeOutcome<R> {
  const first = new Map(recorded);
  const out: R[] = [];
  const dropped: { row: R; first: FirstRecord }[] = [];
  let retimed = 0;
  for (const row of rows) {
    if (!needsLookup(row)) {
      out.push(row);
      continue;
    }
    const key = keyOf(row);
    const seen = first.get(key);
    if (!seen) {
      first.set(key, { video_id: row.video_id, timestamp: row.timestamp });
      out.push(row);
    } else if (seen.video_id.toLowerCase() !== row.video_id.toLowerCase()) {
      dropped.push({ row, first: seen });
    } else if (seen.timestamp === row.timestamp) {
      out.push(row); // a replay of the first record itself
    } else {
      out.push({ ...row, timestamp: seen.timestamp });
      retimed++;
    }
  }
  return { rows: out, retimed, dropped };
}

/**
 * Reads where the given ids were first recorded: one query, served by the
 * primary key (tenant_id, event_id) of `event_ids`.
 */
export async function firstRecords(ch: ClickHouseClient, keys: { tenantIds: string[]; eventIds: string[] }): Promise<Map<string, FirstRecord>> {
  const found = new Map<string, FirstRecord>();
  if (keys.eventIds.length === 0) return found;
  // NOTE: aliases differ from the column names: an alias would shadow its
  // column in WHERE. min/argMin rather than FINAL: the earliest record is the
  // first, whatever the merges kept.
  const rs = await ch.query({
    query: `
      SELECT toString(tenant_id) AS t, toString(event_id) AS id,
             toString(argMin(video_id, timestamp)) AS v, toUnixTimestamp64Milli(min(timestamp)) AS ts
      FROM event_ids
      WHERE tenant_id IN {tenants:Array(UUID)} AND event_id IN {ids:Array(UUID)}
      GROUP BY tenant_id, event_id`,
    query_params: { tenants: keys.tenantIds, ids: keys.eventIds },
    format: 'JSONEachRow',
  });
  for (const r of await rs.json<{ t: string; id: string; v: string; ts: string | number }>()) {
    found.set(`${r.t}:${r.id}`, { video_id: r.v, timestamp: chTime(Number(r.ts)) });
  }
  return found;
}

/**
 * Makes a batch of `events` rows safe to insert when it holds retries of
 * events recorded before (see the top of this file). Costs nothing when no
 * row has a client id without an occurred_at; otherwise one query per batch
 * for those rows only.
 */
export async function dedupeRetriedEvents<R extends DedupeRow>(ch: ClickHouseClient, rows: R[], log?: Logger): Promise<R[]> {
  const keys = lookupKeys(rows);
  if (keys.eventIds.length === 0) return rows;
  const outcome = applyFirstRecords(rows, await firstRecords(ch, keys));
  if (outcome.retimed > 0) log?.debug({ retimed: outcome.retimed, lookups: keys.eventIds.length }, 'event_retries_retimed');
  for (const { row, first } of outcome.dropped) {
    log?.warn(
      { tenant_id: row.tenant_id, event_id: row.event_id, video_id: row.video_id, first_video_id: first.video_id },
      'event_id_reused_for_another_video',
    );
  }
  return outcome.rows;
}
