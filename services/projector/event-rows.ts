import type { PlayerEventRecord } from '../../schemas/records.ts';
import { chTime } from '../../shared/clickhouse/clickhouse.ts';

/** An `events` row as the projector builds it; it goes to ClickHouse as `eventLine` (JSONCompactEachRow). */
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
 * A row as its JSONCompactEachRow line: the values of EVENT_COLUMNS in order
 * (an array literal, half the work of JSON.stringify on the object).
 */
export function eventLine(r: EventRow): string {
  return JSON.stringify([
    r.tenant_id,
    r.video_id,
    r.timestamp,
    r.event_id,
    r.event_id_from_client,
    r.event_name,
    r.session_id,
    r.visitor_id,
    r.current_time,
    r.duration,
    r.watched_percentage,
    r.play_ms,
    r.focus_ms,
    r.seek_from,
    r.seek_to,
    r.utm_source,
    r.utm_campaign,
    r.ctwa_clid,
    r.external_lead_id,
    r.source,
    r.conversion_value,
    r.conversion_currency,
    r.received_at,
  ]);
}
