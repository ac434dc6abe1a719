import type { Admin, Kafka } from 'kafkajs';
import type { DeadLetterSink } from './dead-letters.ts';
import { TopicFollower } from './topic-follower.ts';
import type { Logger } from '../logger.ts';
import type { Metrics } from '../metrics.ts';

/**
 * A compacted changelog topic followed from its start, read
 * `read_committed`: per partition, the latest value of every key. A stage
 * that takes a partition on waits for `caughtUp` and reads the partition's
 * values from here, the way Kafka Streams restores a state store.
 *
 * NOTE: every process follows every partition (a TopicFollower), so a
 * process holds the whole changelog, as bytes; a rebalance then needs no
 * re-read.
 */
export class Changelog {
  readonly #values = new Map<number, Map<string, Buffer>>();
  readonly #follower: TopicFollower;
  readonly #admin: Admin;
  readonly topic: string;

  constructor(opts: { kafka: Kafka; admin: Admin; topic: string; log: Logger; metrics: Metrics; deadLetters: Pick<DeadLetterSink, 'send'>; stallMs: number }) {
    this.topic = opts.topic;
    this.#admin = opts.admin;
    this.#follower = new TopicFollower({
      kafka: opts.kafka,
      metrics: opts.metrics,
      deadLetters: opts.deadLetters,
      stallMs: opts.stallMs,
      log: opts.log.child({ component: 'changelog' }),
      name: 'changelog',
      topics: [opts.topic],
      maxOutstanding: 10_000,
      apply: (_topic, partition, message) => {
        const values = this.#values.get(partition) ?? new Map<string, Buffer>();
        this.#values.set(partition, values);
        const key = message.key?.toString('utf8') ?? '';
        if (message.value) values.set(key, message.value);
        else values.delete(key);
      },
    });
  }

  get groupId(): string {
    return this.#follower.consumer.groupId;
  }

  health(now?: number): string | undefined {
    return this.#follower.consumer.health(now);
  }

  start(): Promise<void> {
    return this.#follower.consumer.start();
  }

  stop(): Promise<void> {
    return this.#follower.consumer.stop(1000);
  }

  /** Resolves once every record of `partition` committed so far has been read. */
  caughtUp(partition: number, signal?: AbortSignal): Promise<void> {
    return this.#follower.caughtUp(this.#admin, this.topic, { partition, signal });
  }

  /** The latest value of every key of `partition`. */
  values(partition: number): ReadonlyMap<string, Buffer> {
    return this.#values.get(partition) ?? new Map();
  }
}
