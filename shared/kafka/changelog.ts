import { randomUUID } from 'node:crypto';
import type { Admin, Kafka, KafkaMessage } from 'kafkajs';
import type { DeadLetterSink } from './dead-letters.ts';
import { GroupConsumer } from './group-consumer.ts';
import type { Logger } from '../logger.ts';
import type { Metrics } from '../metrics.ts';
import { DURABLE_HANDOFF, retry } from '../retry.ts';

/**
 * A compacted changelog topic followed from its start, read
 * `read_committed`: per partition, the latest value of every key. A stage
 * that takes a partition on waits for `caughtUp` and reads the partition's
 * values from here, the way Kafka Streams restores a state store.
 *
 * NOTE: every process follows every partition (kafkajs cannot read a chosen
 * partition outside a group), so a process holds the whole changelog, as
 * bytes; a rebalance then needs no re-read.
 */
export class Changelog {
  readonly #values = new Map<number, Map<string, Buffer>>();
  /** Per partition, the last offset read (markers included). */
  readonly #position = new Map<number, bigint>();
  /** Per partition, the offset of the last record applied to `#values`. */
  readonly #applied = new Map<number, bigint>();
  readonly #consumer: GroupConsumer<KafkaMessage>;
  readonly #admin: Admin;
  readonly topic: string;
  #moved: PromiseWithResolvers<void> | undefined;

  constructor(opts: { kafka: Kafka; admin: Admin; topic: string; log: Logger; metrics: Metrics; deadLetters: Pick<DeadLetterSink, 'send'>; stallMs: number }) {
    this.topic = opts.topic;
    this.#admin = opts.admin;
    this.#consumer = new GroupConsumer<KafkaMessage>({
      kafka: opts.kafka,
      log: opts.log.child({ component: 'changelog' }),
      metrics: opts.metrics,
      // A fresh group: every process reads the whole topic, and commits nothing.
      groupId: `changelog-${randomUUID()}`,
      topics: [opts.topic],
      decode: (message) => ({ kind: 'value', value: message as KafkaMessage }),
      deadLetters: opts.deadLetters,
      stallMs: opts.stallMs,
      commitOffsets: false,
      maxOutstanding: 10_000,
      handle: (_record, message, partition) => {
        // A consumer that restarts (after a broker loss, say) rejoins its
        // group with nothing committed and reads from the start again: the
        // records it has already applied are skipped, or older values would
        // stand in for newer ones until it caught up, and a partition
        // restored meanwhile would decide on stale state.
        const offset = BigInt(message.offset);
        if (offset <= (this.#applied.get(partition) ?? -1n)) return { kind: 'work', done: Promise.resolve() };
        this.#applied.set(partition, offset);
        const values = this.#values.get(partition) ?? new Map<string, Buffer>();
        this.#values.set(partition, values);
        const key = message.key?.toString('utf8') ?? '';
        if (message.value) values.set(key, message.value);
        else values.delete(key);
        this.#advance(partition, offset);
        return { kind: 'work', done: Promise.resolve() };
      },
      // The position moves past a batch's trailing markers only once all of
      // its records are applied: kafkajs's END_BATCH_PROCESS also ends a
      // batch cut short by a crash or rebalance with its last offset, and a
      // restore that trusted it decided on state missing that batch's records.
      onBatchTaken: (_topic, partition, lastOffset) => this.#advance(partition, BigInt(lastOffset)),
    });
  }

  get groupId(): string {
    return this.#consumer.groupId;
  }

  health(now?: number): string | undefined {
    return this.#consumer.health(now);
  }

  start(): Promise<void> {
    return this.#consumer.start();
  }

  stop(): Promise<void> {
    return this.#consumer.stop(1000);
  }

  /** Resolves once every record of `partition` committed so far has been read. */
  async caughtUp(partition: number, signal?: AbortSignal): Promise<void> {
    // kafkajs' fetchTopicOffsets throws while a partition has no leader (a
    // broker down): asked again until it answers or the owner stops.
    const offsets = await retry(() => this.#admin.fetchTopicOffsets(this.topic), { schedule: DURABLE_HANDOFF, signal });
    const high = BigInt(offsets.find((o) => o.partition === partition)?.high ?? '0');
    const low = BigInt(offsets.find((o) => o.partition === partition)?.low ?? '0');
    while (high > low && (this.#position.get(partition) ?? -1n) < high - 1n) {
      if (signal?.aborted) throw new Error('stopped');
      const moved = (this.#moved ??= Promise.withResolvers<void>());
      await Promise.race([moved.promise, new Promise((r) => setTimeout(r, 200))]);
    }
  }

  /** The latest value of every key of `partition`. */
  values(partition: number): ReadonlyMap<string, Buffer> {
    return this.#values.get(partition) ?? new Map();
  }

  #advance(partition: number, offset: bigint): void {
    if (offset <= (this.#position.get(partition) ?? -1n)) return;
    this.#position.set(partition, offset);
    this.#moved?.resolve();
    this.#moved = undefined;
  }
}
