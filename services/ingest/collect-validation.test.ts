import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { PlayerEventRecord, VideoRecord } from '../../schemas/records.ts';
import type { ConfigStore } from '../../shared/config-store/config-store.ts';
import { WEBHOOK_EVENTS, COLLECTABLE_EVENT_NAMES } from '../../shared/event-names.ts';
import { buildHttpApp, type App } from '../../shared/http/app.ts';
import { ApiError } from '../../shared/http/errors.ts';
import { toVideoId } from '../../shared/ids.ts';
import { createLogger } from '../../shared/logger.ts';
import { createMetrics } from '../../shared/metrics.ts';
import { collectEvent } from '../../test/helpers/player-event.ts';
import { CollectBody, MAX_EVENTS_PER_REQUEST, type CollectEvent } from './collect.schema.ts';
import { collectRecords, type RecordContext } from './event-record.ts';
import { collectBodyCheck, intakePlugin } from './intake.plugin.ts';
import type { PlayerEventsWriter } from './player-events.writer.ts';

/**
 * /v1/collect's validation (the JSON Schema derived from CollectBody, run by
 * ajv, then meetsCollectRules) against zod's parse of CollectBody itself:
 * whatever it accepts, zod accepts, and the body as sent builds the same
 * records as zod's output. This is what the ajv options and the derivation
 * must hold to (types not coerced, lengths in UTF-16 code units, patterns for
 * refinements). Bodies are valid ones from a generator, then mutated, mostly
 * into something invalid or unusual.
 */

const isPlainlyValidCollectBody = collectBodyCheck(CollectBody);

const TENANT = '11111111-1111-4111-8111-111111111111';
const OTHER = '22222222-2222-4222-8222-222222222222';
const video = (id: string, tenant: string): VideoRecord => ({ id, tenant_id: tenant, title: id, duration_sec: 90, created_at: 1, pitch_at_sec: null, offer_window_sec: 60 });
const OWN = [video('aaaaaaaa-aaaa-4aaa-8aaa-aaaaaaaaaaaa', TENANT), video('0f8fad5b-d9cb-469f-a165-70867728950e', TENANT)];
const FOREIGN = video('bbbbbbbb-bbbb-4bbb-8bbb-bbbbbbbbbbbb', OTHER);
const UNKNOWN = 'cccccccc-cccc-4ccc-8ccc-cccccccccccc';
const VIDEOS = [...OWN, FOREIGN];
/** After 2026-11-23T10:00:00.000Z, so that the examples' occurred_at lies in the past. */
const RECEIVED = Date.UTC(2026, 10, 23, 12, 0, 0);

const ctx = (): RecordContext => {
  let n = 0;
  return {
    tenantId: TENANT,
    received: RECEIVED,
    videoById: (id) => VIDEOS.find((v) => v.id === id),
    newId: () => `00000000-0000-4000-8000-${String(++n).padStart(12, '0')}`,
  };
};

/** The records of `events`, or the refusal collectRecords throws (unknown video, occurred_at out of range). */
function outcome(events: readonly CollectEvent[]) {
  try {
    return { records: collectRecords(events, ctx()) };
  } catch (err) {
    if (!(err instanceof ApiError)) throw err;
    return { refused: { code: err.code, status: err.status, message: err.message, errors: err.errors } };
  }
}

/** The property: a fast accept implies zod's accept and the same records (or the same refusal). */
function expectSound(body: unknown): { fast: boolean; zod: boolean } {
  const fast = isPlainlyValidCollectBody(body);
  const parsed = CollectBody.safeParse(body);
  if (fast) {
    expect(parsed.error?.issues, JSON.stringify(body)).toBeUndefined();
    expect(outcome((body as { events: CollectEvent[] }).events)).toStrictEqual(outcome(parsed.data!.events));
  }
  return { fast, zod: parsed.success };
}

// ───────────────────────────── generators ─────────────────────────────

const pad = (n: number, width: number) => String(n).padStart(width, '0');
const daysIn = (y: number, m: number) => new Date(Date.UTC(y, m, 0)).getUTCDate();
const digit = fc.constantFrom(...'0123456789');
const ID_CHARS = [...'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-'];

const suffix = (min: number, max: number) => fc.string({ unit: fc.constantFrom(...ID_CHARS), minLength: min, maxLength: max });
const sessionId = suffix(1, 64).map((s) => `ses_${s}`);
const visitorId = suffix(1, 64).map((s) => `vis_${s}`);

/** Upper, lower or mixed case. */
const anyCase = (arb: fc.Arbitrary<string>) =>
  fc.tuple(arb, fc.constantFrom('lower', 'upper', 'mixed')).map(([s, c]) =>
    c === 'lower' ? s : c === 'upper' ? s.toUpperCase() : [...s].map((ch, i) => (i % 2 ? ch.toUpperCase() : ch)).join(''),
  );
const eventId = anyCase(fc.uuid());
const videoId = fc.oneof(
  { weight: 8, arbitrary: fc.constantFrom(...OWN.flatMap((v) => [toVideoId(v.id), v.id, v.id.toUpperCase()])) },
  { weight: 1, arbitrary: fc.constantFrom(toVideoId(FOREIGN.id), FOREIGN.id, toVideoId(UNKNOWN), UNKNOWN) },
);

const position = fc.oneof(fc.constantFrom(0, -0, 1e7, 0.5, 1), fc.double({ min: 0, max: 1e7, noNaN: true }));
const percent = fc.oneof(fc.constantFrom(0, -0, 100, 99.99), fc.double({ min: 0, max: 100, noNaN: true }));
const signalMs = fc.oneof(fc.constantFrom(0, 3_600_000), fc.integer({ min: 0, max: 3_600_000 }));

/** occurred_at in the form players send: valid dates, 0–9 fraction digits, Z or an offset. */
const offset = fc
  .tuple(fc.constantFrom('+', '-'), fc.integer({ min: 0, max: 23 }), fc.integer({ min: 0, max: 59 }))
  .map(([sign, h, m]) => `${sign}${pad(h, 2)}:${pad(m, 2)}`);
const fraction = fc.oneof(fc.constant(''), fc.string({ unit: digit, minLength: 1, maxLength: 9 }).map((f) => `.${f}`));
const validDate = fc
  .record({
    y: fc.oneof({ weight: 5, arbitrary: fc.integer({ min: 2000, max: 2026 }) }, { weight: 1, arbitrary: fc.integer({ min: 0, max: 9999 }) }),
    m: fc.integer({ min: 1, max: 12 }),
    d: fc.integer({ min: 1, max: 31 }),
    h: fc.integer({ min: 0, max: 23 }),
    mi: fc.integer({ min: 0, max: 59 }),
    s: fc.integer({ min: 0, max: 59 }),
    frac: fraction,
    tz: fc.oneof(fc.constant('Z'), offset),
  })
  .map(({ y, m, d, h, mi, s, frac, tz }) => `${pad(y, 4)}-${pad(m, 2)}-${pad(Math.min(d, daysIn(y, m)), 2)}T${pad(h, 2)}:${pad(mi, 2)}:${pad(s, 2)}${frac}${tz}`);
/**
 * Dates near that form, mostly with one part wrong: Feb 29 of every kind of
 * year, the 29th–31st of every month, hour 24, second 60, empty or long
 * fractions, other offsets and separators.
 */
const mostly = <T>(valid: fc.Arbitrary<T>, invalid: fc.Arbitrary<T>) => fc.oneof({ weight: 6, arbitrary: valid }, { weight: 1, arbitrary: invalid });
const fuzzyDate = fc
  .record({
    y: fc.oneof(fc.integer({ min: 0, max: 9999 }), fc.constantFrom(0, 1600, 1900, 2000, 2023, 2024, 2026, 2100, 2400)),
    m: mostly(fc.integer({ min: 1, max: 12 }), fc.constantFrom(0, 13, 20)),
    d: mostly(fc.oneof(fc.integer({ min: 28, max: 31 }), fc.integer({ min: 1, max: 31 })), fc.constantFrom(0, 32, 39)),
    h: mostly(fc.integer({ min: 0, max: 23 }), fc.constantFrom(24, 25, 30)),
    mi: mostly(fc.integer({ min: 0, max: 59 }), fc.constantFrom(60, 61)),
    s: mostly(fc.integer({ min: 0, max: 59 }), fc.constantFrom(60, 61)),
    frac: mostly(fraction, fc.oneof(fc.constantFrom('.', ',5', '.5e1', '.-1', '. 5'), fc.string({ unit: digit, minLength: 10, maxLength: 14 }).map((f) => `.${f}`))),
    sep: mostly(fc.constant('T'), fc.constantFrom('t', ' ', '')),
    tz: mostly(fc.oneof(fc.constant('Z'), offset), fc.constantFrom('', 'z', '+0100', '+24:00', '-00:60', '+1:00', '+01', 'Z\n', ' Z', 'UTC', '+01:00:00')),
  })
  .map(({ y, m, d, h, mi, s, frac, sep, tz }) => `${pad(y, 4)}-${pad(m, 2)}-${pad(d, 2)}${sep}${pad(h, 2)}:${pad(mi, 2)}:${pad(s, 2)}${frac}${tz}`);

/** `units` code units of a character of one or of two code units (a lone surrogate included). */
const ofLength = (min: number, max: number) =>
  fc.tuple(fc.constantFrom('a', 'é', '😀', '\ud800'), fc.integer({ min, max })).map(([c, units]) => c.repeat(Math.ceil(units / c.length)));
/** Valid attribution strings, up to the 512 code unit limit. */
const attribution = fc.oneof(
  { weight: 4, arbitrary: fc.string({ maxLength: 20 }) },
  { weight: 1, arbitrary: fc.string({ unit: 'binary', maxLength: 20 }) },
  { weight: 1, arbitrary: ofLength(500, 512).filter((s) => s.length <= 512) },
);

const opt = <T>(arb: fc.Arbitrary<T>) => fc.option(arb, { nil: undefined, freq: 2 });

/** A valid event of any collectable name; optional fields are present only when set, as in JSON. */
const validEvent = fc
  .record({
    event_name: fc.constantFrom(...COLLECTABLE_EVENT_NAMES),
    video_id: videoId,
    session_id: sessionId,
    visitor_id: visitorId,
    current_time: position,
    duration: position,
    watched_percentage: percent,
    event_id: opt(eventId),
    occurred_at: opt(validDate),
    play_ms: signalMs,
    focus_share: fc.double({ min: 0, max: 1, noNaN: true }),
    from: position,
    to: position,
    // Signal fields on other events are allowed (and ignored).
    signal_fields_anyway: fc.boolean(),
    utm_source: opt(attribution),
    utm_campaign: opt(attribution),
    ctwa_clid: opt(attribution),
    external_lead_id: opt(attribution),
    x_unknown: opt(fc.jsonValue({ maxDepth: 2 })),
  })
  .map(({ focus_share, play_ms, from, to, signal_fields_anyway, ...e }) => {
    const out: Record<string, unknown> = {};
    for (const [k, v] of Object.entries(e)) if (v !== undefined) out[k] = v;
    if (e.event_name === 'heartbeat' || signal_fields_anyway) Object.assign(out, { play_ms, focus_ms: Math.floor(play_ms * focus_share) });
    if (e.event_name === 'seek' || signal_fields_anyway) Object.assign(out, { from, to });
    return out;
  });

const validBody = fc
  .record({ events: fc.array(validEvent, { minLength: 1, maxLength: 6 }), extra: opt(fc.jsonValue({ maxDepth: 1 })) })
  .map(({ events, extra }) => (extra === undefined ? { events } : { events, x_extra: extra }));

const FIELDS = [
  'event_id', 'event_name', 'video_id', 'session_id', 'visitor_id', 'current_time', 'duration', 'watched_percentage', 'occurred_at',
  'play_ms', 'focus_ms', 'from', 'to', 'utm_source', 'utm_campaign', 'ctwa_clid', 'external_lead_id',
] as const;
/** The next double above a positive `x`. */
const nextUp = (x: number) => {
  const bits = new BigInt64Array(new Float64Array([x]).buffer);
  bits[0]! += 1n;
  return new Float64Array(bits.buffer)[0]!;
};
/** Values for any field: wrong types, boundaries just outside (and on) the ranges, other fields' values. */
const anyValue = fc.oneof(
  fc.constantFrom(null, undefined, true, '', 'x', [], {}, '12', 0, -0, -1, -Number.MIN_VALUE, 1.5, 100, nextUp(100), 1e7, nextUp(1e7)),
  fc.constantFrom(3_600_000, 3_600_001, nextUp(3_600_000), NaN, Infinity, -Infinity, 1e300, Number.MAX_SAFE_INTEGER + 2, 2 ** 53),
  fc.constantFrom(...Object.keys(WEBHOOK_EVENTS), 'VIDEO_PLAY', 'heartbeat', 'seek', 'toString', '__proto__', 'video_play '),
  fc.constantFrom('ses_', 'vis_', 'ses_é', `ses_${'a'.repeat(65)}`, 'SES_a', 'vis_a\n', 'vid_' + 'A'.repeat(32), 'vid_' + 'a'.repeat(31), `vid_${'0'.repeat(32)}x`),
  fc.constantFrom('00000000-0000-0000-0000-000000000000', 'ffffffff-ffff-ffff-ffff-ffffffffffff', '0192f0c4-8f3e-9b6a-9d2e-5c4b3a291807', '0192f0c4-8f3e-7b6a-cd2e-5c4b3a291807'),
  fc.uuid({ version: [1, 4, 7, 8, 9, 15] }),
  eventId,
  videoId,
  sessionId,
  visitorId,
  suffix(60, 70).map((s) => `vis_${s}`),
  validDate,
  fuzzyDate,
  fuzzyDate.map((d) => ` ${d}`),
  attribution,
  ofLength(510, 520),
  fc.double(),
  fc.integer({ min: -10, max: 4_000_000 }),
);

class Thing {}
type Body = { events: unknown } & Record<string, unknown>;
type Mutation = (body: Body) => void;
const events = (b: Body) => (Array.isArray(b.events) ? (b.events as Record<string, unknown>[]) : []);
/** The event `i` (mod the count) of a body, when it has one that is an object. */
const at = (b: Body, i: number) => {
  const list = events(b);
  const e = list[i % Math.max(list.length, 1)];
  return typeof e === 'object' && e !== null ? e : undefined;
};

/** Per field, values on either side of its rules' edges. */
const aroundPosition = (max: number) =>
  fc.oneof(
    fc.constantFrom(0, -0, max, nextUp(max), max + 1, -Number.MIN_VALUE, -1, NaN, Infinity, -Infinity, String(max / 2), null),
    fc.double({ min: max - 1, max: max + 1 }),
    fc.double(),
  );
const aroundMs = fc.oneof(
  fc.constantFrom(0, -0, 3_600_000, 3_600_001, nextUp(3_600_000), 0.5, -1, NaN, Infinity, '5', null),
  fc.double({ min: -2, max: 10 }),
  fc.integer({ min: 3_599_990, max: 3_600_010 }),
);
const aroundId = (prefix: string) =>
  fc
    .tuple(
      fc.constantFrom(prefix, prefix.toUpperCase(), prefix.slice(0, 3), ''),
      fc.string({ unit: fc.constantFrom(...ID_CHARS, ' ', '.', 'é', '\n'), minLength: 0, maxLength: 66 }),
    )
    .map(([p, rest]) => p + rest);
const hexOf = (min: number, max: number) => fc.string({ unit: fc.constantFrom(...'0123456789abcdefABCDEFg'), minLength: min, maxLength: max });
const NEAR: Record<(typeof FIELDS)[number], fc.Arbitrary<unknown>> = {
  event_id: fc.oneof(
    anyCase(fc.uuid({ version: [1, 2, 3, 4, 5, 6, 7, 8, 9, 15] })),
    fc.constantFrom('00000000-0000-0000-0000-000000000000', 'ffffffff-ffff-ffff-ffff-ffffffffffff', '0192f0c4-8f3e-7b6a-cd2e-5c4b3a291807', '0192f0c4-8f3e-0b6a-9d2e-5c4b3a291807'),
    fc.tuple(fc.uuid(), fc.nat({ max: 35 }), fc.constantFrom('g', 'G', '-', '', 'aa')).map(([u, i, c]) => u.slice(0, i) + c + u.slice(i + 1)),
  ),
  event_name: fc.constantFrom(...Object.keys(WEBHOOK_EVENTS), ...COLLECTABLE_EVENT_NAMES.map((n) => n.toUpperCase()), 'heartbeat', 'seek', 'toString', '__proto__', 'seek '),
  video_id: fc.oneof(
    anyCase(hexOf(30, 34).map((h) => `vid_${h}`)),
    anyCase(fc.uuid({ version: [1, 4, 9, 15] })),
    fc.constantFrom(`vid_${'0'.repeat(32)}`, `VID_${'0'.repeat(32)}`, toVideoId(UNKNOWN), OWN[0]!.id.replaceAll('-', '')),
  ),
  session_id: aroundId('ses_'),
  visitor_id: aroundId('vis_'),
  current_time: aroundPosition(1e7),
  duration: aroundPosition(1e7),
  watched_percentage: aroundPosition(100),
  occurred_at: fc.oneof({ weight: 4, arbitrary: fuzzyDate }, { weight: 1, arbitrary: validDate }),
  play_ms: aroundMs,
  focus_ms: aroundMs,
  from: aroundPosition(1e7),
  to: aroundPosition(1e7),
  utm_source: ofLength(505, 520),
  utm_campaign: ofLength(505, 520),
  ctwa_clid: ofLength(505, 520),
  external_lead_id: fc.oneof(ofLength(505, 520), fc.constantFrom(null, 1, [], {})),
};

const mutation: fc.Arbitrary<Mutation> = fc.oneof(
  // A field set to something else (possibly still valid), or removed.
  {
    weight: 20,
    arbitrary: fc
      .constantFrom(...FIELDS)
      .chain((k) => fc.tuple(fc.nat(), fc.constant(k), fc.oneof({ weight: 3, arbitrary: NEAR[k] }, { weight: 1, arbitrary: anyValue })))
      .map(([i, k, v]): Mutation => (b) => void (at(b, i) && (at(b, i)![k] = v))),
  },
  { weight: 3, arbitrary: fc.tuple(fc.nat(), fc.constantFrom(...FIELDS)).map(([i, k]): Mutation => (b) => void (at(b, i) && delete at(b, i)![k])) },
  // Heartbeats and seeks with a field missing or focus over play.
  {
    weight: 2,
    arbitrary: fc.tuple(fc.nat(), fc.constantFrom('heartbeat', 'seek'), fc.constantFrom('play_ms', 'focus_ms', 'from', 'to', 'none')).map(
      ([i, name, drop]): Mutation =>
        (b) => {
          const e = at(b, i);
          if (!e) return;
          Object.assign(e, { event_name: name, play_ms: 10, focus_ms: 10, from: 1, to: 2 });
          if (drop !== 'none') delete e[drop];
        },
    ),
  },
  { weight: 2, arbitrary: fc.tuple(fc.nat(), fc.integer({ min: -2, max: 2 })).map(([i, d]): Mutation => (b) => void (at(b, i) && Object.assign(at(b, i)!, { event_name: 'heartbeat', play_ms: 1000, focus_ms: 1000 + d }))) },
  // One event_id twice in one request, in another case.
  {
    weight: 3,
    arbitrary: fc.tuple(fc.nat(), fc.nat(), eventId, fc.boolean()).map(
      ([i, j, id, upper]): Mutation =>
        (b) => {
          const [e, f] = [at(b, i), at(b, j)];
          if (!e || !f) return;
          e.event_id ??= id;
          f.event_id = upper ? String(e.event_id).toUpperCase() : String(e.event_id).toLowerCase();
        },
    ),
  },
  // Counts at and beyond the bounds.
  {
    weight: 2,
    arbitrary: fc.constantFrom(0, MAX_EVENTS_PER_REQUEST, MAX_EVENTS_PER_REQUEST + 1).map(
      (n): Mutation =>
        (b) => {
          const first = events(b)[0];
          b.events = Array.from({ length: n }, () => ({ ...first, event_id: undefined }));
          for (const e of b.events as Record<string, unknown>[]) delete e.event_id;
        },
    ),
  },
  // Other shapes where objects and arrays are expected, and prototype tricks.
  {
    weight: 3,
    arbitrary: fc.tuple(fc.nat(), fc.constantFrom('array', 'null', 'null-proto', 'class', 'inherits', 'proxy', 'proto-key', 'proto-set', 'getter')).map(
      ([i, kind]): Mutation =>
        (b) => {
          const list = events(b);
          const k = i % Math.max(list.length, 1);
          const e = list[k];
          if (typeof e !== 'object' || e === null) return;
          const replaced = {
            array: () => Object.values(e),
            null: () => null,
            'null-proto': () => Object.assign(Object.create(null), e),
            class: () => Object.assign(new Thing(), e),
            // Every field inherited, none own.
            inherits: () => Object.create(e),
            proxy: () => new Proxy(e, {}),
            'proto-key': () => Object.defineProperty({ ...e }, '__proto__', { value: { event_name: 'seek' }, enumerable: true }),
            'proto-set': () => Object.setPrototypeOf({ ...e }, { play_ms: 5, focus_ms: 5 }),
            getter: () => Object.defineProperty({ ...e }, 'current_time', { get: () => 5, set: () => {}, enumerable: true, configurable: true }),
          }[kind]();
          list[k] = replaced;
        },
    ),
  },
  {
    weight: 2,
    arbitrary: fc.constantFrom('object', 'string', 'null', 'sparse', 'array-body', 'null-proto-body', 'events-missing').map(
      (kind): Mutation =>
        (b) => {
          const list = events(b);
          if (kind === 'object') b.events = { ...list };
          if (kind === 'string') b.events = JSON.stringify(list);
          if (kind === 'null') b.events = null;
          if (kind === 'sparse') b.events = Object.assign(new Array(list.length + 1), list);
          if (kind === 'events-missing') delete b.events;
          // Stand-ins for a body of another shape: `mutated` returns `__replace` when set.
          if (kind === 'array-body') b.__replace = [{ events: list }];
          if (kind === 'null-proto-body') b.__replace = Object.assign(Object.create(null), { events: list });
        },
    ),
  },
  // Unknown keys, in the body and in events.
  { weight: 2, arbitrary: fc.tuple(fc.nat(), fc.string(), fc.jsonValue({ maxDepth: 1 })).map(([i, k, v]): Mutation => (b) => void (at(b, i) && !FIELDS.includes(k as never) && (at(b, i)![k] = v))) },
);

/** A deep copy that keeps -0, NaN and undefined (structuredClone does). */
const copy = <T>(v: T): T => structuredClone(v);

function mutated(base: Body, mutations: Mutation[]): unknown {
  const body = copy(base);
  for (const m of mutations) m(body);
  return '__replace' in body ? body.__replace : body;
}

// ─────────────────────────────── tests ───────────────────────────────

describe('the JSON Schema check of CollectBody', () => {
  it('accepts every generated valid body, and zod does too with the same records', () => {
    let accepted = 0;
    let runs = 0;
    fc.assert(
      fc.property(validBody, (body) => {
        runs++;
        const { fast, zod } = expectSound(body);
        expect(zod, JSON.stringify(body)).toBe(true);
        if (fast) accepted++;
        // The JSON form of the body (-0 becomes 0) as the route gets it.
        expectSound(JSON.parse(JSON.stringify(body)));
      }),
      { numRuns: 1500 },
    );
    // Every valid body of the forms the generator makes is fast; any fallback here is a lost speed-up.
    expect(accepted).toBe(runs);
  });

  it('accepts only what zod accepts, with the same records, when valid bodies are mutated', () => {
    const seen = { fast: 0, zodOnly: 0, neither: 0 };
    fc.assert(
      fc.property(validBody, fc.array(mutation, { minLength: 1, maxLength: 3 }), (base, mutations) => {
        const body = mutated(base, mutations);
        const { fast, zod } = expectSound(body);
        seen[fast ? 'fast' : zod ? 'zodOnly' : 'neither']++;
        if (typeof body === 'object' && body !== null) expectSound(JSON.parse(JSON.stringify(body)));
      }),
      { numRuns: 4000 },
    );
    // Both sides of the check were exercised: mutations that keep a body valid, and ones that break it.
    expect(seen.fast).toBeGreaterThan(200);
    expect(seen.neither).toBeGreaterThan(1000);
  });

  it('accepts an occurred_at only when zod does, and most valid ones', () => {
    const seen = { fast: 0, zodOnly: 0, neither: 0 };
    fc.assert(
      fc.property(validEvent, fuzzyDate, (e, occurred_at) => {
        const { fast, zod } = expectSound({ events: [{ ...e, occurred_at }] });
        seen[fast ? 'fast' : zod ? 'zodOnly' : 'neither']++;
      }),
      { numRuns: 5000 },
    );
    expect(seen.fast).toBeGreaterThan(1000);
    expect(seen.neither).toBeGreaterThan(1000);
  });

  const ev = (over: Record<string, unknown> = {}) => collectEvent(toVideoId(OWN[0]!.id), over);
  const fastAndZod = (...events: unknown[]) => {
    const body = { events };
    expect(CollectBody.safeParse(body).success, JSON.stringify(body)).toBe(true);
    return isPlainlyValidCollectBody(body);
  };

  it('accepts the common shapes: heartbeat, seek, a client event_id and occurred_at, UUID video ids, 512 code units', () => {
    expect(fastAndZod(ev())).toBe(true);
    expect(fastAndZod(ev({ event_name: 'heartbeat', play_ms: 5000, focus_ms: 4000 }))).toBe(true);
    expect(fastAndZod(ev({ event_name: 'heartbeat', play_ms: 0, focus_ms: 0 }))).toBe(true);
    expect(fastAndZod(ev({ event_name: 'seek', from: 40, to: 10 }))).toBe(true);
    expect(fastAndZod(ev({ event_id: '0192f0c4-8f3e-7b6a-9d2e-5c4b3a291807', occurred_at: '2026-11-23T10:00:00.000Z' }))).toBe(true);
    expect(fastAndZod(ev({ event_id: '0192F0C4-8F3E-7B6A-9D2E-5C4B3A291807', occurred_at: '2026-11-23T11:00:00+01:00' }))).toBe(true);
    expect(fastAndZod(ev({ occurred_at: '2024-02-29T23:59:59.123456789-05:30' }), ev({ occurred_at: '2000-02-29T00:00:00Z' }))).toBe(true);
    expect(fastAndZod(ev({ video_id: OWN[0]!.id }), ev({ video_id: OWN[0]!.id.toUpperCase() }))).toBe(true);
    expect(fastAndZod(ev({ utm_source: 'a'.repeat(512), utm_campaign: '😀'.repeat(256), ctwa_clid: '', external_lead_id: 'crm-1' }))).toBe(true);
    expect(fastAndZod(ev({ current_time: 1e7, duration: 0, watched_percentage: 100, x_player: { v: 2 } }))).toBe(true);
    expect(fastAndZod(...Array.from({ length: MAX_EVENTS_PER_REQUEST }, () => ev()))).toBe(true);
  });

  it('refuses what zod refuses: types, bounds, patterns, dates, signals, names, repeated ids', () => {
    const no = (body: unknown) => expect(isPlainlyValidCollectBody(body), JSON.stringify(body)).toBe(false);
    const noEvent = (over: Record<string, unknown>) => no({ events: [ev(over)] });
    // Invalid for zod too.
    for (const v of [null, undefined, 1.5, -1, 3_600_001, '10', NaN, Infinity]) noEvent({ event_name: 'heartbeat', play_ms: v, focus_ms: 0 });
    noEvent({ event_name: 'heartbeat', play_ms: 10 });
    noEvent({ event_name: 'heartbeat', play_ms: 10, focus_ms: 11 });
    noEvent({ event_name: 'seek', from: 1 });
    noEvent({ event_name: 'seek', from: null, to: 1 });
    noEvent({ utm_source: null });
    noEvent({ utm_campaign: 'a'.repeat(513) });
    noEvent({ ctwa_clid: '😀'.repeat(257) });
    noEvent({ event_name: 'conversion' });
    noEvent({ event_name: 'VIDEO_PLAY' });
    noEvent({ event_name: 'toString' });
    noEvent({ video_id: `vid_${'A'.repeat(32)}` });
    noEvent({ session_id: `ses_${'a'.repeat(65)}` });
    noEvent({ visitor_id: 'vis_a b' });
    noEvent({ current_time: nextUp(1e7) });
    noEvent({ watched_percentage: -Number.MIN_VALUE });
    noEvent({ event_id: '00000000-0000-0000-0000-000000000000' });
    noEvent({ occurred_at: '2026-02-29T00:00:00Z' });
    noEvent({ occurred_at: '1900-02-29T00:00:00Z' });
    noEvent({ occurred_at: '2026-04-31T00:00:00Z' });
    noEvent({ occurred_at: '2026-11-23T10:00:00' });
    noEvent({ occurred_at: '2026-11-23 10:00:00Z' });
    noEvent({ occurred_at: '2026-11-23T10:00Z' });
    noEvent({ occurred_at: '2026-11-23T10:00:00Z\n' });
    noEvent({ occurred_at: '2026-11-23T10:00:00.Z' });
    noEvent({ occurred_at: '2026-11-23T10:00:00+24:00' });
    noEvent({ occurred_at: '2026-11-23T24:00:00Z' });
    noEvent({ occurred_at: '2026-11-23T10:00:60Z' });
    no({ events: [ev({ event_id: '0192f0c4-8f3e-7b6a-9d2e-5c4b3a291807' }), ev({ event_id: '0192F0C4-8F3E-7B6A-9D2E-5C4B3A291807' })] });
    no({ events: [] });
    no({ events: Array.from({ length: MAX_EVENTS_PER_REQUEST + 1 }, () => ev()) });
    no({ events: ev() });
    no([{ events: [ev()] }]);
    no({ events: [Object.values(ev())] });
    no(null);
    // Valid for zod and for the JSON Schema alike: longer fractions, other prototypes.
    const both = (body: unknown) => {
      expect(CollectBody.safeParse(body).success).toBe(true);
      expect(isPlainlyValidCollectBody(body), JSON.stringify(body)).toBe(true);
      expectSound(body);
    };
    both({ events: [ev({ occurred_at: '2026-11-23T10:00:00.0000000001Z' })] });
    both({ events: [Object.assign(Object.create(null), ev())] });
    both({ events: [Object.assign(new Thing(), ev())] });
    both(Object.assign(Object.create(null), { events: [ev()] }));
  });
});

describe('POST /v1/collect with the JSON Schema check', () => {
  let app: App;
  const written: PlayerEventRecord[][] = [];
  let seen: unknown;

  beforeAll(async () => {
    app = await buildHttpApp({ log: createLogger({ level: 'silent' }), metrics: createMetrics(), bodyLimit: 1 << 20, version: 't' });
    // What the handler gets as req.body: the body as sent (fast path) or zod's output (unknown keys stripped).
    app.addHook('preHandler', async (req) => {
      seen = req.body;
    });
    const tenant = { id: TENANT, player_key: 'pk_test', allowed_origins: [], previous_player_key: null, previous_player_key_expires_at: null, suspended_at: null };
    const store = { tenantByPlayerKey: (key: string) => (key === 'pk_test' ? tenant : undefined), videos: new Map(VIDEOS.map((v) => [v.id, v])) };
    const writer = {
      refuseIfOverloaded: () => {},
      overloaded: (why: string) => new ApiError('unavailable', why),
      write: async (records: readonly PlayerEventRecord[]) => void written.push([...records]),
    };
    await app.register(intakePlugin, {
      store: store as unknown as ConfigStore,
      writer: writer as unknown as PlayerEventsWriter,
      apiKeyAuth: async () => {},
      now: () => RECEIVED,
      config: { INGEST_MAX_IN_FLIGHT_REQUESTS: 10, PLAYER_KEY_EVENTS_PER_MINUTE: 0, CLIENT_ADDRESS_REQUESTS_PER_MINUTE: 0 },
    });
  });
  afterAll(async () => app?.close());

  const post = (body: unknown) => app.inject({ method: 'POST', url: '/v1/collect', headers: { 'x-player-key': 'pk_test' }, payload: body as object });
  const e = (over: Record<string, unknown>) => ({
    event_name: 'heartbeat',
    video_id: toVideoId(OWN[0]!.id),
    session_id: 'ses_1',
    visitor_id: 'vis_1',
    current_time: 1,
    duration: 90,
    watched_percentage: 1,
    play_ms: 5000,
    focus_ms: 4000,
    x_unknown: 1,
    ...over,
  });

  it('takes a valid body as sent, and writes the same records as from zod\'s output', async () => {
    const id = '0192f0c4-8f3e-7b6a-9d2e-5c4b3a291807';
    const body = { events: [e({ event_id: id, occurred_at: '2026-11-23T10:00:00.0000000000Z' })], x_extra: true };

    const a = await post(body);
    expect(a.statusCode, a.body).toBe(202);
    // As sent: the unknown keys zod would strip are still there.
    expect(seen).toEqual(body);
    expect(written).toHaveLength(1);
    expect(written[0]).toStrictEqual(collectRecords(CollectBody.parse(body).events, { ...ctx(), newId: undefined }));
  });

  it('answers an invalid body with zod\'s 422, paths and wording', async () => {
    const res = await post({ events: [e({ focus_ms: 6000 })] });
    expect(res.statusCode).toBe(422);
    expect(res.json()).toMatchObject({
      detail: 'body.events.0.focus_ms: cannot exceed play_ms',
      errors: [{ path: 'body.events.0.focus_ms', message: 'cannot exceed play_ms' }],
    });
  });
});
