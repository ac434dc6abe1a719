import type { KafkaMessage } from 'kafkajs';
import type { z } from 'zod';
import { SchemaDecodeError, type SchemaRegistry, type Subject } from '../../schemas/registry.ts';

/**
 * Why a record could not be taken: the `reason` label of dead letters.
 * `rejected_by_sink`: it decoded, but the sink (ClickHouse) refuses it for
 * good (shared/failure-class.ts).
 */
export type PoisonReason =
  | 'empty_value'
  | 'not_wire_format'
  | 'unknown_schema'
  | 'wrong_subject'
  | 'undecodable'
  | 'schema_violation'
  | 'record_too_large'
  | 'rejected_by_sink';

/**
 * A record that no retry can make readable. The consumer that meets one
 * dead-letters it and moves on; it never throws out of a consumer.
 */
export class PoisonRecordError extends Error {
  override name = 'PoisonRecordError';
  readonly reason: PoisonReason;
  constructor(reason: PoisonReason, message: string) {
    super(message);
    this.reason = reason;
  }
}

/** A decoded value, or a tombstone (null value) where the topic allows them. */
export type Decoded<T> = { kind: 'value'; value: T } | { kind: 'tombstone' };

/** Turns a message into a value or throws PoisonRecordError. */
export type RecordDecoder<T> = (message: Pick<KafkaMessage, 'value'> & { key?: KafkaMessage['key']; headers?: KafkaMessage['headers'] }) => Decoded<T>;

/**
 * The decoder of one subject: Confluent wire format → Avro (resolved to the
 * newest reader schema) → validated by the record's zod twin. A null value is
 * a tombstone on compacted topics (`tombstones: true`) and poison elsewhere;
 * an empty value is always poison.
 *
 * `avroRules` is for a subject whose Avro schema states the zod twin's types
 * (e.g. the player event, `playerEventViolation`): the decoded value is
 * trusted for them, only these rules are checked, with no zod parse, and the
 * value is handed on as a plain copy of Avro's fields. A broken rule is
 * poison, `schema_violation`, worded `field: message` as zod's refusals are.
 * With `avroRules`, `plain: false` hands on Avro's own object (an instance
 * of avsc's generated class, same fields) without the copy, for a consumer
 * that only reads the value and keeps none of it.
 */
export function recordDecoder<S extends z.ZodType>(
  registry: SchemaRegistry,
  subject: Subject,
  schema: S,
  opts: { tombstones?: boolean; avroRules?: (value: z.infer<S>) => { field: string; message: string } | undefined; plain?: boolean } = {},
): RecordDecoder<z.infer<S>> {
  const avroRules = opts.avroRules;
  const plain = opts.plain ?? true;
  return (message) => {
    if ((message.value === null || message.value === undefined) && opts.tombstones) return { kind: 'tombstone' };
    const raw = avroOf(message, (bytes) => registry.decode<unknown>(subject, bytes));
    if (avroRules !== undefined) {
      const broken = avroRules(raw as z.infer<S>);
      if (broken !== undefined) throw new PoisonRecordError('schema_violation', `${broken.field}: ${broken.message}`);
      // NOTE: a copy: avsc decodes into instances of a generated class, and zod's output is a plain object.
      return { kind: 'value', value: (plain ? plainCopy(raw as object) : raw) as z.infer<S> };
    }
    const parsed = schema.safeParse(raw);
    if (!parsed.success) {
      const first = parsed.error.issues[0];
      throw new PoisonRecordError('schema_violation', `${first?.path.join('.') || '(root)'}: ${first?.message ?? 'invalid'}`);
    }
    return { kind: 'value', value: parsed.data };
  };
}

/**
 * A decoder of a few top-level fields of `subject` (SchemaRegistry.fieldsDecoder),
 * for a consumer that routes records without reading them: the same poison
 * as recordDecoder for what it cannot read (empty, not the wire format,
 * unknown schema, bytes Avro cannot walk), and no judgement of the rest.
 * Whoever reads the whole record downstream must still decode it with
 * recordDecoder, which refuses what this one lets through (zod, avroRules,
 * and what Avro checks only in the fields it builds, e.g. safe longs).
 */
export function fieldsDecoder<T>(registry: SchemaRegistry, subject: Subject, fields: readonly (keyof T & string)[]): RecordDecoder<T> {
  const decode = registry.fieldsDecoder<T>(subject, fields);
  return (message) => ({ kind: 'value', value: avroOf(message, decode) });
}

/** A record's value through `decode`, or the poison it is: no value, an empty one, or bytes Avro cannot read. */
function avroOf<T>(message: Pick<KafkaMessage, 'value'>, decode: (bytes: Buffer) => T): T {
  const bytes = message.value;
  if (bytes === null || bytes === undefined) throw new PoisonRecordError('empty_value', 'null value on a topic without tombstones');
  if (bytes.length === 0) throw new PoisonRecordError('empty_value', 'empty value');
  try {
    return decode(bytes);
  } catch (err) {
    throw classifyDecodeError(err);
  }
}

/** Avro's decoding as plain objects, nested records included. */
function plainCopy(value: object): object {
  const out: Record<string, unknown> = { ...value };
  // NOTE: for…in over the copy (own fields only), not Object.entries: no array of pairs per record.
  for (const k in out) {
    const v = out[k];
    if (v !== null && typeof v === 'object' && !Array.isArray(v) && !Buffer.isBuffer(v)) out[k] = plainCopy(v);
  }
  return out;
}

function classifyDecodeError(err: unknown): PoisonRecordError {
  const message = err instanceof Error ? err.message : String(err);
  if (err instanceof SchemaDecodeError) {
    if (message.startsWith('unknown schema id')) return new PoisonRecordError('unknown_schema', message);
    if (message.includes(', expected ')) return new PoisonRecordError('wrong_subject', message);
    return new PoisonRecordError('not_wire_format', message);
  }
  // avsc throws plain errors for truncated or trailing bytes.
  return new PoisonRecordError('undecodable', message.slice(0, 200));
}
