import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import avro from 'avsc';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { COLLECTABLE_EVENT_NAMES } from '../shared/event-names.ts';
import { SESSION_ID_RE, VISITOR_ID_RE } from '../shared/ids.ts';
import { PoisonRecordError, recordDecoder, type RecordDecoder } from '../shared/kafka/poison.ts';
import { PLAYER_EVENT } from '../test/helpers/player-event.ts';
import { plainlyValidPlayerEvent } from './player-event-fast-check.ts';
import { PlayerEventRecord } from './records.ts';
import { SchemaRegistry } from './registry.ts';

/**
 * The fast path of the player-event decoders against zod itself: whatever it
 * accepts, zod accepts, and its value is zod's output (same keys in the same
 * order, same values, a plain object). Values are valid records from a
 * generator, then mutated, mostly into something invalid or unusual; both as
 * plain objects and as bytes through the Avro writers of every version.
 */

const registry = SchemaRegistry.fromManifest();
const avsc = (file: string) => avro.Type.forSchema(JSON.parse(readFileSync(join(import.meta.dirname, 'avro', file), 'utf8')) as avro.Schema);
const V1 = avsc('player-event.v1.avsc');
const V2 = avsc('player-event.v2.avsc');
const V3 = avsc('player-event.v3.avsc');
const KEYS = Object.keys(PlayerEventRecord.shape) as (keyof PlayerEventRecord)[];

/** Confluent wire format around an Avro body: magic 0, then the schema id. */
const framed = (id: number, body: Buffer) => Buffer.concat([Buffer.from([0, 0, 0, 0, id]), body]);

/** The bytes of `value` as each writer version writes it (v1 and v2 ignore the fields they lack), or none where Avro refuses it. */
function encodings(value: unknown): { version: number; bytes: Buffer }[] {
  const out: { version: number; bytes: Buffer }[] = [];
  const attempt = (version: number, encode: () => Buffer) => {
    try {
      out.push({ version, bytes: encode() });
    } catch {
      // Avro refuses many wrong types (a string for a double, a fraction for a long, an unknown enum symbol).
    }
  };
  attempt(3, () => registry.encode('player-event', value));
  attempt(2, () => framed(2, V2.toBuffer(value)));
  attempt(1, () => framed(1, V1.toBuffer(value)));
  return out;
}

/** The same value, to the key order and the prototype: toStrictEqual checks neither order nor, for plain objects, this precisely. */
function expectSameValue(fast: unknown, zod: unknown, label: string) {
  expect(fast, label).toStrictEqual(zod);
  expect(Object.getPrototypeOf(fast), label).toBe(Object.prototype);
  expect(Object.keys(fast as object), label).toEqual(Object.keys(zod as object));
  expect(JSON.stringify(fast), label).toBe(JSON.stringify(zod));
}

const show = (v: unknown) => {
  try {
    return JSON.stringify(v, (_k, x: unknown) => (typeof x === 'number' && !Number.isFinite(x) ? String(x) : typeof x === 'bigint' ? `${x}n` : x));
  } catch {
    return String(v);
  }
};

/**
 * The property: a fast answer implies zod's accept and zod's value. NOTE: the
 * check is also exact here (it refuses only what zod refuses, and a record
 * without a boolean event_id_from_client, which it leaves to zod on purpose),
 * so that a fast path that merely falls back more often also fails.
 */
function expectSound(raw: unknown): { fast: boolean; zod: boolean } {
  const fast = plainlyValidPlayerEvent(raw);
  const parsed = PlayerEventRecord.safeParse(raw);
  const label = show(raw);
  if (fast !== undefined) {
    expect(parsed.error?.issues, label).toBeUndefined();
    expectSameValue(fast, parsed.data, label);
    expect(fast, label).not.toBe(raw);
  }
  const expected = parsed.success && typeof parsed.data.event_id_from_client === 'boolean';
  expect(fast !== undefined, `exactness: ${label}`).toBe(expected);
  return { fast: fast !== undefined, zod: parsed.success };
}

type Outcome = { value: unknown } | { tombstone: true } | { poison: { name: string; reason: string; message: string } };

function outcome(decode: RecordDecoder<PlayerEventRecord>, value: Buffer | null): Outcome {
  try {
    const d = decode({ value });
    return d.kind === 'value' ? { value: d.value } : { tombstone: true };
  } catch (err) {
    if (!(err instanceof PoisonRecordError)) throw err;
    return { poison: { name: err.name, reason: err.reason, message: err.message } };
  }
}

const slowDecoder = recordDecoder(registry, 'player-event', PlayerEventRecord);
let fastTaken = 0;
const fastDecoder = recordDecoder(registry, 'player-event', PlayerEventRecord, {
  fastCheck: (raw) => {
    const v = plainlyValidPlayerEvent(raw);
    if (v !== undefined) fastTaken++;
    return v;
  },
});

/** The decoder with the fast path answers as the one without; returns whether the fast path answered. */
function expectSameDecoding(bytes: Buffer | null, label: string): { fast: boolean; outcome: Outcome } {
  const before = fastTaken;
  const fast = outcome(fastDecoder, bytes);
  const slow = outcome(slowDecoder, bytes);
  expect(fast, label).toStrictEqual(slow);
  if ('value' in fast && 'value' in slow) expectSameValue(fast.value, slow.value, label);
  return { fast: fastTaken > before, outcome: slow };
}

// ───────────────────────────── generators ─────────────────────────────

const NIL = '00000000-0000-0000-0000-000000000000';
const MAX = 'ffffffff-ffff-ffff-ffff-ffffffffffff';
const ID_CHARS = [...'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-'];
const suffix = (min: number, max: number) => fc.string({ unit: fc.constantFrom(...ID_CHARS), minLength: min, maxLength: max });

/** Upper, lower or mixed case. */
const anyCase = (arb: fc.Arbitrary<string>) =>
  fc.tuple(arb, fc.constantFrom('lower', 'upper', 'mixed')).map(([s, c]) =>
    c === 'lower' ? s : c === 'upper' ? s.toUpperCase() : [...s].map((ch, i) => (i % 2 ? ch.toUpperCase() : ch)).join(''),
  );

const VALID_VERSIONS = [1, 2, 3, 4, 5, 6, 7, 8] as const;
const ALL_VERSIONS = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15] as const;

/** UUIDs z.uuid() takes: versions 1–8 in any case, the nil UUID and the max UUID (lower case). */
const uuid = fc.oneof(
  { weight: 8, arbitrary: fc.uuid({ version: [...VALID_VERSIONS] }) },
  { weight: 2, arbitrary: anyCase(fc.uuid({ version: [...VALID_VERSIONS] })) },
  { weight: 1, arbitrary: fc.constantFrom(NIL, MAX) },
);

/** Near misses and other strings, some of them valid after all. */
const uuidish = fc.oneof(
  uuid,
  anyCase(fc.uuid({ version: [...ALL_VERSIONS] })),
  // Version digit 0 or 9–f, variant digit outside 8–b.
  fc.tuple(fc.uuid({ version: [...VALID_VERSIONS] }), fc.constantFrom(...'09acfACF'), fc.constantFrom(14, 19)).map(([u, ch, at]) => u.slice(0, at) + ch + u.slice(at + 1)),
  fc.constantFrom(
    NIL.toUpperCase(),
    MAX.toUpperCase(),
    'Ffffffff-ffff-ffff-ffff-ffffffffffff',
    NIL.replaceAll('-', ''),
    `${NIL}0`,
    `{${NIL}}`,
    ` ${NIL}`,
    `${NIL}\n`,
    '',
    'not-a-uuid',
    '3f1c2b8e4b1a4c559a570d7f8f7d2c11',
    'vid_3f1c2b8e4b1a4c559a570d7f8f7d2c11',
  ),
  fc.uuid().map((u) => u.slice(1)),
  fc.uuid().map((u) => `${u}a`),
  fc.string({ unit: fc.constantFrom(...'0123456789abcdefABCDEFgG-'), minLength: 30, maxLength: 40 }),
);

const idish = (prefix: string, other: string) =>
  fc.oneof(
    suffix(1, 64).map((s) => prefix + s),
    suffix(0, 66).map((s) => prefix + s),
    suffix(1, 64).map((s) => other + s),
    fc.string({ unit: 'binary', maxLength: 70 }).map((s) => prefix + s),
    fc.constantFrom(prefix, `${prefix}a\n`, `${prefix}a b`, `${prefix}é`, prefix.toUpperCase() + 'a', ` ${prefix}a`),
  );

const eventName = fc.oneof(fc.constantFrom(...COLLECTABLE_EVENT_NAMES, 'conversion'), fc.string({ unit: 'binary', minLength: 1, maxLength: 40 }));
const finite = fc.double({ noNaN: true, noDefaultInfinity: true });
const millis = fc.oneof(fc.integer({ min: 0, max: 4_102_444_800_000 }), fc.maxSafeNat());
const nullableString = fc.option(fc.string({ unit: 'binary', maxLength: 40 }), { nil: null });

/** Records both schemas take, in the shape every consumer sees. */
const validRecord: fc.Arbitrary<PlayerEventRecord> = fc.record({
  event_id: uuid,
  tenant_id: uuid,
  video_id: uuid,
  session_id: suffix(1, 64).map((s) => `ses_${s}`),
  visitor_id: suffix(1, 64).map((s) => `vis_${s}`),
  event_name: eventName,
  timestamp: millis,
  received_at: millis,
  current_time: finite,
  duration: finite,
  watched_percentage: finite,
  play_ms: fc.option(fc.maxSafeInteger(), { nil: null }),
  focus_ms: fc.option(fc.maxSafeInteger(), { nil: null }),
  seek_from: fc.option(finite, { nil: null }),
  seek_to: fc.option(finite, { nil: null }),
  utm_source: nullableString,
  utm_campaign: nullableString,
  ctwa_clid: nullableString,
  external_lead_id: nullableString,
  source: fc.constantFrom('player', 'server'),
  conversion_value: fc.option(finite, { nil: null }),
  conversion_currency: nullableString,
  event_id_from_client: fc.boolean(),
});

/** Numbers zod's number checks tell apart, and a few non-numbers. */
const numberish = fc.oneof(
  fc.constantFrom(NaN, Infinity, -Infinity, -0, 0, -1, 1.5, -1.5, 2 ** 53, 2 ** 53 - 1, -(2 ** 53), 1e300, Number.MIN_VALUE, '1', 1n, true, null, undefined),
  fc.integer({ min: -5, max: 5 }),
  fc.double(),
  fc.maxSafeInteger(),
);

/** Other values of any type. */
const anything = fc.oneof(
  fc.constantFrom(undefined, null, '', 0, true, false, [], {}, 'player', NaN),
  fc.anything(),
);

/** Per field, values to put in its place: valid, near misses, and wrong types. */
const FIELD_VALUES: Record<keyof PlayerEventRecord, fc.Arbitrary<unknown>> = {
  event_id: uuidish,
  tenant_id: uuidish,
  video_id: uuidish,
  session_id: idish('ses_', 'vis_'),
  visitor_id: idish('vis_', 'ses_'),
  event_name: fc.oneof(eventName, fc.constantFrom('', '\uD800', ' ', 'a')),
  timestamp: numberish,
  received_at: numberish,
  current_time: numberish,
  duration: numberish,
  watched_percentage: numberish,
  play_ms: numberish,
  focus_ms: numberish,
  seek_from: numberish,
  seek_to: numberish,
  utm_source: fc.oneof(nullableString, fc.constantFrom(undefined, 1, new String('x'))),
  utm_campaign: fc.oneof(nullableString, fc.constantFrom(undefined, 1, new String('x'))),
  ctwa_clid: fc.oneof(nullableString, fc.constantFrom(undefined, 1)),
  external_lead_id: fc.oneof(nullableString, fc.constantFrom(undefined, 1)),
  source: fc.oneof(fc.constantFrom('player', 'server', 'PLAYER', 'Server', '', ' player', null, undefined), fc.string()),
  conversion_value: numberish,
  conversion_currency: fc.oneof(nullableString, fc.constantFrom(undefined, 0)),
  event_id_from_client: fc.constantFrom(true, false, undefined, null, 'true', 0, 1),
};

type Mutation =
  | { kind: 'set'; key: keyof PlayerEventRecord; value: unknown }
  | { kind: 'setAny'; key: keyof PlayerEventRecord; value: unknown }
  | { kind: 'delete'; key: keyof PlayerEventRecord }
  | { kind: 'extra'; key: string; value: unknown };

const fieldKey = fc.constantFrom(...KEYS);
const mutation: fc.Arbitrary<Mutation> = fc.oneof(
  { weight: 6, arbitrary: fieldKey.chain((key) => FIELD_VALUES[key].map((value): Mutation => ({ kind: 'set', key, value }))) },
  { weight: 1, arbitrary: fc.record({ kind: fc.constant('setAny' as const), key: fieldKey, value: anything }) },
  { weight: 1, arbitrary: fc.record({ kind: fc.constant('delete' as const), key: fieldKey }) },
  {
    weight: 1,
    arbitrary: fc.record({ kind: fc.constant('extra' as const), key: fc.constantFrom('extra', 'event_id_from_server', '__proto__', 'constructor', 'toString', '0'), value: anything }),
  },
);

/** `record` as a plain object with the mutations applied (own properties, so `__proto__` too). */
function mutated(record: PlayerEventRecord, mutations: readonly Mutation[]): Record<string, unknown> {
  const out: Record<string, unknown> = { ...record };
  for (const m of mutations) {
    if (m.kind === 'delete') delete out[m.key];
    else Object.defineProperty(out, m.key, { value: m.value, enumerable: true, writable: true, configurable: true });
  }
  return out;
}

const mutatedRecord = fc.tuple(validRecord, fc.array(mutation, { minLength: 1, maxLength: 3 })).map(([r, ms]) => mutated(r, ms));

// ───────────────────────────── tests ─────────────────────────────

const example: PlayerEventRecord = PLAYER_EVENT;

describe('plainlyValidPlayerEvent', () => {
  it('restates the schema it stands in for: the same patterns, and the Avro reader has exactly its fields', () => {
    type Internals = { _zod: { def: { pattern?: RegExp; checks?: { _zod: { def: { pattern?: RegExp } } }[] } } };
    const def = (key: keyof PlayerEventRecord) => (PlayerEventRecord.shape[key] as unknown as Internals)._zod.def;
    for (const key of ['event_id', 'tenant_id', 'video_id'] as const) expect(def(key).pattern).toEqual(z.regexes.uuid());
    expect(def('session_id').checks?.map((c) => c._zod.def.pattern)).toEqual([SESSION_ID_RE]);
    expect(def('visitor_id').checks?.map((c) => c._zod.def.pattern)).toEqual([VISITOR_ID_RE]);
    // The newest reader decodes every version into these fields.
    expect((V3 as avro.types.RecordType).fields.map((f) => f.name)).toEqual(KEYS);
  });

  it('answers a plain copy of an avsc-decoded record, equal to zod\'s output, for every writer version', () => {
    for (const { version, bytes } of encodings(example)) {
      const raw = registry.decode<PlayerEventRecord>('player-event', bytes);
      expect(Object.getPrototypeOf(raw), `v${version}`).not.toBe(Object.prototype);
      const fast = plainlyValidPlayerEvent(raw);
      expect(fast, `v${version}`).toBeDefined();
      expectSameValue(fast, PlayerEventRecord.parse(raw), `v${version}`);
      // NOTE: the avsc instance itself is not what zod gives: another prototype.
      expect(raw).not.toStrictEqual(PlayerEventRecord.parse(raw));
    }
  });

  it('decides the UUID near misses as z.uuid() does', () => {
    const cases: [string, boolean][] = [
      ['3f1c2b8e-4b1a-4c55-9a57-0d7f8f7d2c11', true],
      ['3F1C2B8E-4B1A-4C55-9A57-0D7F8F7D2C11', true],
      [NIL, true],
      [MAX, true],
      [MAX.toUpperCase(), false],
      ['3f1c2b8e-4b1a-0c55-9a57-0d7f8f7d2c11', false], // version 0
      ['3f1c2b8e-4b1a-9c55-9a57-0d7f8f7d2c11', false], // version 9
      ['3f1c2b8e-4b1a-4c55-ca57-0d7f8f7d2c11', false], // variant c
      ['3f1c2b8e-4b1a-4c55-9a57-0d7f8f7d2c1', false],
      ['3f1c2b8e4b1a4c559a570d7f8f7d2c11', false],
      [`${NIL}\n`, false],
    ];
    for (const [id, ok] of cases) {
      for (const key of ['event_id', 'tenant_id', 'video_id'] as const) {
        expect(expectSound({ ...example, [key]: id }), `${key} ${id}`).toEqual({ fast: ok, zod: ok });
      }
    }
  });

  it('falls back on the values zod refuses, and on an absent or undefined event_id_from_client', () => {
    const refused: [keyof PlayerEventRecord, unknown][] = [
      ['current_time', NaN],
      ['duration', Infinity],
      ['watched_percentage', -Infinity],
      ['seek_from', NaN],
      ['conversion_value', Infinity],
      ['timestamp', -1],
      ['timestamp', 1.5],
      ['received_at', 2 ** 53],
      ['play_ms', 0.5],
      ['focus_ms', NaN],
      ['event_name', ''],
      ['session_id', 'ses_'],
      ['visitor_id', `vis_${'a'.repeat(65)}`],
      ['source', 'PLAYER'],
      ['utm_source', undefined],
      ['event_id_from_client', null],
    ];
    for (const [key, value] of refused) expect(expectSound({ ...example, [key]: value }), `${key} ${show(value)}`).toEqual({ fast: false, zod: false });
    const { event_id_from_client: _f, ...unflagged } = example;
    expect(expectSound(unflagged)).toEqual({ fast: false, zod: true });
    expect(expectSound({ ...example, event_id_from_client: undefined })).toEqual({ fast: false, zod: true });
    for (const raw of [null, undefined, 'x', 1, [], [example], Object.assign([], example)]) expect(expectSound(raw).fast, show(raw)).toBe(false);
    // Still valid: -0, the extremes, a lone surrogate as event name; extra keys are dropped.
    for (const raw of [
      { ...example, timestamp: -0, current_time: -0, play_ms: -0 },
      { ...example, timestamp: Number.MAX_SAFE_INTEGER, play_ms: Number.MIN_SAFE_INTEGER, duration: Number.MAX_VALUE },
      { ...example, event_name: '\uD800' },
      { ...example, extra: 1, event_id_from_server: true },
      Object.create(example) as object,
    ]) {
      expect(expectSound(raw), show(raw)).toEqual({ fast: true, zod: true });
    }
  });

  it('accepts every generated valid record, and answers zod\'s value', () => {
    fc.assert(
      fc.property(validRecord, (r) => {
        expect(expectSound(r)).toEqual({ fast: true, zod: true });
      }),
      { numRuns: 1000 },
    );
  });

  it('is sound (and exact) on mutated records as plain objects', () => {
    const seen = { fast: 0, zodOnly: 0, neither: 0 };
    fc.assert(
      fc.property(mutatedRecord, (raw) => {
        const r = expectSound(raw);
        if (r.fast) seen.fast++;
        else if (r.zod) seen.zodOnly++;
        else seen.neither++;
      }),
      { numRuns: 5000 },
    );
    // The mutations reach every outcome; else the property would prove little.
    expect(seen.fast).toBeGreaterThan(250);
    expect(seen.zodOnly).toBeGreaterThan(10);
    expect(seen.neither).toBeGreaterThan(2500);
  });

  it('is sound on avsc-decoded records, valid and then mutated in place', () => {
    let fast = 0;
    fc.assert(
      fc.property(validRecord, fc.array(mutation, { maxLength: 2 }), (r, ms) => {
        for (const { bytes } of encodings(r)) {
          const raw = registry.decode<Record<string, unknown>>('player-event', bytes);
          for (const m of ms) {
            if (m.kind === 'delete') delete raw[m.key];
            else Object.defineProperty(raw, m.key, { value: m.value, enumerable: true, writable: true, configurable: true });
          }
          if (expectSound(raw).fast) fast++;
          else expect(ms.length).toBeGreaterThan(0);
        }
      }),
      { numRuns: 500 },
    );
    expect(fast).toBeGreaterThan(500);
  });
});

describe('recordDecoder with the player-event fast path', () => {
  it('decodes what every writer version wrote as without it, taking the fast path for valid records', () => {
    const versions = new Set<number>();
    fc.assert(
      fc.property(validRecord, (r) => {
        for (const { version, bytes } of encodings(r)) {
          versions.add(version);
          const d = expectSameDecoding(bytes, `v${version} ${show(r)}`);
          expect(d.fast, `v${version}`).toBe(true);
        }
      }),
      { numRuns: 500 },
    );
    expect([...versions].sort()).toEqual([1, 2, 3]);
  });

  it('gives the same values and the same poison (reason and message) as without it for mutated records', () => {
    const seen = { fast: 0, slowValue: 0, poison: 0 };
    fc.assert(
      fc.property(mutatedRecord, (raw) => {
        for (const { version, bytes } of encodings(raw)) {
          const d = expectSameDecoding(bytes, `v${version} ${show(raw)}`);
          if (d.fast) seen.fast++;
          else if ('value' in d.outcome) seen.slowValue++;
          else seen.poison++;
        }
      }),
      { numRuns: 3000 },
    );
    expect(seen.fast).toBeGreaterThan(500);
    expect(seen.poison).toBeGreaterThan(500);
  });

  it('words a NaN double, a negative timestamp and a bad UUID as zod did: schema_violation', () => {
    const cases: [Partial<Record<keyof PlayerEventRecord, unknown>>, string][] = [
      [{ current_time: NaN }, 'current_time: '],
      [{ seek_to: Infinity }, 'seek_to: '],
      [{ timestamp: -5 }, 'timestamp: '],
      [{ tenant_id: MAX.toUpperCase() }, 'tenant_id: '],
      [{ event_name: '' }, 'event_name: '],
      [{ session_id: 'ses_a b' }, 'session_id: '],
    ];
    for (const [change, prefix] of cases) {
      for (const { version, bytes } of encodings({ ...example, ...change })) {
        const d = expectSameDecoding(bytes, `v${version} ${show(change)}`);
        expect(d.fast).toBe(false);
        expect(d.outcome).toMatchObject({ poison: { name: 'PoisonRecordError', reason: 'schema_violation' } });
        expect((d.outcome as { poison: { message: string } }).poison.message.startsWith(prefix), show(d.outcome)).toBe(true);
      }
    }
  });

  it('leaves bytes that are not a player event to the same refusals', () => {
    const good = registry.encode('player-event', example);
    const tenant = registry.encode('tenant', { id: example.tenant_id, name: 'Acme', player_key: 'pk_abc', created_at: 1, allowed_origins: [], previous_player_key: null, previous_player_key_expires_at: null, suspended_at: null });
    for (const bytes of [null, Buffer.alloc(0), Buffer.from([1, 0, 0, 0, 3]), Buffer.from([0, 0, 0, 0, 99, 1]), tenant, good.subarray(0, good.length - 3), Buffer.concat([good, Buffer.from([7])])]) {
      const d = expectSameDecoding(bytes, show(bytes));
      expect(d.fast).toBe(false);
      expect('poison' in d.outcome).toBe(true);
    }
  });
});
