import type { DeliveryRecord, DestinationRecord, PlayerEventRecord, SecurityEventRecord, WebhookAttemptRecord } from '../../schemas/records.ts';
import { RETRY_TIERS } from '../../shared/kafka/topics.ts';
import { attemptRecord, firstAttempt, hostOf, nextStep, payloadOf, selects, uuidV5 } from '../../shared/webhooks/fanout-plan.ts';
import type { DeliveryResult } from '../../shared/webhooks/https-delivery.ts';
import { webhookHeaders } from '../../shared/webhooks/signing.ts';

/**
 * The steps of a delivery as values: which deliveries an event makes, what an
 * attempt does, and which records follow its result. No I/O: the fan-out
 * service (fanout.service.ts) Avro-encodes each `Outgoing` under its subject,
 * produces it to `topics[topic]`, and records the metrics and logs these
 * steps name.
 */

/** One record to produce: the key of its topic in `Topics`, its schema subject, Kafka key, record and headers. */
export type Outgoing =
  | { topic: 'webhookAttempts'; subject: 'webhook-attempt'; key: string; record: WebhookAttemptRecord }
  | { topic: (typeof RETRY_TIERS)[number] | 'webhooksFailed'; subject: 'delivery'; key: string; record: DeliveryRecord; headers?: Record<string, string> }
  | { topic: 'securityEvents'; subject: 'security-event'; key: string; record: SecurityEventRecord };

/** A delivery handed to a retry tier or to the failed topic. */
export type DeliveryOut = Extract<Outgoing, { subject: 'delivery' }>;

/** A security event to record: it goes through a producer of its own, counts in security_events_total and may be logged. */
export type SecurityOut = Extract<Outgoing, { subject: 'security-event' }>;

/** The result of one POST, or of an attempt the fan-out settles without one (`destination_backlogged`). */
export type AttemptResult = Pick<DeliveryResult, 'ok' | 'status' | 'durationMs'> & { errorClass?: string };

/**
 * The security event of a skipped delivery to `dest`, which has no secret.
 * It names only the host: never the URL's path or query, never a secret.
 */
export function securityEvent(dest: DestinationRecord, eventId: string, eventName: string, now: number): SecurityOut {
  const record: SecurityEventRecord = {
    id: uuidV5(`security:${dest.id}`, eventId),
    kind: dest.kind === 'integration' ? 'integration_missing_webhook_secret' : 'webhook_missing_secret',
    tenant_id: dest.tenant_id,
    endpoint_id: dest.id,
    host: hostOf(dest.url),
    event_id: eventId,
    event_name: eventName,
    occurred_at: now,
  };
  return { topic: 'securityEvents', subject: 'security-event', key: dest.tenant_id, record };
}

/**
 * A player event → one first-attempt delivery per destination that selects
 * it and has a secret, and one security event per selecting destination
 * without one.
 */
export function planFanOut(e: PlayerEventRecord, destinations: Iterable<DestinationRecord>, now: number): { deliveries: DeliveryRecord[]; security: SecurityOut[] } {
  const deliveries: DeliveryRecord[] = [];
  const security: SecurityOut[] = [];
  let body: string | undefined;
  for (const dest of destinations) {
    if (!selects(dest, e.event_name)) continue;
    if (!dest.secret_enc) {
      security.push(securityEvent(dest, e.event_id, e.event_name, now));
      continue;
    }
    deliveries.push(firstAttempt(dest, e, (body ??= payloadOf(e)), now, 'event'));
  }
  return { deliveries, security };
}

/** The delivery-log record of attempt `d.attempt`, recorded at `now`. */
function attemptOut(d: DeliveryRecord, now: number, fields: Partial<WebhookAttemptRecord> & Pick<WebhookAttemptRecord, 'state'>): Outgoing {
  return { topic: 'webhookAttempts', subject: 'webhook-attempt', key: d.delivery_id, record: attemptRecord(d, now, fields) };
}

/** What an attempt does: fail at once with these records, or post signed `body` to `url`. */
export type AttemptPlan =
  | { kind: 'settled'; out: Outgoing[]; security: SecurityOut[] }
  | { kind: 'post'; url: string; host: string; headers: Record<string, string>; body: string; startedAt: number };

/**
 * The plan of attempt `d.attempt` at `now`: a delivery whose destination is
 * gone fails (`destination_deleted`); one whose destination has no secret
 * (`secret` is the opened secret, '' for none) fails (`missing_secret`) and
 * makes a security event; any other is signed and posted.
 */
export function planAttempt(d: DeliveryRecord, dest: DestinationRecord | undefined, secret: string, now: number): AttemptPlan {
  if (!dest) return { kind: 'settled', out: [attemptOut(d, now, { state: 'failed', error_class: 'destination_deleted' })], security: [] };
  if (!secret) {
    return {
      kind: 'settled',
      out: [attemptOut(d, now, { state: 'failed', error_class: 'missing_secret' })],
      security: [securityEvent(dest, d.event_id, d.event_name, now)],
    };
  }
  const headers = webhookHeaders({ eventName: d.event_name, deliveryId: d.delivery_id, secret, rawBody: d.body, nowSec: Math.floor(now / 1000) });
  return { kind: 'post', url: dest.url, host: hostOf(dest.url), headers, body: d.body, startedAt: now };
}

/**
 * The settlement of attempt `d.attempt` with `result` (`nextStep` decides):
 * the records to produce (its delivery-log record, then the delivery on its
 * next retry tier with a due-at header, or on the failed topic), the labels
 * of webhook_attempts_total, the observation of
 * webhook_attempt_duration_seconds and, for a failure, the fields of the
 * `webhook_attempt_failed` log line (the host only; null for a success).
 */
export function settlement(
  d: DeliveryRecord,
  result: AttemptResult,
  opts: { startedAt: number; now: number; delaysMs: readonly number[]; host?: string },
) {
  const step = nextStep({ attempt: d.attempt, ok: result.ok, origin: d.origin, now: opts.now, delaysMs: opts.delaysMs });
  const outcome = step.kind === 'retry' ? 'retrying' : step.kind;
  const out: Outgoing[] = [
    attemptOut(d, opts.now, {
      state: outcome,
      started_at: opts.startedAt,
      duration_ms: Math.round(result.durationMs),
      status_code: result.status ?? null,
      error_class: result.ok ? null : (result.errorClass ?? 'http_status'),
      next_attempt_at: step.kind === 'retry' ? step.dueAt : null,
    }),
  ];
  if (step.kind === 'retry') {
    const next: DeliveryRecord = { ...d, attempt: step.nextAttempt, due_at: step.dueAt };
    out.push({ topic: RETRY_TIERS[step.tier], subject: 'delivery', key: d.delivery_id, record: next, headers: { 'due-at': String(step.dueAt) } });
  } else if (step.kind === 'failed') {
    out.push({ topic: 'webhooksFailed', subject: 'delivery', key: d.delivery_id, record: d });
  }
  return {
    out,
    labels: { outcome, error_class: result.errorClass ?? (result.ok ? 'none' : 'http_status') },
    durationSec: result.durationMs / 1000,
    failureLog: result.ok
      ? null
      : { delivery_id: d.delivery_id, destination_id: d.destination_id, host: opts.host, attempt: d.attempt, status: result.status, error_class: result.errorClass, outcome },
  };
}

/**
 * `d` pushed back by a full lane to the first tier, due when a first retry
 * would be (so the tier stays in due order and nothing queues behind it),
 * without using an attempt. `deferrals` is the count it now carries.
 */
export function deferral(d: DeliveryRecord, deferrals: number, now: number, delaysMs: readonly number[]): DeliveryOut {
  const dueAt = now + delaysMs[0]!;
  return {
    topic: 'retry1',
    subject: 'delivery',
    key: d.delivery_id,
    record: { ...d, due_at: dueAt },
    headers: { 'due-at': String(dueAt), deferrals: String(deferrals) },
  };
}

/** The deferral count of a queued delivery's `deferrals` header (0 when absent or not a number). */
export function deferralsOf(header: Buffer | string | (Buffer | string)[] | undefined): number {
  const n = Number(header?.toString() ?? 0);
  return Number.isFinite(n) ? n : 0;
}

/** Lets a log line through once per `everyMs` per key; the rest are only counted elsewhere. */
export class LogThrottle {
  readonly #last = new Map<string, number>();
  readonly #everyMs: number;

  constructor(everyMs = 60_000) {
    this.#everyMs = everyMs;
  }

  /** True when `key` may log at `now` (which then counts as its last line). */
  due(key: string, now: number): boolean {
    const last = this.#last.get(key);
    if (last !== undefined && last + this.#everyMs > now) return false;
    this.#last.set(key, now);
    return true;
  }
}
