import { v5 } from 'uuid';
import type { DeliveryRecord, DestinationRecord, PlayerEventRecord, WebhookAttemptRecord } from '../../schemas/records.ts';
import { WEBHOOK_EVENTS } from '../event-names.ts';

/**
 * The pure core of fan-out and retries: who receives an event, under which
 * delivery id, with which body, and what happens after an attempt. No I/O.
 */

export const MAX_ATTEMPTS = 4;

/** RFC 9562 version 5 UUID (SHA-1) of a name in a namespace: `uuidV5(name, namespace)`. */
export { v5 as uuidV5 } from 'uuid';

/**
 * delivery_id = UUIDv5(name: destination id, namespace: event id): a replayed
 * event yields the same id, so the receiver's idempotency survives our own
 * crashes and replays.
 */
export function deliveryId(eventId: string, destinationId: string): string {
  return v5(destinationId, eventId);
}

/**
 * An empty selection means every event. Only the events of spec 6.1 are
 * delivered; signals (heartbeat, seek) are not.
 */
export function selects(destination: Pick<DestinationRecord, 'events'>, eventName: string): boolean {
  if (!Object.hasOwn(WEBHOOK_EVENTS, eventName)) return false;
  return destination.events.length === 0 || destination.events.includes(eventName);
}

/** The first attempt, due at once, of a delivery of event `e` to `dest` with `body`. */
export function firstAttempt(
  dest: Pick<DestinationRecord, 'id' | 'tenant_id'>,
  e: Pick<PlayerEventRecord, 'event_id' | 'event_name'>,
  body: string,
  now: number,
  origin: 'event' | 'test',
): DeliveryRecord {
  return {
    delivery_id: deliveryId(e.event_id, dest.id),
    tenant_id: dest.tenant_id,
    destination_id: dest.id,
    event_id: e.event_id,
    event_name: e.event_name,
    body,
    attempt: 1,
    due_at: now,
    created_at: now,
    origin,
  };
}

type PayloadSource = Pick<
  PlayerEventRecord,
  'tenant_id' | 'video_id' | 'session_id' | 'visitor_id' | 'event_name' | 'current_time' | 'duration' | 'watched_percentage' | 'utm_source' | 'utm_campaign' | 'ctwa_clid' | 'external_lead_id' | 'timestamp'
> &
  Partial<Pick<PlayerEventRecord, 'lead' | 'conversion_value' | 'conversion_currency'>>;

/**
 * The JSON body of spec 2.7, serialised once: every attempt sends these
 * exact bytes. Beyond 2.7: a `conversion` carries its value and currency,
 * a `high_intent_lead` its score, score version and factors
 * (docs/webhooks.md).
 */
export function payloadOf(e: PayloadSource): string {
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
    ...(e.event_name === 'conversion' && { conversion_value: e.conversion_value ?? null, conversion_currency: e.conversion_currency ?? null }),
    ...(e.lead && {
      score: e.lead.score,
      score_version: e.lead.score_version,
      factors: { watched_percent: e.lead.watched_percent, focus_time_ratio: e.lead.focus_time_ratio, cta_clicks: e.lead.cta_clicks, rewinds: e.lead.rewinds },
    }),
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
