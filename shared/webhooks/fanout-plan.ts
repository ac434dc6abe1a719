import { v5 } from 'uuid';
import type { DeliveryRecord, DestinationRecord, PlayerEventRecord, WebhookAttemptRecord } from '../../schemas/records.ts';
import { WEBHOOK_EVENTS } from '../event-names.ts';

/**
 * The pure core of fan-out and retries: who receives an event, under which
 * delivery id, with which body, and what happens after an attempt. No I/O.
 */

export const MAX_ATTEMPTS = 4;

/** RFC 9562 version 5 UUID (SHA-1) of `name` in `namespace` (the `uuid` package). */
export function uuidV5(name: string, namespace: string): string {
  return v5(name, namespace);
}

/**
 * delivery_id = UUIDv5(name: destination id, namespace: event id): a replayed
 * event yields the same id, so the receiver's idempotency survives our own
 * crashes and replays.
 */
export function deliveryId(eventId: string, destinationId: string): string {
  return uuidV5(destinationId, eventId);
}

export function isActiveEvent(name: string): boolean {
  return (WEBHOOK_EVENTS as Record<string, { status: string }>)[name]?.status === 'active';
}

/** Only active events are delivered; an empty selection means every active event. */
export function selects(destination: Pick<DestinationRecord, 'events'>, eventName: string): boolean {
  if (!isActiveEvent(eventName)) return false;
  return destination.events.length === 0 || destination.events.includes(eventName);
}

/** The JSON body of spec 2.7, serialised once: every attempt sends these exact bytes. */
export function payloadOf(e: Pick<PlayerEventRecord, 'tenant_id' | 'video_id' | 'session_id' | 'visitor_id' | 'event_name' | 'current_time' | 'duration' | 'watched_percentage' | 'utm_source' | 'utm_campaign' | 'ctwa_clid' | 'external_lead_id' | 'timestamp'>): string {
  return JSON.stringify({
    tenant_id: e.tenant_id,
    video_id: e.video_id,
    session_id: e.session_id,
    visitor_id: e.visitor_id,
    event_name: e.event_name,
    current_time: e.current_time,
    duration: e.duration,
    watched_percentage: e.watched_percentage,
    utm_source: e.utm_source,
    utm_campaign: e.utm_campaign,
    ctwa_clid: e.ctwa_clid,
    external_lead_id: e.external_lead_id,
    created_at: new Date(e.timestamp).toISOString(),
  });
}

export type AttemptOutcome =
  | { kind: 'succeeded' }
  | { kind: 'retry'; tier: 0 | 1 | 2; nextAttempt: number; dueAt: number }
  | { kind: 'failed' };

/**
 * What follows attempt `attempt`: success ends it; a failure waits on the
 * next tier (+delays[0], +delays[1], +delays[2]) until attempt 4 has failed.
 * A manual reprocess is one attempt: on failure it is failed again.
 */
export function nextStep(opts: { attempt: number; ok: boolean; origin: 'event' | 'test' | 'reprocess'; now: number; delaysMs: readonly number[] }): AttemptOutcome {
  if (opts.ok) return { kind: 'succeeded' };
  if (opts.origin === 'reprocess' || opts.attempt >= MAX_ATTEMPTS) return { kind: 'failed' };
  const tier = (opts.attempt - 1) as 0 | 1 | 2;
  return { kind: 'retry', tier, nextAttempt: opts.attempt + 1, dueAt: opts.now + opts.delaysMs[tier]! };
}

/** The host of a URL, the only part of it a log or a security event may carry. */
export function hostOf(url: string): string {
  try {
    return new URL(url).host;
  } catch {
    return 'invalid-url';
  }
}

/**
 * The delivery-log record of a state change of `d`: an attempt's outcome, or
 * `pending` (attempt 0) when it is queued by hand.
 */
export function attemptRecord(
  d: DeliveryRecord,
  recordedAt: number,
  fields: Partial<WebhookAttemptRecord> & Pick<WebhookAttemptRecord, 'state'>,
): WebhookAttemptRecord {
  return {
    delivery_id: d.delivery_id,
    tenant_id: d.tenant_id,
    destination_id: d.destination_id,
    event_id: d.event_id,
    event_name: d.event_name,
    attempt: fields.state === 'pending' ? 0 : d.attempt,
    started_at: null,
    duration_ms: null,
    status_code: null,
    error_class: null,
    next_attempt_at: null,
    delivery_created_at: d.created_at,
    recorded_at: recordedAt,
    body: d.body,
    ...fields,
  };
}
