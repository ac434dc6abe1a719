import { randomUUID } from 'node:crypto';
import type { Admin, KafkaMessage } from 'kafkajs';
import { GroupConsumer } from './group-consumer.ts';
import type { GroupMemberOptions } from './group-member.ts';
import { DURABLE_HANDOFF, retry, sleep } from '../retry.ts';

export type TopicFollowerOptions = Pick<GroupMemberOptions<KafkaMessage>, 'kafka' | 'log' | 'metrics' | 'deadLetters' | 'stallMs' | 'topics' | 'consumer'> & {
  /** Names the group: `<name>-<random id>`. */
  name: string;
  maxOutstanding: number;
  /** Takes one record in; what it returns (a dead letter, say) is awaited before the consumer stops. */
  apply: (topic: string, partition: number, message: KafkaMessage) => Promise<void> | void;
};

/**
 * Whole topics followed from their start by every process, in a group of
 * its own that commits nothing, the way Kafka Connect keeps its configs and
 * Kafka Streams restores a state store (kafkajs cannot read a partition
 * outside a group).
 *
 * A consumer that restarts (after a broker loss, say) rejoins with nothing
 * committed and reads from the start again: records already applied are
 * skipped, or older values would stand in for newer ones (a revoked key
 * for its revocation) until the re-read passed them.
 */
export class TopicFollower {
  readonly consumer: GroupConsumer<KafkaMessage>;
  /** Per `topic/partition`, the offset of the last record applied. */
  readonly #applied = new Map<string, bigint>();
  /** Per `topic/partition`, the last offset read, markers included. */
  readonly #position = new Map<string, bigint>();
  #moved: PromiseWithResolvers<void> | undefined;

  constructor(opts: TopicFollowerOptions) {
    this.consumer = new GroupConsumer<KafkaMessage>({
      kafka: opts.kafka,
      log: opts.log,
      metrics: opts.metrics,
      groupId: `${opts.name}-${randomUUID()}`,
      topics: opts.topics,
      decode: (message) => ({ kind: 'value', value: message as KafkaMessage }),
      deadLetters: opts.deadLetters,
      stallMs: opts.stallMs,
      commitOffsets: false,
      maxOutstanding: opts.maxOutstanding,
      consumer: opts.consumer,
      handle: (_record, message, partition, topic) => {
        const key = `${topic}/${partition}`;
        const offset = BigInt(message.offset);
        if (offset <= (this.#applied.get(key) ?? -1n)) return { kind: 'work', done: Promise.resolve() };
        this.#applied.set(key, offset);
        const done = opts.apply(topic, partition, message) ?? Promise.resolve();
        this.#advance(key, offset);
        return { kind: 'work', done };
      },
      // The position moves past a batch's trailing markers only once all of
      // its records are applied: kafkajs's END_BATCH_PROCESS also ends a
      // batch cut short by a crash or rebalance with its last offset, and a
      // restore that trusted it decided on state missing that batch's records.
      onBatchTaken: (topic, partition, lastOffset) => this.#advance(`${topic}/${partition}`, BigInt(lastOffset)),
    });
  }

  /** Resolves once everything of the partition up to `offset` is read; throws once `signal` aborts first. */
  async readThrough(topic: string, partition: number, offset: bigint, signal?: AbortSignal): Promise<void> {
    while ((this.#position.get(`${topic}/${partition}`) ?? -1n) < offset) {
      if (signal?.aborted) throw new Error('stopped');
      await Promise.race([(this.#moved ??= Promise.withResolvers<void>()).promise, sleep(200, signal)]);
    }
  }

  /** Resolves once every record of `topic` (of `partition` only, if given) committed when asked is read. */
  async caughtUp(admin: Admin, topic: string, opts: { partition?: number; signal?: AbortSignal } = {}): Promise<void> {
    // kafkajs' fetchTopicOffsets throws while a partition has no leader (a
    // broker down): asked again until it answers or the owner stops.
    const offsets = await retry(() => admin.fetchTopicOffsets(topic), { schedule: DURABLE_HANDOFF, signal: opts.signal });
    const pending = offsets.filter((o) => (opts.partition === undefined || o.partition === opts.partition) && BigInt(o.high) > BigInt(o.low));
    await Promise.all(pending.map((o) => this.readThrough(topic, o.partition, BigInt(o.high) - 1n, opts.signal)));
  }

  #advance(key: string, offset: bigint): void {
    if (offset <= (this.#position.get(key) ?? -1n)) return;
    this.#position.set(key, offset);
    this.#moved?.resolve();
    this.#moved = undefined;
  }
}
