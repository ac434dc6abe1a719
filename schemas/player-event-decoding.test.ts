import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import avro from 'avsc';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { COLLECTABLE_EVENT_NAMES } from '../shared/event-names.ts';
import { PoisonRecordError, recordDecoder, type RecordDecoder } from '../shared/kafka/poison.ts';
import { PLAYER_EVENT } from '../test/helpers/player-event.ts';
import { PlayerEventRecord, playerEventViolation } from './records.ts';
import { SchemaRegistry } from './registry.ts';

/**
 * The player-event decoder of the consumers (Avro's decoding trusted for the
 * types, `playerEventViolation` for the rest) against a decoder that parses
 * with the zod twin: the same values (same keys in the same order, a plain
 * object) and the same poison reasons, for what every writer version writes.
 * Values are valid records from a generator, then mutated, mostly into
 * something invalid or unusual, and then written by Avro where it can.
 */

const registry = SchemaRegistry.fromManifest();
const avsc = (file: string) => avro.Type.forSchema(JSON.parse(readFileSync(join(import.meta.dirname, 'avro', file), 'utf8')) as avro.Schema);
const V1 = avsc('player-event.v1.avsc');
const V2 = avsc('player-event.v2.avsc');
const V3 = avsc('player-event.v3.avsc');
const V4 = avsc('player-event.v4.avsc');
const KEYS = Object.keys(PlayerEventRecord.shape) as (keyof PlayerEventRecord)[];

/** Confluent wire format around an Avro body: magic 0, then the schema id. */
const framed = (id: number, body: Buffer) => Buffer.concat([Buffer.from([0, 0, 0, 0, id]), body]);

/** The bytes of `value` as each writer version writes it (v1 to v3 ignore the fields they lack), or none where Avro refuses it. */
function encodings(value: unknown): { version: number; bytes: Buffer }[] {
  const out: { version: number; bytes: Buffer }[] = [];
  const attempt = (version: number, encode: () => Buffer) => {
    try {
      out.push({ version, bytes: encode() });
    } catch {
      // Avro refuses many wrong types (a string for a double, a fraction for a long, an unknown enum symbol).
    }
  };
  attempt(4, () => registry.encode('player-event', value));
  attempt(3, () => framed(3, V3.toBuffer(value)));
  attempt(2, () => framed(2, V2.toBuffer(value)));
  attempt(1, () => framed(1, V1.toBuffer(value)));
  return out;
}

/** The same value, to the key order and the prototype. */
function expectSameValue(a: unknown, b: unknown, label: string) {
  expect(a, label).toStrictEqual(b);
  expect(Object.getPrototypeOf(a), label).toBe(Object.prototype);
  expect(Object.keys(a as object), label).toEqual(Object.keys(b as object));
  expect(JSON.stringify(a), label).toBe(JSON.stringify(b));
}

const show = (v: unknown) => {
  try {
    return JSON.stringify(v, (_k, x: unknown) => (typeof x === 'number' && !Number.isFinite(x) ? String(x) : typeof x === 'bigint' ? `${x}n` : x));
  } catch {
    return String(v);
  }
};

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

const zodDecoder = recordDecoder(registry, 'player-event', PlayerEventRecord);
const avroDecoder = recordDecoder(registry, 'player-event', PlayerEventRecord, { avroRules: playerEventViolation });

/**
 * The consumers' decoder answers as the zod twin's: the same value, or poison
 * for the same reason (a record that breaks several rules may be worded by
 * another of them). Returns the consumers' outcome.
 */
function expectSameDecoding(bytes: Buffer | null, label: string): Outcome {
  const avro = outcome(avroDecoder, bytes);
  const zod = outcome(zodDecoder, bytes);
  if ('value' in zod) {
    expect(avro, label).toHaveProperty('value');
    expectSameValue((avro as { value: unknown }).value, zod.value, label);
  } else if ('poison' in zod) {
    expect(avro, label).toMatchObject({ poison: { name: zod.poison.name, reason: zod.poison.reason } });
    if (zod.poison.reason !== 'schema_violation') expect(avro, label).toStrictEqual(zod);
  } else {
    expect(avro, label).toStrictEqual(zod);
  }
  return avro;
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
  source: fc.constantFrom('player', 'server', 'derived'),
  conversion_value: fc.option(finite, { nil: null }),
  conversion_currency: nullableString,
  event_id_from_client: fc.boolean(),
  lead: fc.option(
    fc.record({ score: fc.integer({ min: 0, max: 100 }), score_version: fc.integer({ min: 1, max: 9 }), watched_percent: finite, focus_time_ratio: finite, cta_clicks: fc.nat(), rewinds: fc.nat() }),
    { nil: null },
  ),
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
  source: fc.oneof(fc.constantFrom('player', 'server', 'derived', 'PLAYER', 'Server', '', ' player', null, undefined), fc.string()),
  conversion_value: numberish,
  conversion_currency: fc.oneof(nullableString, fc.constantFrom(undefined, 0)),
  event_id_from_client: fc.constantFrom(true, false, undefined, null, 'true', 0, 1),
  lead: fc.constantFrom(null, undefined, {}, { score: 80 }, { score: 1.5, score_version: 1, watched_percent: 1, focus_time_ratio: 1, cta_clicks: 0, rewinds: 0 }),
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

describe('the player-event decoder', () => {
  it('hands on the fields of the zod twin: the newest Avro reader has exactly its keys, in its order', () => {
    expect((V4 as avro.types.RecordType).fields.map((f) => f.name)).toEqual(KEYS);
  });

  it('answers a plain copy of what every writer version wrote, equal to the zod twin\'s output', () => {
    for (const { version, bytes } of encodings(example)) {
      const raw = registry.decode<PlayerEventRecord>('player-event', bytes);
      // avsc decodes into instances of its generated class; the consumers get plain objects.
      expect(Object.getPrototypeOf(raw), `v${version}`).not.toBe(Object.prototype);
      const d = expectSameDecoding(bytes, `v${version}`);
      expectSameValue((d as { value: unknown }).value, PlayerEventRecord.parse(raw), `v${version}`);
    }
  });

  it('takes the UUIDs z.uuid() takes, and refuses its near misses', () => {
    const NIL_ = '00000000-0000-0000-0000-000000000000';
    const MAX_ = 'ffffffff-ffff-ffff-ffff-ffffffffffff';
    const cases: [string, boolean][] = [
      ['3f1c2b8e-4b1a-4c55-9a57-0d7f8f7d2c11', true],
      ['3F1C2B8E-4B1A-4C55-9A57-0D7F8F7D2C11', true],
      [NIL_, true],
      [MAX_, true],
      [MAX_.toUpperCase(), false],
      ['3f1c2b8e-4b1a-0c55-9a57-0d7f8f7d2c11', false], // version 0
      ['3f1c2b8e-4b1a-9c55-9a57-0d7f8f7d2c11', false], // version 9
      ['3f1c2b8e-4b1a-4c55-ca57-0d7f8f7d2c11', false], // variant c
      ['3f1c2b8e-4b1a-4c55-9a57-0d7f8f7d2c1', false],
      ['3f1c2b8e4b1a4c559a570d7f8f7d2c11', false],
      [`${NIL_}\n`, false],
    ];
    for (const [id, ok] of cases) {
      for (const key of ['event_id', 'tenant_id', 'video_id'] as const) {
        const d = expectSameDecoding(registry.encode('player-event', { ...example, [key]: id }), `${key} ${id}`);
        expect('value' in d, `${key} ${id}`).toBe(ok);
      }
    }
  });

  it('words a broken rule as `field: why`, schema_violation, for every writer version', () => {
    const cases: [Partial<Record<keyof PlayerEventRecord, unknown>>, string][] = [
      [{ current_time: NaN }, 'current_time: must be a finite number'],
      [{ seek_to: Infinity }, 'seek_to: must be a finite number'],
      [{ conversion_value: -Infinity }, 'conversion_value: must be a finite number'],
      [{ timestamp: -5 }, 'timestamp: must not be negative'],
      [{ received_at: -1 }, 'received_at: must not be negative'],
      [{ tenant_id: 'ffffffff-ffff-ffff-ffff-ffffffffffff'.toUpperCase() }, 'tenant_id: must be a UUID'],
      [{ event_name: '' }, 'event_name: must not be empty'],
      [{ session_id: 'ses_a b' }, 'session_id: must match /^ses_[A-Za-z0-9_-]{1,64}$/'],
      [{ visitor_id: 'vis_' }, 'visitor_id: must match /^vis_[A-Za-z0-9_-]{1,64}$/'],
    ];
    for (const [change, message] of cases) {
      const all = encodings({ ...example, ...change });
      expect(all.length, show(change)).toBeGreaterThan(0);
      for (const { version, bytes } of all) {
        const d = expectSameDecoding(bytes, `v${version} ${show(change)}`);
        // v1 has no conversion_value: its reader fills in null.
        if (version === 1 && 'conversion_value' in change) continue;
        expect(d, `v${version}`).toStrictEqual({ poison: { name: 'PoisonRecordError', reason: 'schema_violation', message } });
      }
      // The zod twin refuses it on the same field.
      expect(PlayerEventRecord.safeParse({ ...example, ...change }).error?.issues[0]?.path, show(change)).toEqual([message.split(':')[0]]);
    }
  });

  it('decodes every generated valid record as the zod twin does, from every writer version', () => {
    const versions = new Set<number>();
    fc.assert(
      fc.property(validRecord, (r) => {
        for (const { version, bytes } of encodings(r)) {
          versions.add(version);
          expect('value' in expectSameDecoding(bytes, `v${version} ${show(r)}`), `v${version}`).toBe(true);
        }
      }),
      { numRuns: 500 },
    );
    expect([...versions].sort()).toEqual([1, 2, 3, 4]);
  });

  it('gives the same values and poison reasons as the zod twin for mutated records', () => {
    const seen = { value: 0, poison: 0 };
    fc.assert(
      fc.property(mutatedRecord, (raw) => {
        for (const { version, bytes } of encodings(raw)) {
          const d = expectSameDecoding(bytes, `v${version} ${show(raw)}`);
          if ('value' in d) seen.value++;
          else seen.poison++;
        }
      }),
      { numRuns: 3000 },
    );
    // The mutations reach both outcomes; else the property would prove little.
    expect(seen.value).toBeGreaterThan(500);
    expect(seen.poison).toBeGreaterThan(500);
  });

  it('refuses bytes that are not a player event as the zod twin\'s decoder does', () => {
    const good = registry.encode('player-event', example);
    const tenant = registry.encode('tenant', { id: example.tenant_id, name: 'Acme', player_key: 'pk_abc', created_at: 1, allowed_origins: [], previous_player_key: null, previous_player_key_expires_at: null, suspended_at: null });
    for (const bytes of [null, Buffer.alloc(0), Buffer.from([1, 0, 0, 0, 3]), Buffer.from([0, 0, 0, 0, 99, 1]), tenant, good.subarray(0, good.length - 3), Buffer.concat([good, Buffer.from([7])])]) {
      expect('poison' in expectSameDecoding(bytes, show(bytes))).toBe(true);
    }
  });
});
