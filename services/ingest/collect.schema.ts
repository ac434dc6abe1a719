import { z } from 'zod';
import { COLLECTABLE_EVENT_NAMES, WEBHOOK_EVENTS } from '../../shared/event-names.ts';
import { SESSION_ID_RE, VIDEO_ID_RE, VISITOR_ID_RE } from '../../shared/ids.ts';

export const MAX_EVENTS_PER_REQUEST = 500;
/** How far in the future an occurred_at may lie (clock skew of players). */
export const MAX_FUTURE_SKEW_MS = 5 * 60 * 1000;
/**
 * How far in the past an occurred_at may lie: a player that buffered events
 * offline sends them within days. The bound also keeps what one request can
 * spread over the `events` table's month partitions to two or three months.
 */
export const MAX_OCCURRED_AT_AGE_DAYS = 30;
export const MAX_OCCURRED_AT_AGE_MS = MAX_OCCURRED_AT_AGE_DAYS * 24 * 60 * 60 * 1000;

export const MAX_POSITION_SEC = 1e7;
export const MAX_PERCENT = 100;
export const MAX_SIGNAL_MS = 3_600_000;
export const MAX_ATTRIBUTION_LENGTH = 512;

const attribution = z.string().max(MAX_ATTRIBUTION_LENGTH).optional();

/** When an event happened, as the player or the customer's server sends it (event-record.ts checks its range). */
const occurredAt = z.iso
  .datetime({ offset: true })
  .optional()
  .meta({
    description: `When it happened (ISO 8601); from at most ${MAX_OCCURRED_AT_AGE_DAYS} days before receipt to at most 5 minutes after it. Defaults to the time of receipt.`,
  });

// A pattern rather than a refinement, so that the JSON Schema of the intake checks it too.
export const VideoIdParam = z
  .string()
  .regex(VIDEO_ID_RE, 'must be vid_<32 hex> or a UUID')
  .meta({ description: 'Video id: `vid_<32 hex>` (a UUID is also accepted)', example: 'vid_0f8fad5bd9cb469fa16570867728950e' });

export const VisitorId = z.string().regex(VISITOR_ID_RE, 'must be vis_ followed by 1–64 of [A-Za-z0-9_-]');
export const SessionId = z.string().regex(SESSION_ID_RE, 'must be ses_ followed by 1–64 of [A-Za-z0-9_-]');

const EVENT_NAMES: ReadonlySet<string> = new Set(COLLECTABLE_EVENT_NAMES);

/** Why the player may not send this event name, or undefined when it may. */
export function eventNameRefusal(name: string): string | undefined {
  if (EVENT_NAMES.has(name)) return undefined;
  const known = (WEBHOOK_EVENTS as Record<string, { origin: string }>)[name];
  if (!known) return `unknown event name; expected one of ${COLLECTABLE_EVENT_NAMES.join(', ')}`;
  return known.origin === 'server' ? `${name} is not accepted from the player; use /api/public/conversion` : `${name} is not accepted from the player: the service derives it`;
}

const eventName = z.string().superRefine((name, ctx) => {
  const refusal = eventNameRefusal(name);
  if (refusal !== undefined) ctx.addIssue({ code: 'custom', message: refusal });
});

/**
 * The player's own id of an event: its idempotency key. A UUID of RFC 9562
 * versions 1–8 (v4 or v7 are the usual choices); case is ignored. NOTE: the
 * pattern leaves out the nil and max UUIDs that z.uuid() lets through: a
 * player that sent such a constant would have every event after the first
 * taken for a retry of it.
 */
export const CLIENT_EVENT_ID_RE = /^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[1-8][0-9a-fA-F]{3}-[89abAB][0-9a-fA-F]{3}-[0-9a-fA-F]{12}$/;
export const ClientEventId = z
  .stringFormat('uuid', CLIENT_EVENT_ID_RE, {
    error: 'must be a UUID (RFC 9562, version 1–8; not the nil or max UUID)',
  })
  .meta({
    description:
      'Your own UUID for this event (RFC 9562 version 1–8, e.g. v4 or v7; case-insensitive; unique within the request), generated once when the event happens and sent again unchanged on every retry, so a retried request never records the event twice. Without it the server assigns one, and a retry of a request whose answer was lost can record its events twice.',
    example: '0192f0c4-8f3e-7b6a-9d2e-5c4b3a291807',
  });

/**
 * One event as the player sends it to /v1/collect. The intake validates it
 * with the JSON Schema derived from this schema, then with `meetsCollectRules`
 * for what JSON Schema cannot state (intake.plugin.ts).
 */
export const CollectEvent = z
  .object({
    event_id: ClientEventId.optional(),
    event_name: eventName.meta({ description: 'A player event name of spec 6.1 (not conversion nor the derived events), or the signals heartbeat and seek' }),
    video_id: VideoIdParam,
    session_id: SessionId,
    visitor_id: VisitorId,
    current_time: z.number().min(0).max(MAX_POSITION_SEC).meta({ description: 'Playback position in seconds' }),
    duration: z.number().min(0).max(MAX_POSITION_SEC).meta({ description: 'Video duration in seconds' }),
    watched_percentage: z.number().min(0).max(MAX_PERCENT),
    occurred_at: occurredAt,
    play_ms: z.number().int().min(0).max(MAX_SIGNAL_MS).optional().meta({ description: 'heartbeat: played ms since the last heartbeat' }),
    focus_ms: z.number().int().min(0).max(MAX_SIGNAL_MS).optional().meta({ description: 'heartbeat: played ms with the page focused' }),
    from: z.number().min(0).max(MAX_POSITION_SEC).optional().meta({ description: 'seek: position before, seconds' }),
    to: z.number().min(0).max(MAX_POSITION_SEC).optional().meta({ description: 'seek: position after, seconds' }),
    utm_source: attribution,
    utm_campaign: attribution,
    ctwa_clid: attribution,
    external_lead_id: attribution,
  })
  .superRefine((e, ctx) => signalRules(e, (path, message) => ctx.addIssue({ code: 'custom', path: [path], message })));
export type CollectEvent = z.infer<typeof CollectEvent>;

export const CollectBody = z.object({
  events: z
    .array(CollectEvent)
    .min(1)
    .max(MAX_EVENTS_PER_REQUEST)
    .superRefine((events, ctx) => repeatedEventIds(events, (i, message) => ctx.addIssue({ code: 'custom', path: [i, 'event_id'], message }))),
});

/**
 * The fields a signal requires, and focus_ms ≤ play_ms: rules across fields,
 * which JSON Schema cannot state. Stated here once, for CollectEvent and for
 * `meetsCollectRules`.
 */
function signalRules(e: Pick<CollectEvent, 'event_name' | 'play_ms' | 'focus_ms' | 'from' | 'to'>, report: (field: string, message: string) => void): void {
  if (e.event_name === 'heartbeat') {
    if (e.play_ms === undefined) report('play_ms', 'required for heartbeat');
    if (e.focus_ms === undefined) report('focus_ms', 'required for heartbeat');
    if (e.play_ms !== undefined && e.focus_ms !== undefined && e.focus_ms > e.play_ms) report('focus_ms', 'cannot exceed play_ms');
  } else if (e.event_name === 'seek') {
    if (e.from === undefined) report('from', 'required for seek');
    if (e.to === undefined) report('to', 'required for seek');
  }
}

/**
 * Two events of one request cannot be one event: the second would be taken
 * for a retry of the first and dropped. Case is ignored, as in UUIDs.
 */
function repeatedEventIds(events: readonly Pick<CollectEvent, 'event_id'>[], report: (index: number, message: string) => void): void {
  // Allocated only for a request whose events carry their own ids.
  let first: Map<string, number> | undefined;
  events.forEach((e, i) => {
    if (e.event_id === undefined) return;
    const id = e.event_id.toLowerCase();
    first ??= new Map();
    const seen = first.get(id);
    if (seen === undefined) first.set(id, i);
    else report(i, `repeats the event_id of events.${seen}; every event needs its own`);
  });
}

/**
 * The rules of CollectBody that its JSON Schema cannot state (event names,
 * the signals' fields, unique event ids), for a body that JSON Schema passed.
 * Answers only whether they hold: CollectBody words any refusal.
 */
export function meetsCollectRules(body: { events: readonly CollectEvent[] }): boolean {
  let ok = true;
  const fail = () => {
    ok = false;
  };
  for (const e of body.events) {
    if (eventNameRefusal(e.event_name) !== undefined) return false;
    signalRules(e, fail);
    if (!ok) return false;
  }
  repeatedEventIds(body.events, fail);
  return ok;
}

export const CollectQuery = z.object({
  key: z.string().max(200).optional().meta({ description: 'Player key, for sendBeacon bodies that cannot set headers' }),
});

export const Accepted = z.object({ accepted: z.number().int() });

/** Body of POST /api/public/conversion. */
export const ConversionBody = z.object({
  visitor_id: VisitorId,
  session_id: SessionId.optional(),
  video_id: VideoIdParam,
  external_lead_id: attribution,
  value: z.number().min(0).max(1e12).optional(),
  currency: z
    .string()
    .regex(/^[A-Z]{3}$/, 'ISO 4217 code, e.g. EUR')
    .optional(),
  occurred_at: occurredAt,
});
export type ConversionBody = z.infer<typeof ConversionBody>;

export const ConversionAccepted = z.object({ accepted: z.literal(1), event_id: z.uuid() });
