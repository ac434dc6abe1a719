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
export type RecordDecoder<T> = (message: Pick<KafkaMessage, 'value'> & { key?: KafkaMessage['key'] }) => Decoded<T>;

/**
 * The decoder of one subject: Confluent wire format → Avro (resolved to the
 * newest reader schema) → validated by the record's zod twin. A null value is
 * a tombstone on compacted topics (`tombstones: true`) and poison elsewhere;
 * an empty value is always poison.
 *
 * `fastCheck` is an optional shortcut in front of zod for a hot subject (e.g.
 * schemas/player-event-fast-check.ts): for a decoded value that `schema`
 * certainly accepts it answers the value zod's parse would give, and
 * undefined for anything else, which zod then parses as before (so refusals
 * keep zod's reason and wording).
 */
export function recordDecoder<S extends z.ZodType>(
  registry: SchemaRegistry,
  subject: Subject,
  schema: S,
  opts: { tombstones?: boolean; fastCheck?: (raw: unknown) => z.infer<S> | undefined } = {},
): RecordDecoder<z.infer<S>> {
  const fastCheck = opts.fastCheck;
  return (message) => {
    const bytes = message.value;
    if (bytes === null || bytes === undefined) {
      if (opts.tombstones) return { kind: 'tombstone' };
      throw new PoisonRecordError('empty_value', 'null value on a topic without tombstones');
    }
    if (bytes.length === 0) throw new PoisonRecordError('empty_value', 'empty value');
    let raw: unknown;
    try {
      raw = registry.decode<unknown>(subject, bytes);
    } catch (err) {
      throw classifyDecodeError(err);
    }
    if (fastCheck !== undefined) {
      const fast = fastCheck(raw);
      if (fast !== undefined) return { kind: 'value', value: fast };
    }
    const parsed = schema.safeParse(raw);
    if (!parsed.success) {
      const first = parsed.error.issues[0];
      throw new PoisonRecordError('schema_violation', `${first?.path.join('.') || '(root)'}: ${first?.message ?? 'invalid'}`);
    }
    return { kind: 'value', value: parsed.data };
  };
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
