import { COLLECTABLE_EVENT_NAMES } from '../../shared/event-names.ts';
import { SESSION_ID_RE, VID_RE, VISITOR_ID_RE, isUuid } from '../../shared/ids.ts';
import { CLIENT_EVENT_ID_RE, MAX_ATTRIBUTION_LENGTH, MAX_EVENTS_PER_REQUEST, MAX_PERCENT, MAX_POSITION_SEC, MAX_SIGNAL_MS } from './collect.schema.ts';

/**
 * A fast path in front of the zod validation of POST /v1/collect bodies: zod
 * costs about 3 µs of CPU per event, and allocates an output object per
 * event, for bodies that are nearly always valid. The check answers true
 * only for a body that `CollectBody` certainly accepts and whose parsed value
 * builds the same records as the body itself (zod only strips unknown keys,
 * which `collectRecords` never reads), so the route may take the body as it
 * is. Anything else, an invalid body or merely an unusual one, answers false
 * and goes through zod as before, which then words every refusal.
 *
 * NOTE: it mirrors the rules of collect.schema.ts by hand; a change there
 * needs one here, and collect-fast-check.test.ts compares the two on
 * generated bodies. It reads each field as zod does (`event[key]`), and
 * assumes the body is plain data as JSON.parse makes it: no getters or
 * proxies, which could answer a second read differently from the first.
 */
export function isPlainlyValidCollectBody(body: unknown): boolean {
  if (!isJsonObject(body)) return false;
  const events = (body as { events?: unknown }).events;
  if (!Array.isArray(events) || Object.getPrototypeOf(events) !== Array.prototype) return false;
  const n = events.length;
  if (n < 1 || n > MAX_EVENTS_PER_REQUEST) return false;
  // Allocated only for a request whose events carry their own ids.
  let ids: Set<string> | undefined;
  for (let i = 0; i < n; i++) {
    const e: unknown = events[i];
    if (!isPlainlyValidEvent(e)) return false;
    const id = (e as { event_id?: string }).event_id;
    if (id === undefined) continue;
    // Case is ignored, as CollectBody's duplicate check does; a repeat is left to zod to word.
    const key = id.toLowerCase();
    ids ??= new Set();
    if (ids.has(key)) return false;
    ids.add(key);
  }
  return true;
}

const EVENT_NAMES: ReadonlySet<string> = new Set(COLLECTABLE_EVENT_NAMES);

/**
 * A plain object as JSON.parse makes it. NOTE: stricter than zod's object
 * check (which takes any non-array object, class instances included): other
 * prototypes are rare enough to leave to zod.
 */
function isJsonObject(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && Object.getPrototypeOf(v) === Object.prototype;
}

function isPlainlyValidEvent(v: unknown): boolean {
  if (!isJsonObject(v)) return false;
  const name = v.event_name;
  if (typeof name !== 'string' || !EVENT_NAMES.has(name)) return false;
  const videoId = v.video_id;
  if (typeof videoId !== 'string' || !(VID_RE.test(videoId) || isUuid(videoId))) return false;
  const sessionId = v.session_id;
  if (typeof sessionId !== 'string' || !SESSION_ID_RE.test(sessionId)) return false;
  const visitorId = v.visitor_id;
  if (typeof visitorId !== 'string' || !VISITOR_ID_RE.test(visitorId)) return false;
  if (!inRange(v.current_time, MAX_POSITION_SEC) || !inRange(v.duration, MAX_POSITION_SEC) || !inRange(v.watched_percentage, MAX_PERCENT)) {
    return false;
  }

  // Optional fields: absent (undefined) or valid; null is not absent to zod.
  const eventId = v.event_id;
  if (eventId !== undefined && (typeof eventId !== 'string' || !CLIENT_EVENT_ID_RE.test(eventId))) return false;
  const occurredAt = v.occurred_at;
  if (occurredAt !== undefined && (typeof occurredAt !== 'string' || !isPlainDateTime(occurredAt))) return false;
  const playMs = v.play_ms;
  const focusMs = v.focus_ms;
  if (playMs !== undefined && !isSignalMs(playMs)) return false;
  if (focusMs !== undefined && !isSignalMs(focusMs)) return false;
  const from = v.from;
  const to = v.to;
  if (from !== undefined && !inRange(from, MAX_POSITION_SEC)) return false;
  if (to !== undefined && !inRange(to, MAX_POSITION_SEC)) return false;
  if (!isAttribution(v.utm_source) || !isAttribution(v.utm_campaign) || !isAttribution(v.ctwa_clid) || !isAttribution(v.external_lead_id)) {
    return false;
  }

  // CollectEvent's superRefine.
  if (name === 'heartbeat') return playMs !== undefined && focusMs !== undefined && (focusMs as number) <= (playMs as number);
  if (name === 'seek') return from !== undefined && to !== undefined;
  return true;
}

/**
 * A finite number in [0, max], as z.number().min(0).max(max) takes it: NaN
 * fails both comparisons, ±Infinity one. NOTE: -0 passes, as it does in zod,
 * which hands it on unchanged, so the records are the same either way.
 */
function inRange(v: unknown, max: number): boolean {
  return typeof v === 'number' && v >= 0 && v <= max;
}

function isSignalMs(v: unknown): boolean {
  return inRange(v, MAX_SIGNAL_MS) && Number.isInteger(v);
}

/** Absent, or a string of at most 512 UTF-16 code units (z.string().max() counts `.length`). */
function isAttribution(v: unknown): boolean {
  return v === undefined || (typeof v === 'string' && v.length <= MAX_ATTRIBUTION_LENGTH);
}

/**
 * `YYYY-MM-DDTHH:MM:SS`, 1–9 fraction digits, then `Z` or `±HH:MM`: the form
 * players send, and a subset of what z.iso.datetime({ offset: true }) takes
 * (which also allows longer fractions). The day of the month is checked
 * below, as zod's pattern does, leap years included.
 */
const DATE_TIME_RE = /^\d{4}-(?:0[1-9]|1[0-2])-(?:0[1-9]|[12]\d|3[01])T(?:[01]\d|2[0-3]):[0-5]\d:[0-5]\d(?:\.\d{1,9})?(?:Z|[+-](?:[01]\d|2[0-3]):[0-5]\d)$/;

function isPlainDateTime(s: string): boolean {
  if (!DATE_TIME_RE.test(s)) return false;
  const day = digits(s, 8, 2);
  if (day <= 28) return true;
  const month = digits(s, 5, 2);
  if (month === 2) {
    const year = digits(s, 0, 4);
    return day === 29 && year % 4 === 0 && (year % 100 !== 0 || year % 400 === 0);
  }
  return day <= 30 || month === 1 || month === 3 || month === 5 || month === 7 || month === 8 || month === 10 || month === 12;
}

/** The decimal number of `length` ASCII digits of `s` from `at` (already matched as digits). */
function digits(s: string, at: number, length: number): number {
  let n = 0;
  for (let i = at; i < at + length; i++) n = n * 10 + (s.charCodeAt(i) - 48);
  return n;
}
