import type { Message } from 'kafkajs';
import type { PlayerEventRecord } from '../../schemas/records.ts';
import type { SchemaRegistry } from '../../schemas/registry.ts';
import { ApiError } from '../../shared/http/errors.ts';
import { KafkaUnavailableError, ProducerOverloadedError, type GroupCommitProducer } from '../../shared/kafka/group-commit-producer.ts';
import type { Metrics } from '../../shared/metrics.ts';
import { playerEventKey } from '../../shared/kafka/event-keys.ts';

export interface PlayerEventsWriterOptions {
  registry: SchemaRegistry;
  producer: GroupCommitProducer;
  /** The player events topic. */
  topic: string;
  metrics: Metrics;
}

/** Which intake route a write came from (the `path` label of ingest_events_total). */
export type IntakePath = 'collect' | 'conversion';

/**
 * Writes one request's records to the player events topic, all or nothing,
 * keyed `tenant:session`. Answers 503 (as an ApiError with Retry-After) when
 * intake is closed for shutdown or Kafka did not take the records.
 */
export class PlayerEventsWriter {
  readonly #opts: PlayerEventsWriterOptions;
  #accepting = true;

  constructor(opts: PlayerEventsWriterOptions) {
    this.#opts = opts;
  }

  /** Refuses every later write: the first step of shutdown, before the HTTP server drains. */
  close(): void {
    this.#accepting = false;
  }

  /**
   * Refuses a request before its body is read while the producer sheds load
   * (INGEST_MAX_QUEUE_DELAY_MS, INGEST_MAX_QUEUED_EVENTS): a quick 503 the
   * client retries instead of a wait it would time out in.
   */
  refuseIfOverloaded(): void {
    const why = this.#opts.producer.overloaded();
    if (why) throw this.overloaded(why);
  }

  /** The 503 of a request refused to shed load, counted as `overloaded`. */
  overloaded(why: string): ApiError {
    this.#opts.metrics.ingestRejected.inc({ reason: 'overloaded' });
    return new ApiError('unavailable', `the intake is overloaded (${why}); nothing was accepted, retry shortly`, { headers: { 'Retry-After': '1' } });
  }

  /** Resolves once Kafka acknowledged every record. */
  async write(records: readonly PlayerEventRecord[], path: IntakePath): Promise<void> {
    if (!this.#accepting) throw new ApiError('unavailable', 'the service is shutting down; retry', { headers: { 'Retry-After': '1' } });
    const values = this.#opts.registry.encodeAll('player-event', records);
    const messages: Message[] = records.map((r, i) => ({ key: playerEventKey(r.tenant_id, r.session_id), value: values[i]! }));
    try {
      await this.#opts.producer.send(this.#opts.topic, messages);
    } catch (err) {
      if (err instanceof ProducerOverloadedError) throw this.overloaded(err.message);
      if (err instanceof KafkaUnavailableError) {
        this.#opts.metrics.ingestRejected.inc({ reason: 'kafka_unavailable' });
        throw new ApiError('unavailable', 'the event log is unavailable; nothing was accepted, retry later', {
          headers: { 'Retry-After': '5' },
        });
      }
      throw err;
    }
    this.#opts.metrics.ingestEvents.inc({ path }, records.length);
  }
}
