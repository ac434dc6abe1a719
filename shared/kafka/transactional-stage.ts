import type { Admin, EachBatchPayload, KafkaMessage, Message, Producer } from 'kafkajs';
import { GroupMember, type GroupMemberOptions } from './group-member.ts';
import { JavaCompatiblePartitioner } from './partitioner.ts';
import type { Decoded } from './poison.ts';

/** A record a stage writes: to `topic`, on `partition` when given, else by its key. */
export interface StageOutput extends Message {
  topic: string;
  /** A compacted topic's value: of several with one key in a commit, only the last is written. */
  compacted?: boolean;
}

export interface TransactionalStageOptions<T> extends GroupMemberOptions<T> {
  admin: Admin;
  /** Prefix of the stage's transactional ids: one per input partition, `<prefix>-<partition>`. */
  transactionalIdPrefix: string;
  /**
   * Called when the stage takes a partition on (at every assignment, and
   * after a failed transaction), once the partition's previous writer is
   * fenced: load its state as of the committed offset.
   */
  restore: (partition: number) => Promise<void>;
  /**
   * What one fetched batch of a partition (in offset order, poison left out)
   * writes. It may keep state: a failed transaction restores the partition
   * before it reads again.
   */
  process: (partition: number, records: { record: Decoded<T>; message: KafkaMessage }[]) => StageOutput[];
  /** After a transaction committed. */
  onCommitted?: (partition: number, records: number, outputs: number) => void;
  /**
   * How long a partition's processed batches may wait to share one
   * transaction (Kafka Streams' commit.interval.ms): a transaction costs
   * several requests to the broker, and a compacted key changed in many
   * batches is written once.
   */
  commitIntervalMs: number;
}

/** Outputs past which a partition commits without waiting for the interval. */
const MAX_PENDING_OUTPUTS = 50_000;

interface Owned {
  generation: number;
  producer: Producer;
  /** The input offset the last commit (or the take-on) left the partition at. */
  committed: string;
  /** Processed and not yet committed: the outputs, and the input offset to commit with them. */
  pending: { outputs: StageOutput[]; next: string; records: number; since: number } | undefined;
  /** The commit running, if any: a batch and the interval's timer take turns. */
  flushing: Promise<void> | undefined;
  timer: NodeJS.Timeout | undefined;
}

/**
 * Consume, transform and produce exactly once: the outputs of a partition's
 * batches over `commitIntervalMs` and the input offset after them are
 * written in one Kafka transaction, by the transactional producer of the
 * input partition (`<prefix>-<partition>`, the
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

  /** Stops fetching, leaves the group, commits what was processed (unless a new owner fenced it off first). */
  async stop(): Promise<void> {
    this.member.beginStop();
    await this.member.consumer.disconnect();
    const topic = this.topics[0]!;
    await Promise.all([...this.#owned].map(([partition, o]) => this.#commit(topic, partition, o).catch(() => undefined)));
    await Promise.all([...this.#owned.values()].map((o) => o.producer.disconnect().catch(() => undefined)));
    this.#owned.clear();
  }

  async #eachBatch({ batch, resolveOffset, heartbeat, isRunning, isStale }: EachBatchPayload): Promise<void> {
    const { topic, partition, messages } = batch;
    const current = this.member.batchCheck({ isRunning, isStale });
    if (!current()) return;
    let owned = this.#owned.get(partition);
    if (!owned || owned.generation !== this.#generation) {
      owned = await this.#takeOn(topic, partition, messages[0]?.offset ?? batch.firstOffset() ?? '0');
      if (!owned) return;
    }
    if (messages.length === 0 || !current()) return;
    // The interval's commit may be running: the next batch waits for it (and, if it failed, for the take-on afresh).
    await owned.flushing;
    if (this.#owned.get(partition) !== owned) return;

    const records: { record: Decoded<T>; message: KafkaMessage }[] = [];
    for (const message of messages) {
      const outcome = this.member.outcome(topic, partition, message);
      if (outcome.kind === 'poison') await this.#opts.deadLetters.send([outcome.letter]);
      else records.push({ record: outcome.record, message });
    }
    let outputs: StageOutput[];
    try {
      outputs = this.#opts.process(partition, records);
    } catch (err) {
      await this.#fail(topic, partition, owned, err);
      throw err;
    }
    const now = Date.now();
    const pending = (owned.pending ??= { outputs: [], next: owned.committed, records: 0, since: now });
    for (const o of outputs) pending.outputs.push(o);
    pending.next = String(BigInt(batch.lastOffset()) + 1n);
    pending.records += records.length;
    resolveOffset(batch.lastOffset());
    const due = pending.since + this.#opts.commitIntervalMs;
    if (now >= due || pending.outputs.length >= MAX_PENDING_OUTPUTS || this.member.stopping) {
      await this.#commit(topic, partition, owned);
    } else {
      owned.timer ??= setTimeout(() => void this.#commit(topic, partition, owned).catch(() => undefined), due - now);
    }
    await heartbeat();
  }

  /** Writes the partition's pending outputs and input offset in one transaction. */
  #commit(topic: string, partition: number, owned: Owned): Promise<void> {
    const previous = owned.flushing;
    const run = async () => {
      await previous;
      clearTimeout(owned.timer);
      owned.timer = undefined;
      const pending = owned.pending;
      owned.pending = undefined;
      // Revoked meanwhile: the next owner fences this producer and reads from the committed offset.
      if (!pending || owned.generation !== this.#generation || this.#owned.get(partition) !== owned) return;
      const outputs = lastOfEachCompactedKey(pending.outputs);
      const tx = await owned.producer.transaction();
      try {
        const byTopic = new Map<string, Message[]>();
        for (const { topic: out, compacted: _, ...m } of outputs) {
          const list = byTopic.get(out);
          if (list) list.push(m);
          else byTopic.set(out, [m]);
        }
        if (byTopic.size > 0) await tx.sendBatch({ topicMessages: [...byTopic].map(([t, ms]) => ({ topic: t, messages: ms })) });
        await tx.sendOffsets({ consumerGroupId: this.groupId, topics: [{ topic, partitions: [{ partition, offset: pending.next }] }] });
        await tx.commit();
      } catch (err) {
        await tx.abort().catch(() => undefined);
        await this.#fail(topic, partition, owned, err);
        throw err;
      }
      owned.committed = pending.next;
      this.member.progress();
      if (this.member.failing !== undefined) this.member.recovered();
      this.#opts.onCommitted?.(partition, pending.records, outputs.length);
    };
    const committing = run();
    const settled: Promise<void> = committing.then(
      () => undefined,
      () => undefined,
    );
    owned.flushing = settled;
    void settled.then(() => {
      if (owned.flushing === settled) owned.flushing = undefined;
    });
    return committing;
  }

  /**
   * The state moved past what was committed: drop the partition, so the next
   * batch takes it on afresh (restores the state), and read again from the
   * committed offset.
   */
  async #fail(topic: string, partition: number, owned: Owned, err: unknown): Promise<void> {
    clearTimeout(owned.timer);
    owned.timer = undefined;
    owned.pending = undefined;
    if (this.#owned.get(partition) === owned) this.#owned.delete(partition);
    await owned.producer.disconnect().catch(() => undefined);
    this.member.transientFailure(err);
    if (owned.generation === this.#generation && !this.member.stopping) {
      try {
        this.member.consumer.seek({ topic, partition, offset: owned.committed });
      } catch {
        // Not assigned any more: its next owner reads from the committed offset.
      }
    }
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
    });
    await producer.connect();
    // After the fence: a transaction of the previous owner is now committed or aborted.
    const [committed] = await this.#opts.admin.fetchOffsets({ groupId: this.groupId, topics: [topic] });
    const at = committed?.partitions.find((p) => p.partition === partition)?.offset ?? '-1';
    await this.#opts.restore(partition);
    const owned: Owned = { generation, producer, committed: at !== '-1' ? at : fetchedFrom, pending: undefined, flushing: undefined, timer: undefined };
    this.#owned.set(partition, owned);
    if (at !== '-1' && at !== fetchedFrom) {
      this.member.consumer.seek({ topic, partition, offset: at });
      return undefined;
    }
    return owned;
  }
}

/** `outputs` in order, less each compacted value that a later one with its topic, partition and key replaces. */
function lastOfEachCompactedKey(outputs: StageOutput[]): StageOutput[] {
  const seen = new Set<string>();
  const kept: StageOutput[] = [];
  for (let i = outputs.length - 1; i >= 0; i--) {
    const o = outputs[i]!;
    if (o.compacted) {
      const id = `${o.topic}\u0000${o.partition ?? ''}\u0000${o.key?.toString() ?? ''}`;
      if (seen.has(id)) continue;
      seen.add(id);
    }
    kept.push(o);
  }
  return kept.reverse();
}
