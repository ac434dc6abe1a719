import type { IHeaders, Message } from 'kafkajs';
import type { Logger } from '../logger.ts';
import type { Metrics } from '../metrics.ts';
import { RecordTooLargeError } from '../failure-class.ts';
import type { CoalescingSender } from './coalescing-sender.ts';
import type { PoisonReason } from './poison.ts';

/** A record taken off its partition because it can never be processed. */
export interface DeadLetter {
  topic: string;
  partition: number;
  offset: string;
  key: Buffer | string | null;
  value: Buffer | null;
  headers?: IHeaders;
  reason: PoisonReason;
  /** What the decoder said; never the record's content. */
  detail: string;
  /** The consumer group (or `config-store`) that met it. */
  group: string;
}

/**
 * Writes dead letters to the dead-letter topic, Kafka Connect style: the
 * original key and value bytes, the original headers, and `dlq-*` headers
 * naming the source topic, partition, offset, the reason and the group. The
 * consumer commits past a poison record only after its dead letter is
 * acknowledged, so a record is never both skipped and unrecorded.
 */
export class DeadLetterSink {
  readonly #sender: CoalescingSender;
  readonly #topic: string;
  readonly #metrics: Metrics;
  readonly #log: Logger;

  constructor(opts: { sender: CoalescingSender; topic: string; metrics: Metrics; log: Logger }) {
    this.#sender = opts.sender;
    this.#topic = opts.topic;
    this.#metrics = opts.metrics;
    this.#log = opts.log.child({ component: 'dead-letters' });
  }

  async send(letters: DeadLetter[]): Promise<void> {
    if (letters.length === 0) return;
    try {
      await this.#sender.send([{ topic: this.#topic, messages: letters.map((l) => toMessage(l, true)) }]);
    } catch (err) {
      if (!(err instanceof RecordTooLargeError)) throw err;
      // Too big for the dead-letter topic too: keep the coordinates and the
      // reason; the bytes stay on the source topic at that offset.
      for (const l of letters) {
        try {
          await this.#sender.send([{ topic: this.#topic, messages: [toMessage(l, true)] }]);
        } catch (inner) {
          if (!(inner instanceof RecordTooLargeError)) throw inner;
          await this.#sender.send([{ topic: this.#topic, messages: [toMessage(l, false)] }]);
        }
      }
    }
    for (const l of letters) {
      this.#metrics.deadLettered.inc({ topic: l.topic, reason: l.reason });
      this.#log.warn(
        { source_topic: l.topic, partition: l.partition, offset: l.offset, reason: l.reason, detail: l.detail, group: l.group, bytes: l.value?.length ?? 0 },
        'record_dead_lettered',
      );
    }
  }
}

function toMessage(l: DeadLetter, withValue: boolean): Message {
  const headers: IHeaders = {
    ...(l.headers ?? {}),
    'dlq-source-topic': l.topic,
    'dlq-source-partition': String(l.partition),
    'dlq-source-offset': l.offset,
    'dlq-reason': l.reason,
    'dlq-detail': l.detail.slice(0, 500),
    'dlq-group': l.group,
  };
  if (!withValue) headers['dlq-value-omitted'] = 'too_large';
  return { key: l.key, value: withValue ? l.value : null, headers };
}
