import { z } from 'zod';
import { visitorFields } from '../api/visitor.schema.ts';
import { DELIVERY_STATUSES } from '../../schemas/delivery-status.ts';
import {
  DEFAULT_HIGH_INTENT_THRESHOLD,
  DEFAULT_OFFER_WINDOW_SEC,
  HighIntentThreshold,
  MAX_OFFER_WINDOW_SEC,
  MIN_OFFER_WINDOW_SEC,
  OfferWindowSec,
  PitchAtSec,
} from '../../schemas/intent-settings.ts';
import { DisplayName } from '../../shared/http/schemas.ts';

/**
 * Response shapes of the management API (/admin/v1, mounted again under
 * /dashboard/api). Pure zod, no Node imports: the dashboard's types are
 * inferred from these (services/dashboard/web/types.ts).
 */

export const Tenant = z
  .object({
    id: z.uuid(),
    name: z.string(),
    player_key: z.string(),
    created_at: z.string(),
    allowed_origins: z.array(z.string()).meta({ description: 'Origins a browser may send the player key from; empty: any' }),
    previous_player_key: z.string().nullable().meta({ description: 'The key before the last rotation, while it still works' }),
    previous_player_key_expires_at: z.string().nullable().meta({ description: 'When the previous key stops working' }),
    suspended_at: z.string().nullable().meta({ description: 'Set while the tenant is suspended: its player key and API keys are refused' }),
    high_intent_threshold: z.number().int().meta({ description: 'Lead Intent Score (0–100) at or above which a visitor counts as a high-intent lead' }),
    limits: z
      .object({
        player_key_events_per_minute: z.number().int().meta({ description: 'PLAYER_KEY_EVENTS_PER_MINUTE, per intake process; 0: no limit' }),
        client_address_requests_per_minute: z.number().int().meta({ description: 'CLIENT_ADDRESS_REQUESTS_PER_MINUTE, per intake process; 0: no limit' }),
      })
      .meta({ description: "The player intake's limits as this process is configured" }),
  })
  .meta({ id: 'Tenant' });

/** The longest overlap a rotated player key may keep working for. */
export const MAX_PLAYER_KEY_OVERLAP_S = 30 * 24 * 3600;
/** A rotated player key keeps working this long unless the rotation says otherwise. */
export const DEFAULT_PLAYER_KEY_OVERLAP_S = 24 * 3600;
/** Origins one tenant may allow. */
export const MAX_ALLOWED_ORIGINS = 100;

export const ApiKeyCreated = z
  .object({ id: z.uuid(), name: z.string(), key: z.string().meta({ description: 'Shown only in this response' }), prefix: z.string(), created_at: z.string() })
  .meta({ id: 'ApiKeyCreated' });

export const ApiKey = z
  .object({
    id: z.uuid(),
    name: z.string(),
    prefix: z.string(),
    created_at: z.string(),
    last_used_at: z.string().nullable(),
    revoked_at: z.string().nullable(),
  })
  .meta({ id: 'ApiKey' });

export const AdminVideo = z
  .object({
    id: z.string(),
    title: z.string(),
    duration_sec: z.number().int(),
    created_at: z.string(),
    pitch_at_sec: z.number().int().nullable().meta({ description: 'Where the offer segment (the pitch) starts, in seconds of playback; null: none' }),
    offer_window_sec: z.number().int().meta({ description: 'After a cta_shown, a session that ends within this many seconds of stream time without a cta_clicked counts as abandoned after the offer' }),
  })
  .meta({ id: 'AdminVideo' });

/** The intent settings of a tenant, as a client sends them. */
const thresholdInput = HighIntentThreshold.meta({
  description: `Lead Intent Score (0–100) at or above which a visitor counts as a high-intent lead (default ${DEFAULT_HIGH_INTENT_THRESHOLD})`,
});

export const CreateTenant = z.object({ name: DisplayName, high_intent_threshold: thresholdInput.optional() });

export const PatchTenant = z
  .object({ high_intent_threshold: thresholdInput.optional() })
  .strict()
  .refine((b) => Object.keys(b).length > 0, 'nothing to change: send high_intent_threshold');

/** The intent settings of a video, as a client sends them. */
const pitchInput = PitchAtSec.nullable().meta({ description: 'Where the offer segment (the pitch) starts, in whole seconds of playback; null: none (default)' });
const offerWindowInput = OfferWindowSec.meta({
  description: `Seconds of stream time after a cta_shown within which a session that ends without a cta_clicked counts as abandoned after the offer, ${MIN_OFFER_WINDOW_SEC}–${MAX_OFFER_WINDOW_SEC} (default ${DEFAULT_OFFER_WINDOW_SEC})`,
});

export const CreateVideo = z.object({
  title: DisplayName,
  duration_sec: z.number().int().min(0).max(1_000_000),
  pitch_at_sec: pitchInput.optional(),
  offer_window_sec: offerWindowInput.optional(),
});

export const PatchVideo = z
  .object({ title: DisplayName.optional(), pitch_at_sec: pitchInput.optional(), offer_window_sec: offerWindowInput.optional() })
  .strict()
  .refine((b) => Object.keys(b).length > 0, 'nothing to change: send title, pitch_at_sec or offer_window_sec');

export const DestinationKind = z.enum(['webhook', 'integration']);

export const Destination = z
  .object({
    id: z.uuid(),
    kind: DestinationKind,
    name: z.string(),
    url: z.string(),
    events: z.array(z.string()),
    secret_masked: z.string().nullable().meta({ description: 'A generated secret: its prefix and last 4 characters; an integration\'s: … and at most an eighth of it from its end; null when there is no secret' }),
    created_at: z.string(),
    updated_at: z.string(),
  })
  .meta({ id: 'Destination' });

export const DestinationWithSecret = Destination.extend({ secret: z.string().meta({ description: 'Shown only in this response' }) }).meta({
  id: 'DestinationWithSecret',
});

export const DeliveryStatus = z.enum(DELIVERY_STATUSES);

export const Delivery = z
  .object({
    id: z.uuid(),
    destination_id: z.uuid(),
    event_name: z.string(),
    status: DeliveryStatus,
    attempt_count: z.number().int().meta({ description: 'Attempts made so far' }),
    next_attempt_at: z.string().nullable(),
    created_at: z.string(),
  })
  .meta({ id: 'Delivery' });

export const Attempt = z.object({
  attempt: z.number().int(),
  started_at: z.string().nullable(),
  duration_ms: z.number().int().nullable(),
  status_code: z.number().int().nullable(),
  error_class: z.string().nullable(),
  outcome: z.enum(['retrying', 'succeeded', 'failed']),
  next_attempt_at: z.string().nullable(),
});

export const DeliveryDetail = Delivery.extend({ attempts: z.array(Attempt) }).meta({ id: 'DeliveryDetail' });

export const SecurityEvent = z
  .object({
    id: z.uuid(),
    kind: z.string(),
    tenant_id: z.uuid(),
    endpoint_id: z.uuid(),
    host: z.string(),
    event_name: z.string().nullable(),
    occurred_at: z.string(),
  })
  .meta({ id: 'SecurityEvent' });

/** How many deliveries a lead shows. */
export const LEAD_DELIVERIES = 20;

/** A delivery about a lead: one of the webhooks sent for one of its events. */
export const LeadDelivery = Delivery.omit({ next_attempt_at: true }).meta({ id: 'LeadDelivery' });

export const Lead = z
  .object({
    ...visitorFields,
    deliveries: z.array(LeadDelivery).meta({ description: `The newest deliveries about the visitor's events, at most ${LEAD_DELIVERIES}, newest first` }),
  })
  .meta({ id: 'Lead' });
