import { z } from 'zod';
import { SESSION_ID_RE, VISITOR_ID_RE } from '../shared/ids.ts';
import { DELIVERY_STATUSES } from './delivery-status.ts';
import { HighIntentThreshold, OfferWindowSec, PitchAtSec } from './intent-settings.ts';

/**
 * zod twins of the Avro records in schemas/avro. Both describe the same
 * values; schemas/records.test.ts feeds one set of fixtures through both.
 */
const uuid = z.uuid();
const millis = z.number().int().nonnegative();
const nullableString = z.string().nullable();

/**
 * The player event's fields as Avro types them (z.number(): finite, as JSON
 * has it). The rules Avro cannot state are `playerEventViolation`'s alone:
 * this schema runs it as a refinement, and the consumers of the topic run it
 * on Avro's decoding without a zod parse (recordDecoder's `avroRules`).
 */
export const PlayerEventRecord = z
  .object({
    event_id: z.string(),
    tenant_id: z.string(),
    video_id: z.string(),
    session_id: z.string(),
    visitor_id: z.string(),
    event_name: z.string(),
    timestamp: z.number().int(),
    received_at: z.number().int(),
    current_time: z.number(),
    duration: z.number(),
    watched_percentage: z.number(),
    play_ms: z.number().int().nullable(),
    focus_ms: z.number().int().nullable(),
    seek_from: z.number().nullable(),
    seek_to: z.number().nullable(),
    utm_source: nullableString,
    utm_campaign: nullableString,
    ctwa_clid: nullableString,
    external_lead_id: nullableString,
    source: z.enum(['player', 'server', 'derived']),
    conversion_value: z.number().nullable(),
    conversion_currency: nullableString,
    /**
     * The player chose event_id (schema v3). NOTE: optional, not defaulted: an
     * absent value means false, exactly as the Avro default fills it in for
     * records written before v3, and writers that predate the field still type.
     */
    event_id_from_client: z.boolean().optional(),
    /** On a high_intent_lead (schema v4): the score that crossed the threshold and its factors. Optional like event_id_from_client. */
    lead: z
      .object({
        score: z.number().int(),
        score_version: z.number().int(),
        watched_percent: z.number(),
        focus_time_ratio: z.number(),
        cta_clicks: z.number().int(),
        rewinds: z.number().int(),
      })
      .nullable()
      .optional(),
  })
  .superRefine((e, ctx) => {
    const broken = playerEventViolation(e);
    if (broken !== undefined) ctx.addIssue({ code: 'custom', path: [broken.field], message: broken.message });
  });
export type PlayerEventRecord = z.infer<typeof PlayerEventRecord>;

/** z.uuid()'s pattern (versions 1–8, the nil and max UUIDs), taken from zod. */
const UUID_RE = z.regexes.uuid();
const isMillis = (v: number) => v >= 0;
const isFiniteOrNull = (v: number | null) => v === null || Number.isFinite(v);

/**
 * The first rule of a player event that its Avro schema cannot state and the
 * event breaks, or undefined: the ids' forms, a non-empty event name, times
 * not before 1970, and finite doubles (Avro's double holds NaN and
 * ±Infinity). Types, safe-integer longs, the enum and the flag are Avro's.
 */
export function playerEventViolation(e: PlayerEventRecord): { field: keyof PlayerEventRecord; message: string } | undefined {
  if (!UUID_RE.test(e.event_id)) return { field: 'event_id', message: 'must be a UUID' };
  if (!UUID_RE.test(e.tenant_id)) return { field: 'tenant_id', message: 'must be a UUID' };
  if (!UUID_RE.test(e.video_id)) return { field: 'video_id', message: 'must be a UUID' };
  if (!SESSION_ID_RE.test(e.session_id)) return { field: 'session_id', message: `must match ${SESSION_ID_RE}` };
  if (!VISITOR_ID_RE.test(e.visitor_id)) return { field: 'visitor_id', message: `must match ${VISITOR_ID_RE}` };
  if (e.event_name.length === 0) return { field: 'event_name', message: 'must not be empty' };
  if (!isMillis(e.timestamp)) return { field: 'timestamp', message: 'must not be negative' };
  if (!isMillis(e.received_at)) return { field: 'received_at', message: 'must not be negative' };
  for (const field of ['current_time', 'duration', 'watched_percentage', 'seek_from', 'seek_to', 'conversion_value'] as const) {
    if (!isFiniteOrNull(e[field])) return { field, message: 'must be a finite number' };
  }
  if (e.lead && !(Number.isFinite(e.lead.watched_percent) && Number.isFinite(e.lead.focus_time_ratio))) return { field: 'lead', message: 'factors must be finite numbers' };
  return undefined;
}

export const TenantRecord = z.object({
  id: uuid,
  name: z.string().min(1),
  player_key: z.string().regex(/^pk_[A-Za-z0-9]+$/),
  created_at: millis,
  /** Origins a browser may send the player key from (scheme://host[:port]); empty: any. */
  allowed_origins: z.array(z.string()),
  /** The key before the last rotation, accepted until `previous_player_key_expires_at`. */
  previous_player_key: z.string().regex(/^pk_[A-Za-z0-9]+$/).nullable(),
  previous_player_key_expires_at: millis.nullable(),
  /** Set while the tenant is suspended: its player key and API keys are refused. */
  suspended_at: millis.nullable(),
  /** Schema v3; older records read with DEFAULT_HIGH_INTENT_THRESHOLD. */
  high_intent_threshold: HighIntentThreshold,
});
export type TenantRecord = z.infer<typeof TenantRecord>;

export const ApiKeyRecord = z.object({
  id: uuid,
  tenant_id: uuid,
  name: z.string().min(1),
  prefix: z.string().min(1),
  key_hash: z.string().regex(/^[0-9a-f]{64}$/),
  created_at: millis,
  revoked_at: millis.nullable(),
});
export type ApiKeyRecord = z.infer<typeof ApiKeyRecord>;

export const ApiKeyUsageRecord = z.object({
  key_id: uuid,
  tenant_id: uuid,
  last_used_at: millis,
});
export type ApiKeyUsageRecord = z.infer<typeof ApiKeyUsageRecord>;

export const VideoRecord = z.object({
  id: uuid,
  tenant_id: uuid,
  title: z.string().min(1),
  duration_sec: z.number().int().nonnegative(),
  created_at: millis,
  /** Schema v2; null (no pitch) for older records. */
  pitch_at_sec: PitchAtSec.nullable(),
  /** Schema v2; DEFAULT_OFFER_WINDOW_SEC for older records. */
  offer_window_sec: OfferWindowSec,
});
export type VideoRecord = z.infer<typeof VideoRecord>;

export const DestinationRecord = z.object({
  id: uuid,
  tenant_id: uuid,
  kind: z.enum(['webhook', 'integration']),
  name: z.string().min(1),
  url: z.url(),
  events: z.array(z.string()),
  secret_enc: nullableString,
  secret_hint: nullableString,
  created_at: millis,
  updated_at: millis,
});
export type DestinationRecord = z.infer<typeof DestinationRecord>;

/** What names one delivery: its id, the destination it goes to and the event it carries. */
const deliveryKey = {
  delivery_id: uuid,
  tenant_id: uuid,
  destination_id: uuid,
  event_id: uuid,
  event_name: z.string().min(1),
};

export const DeliveryRecord = z.object({
  ...deliveryKey,
  body: z.string(),
  attempt: z.number().int().min(1),
  due_at: millis,
  created_at: millis,
  origin: z.enum(['event', 'test', 'reprocess']),
});
export type DeliveryRecord = z.infer<typeof DeliveryRecord>;

export const DeliveryState = z.enum(DELIVERY_STATUSES);
export type DeliveryState = z.infer<typeof DeliveryState>;

export const WebhookAttemptRecord = z.object({
  ...deliveryKey,
  attempt: z.number().int().min(0),
  state: DeliveryState,
  started_at: millis.nullable(),
  duration_ms: z.number().int().nullable(),
  status_code: z.number().int().nullable(),
  error_class: nullableString,
  next_attempt_at: millis.nullable(),
  delivery_created_at: millis,
  recorded_at: millis,
  body: z.string(),
});
export type WebhookAttemptRecord = z.infer<typeof WebhookAttemptRecord>;

export const SecurityEventRecord = z.object({
  id: uuid,
  kind: z.enum(['webhook_missing_secret', 'integration_missing_webhook_secret']),
  tenant_id: uuid,
  endpoint_id: uuid,
  host: z.string().min(1),
  event_id: nullableString,
  event_name: nullableString,
  occurred_at: millis,
});
export type SecurityEventRecord = z.infer<typeof SecurityEventRecord>;
