import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import avro from 'avsc';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { PlayerEventRecord, playerEventViolation } from '../../schemas/records.ts';
import { SchemaRegistry } from '../../schemas/registry.ts';
import { PLAYER_EVENT } from '../../test/helpers/player-event.ts';
import { poisonValues } from '../../test/helpers/kafka-inspect.ts';
import { fieldsDecoder, PoisonRecordError, recordDecoder, type RecordDecoder } from './poison.ts';

/**
 * fieldsDecoder (a router's decoding of a few fields) against recordDecoder
 * (the whole record): where the whole decoding answers a value, the fields
 * are the same; what the fields decoder refuses, the whole decoding refuses
 * for the same reason. So a router never dead-letters a record its reader
 * would take, and lets through only what its reader will judge.
 */

const registry = SchemaRegistry.fromManifest();
const avsc = (file: string) => avro.Type.forSchema(JSON.parse(readFileSync(join(import.meta.dirname, '../../schemas/avro', file), 'utf8')) as avro.Schema);
const WRITERS: [number, avro.Type][] = [
  [1, avsc('player-event.v1.avsc')],
  [2, avsc('player-event.v2.avsc')],
  [3, avsc('player-event.v3.avsc')],
  [4, avsc('player-event.v4.avsc')],
];
const framed = (id: number, body: Buffer) => Buffer.concat([Buffer.from([0, 0, 0, 0, id]), body]);

type Route = Pick<PlayerEventRecord, 'tenant_id' | 'visitor_id' | 'source'>;
const route = fieldsDecoder<Route>(registry, 'player-event', ['tenant_id', 'visitor_id', 'source']);
const whole = recordDecoder(registry, 'player-event', PlayerEventRecord, { avroRules: playerEventViolation });

type Outcome<T> = { value: T } | { poison: string };
function outcome<T extends Route>(decode: RecordDecoder<T>, value: Buffer): Outcome<Route> {
  try {
    const d = decode({ value });
    if (d.kind !== 'value') throw new Error('no tombstones here');
    const { tenant_id, visitor_id, source } = d.value;
    return { value: { tenant_id, visitor_id, source } };
  } catch (err) {
    if (!(err instanceof PoisonRecordError)) throw err;
    return { poison: err.reason };
  }
}

function expectConsistent(bytes: Buffer, label: string): void {
  const r = outcome(route, bytes);
  const w = outcome(whole, bytes);
  if ('value' in w) {
    expect(r, label).toStrictEqual(w);
  }
  if ('poison' in r) expect(w, label).toStrictEqual(r);
}

describe('fieldsDecoder', () => {
  it('reads the fields of every writer version as the whole decoding does (source defaults to player before v2)', () => {
    for (const [id, type] of WRITERS) {
      const bytes = framed(id, type.toBuffer({ ...PLAYER_EVENT, source: 'server', lead: null }));
      expect(outcome(route, bytes)).toStrictEqual({ value: { tenant_id: PLAYER_EVENT.tenant_id, visitor_id: PLAYER_EVENT.visitor_id, source: id === 1 ? 'player' : 'server' } });
      expectConsistent(bytes, `v${id}`);
    }
  });

  it('refuses the poison the consumers meet for the same reasons as recordDecoder', () => {
    for (const { kind, value } of poisonValues(registry.writerId('player-event'))) {
      const r = outcome(route, value);
      expect(r, kind).toHaveProperty('poison');
      expect(r, kind).toStrictEqual(outcome(whole, value));
    }
    expect(outcome(route, registry.encode('tenant', { id: PLAYER_EVENT.tenant_id, name: 'x', player_key: 'pk', created_at: 0 }, 10))).toStrictEqual({ poison: 'wrong_subject' });
    expect(() => route({ value: null })).toThrow(PoisonRecordError);
  });

  it('lets through a record that breaks a rule of the record, which recordDecoder refuses', () => {
    const bytes = registry.encode('player-event', { ...PLAYER_EVENT, event_id: 'not-a-uuid' });
    expect(outcome(route, bytes)).toHaveProperty('value');
    expect(outcome(whole, bytes)).toStrictEqual({ poison: 'schema_violation' });
  });

  it('agrees with recordDecoder on truncated, extended and altered bytes of every version', () => {
    fc.assert(
      fc.property(
        fc.constantFrom(...WRITERS),
        fc.oneof(
          fc.record({ kind: fc.constant('cut' as const), at: fc.nat() }),
          fc.record({ kind: fc.constant('extend' as const), extra: fc.uint8Array({ minLength: 1, maxLength: 8 }) }),
          fc.record({ kind: fc.constant('flip' as const), at: fc.nat(), byte: fc.integer({ min: 0, max: 255 }) }),
        ),
        ([id, type], change) => {
          const body = type.toBuffer({ ...PLAYER_EVENT, lead: null });
          let bytes = framed(id, body);
          if (change.kind === 'cut') bytes = bytes.subarray(0, 5 + (change.at % body.length));
          else if (change.kind === 'extend') bytes = Buffer.concat([bytes, change.extra]);
          else {
            bytes = Buffer.from(bytes);
            bytes[5 + (change.at % body.length)] = change.byte;
          }
          expectConsistent(bytes, `v${id} ${JSON.stringify(change)}`);
        },
      ),
      { numRuns: 2000 },
    );
  });
});

describe('recordDecoder with plain: false', () => {
  it("answers Avro's own object with the same fields as the plain copy", () => {
    const raw = recordDecoder(registry, 'player-event', PlayerEventRecord, { avroRules: playerEventViolation, plain: false });
    const bytes = registry.encode('player-event', PLAYER_EVENT);
    const a = raw({ value: bytes });
    const b = whole({ value: bytes });
    expect(a.kind === 'value' && { ...a.value }).toEqual(b.kind === 'value' && b.value);
    expect(outcome(raw, registry.encode('player-event', { ...PLAYER_EVENT, event_id: 'x' }))).toStrictEqual({ poison: 'schema_violation' });
  });
});
