import type { Consumer, EachBatchPayload, KafkaMessage } from 'kafkajs';
import { classifyFailure } from '../failure-class.ts';
import type { DeadLetter } from './dead-letters.ts';
import { GroupMember, type GroupMemberOptions, type Outcome } from './group-member.ts';
import type { Decoded } from './poison.ts';
import { eventLoopSlices, type TimeSlices } from '../time-slices.ts';
import { delayFor, sleep, type Schedule } from '../retry.ts';

/**
 * The wait before a failed batch is read again, by failures in a row. The
 * retry is a rewind and a new fetch, not a call in a loop, so only the
 * schedule is shared with retry().
 */
const REWIND_SCHEDULE: Schedule = { initialMs: 250, maxMs: 10_000 };

/** A decoded record handed to a batch handler. */
export interface BatchItem<T> {
  topic: string;
  partition: number;
  message: KafkaMessage;
  record: Decoded<T>;
}

interface Fetched<T> {
  topic: string;
  partition: number;
  message: KafkaMessage;
  generation: number;
  /** Only a commit point (transaction markers up to this offset): nothing to decode. */
  marker?: true;
  /** Decoded (or found to be poison) as it arrived. */
  outcome?: Outcome<T>;
}

/** The last offset handled on a partition. */
interface CommitPoint {
  topic: string;
  partition: number;
  offset: string;
}

export interface BatchConsumerOptions<T> extends GroupMemberOptions<T> {
  /** How long messages may wait for others to share a handler call when none is running. */
  flushMs: number;
  /** Most messages in one handler call; fetching pauses while twice this many wait. */
  maxMessages: number;
  /**
   * Makes the records' effect durable (e.g. one ClickHouse insert); must be
   * idempotent, since a failure replays the batch. Offsets are committed
   * only after it resolves. If it throws a transient failure
   * (shared/failure-class.ts), nothing is committed and the records are read
   * again after a growing pause. If it throws a permanent one, the batch is
   * split in halves and each half handled again, until the records at fault
   * stand alone: those are dead-lettered (`rejected_by_sink`), the rest made
   * durable, and all of it committed.
   */
  handle: (items: BatchItem<T>[]) => Promise<void>;
  onFlush?: (messages: number, ms: number) => void;
  /**
   * The age (ms, now minus the record's Kafka timestamp) of the oldest record
   * of each fetched batch as it arrives (`fetched`) and of each handler call
   * once it resolved (`handled`): how stale what the handler makes durable is.
   */
  onRecordAge?: (stage: 'fetched' | 'handled', ageMs: number) => void;
  /** Time between turns of the event loop while records are decoded (default: the process's eventLoopSlices). */
  slices?: TimeSlices;
}

/**
 * A consumer-group member that turns kafkajs' per-partition batches into few,
 * large handler calls (so ClickHouse sees few, large inserts) and commits
 * each partition's offset only after the handler made its records durable
 * and every poison record among them was dead-lettered.
 *
 * Group commit: while one handler call runs, the next batches gather (and
 * fetching goes on); the moment it finishes, everything gathered goes in the
 * next call.
 */
export class BatchConsumer<T> {
  readonly #opts: BatchConsumerOptions<T>;
  /** Membership, generations, outcomes and health, shared by every consumer. */
  readonly member: GroupMember<T>;
  #pending: Fetched<T>[] = [];
  #flushing: Promise<void> | undefined;
  /** The offset commits of handled batches, one after the other. */
  #commits: Promise<void> = Promise.resolve();
  #timer: NodeJS.Timeout | undefined;
  #failuresInRow = 0;
  readonly #slices: TimeSlices;

  constructor(opts: BatchConsumerOptions<T>) {
    // Small fetches: kafkajs decodes a whole fetch response in one turn of
    // the event loop. With 10 MB responses of 4 MB batches (kafkajs' default and ours
    // before), a process draining a backlog held its event loop for
    // 0.4-0.9 s at a time (docs/performance.md); the API and the intake
    // in the same process stalled as long. A record batch larger than these
    // bounds is still fetched whole (the broker always returns the first
    // batch of a partition).
    this.#opts = opts;
    this.member = new GroupMember(
      { ...opts, consumer: { maxWaitTimeInMs: 50, maxBytes: 1024 * 1024, maxBytesPerPartition: 256 * 1024, ...opts.consumer } },
      { onRevoked: () => this.#onRevoked(), onSkippedRecords: (t, p, o) => this.#onSkippedRecords(t, p, o), busy: () => this.#busy(), run: (c) => this.#run(c) },
    );
    this.#slices = opts.slices ?? eventLoopSlices;
  }

  get groupId(): string {
    return this.member.groupId;
  }

  get topics(): readonly string[] {
    return this.member.topics;
  }

  /** Undefined when healthy, else why not (GroupMember.health). */
  health(now?: number): string | undefined {
    return this.member.health(now);
  }

  /** Joins the group and starts reading. */
  start(): Promise<void> {
    return this.member.start();
  }

  #onRevoked(): void {
    // Whatever was fetched before the (re)join is fetched again from the
    // committed offsets by whoever owns the partition now.
    this.#pending = [];
    this.member.noteBusy();
  }

  #onSkippedRecords(topic: string, partition: number, lastOffset: string): void {
    const message = { offset: lastOffset } as KafkaMessage;
    this.#pending.push({ topic, partition, message, generation: this.member.generation, marker: true });
    this.#schedule();
  }

  #busy(): boolean {
    return this.#pending.length > 0 || this.#flushing !== undefined || this.member.failing !== undefined;
  }

  async #run(consumer: Consumer): Promise<void> {
    await consumer.run({
      autoCommit: false,
      eachBatchAutoResolve: false,
      partitionsConsumedConcurrently: 64,
      eachBatch: (payload) => this.#eachBatch(payload),
    });
  }

  /** Stops fetching, makes what was fetched durable and commits it (within `budgetMs`), leaves the group. */
  async stop(budgetMs = 10_000): Promise<void> {
    this.member.beginStop();
    this.member.pauseAll();
    clearTimeout(this.#timer);
    this.#timer = undefined;
    const deadline = Date.now() + budgetMs;
    const drain = (async () => {
      await this.#flushing?.catch(() => undefined);
      if (this.#pending.length > 0 && !this.member.failing) await this.#flush().catch(() => undefined);
      await this.#commits;
    })();
    await Promise.race([drain, new Promise((r) => setTimeout(r, Math.max(0, deadline - Date.now())).unref())]);
    await this.member.consumer.disconnect();
  }

  async #eachBatch({ batch, resolveOffset, heartbeat, isRunning, isStale }: EachBatchPayload): Promise<void> {
    const generation = this.member.generation;
    const current = this.member.batchCheck({ isRunning, isStale });
    if (batch.messages.length === 0 || !current()) return;
    this.#opts.onRecordAge?.('fetched', Date.now() - Number(batch.messages[0]!.timestamp));
    // kafkajs hands over every partition's batch of a fetch response at
    // once. Decoded together they held the loop for as long as all of them
    // took: they are decoded in the process's shared slices of it.
    for (const message of batch.messages) {
      if (this.#slices.due) {
        await this.#slices.next();
        if (!current()) return;
      }
      this.#decodeOne(batch.topic, batch.partition, message, generation);
    }
    // Markers after the last record (the transaction's commit) commit with it.
    if (BigInt(batch.lastOffset()) > BigInt(batch.messages.at(-1)!.offset)) this.#onSkippedRecords(batch.topic, batch.partition, batch.lastOffset());
    resolveOffset(batch.lastOffset());
    this.member.noteBusy();
    this.#schedule();
    // Backpressure: stop fetching while too much waits for the handler.
    while (this.#pending.length >= 2 * this.#opts.maxMessages && this.#flushing && isRunning() && !this.member.stopping) {
      await this.#flushing.catch(() => undefined);
      await heartbeat();
    }
  }

  /**
   * Decoded on arrival, not when the handler call is made: decoding (wire
   * format, Avro, zod) is the consumer's main CPU cost, and done here it
   * overlaps the running handler call (a ClickHouse insert, on chdb's own
   * threads) instead of delaying the next one. A decoder failure that is not
   * poison is left to the handler call, whose failures are transient
   * (retried, never skipped).
   */
  #decodeOne(topic: string, partition: number, message: KafkaMessage, generation: number): void {
    let outcome: Outcome<T> | undefined;
    try {
      outcome = this.member.outcome(topic, partition, message);
    } catch {
      outcome = undefined;
    }
    this.#pending.push({ topic, partition, message, generation, outcome });
  }

  #schedule(): void {
    if (this.#flushing || this.#timer || this.member.stopping) return;
    if (this.#pending.length >= this.#opts.maxMessages) {
      void this.#flushLoop();
      return;
    }
    this.#timer = setTimeout(() => {
      this.#timer = undefined;
      void this.#flushLoop();
    }, this.#opts.flushMs);
  }

  /** Runs handler calls back to back while messages are waiting. */
  async #flushLoop(): Promise<void> {
    if (this.#flushing) return;
    while (this.#pending.length > 0 && !this.member.stopping) {
      this.#flushing = this.#flush();
      try {
        await this.#flushing;
      } finally {
        this.#flushing = undefined;
        this.member.noteBusy();
      }
    }
  }

  async #flush(): Promise<void> {
    const fetched = this.#pending.splice(0, this.#opts.maxMessages);
    if (fetched.length === 0) return;
    const started = performance.now();
    const items: BatchItem<T>[] = [];
    const letters: DeadLetter[] = [];
    // Kafka timestamps are decimal strings of one length (13 digits until
    // 2286), so the oldest is the least as a string: no number per record.
    let oldest: string | undefined;
    try {
      // A decoder failure that is not poison (left undecided on arrival) is
      // thrown again here: a transient failure like the handler's, so the
      // records are rewound and read again, never skipped.
      for (const f of fetched) {
        if (f.marker) continue;
        const o = f.outcome ?? this.member.outcome(f.topic, f.partition, f.message);
        if (o.kind === 'poison') letters.push(o.letter);
        else items.push({ topic: f.topic, partition: f.partition, message: f.message, record: o.record });
        if (oldest === undefined || f.message.timestamp < oldest) oldest = f.message.timestamp;
      }
      if (items.length > 0) {
        for (const r of await this.#handleSplitting(items)) letters.push(r);
      }
      if (items.length > 0 && oldest !== undefined) this.#opts.onRecordAge?.('handled', Date.now() - Number(oldest));
      await this.#opts.deadLetters.send(letters);
      this.#failuresInRow = 0;
      this.member.recovered();
    } catch (err) {
      this.member.transientFailure(err);
      await this.#rewind(fetched, err);
      return;
    }
    if (items.length > 0) this.#opts.onFlush?.(items.length, performance.now() - started);
    this.member.progress();
    // The commit runs while the next handler call starts: it is a round trip
    // to the broker that the next insert need not wait for. It always follows
    // its own batch's handler call, commits go one at a time in order, and a
    // handler call ends only once the commit before its own is done, so at
    // most one waits (a broker that does not answer commits holds the
    // handler calls, as before, rather than piling commits up).
    const generation = this.member.generation;
    const points = this.#lastOffsets(fetched);
    const previous = this.#commits;
    this.#commits = previous.then(() => this.#commit(generation, points));
    await previous;
  }

  /**
   * Hands `items` to the handler. On a permanent failure it bisects: each
   * half is handled on its own, so a record the sink refuses costs about
   * 2·log2(n) handler calls and the others of its batch are still made
   * durable. Answers the dead letters of the records refused alone; a
   * transient failure (at any depth) is thrown, and the whole batch is
   * retried (the handler is idempotent, so halves already done are harmless
   * to redo).
   */
  async #handleSplitting(items: BatchItem<T>[]): Promise<DeadLetter[]> {
    try {
      await this.#opts.handle(items);
      return [];
    } catch (err) {
      const failure = classifyFailure(err);
      if (failure.kind === 'transient' || this.member.stopping) throw err;
      if (items.length === 1) {
        const { topic, partition, message } = items[0]!;
        return [this.member.deadLetter(topic, partition, message, 'rejected_by_sink', failure.detail)];
      }
      this.member.log.warn({ detail: failure.detail, messages: items.length }, 'consumer_batch_refused_splitting');
      const half = Math.ceil(items.length / 2);
      // Each half handled is progress: a long bisection is not a stall.
      const first = await this.#handleSplitting(items.slice(0, half));
      this.member.progress();
      const second = await this.#handleSplitting(items.slice(half));
      this.member.progress();
      return [...first, ...second];
    }
  }

  /**
   * The last offset of each partition among `fetched` read in the current
   * generation. Once per partition rather than per record: an ownership
   * check and a BigInt per record were 5 % of a drain's CPU. Offsets are
   * below 2^53, so Number compares them.
   */
  #lastOffsets(fetched: Fetched<T>[]): CommitPoint[] {
    const last = new Map<string, Map<number, string>>();
    for (const f of fetched) {
      if (f.generation !== this.member.generation) continue;
      let byPartition = last.get(f.topic);
      if (!byPartition) last.set(f.topic, (byPartition = new Map()));
      const seen = byPartition.get(f.partition);
      if (seen === undefined || Number(seen) < Number(f.message.offset)) byPartition.set(f.partition, f.message.offset);
    }
    return [...last].flatMap(([topic, byPartition]) => [...byPartition].map(([partition, offset]) => ({ topic, partition, offset })));
  }

  /** Commits the offset after each of `points` (read in `generation`) whose partition the member still owns in that generation. */
  async #commit(generation: number, points: CommitPoint[]): Promise<void> {
    if (generation !== this.member.generation) return;
    await this.member.commit(points.map(({ topic, partition, offset }) => ({ topic, partition, offset: (BigInt(offset) + 1n).toString() })));
  }

  /**
   * The handler failed: nothing of `fetched` (nor what waits behind them) is
   * committed; after a growing pause every owned partition involved is
   * sought back to its first unhandled offset, so the records are fetched
   * again and none is skipped.
   */
  async #rewind(fetched: Fetched<T>[], err: unknown): Promise<void> {
    const all = [...fetched, ...this.#pending];
    this.#pending = [];
    const delay = delayFor(REWIND_SCHEDULE, ++this.#failuresInRow);
    this.member.log.error({ err: { message: (err as Error).message }, messages: fetched.length, retry_in_ms: delay }, 'consumer_batch_failed');
    const generation = this.member.generation;
    const first = new Map<string, { topic: string; partition: number; offset: bigint }>();
    for (const { topic, partition, message, marker } of all) {
      if (marker) continue;
      const key = `${topic}:${partition}`;
      const o = BigInt(message.offset);
      const seen = first.get(key);
      if (!seen || o < seen.offset) first.set(key, { topic, partition, offset: o });
    }
    await sleep(delay, this.member.stopSignal);
    if (this.member.stopping || generation !== this.member.generation) return;
    for (const { topic, partition, offset } of first.values()) {
      if (!this.member.owns(topic, partition)) continue;
      try {
        this.member.consumer.seek({ topic, partition, offset: offset.toString() });
      } catch (seekErr) {
        this.member.log.warn({ err: { message: (seekErr as Error).message }, topic, partition }, 'consumer_seek_failed');
      }
    }
  }
}
