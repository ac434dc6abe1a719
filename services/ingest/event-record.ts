import type { PlayerEventRecord, VideoRecord } from '../../schemas/records.ts';
import { ApiError, invalidField } from '../../shared/http/errors.ts';
import { newId, parseVideoId } from '../../shared/ids.ts';
import { MAX_FUTURE_SKEW_MS, MAX_OCCURRED_AT_AGE_DAYS, MAX_OCCURRED_AT_AGE_MS, type CollectEvent, type ConversionBody } from './collect.schema.ts';

/**
 * The records an intake request becomes, built from a body that already
 * passed its zod schema. Pure: the video lookup is a read of the in-memory
 * config store and the clock and id source are given, so these run without
 * Kafka or Fastify. A refusal is the ApiError the route answers with.
 */

/** What a record needs besides the request body. */
export interface RecordContext {
  /** The tenant the credential belongs to. */
  tenantId: string;
  /** When the request arrived (ms): the timestamp of events without occurred_at. */
  received: number;
  /** A video by its canonical id (the config store's map). */
  videoById: (id: string) => VideoRecord | undefined;
  /** Server-side event ids; random UUIDs by default. */
  newId?: () => string;
}

/** The video `raw` names, if it is the tenant's: 422 when unknown, 403 when another tenant's. */
export function ownVideo(ctx: RecordContext, raw: string, path: string): VideoRecord {
  const id = parseVideoId(raw);
  const video = id ? ctx.videoById(id) : undefined;
  if (!video) throw invalidField(path, 'unknown video');
  if (video.tenant_id !== ctx.tenantId) throw new ApiError('forbidden', `${path}: the video belongs to another tenant`);
  return video;
}

/** The event's time: occurred_at when given (from MAX_OCCURRED_AT_AGE_DAYS back to 5 minutes ahead of receipt), else the time of receipt. */
export function eventTime(occurredAt: string | undefined, received: number, path: string): number {
  if (occurredAt === undefined) return received;
  const t = Date.parse(occurredAt);
  if (t < received - MAX_OCCURRED_AT_AGE_MS) throw invalidField(path, `more than ${MAX_OCCURRED_AT_AGE_DAYS} days in the past`);
  if (t > received + MAX_FUTURE_SKEW_MS) throw invalidField(path, 'more than 5 minutes in the future');
  return t;
}

/** POST /v1/collect: one record per event, in order; the first refused event refuses the request. */
export function collectRecords(events: readonly CollectEvent[], ctx: RecordContext): PlayerEventRecord[] {
  // NOTE: a request's events nearly always name one video; its lookup (the
  // id parsed to a UUID, then the map) is done again only when the id changes.
  let lastId: string | undefined;
  let lastVideo: VideoRecord | undefined;
  return events.map((e, i) => {
    if (e.video_id !== lastId || !lastVideo) {
      lastVideo = ownVideo(ctx, e.video_id, `body.events.${i}.video_id`);
      lastId = e.video_id;
    }
    return playerRecord(e, i, lastVideo, ctx);
  });
}

function playerRecord(e: CollectEvent, i: number, video: VideoRecord, ctx: RecordContext): PlayerEventRecord {
  const timestamp = eventTime(e.occurred_at, ctx.received, `body.events.${i}.occurred_at`);
  return {
    // A retried request carries the player's ids again; the projector keeps
    // one event per (tenant, id): services/projector/event-dedupe.ts.
    event_id: e.event_id?.toLowerCase() ?? (ctx.newId ?? newId)(),
    event_id_from_client: e.event_id !== undefined,
    tenant_id: ctx.tenantId,
    video_id: video.id,
    session_id: e.session_id,
    visitor_id: e.visitor_id,
    event_name: e.event_name,
    timestamp,
    received_at: ctx.received,
    current_time: e.current_time,
    duration: e.duration,
    watched_percentage: e.watched_percentage,
    play_ms: e.event_name === 'heartbeat' ? (e.play_ms ?? 0) : null,
    focus_ms: e.event_name === 'heartbeat' ? (e.focus_ms ?? 0) : null,
    seek_from: e.event_name === 'seek' ? (e.from ?? null) : null,
    seek_to: e.event_name === 'seek' ? (e.to ?? null) : null,
    utm_source: e.utm_source ?? null,
    utm_campaign: e.utm_campaign ?? null,
    ctwa_clid: e.ctwa_clid ?? null,
    external_lead_id: e.external_lead_id ?? null,
    source: 'player',
    conversion_value: null,
    conversion_currency: null,
  };
}

/** POST /api/public/conversion: one `conversion` event from the customer's server. */
export function conversionRecord(b: ConversionBody, ctx: RecordContext): PlayerEventRecord {
  const video = ownVideo(ctx, b.video_id, 'body.video_id');
  const timestamp = eventTime(b.occurred_at, ctx.received, 'body.occurred_at');
  return {
    event_id: (ctx.newId ?? newId)(),
    event_id_from_client: false,
    tenant_id: ctx.tenantId,
    video_id: video.id,
    // NOTE: a conversion without a session is keyed to one synthetic
    // server session so its partition (and order) is stable per tenant.
    session_id: b.session_id ?? 'ses_server',
    visitor_id: b.visitor_id,
    event_name: 'conversion',
    timestamp,
    received_at: ctx.received,
    current_time: 0,
    duration: video.duration_sec,
    watched_percentage: 0,
    play_ms: null,
    focus_ms: null,
    seek_from: null,
    seek_to: null,
    utm_source: null,
    utm_campaign: null,
    ctwa_clid: null,
    external_lead_id: b.external_lead_id ?? null,
    source: 'server',
    conversion_value: b.value ?? null,
    conversion_currency: b.currency ?? null,
  };
}
