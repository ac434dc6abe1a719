import type { PlayerEventRecord } from '../../schemas/records.ts';
import { chTime } from '../../shared/clickhouse/clickhouse.ts';

/** An `events` row of a player event; it goes to ClickHouse as its `eventLine` (JSONCompactEachRow). */
export type EventRow = ReturnType<typeof eventRow>;

/** The ClickHouse `events` row of a player event (pure). */
export function eventRow(e: PlayerEventRecord) {
  return {
    tenant_id: e.tenant_id,
    video_id: e.video_id,
    timestamp: chTime(e.timestamp),
    event_id: e.event_id,
    event_id_from_client: e.event_id_from_client ?? false,
    event_name: e.event_name,
    session_id: e.session_id,
    visitor_id: e.visitor_id,
    current_time: e.current_time,
    duration: e.duration,
    watched_percentage: e.watched_percentage,
    play_ms: e.play_ms ?? 0,
    focus_ms: e.focus_ms ?? 0,
    seek_from: e.seek_from,
    seek_to: e.seek_to,
    utm_source: e.utm_source,
    utm_campaign: e.utm_campaign,
    ctwa_clid: e.ctwa_clid,
    external_lead_id: e.external_lead_id,
    source: e.source,
    conversion_value: e.conversion_value,
    conversion_currency: e.conversion_currency,
    received_at: chTime(e.received_at),
  };
}

/**
 * The last instant a DateTime64(3) column holds (2299-12-31 23:59:59.999):
 * the engine stores later values wrapped, and JavaScript cannot format
 * some of them at all. The intake never accepts such a time; a record
 * holding one came from elsewhere and is refused as it is decoded.
 */
export const LATEST_EVENT_TIME = Date.UTC(2300, 0, 1) - 1;

/** The columns of `events` the projector writes, in the order of an `eventLine`'s values. */
export const EVENT_COLUMNS = [
  'tenant_id',
  'video_id',
  'timestamp',
  'event_id',
  'event_id_from_client',
  'event_name',
  'session_id',
  'visitor_id',
  'current_time',
  'duration',
  'watched_percentage',
  'play_ms',
  'focus_ms',
  'seek_from',
  'seek_to',
  'utm_source',
  'utm_campaign',
  'ctwa_clid',
  'external_lead_id',
  'source',
  'conversion_value',
  'conversion_currency',
  'received_at',
] as const satisfies readonly (keyof EventRow)[];

/**
 * A player event's `events` row as its JSONCompactEachRow line, straight from
 * the record: the values of EVENT_COLUMNS in order, as eventRow has them
 * (an array literal, cheaper than JSON.stringify on the row object, and
 * no row object at all for the records that need none). `timestamp` replaces
 * the record's own (a retry re-timed by the dedupe step).
 */
export function eventLine(e: PlayerEventRecord, timestamp: string = chTime(e.timestamp)): string {
  return JSON.stringify([
    e.tenant_id,
    e.video_id,
    timestamp,
    e.event_id,
    e.event_id_from_client ?? false,
    e.event_name,
    e.session_id,
    e.visitor_id,
    e.current_time,
    e.duration,
    e.watched_percentage,
    e.play_ms ?? 0,
    e.focus_ms ?? 0,
    e.seek_from,
    e.seek_to,
    e.utm_source,
    e.utm_campaign,
    e.ctwa_clid,
    e.external_lead_id,
    e.source,
    e.conversion_value,
    e.conversion_currency,
    chTime(e.received_at),
  ]);
}

/**
 * A record the dedupe step must see (event-dedupe.ts: a client's event id,
 * timed at receipt), with its line serialized on arrival.
 */
export interface RetryCandidate extends EventRow {
  record: PlayerEventRecord;
  line: string;
}

export function retryCandidate(e: PlayerEventRecord, line: string): RetryCandidate {
  return { ...eventRow(e), record: e, line };
}

/**
 * The line of a candidate the dedupe step kept: its line from arrival, or,
 * when the step re-timed it (a copy with the first record's timestamp; a
 * candidate arrives timed at receipt), a new line with that timestamp.
 */
export function candidateLine(c: RetryCandidate): string {
  return c.timestamp === c.received_at ? c.line : eventLine(c.record, c.timestamp);
}

/** The millisecond timestamp of ClickHouse DateTime64(3) text as chTime writes it (`YYYY-MM-DD hh:mm:ss.mmm`, UTC). */
export function chTimeMs(text: string): number {
  return Date.parse(`${text.replace(' ', 'T')}Z`);
}
