import { z } from 'zod';
import { SESSION_ID_RE, VISITOR_ID_RE } from '../shared/ids.ts';
import type { PlayerEventRecord } from './records.ts';

/**
 * A fast path in front of the zod validation of decoded player events: every
 * consumer of the player-event topic (the projector, the fan-out) runs each
 * record through `PlayerEventRecord.safeParse`, about 2.4 µs of CPU per event
 * and an output object besides, for records that are nearly always valid
 * (ingest validated them before writing). For a value that `PlayerEventRecord`
 * certainly accepts, this answers the value zod's parse would give: a new
 * plain object with exactly the schema's keys, in the schema's order, holding
 * the same values. For anything else, an invalid value or merely an unusual
 * one, it answers undefined and the caller parses with zod as before, which
 * then words every refusal (recordDecoder's `fastCheck`).
 *
 * NOTE: it does not hand back avsc's decoded value itself, though the fields
 * are the same: that is an instance of avsc's generated record class, not a
 * plain object (toStrictEqual, a prototype-aware comparison, tells them
 * apart), and a field added to the Avro schema alone would reach the
 * consumers through it, where zod strips it. Copying 23 fields into an object
 * literal costs a fraction of zod's parse.
 *
 * NOTE: it mirrors the rules of records.ts by hand; a change there needs one
 * here, and player-event-fast-check.test.ts compares the two on generated
 * values (and checks that the patterns below are the schema's). It reads each
 * field once, as zod does (`raw[key]`), and builds the result from what it
 * read; it assumes plain data as avsc decodes it: no getters or proxies, which
 * could answer zod's read differently from this one.
 */
export function plainlyValidPlayerEvent(raw: unknown): PlayerEventRecord | undefined {
  // zod's object check: any non-null object but an array (avsc's records are class instances).
  if (typeof raw !== 'object' || raw === null || Array.isArray(raw)) return undefined;
  const r = raw as Record<string, unknown>;

  const event_id = r.event_id;
  const tenant_id = r.tenant_id;
  const video_id = r.video_id;
  if (!isZodUuid(event_id) || !isZodUuid(tenant_id) || !isZodUuid(video_id)) return undefined;
  const session_id = r.session_id;
  if (typeof session_id !== 'string' || !SESSION_ID_RE.test(session_id)) return undefined;
  const visitor_id = r.visitor_id;
  if (typeof visitor_id !== 'string' || !VISITOR_ID_RE.test(visitor_id)) return undefined;
  const event_name = r.event_name;
  // NOTE: min(1) counts code points in zod, but any non-empty string has at least one.
  if (typeof event_name !== 'string' || event_name.length === 0) return undefined;
  const timestamp = r.timestamp;
  const received_at = r.received_at;
  if (!isMillis(timestamp) || !isMillis(received_at)) return undefined;
  const current_time = r.current_time;
  const duration = r.duration;
  const watched_percentage = r.watched_percentage;
  if (!isFiniteNumber(current_time) || !isFiniteNumber(duration) || !isFiniteNumber(watched_percentage)) return undefined;
  const play_ms = r.play_ms;
  const focus_ms = r.focus_ms;
  if (!isNullableInt(play_ms) || !isNullableInt(focus_ms)) return undefined;
  const seek_from = r.seek_from;
  const seek_to = r.seek_to;
  if (!isNullableFinite(seek_from) || !isNullableFinite(seek_to)) return undefined;
  const utm_source = r.utm_source;
  const utm_campaign = r.utm_campaign;
  const ctwa_clid = r.ctwa_clid;
  const external_lead_id = r.external_lead_id;
  if (!isNullableString(utm_source) || !isNullableString(utm_campaign) || !isNullableString(ctwa_clid) || !isNullableString(external_lead_id)) {
    return undefined;
  }
  const source = r.source;
  if (source !== 'player' && source !== 'server') return undefined;
  const conversion_value = r.conversion_value;
  if (!isNullableFinite(conversion_value)) return undefined;
  const conversion_currency = r.conversion_currency;
  if (!isNullableString(conversion_currency)) return undefined;
  const event_id_from_client = r.event_id_from_client;
  // NOTE: optional to zod, but the v3 reader always fills it in (false for
  // older writers), so an absent (or undefined) flag is unusual: zod decides
  // whether the output has the key.
  if (typeof event_id_from_client !== 'boolean') return undefined;

  // zod's output: the schema's keys in the schema's order, nothing else.
  return {
    event_id,
    tenant_id,
    video_id,
    session_id,
    visitor_id,
    event_name,
    timestamp,
    received_at,
    current_time,
    duration,
    watched_percentage,
    play_ms,
    focus_ms,
    seek_from,
    seek_to,
    utm_source,
    utm_campaign,
    ctwa_clid,
    external_lead_id,
    source,
    conversion_value,
    conversion_currency,
    event_id_from_client,
  };
}

/**
 * z.uuid()'s own pattern (versions 1–8 in either case, RFC variant, and the
 * nil and max UUIDs in lower case only), taken from zod rather than restated
 * so that the two cannot differ.
 */
const UUID_RE = z.regexes.uuid();
// NOTE: SESSION_ID_RE and VISITOR_ID_RE (shared/ids.ts) are the same patterns
// as PlayerEventRecord's session_id and visitor_id regexes, which the test
// checks; neither has the g or y flag, so `test` keeps no state between calls.

function isZodUuid(v: unknown): v is string {
  return typeof v === 'string' && UUID_RE.test(v);
}

/**
 * z.number().int().nonnegative(). NOTE: z.number() refuses NaN and
 * ±Infinity, and .int() takes safe integers only, which Number.isSafeInteger
 * answers in one call; -0 passes, as it does in zod, which hands it on
 * unchanged (avsc never decodes a long as -0 anyway).
 */
function isMillis(v: unknown): v is number {
  return Number.isSafeInteger(v) && (v as number) >= 0;
}

/** z.number().finite(): Avro doubles can be NaN or ±Infinity, which zod refuses. */
function isFiniteNumber(v: unknown): v is number {
  return Number.isFinite(v);
}

/** z.number().int().nullable(). */
function isNullableInt(v: unknown): v is number | null {
  return v === null || Number.isSafeInteger(v);
}

/** z.number().finite().nullable(). */
function isNullableFinite(v: unknown): v is number | null {
  return v === null || Number.isFinite(v);
}

/** z.string().nullable(). */
function isNullableString(v: unknown): v is string | null {
  return v === null || typeof v === 'string';
}
