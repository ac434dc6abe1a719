import type { Admin, EachBatchPayload, KafkaMessage, Message, Producer } from 'kafkajs';
import { GroupMember, type GroupMemberOptions } from './group-member.ts';
import { messageBytes } from './coalescing-sender.ts';
import { TRANSACTIONAL_RETRY } from './kafka.ts';
import { JavaCompatiblePartitioner } from './partitioner.ts';
import type { DeadLetter } from './dead-letters.ts';
import type { Decoded } from './poison.ts';

/** A record a stage writes: to `topic`, on `partition` when given, else by its key. */
export interface StageOutput extends Message {
  topic: string;
}

export interface TransactionalStageOptions<T> extends GroupMemberOptions<T> {
  admin: Admin;
  /** Prefix of the stage's transactional ids: one per input partition, `<prefix>-<partition>`. */
  transactionalIdPrefix: string;
  /**
   * Called when the stage takes a partition on (at every assignment, and
   * after a failed transaction), once the partition's previous writer is
   * fenced: load its state as of the committed offset. Resolves to the input
   * offset the state was written at (its `checkpoint`), when it keeps one.
   */
  restore: (partition: number) => Promise<string | undefined>;
  /**
   * A record each transaction also writes, saying the input offset its
   * state reflects (the offset it commits). A restore that reads back an
   * older one is short of committed state, and is made again before the
   * partition is read: deciding on it would raise again what was raised.
   */
  checkpoint?: (partition: number, nextOffset: string) => StageOutput;
  /**
   * Take-ons refused in a row for a restore behind the committed offset
   * before the stage goes on with it (default 5, about 8 s of restarts):
   * an operator who moved the group's offsets forward skipped those records
   * on purpose, and no restore will ever reach them.
   */
  behindRefusals?: number;
  /**
   * What one fetched batch of a partition (in offset order, poison left out)
   * writes. It may keep state: a failed transaction restores the partition
   * before it reads again.
   */
  process: (partition: number, records: { record: Decoded<T>; message: KafkaMessage }[]) => StageOutput[];
  /**
   * Dead letters inside a record that decoded (e.g. one event of many a
   * record carries): sent with the record's own poison, before the batch's
   * transaction, and `process` leaves them out.
   */
  letters?: (record: T) => DeadLetter[];
  /** After a batch's transaction committed, with the seconds each step of it took. */
  onCommitted?: (partition: number, records: number, outputs: number, steps: TransactionSteps) => void;
}

/** Seconds of a batch's transaction: its outputs sent (partitions added first), its input offset added, its commit. */
export interface TransactionSteps {
  send: number;
  offsets: number;
  commit: number;
}

/**
 * Most record bytes in one produce request of a transaction. kafkajs sends
 * each partition's share of a request as one record batch, which the broker
 * refuses for good over the topic's max.message.bytes (1 MiB by default); a
 * batch's outputs can be several times its input (the intent stage writes a
 * state record per changed key), so they go in requests well below it, one
 * after another in the same transaction.
 */
export const MAX_SEND_BYTES = 512 * 1024;

/** Outputs in order, cut into requests of at most `maxBytes` (a larger record alone), each grouped by topic. */
export function sendRequests(outputs: readonly StageOutput[], maxBytes: number): { topic: string; messages: Message[] }[][] {
  const requests: { topic: string; messages: Message[] }[][] = [];
  let current = new Map<string, Message[]>();
  let bytes = 0;
  const flush = () => {
    if (current.size > 0) requests.push([...current].map(([topic, messages]) => ({ topic, messages })));
    current = new Map();
    bytes = 0;
  };
  for (const { topic, ...m } of outputs) {
    const size = messageBytes(m);
    if (bytes > 0 && bytes + size > maxBytes) flush();
    const list = current.get(topic);
    if (list) list.push(m);
    else current.set(topic, [m]);
    bytes += size;
  }
  flush();
  return requests;
}

interface Owned {
  generation: number;
  producer: Producer;
}

/**
 * Consume, transform and produce exactly once: each fetched batch's output
 * and its input offset are written in one Kafka transaction, by the
 * transactional producer of the input partition (`<prefix>-<partition>`, the
 * design of Kafka Streams before KIP-447). When a member takes a partition
 * on, it starts that producer anew, which aborts whatever transaction a
 * previous owner left open (killed, or cut off in a rebalance) and fences
 * that owner out; only then does it read the committed offset and restore
 * the state, so nothing is written twice and nothing is skipped. The
 * member's input is read `read_committed`.
 *
 * NOTE: one producer per owned partition: kafkajs has no consumer-group
 * fencing of transactions (KIP-447), which would allow one per process.
 */
export class TransactionalStage<T> {
  readonly member: GroupMember<T>;
  readonly #opts: TransactionalStageOptions<T>;
  readonly #owned = new Map<number, Owned>();
  /** Per partition, take-ons refused in a row for a restore behind the committed offset. */
  readonly #refused = new Map<number, number>();
  #generation = 0;

  constructor(opts: TransactionalStageOptions<T>) {
    this.#opts = opts;
    this.member = new GroupMember<T>(
      // Larger fetches than the other consumers: each batch costs a
      // transaction (five requests to the broker), which more records share.
      { ...opts, consumer: { maxWaitTimeInMs: 50, maxBytes: 4 * 1024 * 1024, maxBytesPerPartition: 1024 * 1024, ...opts.consumer, readUncommitted: false } },
      {
        onRevoked: () => {
          this.#generation++;
        },
        // Markers are committed with the next batch's transaction.
        onSkippedRecords: () => undefined,
        busy: () => this.member.failing !== undefined,
        run: (consumer) => consumer.run({ autoCommit: false, eachBatchAutoResolve: false, partitionsConsumedConcurrently: 8, eachBatch: (p) => this.#eachBatch(p) }),
      },
    );
  }

  get groupId(): string {
    return this.member.groupId;
  }

  get topics(): readonly string[] {
    return this.member.topics;
  }

  /** The partitions of the input this member owns and has taken on. */
  get owned(): number[] {
    return [...this.#owned.keys()].filter((p) => this.member.owns(this.topics[0]!, p));
  }

  health(now?: number): string | undefined {
    return this.member.health(now);
  }

  start(): Promise<void> {
    return this.member.start();
  }

  /** Stops fetching; the batch in hand finishes its transaction; leaves the group. */
  async stop(): Promise<void> {
    this.member.beginStop();
    await this.member.consumer.disconnect();
    await Promise.all([...this.#owned.values()].map((o) => o.producer.disconnect().catch(() => undefined)));
    this.#owned.clear();
  }

  async #eachBatch({ batch, resolveOffset, heartbeat, isRunning, isStale }: EachBatchPayload): Promise<void> {
    const { topic, partition, messages } = batch;
    const current = this.member.batchCheck({ isRunning, isStale });
    if (!current()) return;
    let owned = this.#owned.get(partition);
    if (!owned || owned.generation !== this.#generation) {
      try {
        owned = await this.#takeOn(topic, partition, messages[0]?.offset ?? batch.firstOffset() ?? '0');
      } catch (err) {
        // Taken on again with the next fetch (kafkajs retries the batch).
        this.member.transientFailure(err);
        throw err;
      }
      if (!owned) return;
    }
    if (messages.length === 0 || !current()) return;

    const records: { record: Decoded<T>; message: KafkaMessage }[] = [];
    const letters: DeadLetter[] = [];
    for (const message of messages) {
      const outcome = this.member.outcome(topic, partition, message);
      if (outcome.kind === 'poison') letters.push(outcome.letter);
      else {
        records.push({ record: outcome.record, message });
        if (this.#opts.letters && outcome.record.kind === 'value') letters.push(...this.#opts.letters(outcome.record.value));
      }
    }
    if (letters.length > 0) await this.#opts.deadLetters.send(letters);
    // A dead letter's send let the loop turn: after a crash the restarted
    // consumer may have taken the partition on again, restoring the state
    // this batch would now change under it.
    if (!current()) return;
    const next = String(BigInt(batch.lastOffset()) + 1n);
    let outputs: StageOutput[] = [];
    let steps: TransactionSteps = { send: 0, offsets: 0, commit: 0 };
    const tx = await owned.producer.transaction();
    try {
      outputs = this.#opts.process(partition, records);
      if (this.#opts.checkpoint) outputs.push(this.#opts.checkpoint(partition, next));
      const t0 = performance.now();
      for (const topicMessages of sendRequests(outputs, MAX_SEND_BYTES)) await tx.sendBatch({ topicMessages });
      const t1 = performance.now();
      await tx.sendOffsets({ consumerGroupId: this.groupId, topics: [{ topic, partitions: [{ partition, offset: next }] }] });
      const t2 = performance.now();
      await tx.commit();
      steps = { send: (t1 - t0) / 1000, offsets: (t2 - t1) / 1000, commit: (performance.now() - t2) / 1000 };
    } catch (err) {
      await tx.abort().catch(() => undefined);
      // The state moved past what was committed: take the partition on
      // afresh (restore, and read from the committed offset) before the next
      // batch, unless a later take-on (after a crash) already has.
      if (this.#owned.get(partition) === owned) this.#owned.delete(partition);
      await owned.producer.disconnect().catch(() => undefined);
      this.member.transientFailure(err);
      throw err;
    }
    resolveOffset(batch.lastOffset());
    this.member.progress();
    if (this.member.failing !== undefined) this.member.recovered();
    this.#opts.onCommitted?.(partition, records.length, outputs.length, steps);
    await heartbeat();
  }

  /**
   * Starts the partition's producer (fencing its previous writer), restores
   * its state and makes sure reading goes on from the committed offset.
   * Undefined when the fetch was not from there (it was sought back).
   */
  async #takeOn(topic: string, partition: number, fetchedFrom: string): Promise<Owned | undefined> {
    const generation = this.#generation;
    const old = this.#owned.get(partition);
    this.#owned.delete(partition);
    await old?.producer.disconnect().catch(() => undefined);
    const producer = this.#opts.kafka.producer({
      transactionalId: `${this.#opts.transactionalIdPrefix}-${partition}`,
      idempotent: true,
      maxInFlightRequests: 1,
      createPartitioner: JavaCompatiblePartitioner,
      retry: TRANSACTIONAL_RETRY,
    });
    let at: string;
    try {
      await producer.connect();
      // After the fence: a transaction of the previous owner is now committed or aborted.
      const [committed] = await this.#opts.admin.fetchOffsets({ groupId: this.groupId, topics: [topic] });
      at = committed?.partitions.find((p) => p.partition === partition)?.offset ?? '-1';
      const restoredAt = await this.#opts.restore(partition);
      // A state ahead of the offset is a replay (the group was reset): what it
      // reads again, the state has counted. Behind, it would count it twice.
      if (restoredAt !== undefined && at !== '-1' && BigInt(restoredAt) < BigInt(at)) {
        const refused = (this.#refused.get(partition) ?? 0) + 1;
        if (refused <= (this.#opts.behindRefusals ?? 5)) {
          this.#refused.set(partition, refused);
          throw new Error(`partition ${partition}: restored state is at input offset ${restoredAt}, behind the committed ${at}`);
        }
        this.member.log.warn({ partition, restored_at: restoredAt, committed: at, refused }, 'stage_restore_behind_accepted');
      }
      this.#refused.delete(partition);
    } catch (err) {
      await producer.disconnect().catch(() => undefined);
      throw err;
    }
    const owned = { generation, producer };
    this.#owned.set(partition, owned);
    if (at !== '-1' && at !== fetchedFrom) {
      this.member.consumer.seek({ topic, partition, offset: at });
      return undefined;
    }
    return owned;
  }
}
