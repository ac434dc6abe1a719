import { randomUUID } from 'node:crypto';
import type { Admin, EachBatchPayload, KafkaMessage, Message, Producer } from 'kafkajs';
import { GroupMember, type GroupMemberOptions } from './group-member.ts';
import { messageBytes } from './coalescing-sender.ts';
import { createProducer } from './kafka.ts';
import type { DeadLetter } from './dead-letters.ts';
import type { Decoded } from './poison.ts';
import { retry } from '../retry.ts';

/** A record a stage writes: to `topic`, on `partition` when given, else by its key. */
export interface StageOutput extends Message {
  topic: string;
}

export interface TransactionalStageOptions<T> extends GroupMemberOptions<T> {
  admin: Admin;
  /** Prefix of the process's transactional id, `<prefix>-<random>`. */
  transactionalIdPrefix: string;
  /**
   * Called when the stage takes a partition on (at every assignment, and
   * after a failed transaction): load its state through every record written
   * to it so far, committed or aborted, which waits for a previous owner's
   * open transaction. Resolves to the input offset the state was written at
   * (its `checkpoint`), when it keeps one.
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
  /** After a batch's transaction committed. */
  onCommitted?: (partition: number, records: number, outputs: number) => void;
  /** After a transaction committed, with the batches it took and the seconds each of its steps took. */
  onTransaction?: (batches: number, steps: TransactionSteps) => void;
}

/** Seconds of a batch's transaction: its outputs sent (partitions added first), its input offset added, its commit. */
export interface TransactionSteps {
  send: number;
  offsets: number;
  commit: number;
}

/**
 * Most record bytes of one partition in one produce request. kafkajs sends
 * each partition's share of a request as one record batch, which the broker
 * refuses for good over the topic's max.message.bytes (1 MiB by default); a
 * batch's outputs can be several times its input (the intent stage writes a
 * state record per changed key), so they go in requests whose share of each
 * partition stays well below it, one after another in the same transaction.
 */
export const MAX_SEND_BYTES = 512 * 1024;
/** Most record bytes in one produce request: a transaction of many partitions' batches sends them in few round trips. */
export const MAX_REQUEST_BYTES = 8 * 1024 * 1024;

/**
 * Outputs in order, cut into requests, each grouped by topic: each
 * partition's share of a request at most `maxPartitionBytes` (outputs keyed
 * to no partition count against their topic as one share), a request at
 * most `maxRequestBytes`; a larger record goes alone.
 */
export function sendRequests(outputs: readonly StageOutput[], maxPartitionBytes: number, maxRequestBytes = MAX_REQUEST_BYTES): { topic: string; messages: Message[] }[][] {
  const requests: { topic: string; messages: Message[] }[][] = [];
  let current = new Map<string, Message[]>();
  let shares = new Map<string, number>();
  let bytes = 0;
  const flush = () => {
    if (current.size > 0) requests.push([...current].map(([topic, messages]) => ({ topic, messages })));
    current = new Map();
    shares = new Map();
    bytes = 0;
  };
  for (const { topic, ...m } of outputs) {
    const size = messageBytes(m);
    const share = `${m.partition ?? '*'}:${topic}`;
    if (bytes > 0 && ((shares.get(share) ?? 0) + size > maxPartitionBytes || bytes + size > maxRequestBytes)) flush();
    const list = current.get(topic);
    if (list) list.push(m);
    else current.set(topic, [m]);
    shares.set(share, (shares.get(share) ?? 0) + size);
    bytes += size;
  }
  flush();
  return requests;
}

/**
 * How long a transaction may stay open before the broker aborts it (as
 * Kafka Streams): a killed process's open transaction holds its partitions'
 * read_committed readers that long.
 */
const TRANSACTION_TIMEOUT_MS = 10_000;

/** A batch's part of a transaction: its partition's outputs and the offset to commit. */
interface Entry {
  topic: string;
  partition: number;
  outputs: StageOutput[];
  next: string;
}

/** Batches of several partitions committed in one transaction, under the group generation they were read in. */
interface Window {
  generationId: number;
  memberId: string;
  entries: Entry[];
  done: Promise<void>;
  resolve: () => void;
  reject: (err: unknown) => void;
}

/**
 * Consume, transform and produce exactly once: the outputs of fetched
 * batches and their input offsets are written in one Kafka transaction.
 * One transactional producer per process, as Kafka Streams does since
 * KIP-447: the batches of every partition read at about the same time
 * share a transaction (a group commit: while one commits, the next
 * gathers), and the offsets go with the consumer's generation and member
 * id (TxnOffsetCommit v3), so the group coordinator refuses them from a
 * member whose generation is over: a zombie's transaction aborts.
 *
 * When a member takes a partition on, `restore` first reads the
 * partition's state through every record written to it so far, which
 * waits for a previous owner's open transaction to end (each one writes
 * the partition's checkpoint before its offsets); only then does it read
 * the committed offset (again, until it reaches the checkpoint), so nothing
 * is written twice and nothing is skipped. A transaction that fails takes each of its partitions on
 * afresh. The member's input is read `read_committed`.
 */
export class TransactionalStage<T> {
  readonly member: GroupMember<T>;
  readonly #opts: TransactionalStageOptions<T>;
  /** Per partition taken on, the member's generation it was taken on in. */
  readonly #taken = new Map<number, number>();
  /** Per partition, take-ons refused in a row for a restore behind the committed offset. */
  readonly #refused = new Map<number, number>();
  readonly #transactionalId: string;
  #producer: Promise<Producer> | undefined;
  #generation = 0;
  /** The consumer's generation and member id in its group, as of its last join. */
  #group = { generationId: -1, memberId: '' };
  /** The window batches join; closed windows wait in `#closed` (one of another generation, while one commits). */
  #gathering: Window | undefined;
  readonly #closed: Window[] = [];
  #committing = false;

  constructor(opts: TransactionalStageOptions<T>) {
    this.#opts = opts;
    // A process's own id: a process killed in a transaction leaves it open
    // until the transaction timeout aborts it.
    this.#transactionalId = `${opts.transactionalIdPrefix}-${randomUUID()}`;
    this.member = new GroupMember<T>(
      // Larger fetches than the other consumers: each transaction costs five
      // requests to the broker, which more records share.
      { ...opts, consumer: { maxWaitTimeInMs: 50, maxBytes: 4 * 1024 * 1024, maxBytesPerPartition: 1024 * 1024, ...opts.consumer, readUncommitted: false } },
      {
        onRevoked: () => {
          this.#generation++;
        },
        // Markers are committed with the next batch's transaction.
        onSkippedRecords: () => undefined,
        busy: () => this.member.failing !== undefined,
        // Every owned partition's batch at once, so that one transaction takes them all.
        run: (consumer) => consumer.run({ autoCommit: false, eachBatchAutoResolve: false, partitionsConsumedConcurrently: 64, eachBatch: (p) => this.#eachBatch(p) }),
      },
    );
    this.member.consumer.on(this.member.consumer.events.GROUP_JOIN, (e) => {
      this.#group = { generationId: e.payload.generationId, memberId: e.payload.memberId };
    });
  }

  get groupId(): string {
    return this.member.groupId;
  }

  get topics(): readonly string[] {
    return this.member.topics;
  }

  /** The partitions of the input this member owns and has taken on. */
  get owned(): number[] {
    return [...this.#taken.keys()].filter((p) => this.member.owns(this.topics[0]!, p));
  }

  health(now?: number): string | undefined {
    return this.member.health(now);
  }

  start(): Promise<void> {
    return this.member.start();
  }

  /** Stops fetching; the batches in hand finish their transaction; leaves the group. */
  async stop(): Promise<void> {
    this.member.beginStop();
    await this.member.consumer.disconnect();
    const producer = this.#producer;
    this.#producer = undefined;
    this.#taken.clear();
    await producer?.then((p) => p.disconnect()).catch(() => undefined);
  }

  async #eachBatch({ batch, resolveOffset, heartbeat, isRunning, isStale }: EachBatchPayload): Promise<void> {
    const { topic, partition, messages } = batch;
    const current = this.member.batchCheck({ isRunning, isStale });
    if (!current()) return;
    if (this.#taken.get(partition) !== this.#generation) {
      let taken: boolean;
      try {
        taken = await this.#takeOn(topic, partition, messages[0]?.offset ?? batch.firstOffset() ?? '0', heartbeat);
      } catch (err) {
        // Taken on again with the next fetch (kafkajs retries the batch).
        this.member.transientFailure(err);
        throw err;
      }
      if (!taken) return;
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
    // this batch would now change under it; or a failed transaction left
    // the partition to be taken on afresh.
    if (!current() || this.#taken.get(partition) !== this.#generation) return;
    const next = String(BigInt(batch.lastOffset()) + 1n);
    const outputs = this.#opts.process(partition, records);
    if (this.#opts.checkpoint) outputs.push(this.#opts.checkpoint(partition, next));
    try {
      await this.#join({ topic, partition, outputs, next });
    } catch (err) {
      // The state moved past what was committed: the partition is taken on
      // afresh (restored, and read from the committed offset) before its next batch.
      this.member.transientFailure(err);
      throw err;
    }
    resolveOffset(batch.lastOffset());
    this.member.progress();
    if (this.member.failing !== undefined) this.member.recovered();
    this.#opts.onCommitted?.(partition, records.length, outputs.length);
    await heartbeat();
  }

  /** Adds a batch to the window of the current generation; resolves once its transaction commits. */
  #join(entry: Entry): Promise<void> {
    const { generationId, memberId } = this.#group;
    let window = this.#gathering;
    if (!window || window.generationId !== generationId || window.memberId !== memberId) {
      if (window) this.#closed.push(window);
      const { promise: done, resolve, reject } = Promise.withResolvers<void>();
      this.#gathering = window = { generationId, memberId, entries: [], done, resolve, reject };
    }
    window.entries.push(entry);
    if (!this.#committing) {
      this.#committing = true;
      // A turn of the loop first: the other partitions of the same fetch join.
      setImmediate(() => void this.#commitWindows());
    }
    return window.done;
  }

  /** Commits the windows one after another; batches that come meanwhile gather in the next. */
  async #commitWindows(): Promise<void> {
    for (;;) {
      const window = this.#closed.shift() ?? this.#gathering;
      if (!window) break;
      if (window === this.#gathering) this.#gathering = undefined;
      try {
        const steps = await this.#commit(window);
        window.resolve();
        this.#opts.onTransaction?.(window.entries.length, steps);
      } catch (err) {
        // The windows after it fail too: a batch in them may have been
        // processed on state this one changed (a partition whose next batch
        // came while this one committed), and it must not commit past it.
        const failed = [window, ...this.#closed.splice(0), ...(this.#gathering ? [this.#gathering] : [])];
        this.#gathering = undefined;
        for (const w of failed) for (const { partition } of w.entries) this.#taken.delete(partition);
        // A producer whose transaction failed may be fenced (a transaction
        // timed out): the next one starts it anew under the same id, which
        // also aborts whatever it left open.
        const producer = this.#producer;
        this.#producer = undefined;
        await producer?.then((p) => p.disconnect()).catch(() => undefined);
        for (const w of failed) w.reject(err);
      }
    }
    this.#committing = false;
  }

  async #commit({ generationId, memberId, entries }: Window): Promise<TransactionSteps> {
    const producer = await this.#connect();
    const tx = await producer.transaction();
    try {
      const t0 = performance.now();
      for (const topicMessages of sendRequests(entries.flatMap((e) => e.outputs), MAX_SEND_BYTES)) await tx.sendBatch({ topicMessages });
      const t1 = performance.now();
      const offsets = Map.groupBy(entries, (e) => e.topic);
      const topics = [...offsets].map(([topic, es]) => ({ topic, partitions: es.map(({ partition, next }) => ({ partition, offset: next })) }));
      await tx.sendOffsets({ consumerGroupId: this.groupId, generationId, memberId, topics });
      const t2 = performance.now();
      await tx.commit();
      return { send: (t1 - t0) / 1000, offsets: (t2 - t1) / 1000, commit: (performance.now() - t2) / 1000 };
    } catch (err) {
      await tx.abort().catch(() => undefined);
      throw err;
    }
  }

  /** The process's transactional producer, started on first use. */
  #connect(): Promise<Producer> {
    if (!this.#producer) {
      const producer = createProducer(this.#opts.kafka, { id: this.#transactionalId, timeoutMs: TRANSACTION_TIMEOUT_MS });
      const started = producer.connect().then(() => producer);
      this.#producer = started;
      started.catch(() => {
        if (this.#producer === started) this.#producer = undefined;
      });
    }
    return this.#producer;
  }

  /**
   * Restores the partition's state and makes sure reading goes on from the
   * committed offset. False when the fetch was not from there (it was sought back).
   */
  async #takeOn(topic: string, partition: number, fetchedFrom: string, heartbeat: () => Promise<void>): Promise<boolean> {
    const generation = this.#generation;
    this.#taken.delete(partition);
    await this.#connect();
    // The restore waits for a previous owner's open transaction to end.
    const restoredAt = await this.#opts.restore(partition);
    const at = await this.#stableOffset(topic, partition, heartbeat);
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
    this.#taken.set(partition, generation);
    if (at !== '-1' && at !== fetchedFrom) {
      this.member.consumer.seek({ topic, partition, offset: at });
      return false;
    }
    return true;
  }

  /**
   * The partition's committed offset, stable: the transaction that wrote the
   * restored state wrote its offset too, but the group coordinator shows it
   * only once the commit's marker reaches it, and answers the offset before
   * it until then unless asked for stable offsets (KIP-447, kafkajs patch 012).
   */
  async #stableOffset(topic: string, partition: number, heartbeat: () => Promise<void>): Promise<string> {
    const [committed] = await retry(
      async (attempt) => {
        if (attempt > 1) await heartbeat();
        return this.#opts.admin.fetchOffsets({ groupId: this.groupId, topics: [{ topic, partitions: [partition] }], requireStable: true });
      },
      {
        schedule: { initialMs: 100, maxMs: 100, factor: 1, giveUpAfterMs: TRANSACTION_TIMEOUT_MS },
        isRetryable: (err) => (err as { type?: string }).type === 'UNSTABLE_OFFSET_COMMIT',
        signal: this.member.stopSignal,
      },
    );
    return committed?.partitions.find((p) => p.partition === partition)?.offset ?? '-1';
  }
}
