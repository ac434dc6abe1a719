import type { Consumer, EachBatchPayload, KafkaMessage } from 'kafkajs';
import { CommitCoordinator, type Lane, type Ticket } from './commit-coordinator.ts';
import { GroupCommit, type BatchItem, type GroupCommitOptions } from './group-commit.ts';
import { GroupMember, type GroupMemberOptions } from './group-member.ts';
import type { Decoded } from './poison.ts';
import { RESTART_SCHEDULE } from './crash-restarts.ts';
import { delayFor, DURABLE_HANDOFF, retry } from '../retry.ts';
import { eventLoopSlices, type TimeSlices } from '../time-slices.ts';

export type { BatchItem } from './group-commit.ts';

/** What a record handler does with one record: its outcome, as a value. */
export type Handling =
  /** Work taken on; the offset may be committed once the promise resolves. */
  | { kind: 'work'; done: Promise<void> }
  /** Not due yet: pause the partition and come back to this record at `dueAt`. */
  | { kind: 'wait'; dueAt: number };

/** Each record handled on its own, finishing in any order (the fan-out, the config store). */
interface PerRecord<T> {
  /**
   * Decides what to do with a decoded record. The work must not reject
   * except while the consumer stops: a transient failure is retried inside
   * it (a rejected record stays uncommitted and holds its partition's commit
   * point, which /readyz reports as a stall).
   */
  handle: (record: Decoded<T>, message: KafkaMessage, partition: number, topic: string) => Handling;
  /** Most records taken on and not yet done before fetching pauses (backpressure). */
  maxOutstanding: number;
  batches?: undefined;
}

/** Records gathered into few, large handler calls (the projector's inserts). */
interface Batched<T> {
  batches: GroupCommitOptions<T>;
  handle?: undefined;
}

export type GroupConsumerOptions<T> = GroupMemberOptions<T> &
  (PerRecord<T> | Batched<T>) & {
    /**
     * Whether done offsets are committed (default true). A reader that reads
     * its topics whole at every start (the config store) commits nothing.
     */
    commitOffsets?: boolean;
    /** Records taken on and not done, after each fetched batch. */
    onInFlight?: (n: number) => void;
    /**
     * Every record of a fetched batch was taken on, in order (or the fetch
     * held only markers and aborted records): the partition is read through
     * `lastOffset`, markers included. Not called for a batch cut short (a
     * rebalance, a crash, a seek), which is fetched again.
     */
    onBatchTaken?: (topic: string, partition: number, lastOffset: string) => void;
    /**
     * A partition waiting for a record that is not yet due is fetched again
     * this long after the record falls due (default 0), so that one fetch
     * takes every record due in that window. Without it, records due a few
     * ms apart each cost a fetch of the whole partition batch (up to
     * maxBytesPerPartition) to handle one record.
     */
    dueSlackMs?: number;
    /**
     * The age (ms, now minus the record's Kafka timestamp) of the oldest
     * record of each fetched batch as it arrives (`fetched`) and, batched,
     * of each handler call once it resolved (`handled`).
     */
    onRecordAge?: (stage: 'fetched' | 'handled', ageMs: number) => void;
    /** Time between turns of the event loop while records are taken on (default: the process's eventLoopSlices). */
    slices?: TimeSlices;
  };

/**
 * The service's one Kafka consumer, composed of a group member (membership,
 * generations, outcomes, health, crash restarts), a commit coordinator
 * (in-order commit points over out-of-order completion, backpressure) and,
 * for a batched consumer, a group commit. Each record's outcome is a value:
 * work (its offset committed once done), a wait (the partition paused and
 * read again from it later, never a sleep in the handler, which would cost
 * the group membership) or, for poison, its dead letter as its work. A
 * record that fails transiently is read again after the growing pause of
 * RESTART_SCHEDULE (a seek and a new fetch, not a call in a loop), never
 * skipped.
 */
export class GroupConsumer<T> {
  readonly #opts: GroupConsumerOptions<T>;
  readonly member: GroupMember<T>;
  readonly #commits: CommitCoordinator;
  readonly #batches: GroupCommit<T> | undefined;
  readonly #slices: TimeSlices;
  readonly #timers = new Set<NodeJS.Timeout>();
  /** Work promises not yet settled, and what stop() awaits for them. */
  #unsettled = 0;
  #idle: PromiseWithResolvers<void> | undefined;

  constructor(opts: GroupConsumerOptions<T>) {
    this.#opts = opts;
    const batched = opts.batches !== undefined;
    // Small fetches: kafkajs decodes a whole fetch response in one turn of
    // the event loop, so its large default, while a backlog drains, stalls
    // the API and the intake in the same process (docs/performance.md). A
    // record batch larger than these bounds is still fetched whole (the
    // broker always returns the first batch of a partition).
    const consumer = { maxWaitTimeInMs: batched ? 50 : 100, maxBytes: 1024 * 1024, maxBytesPerPartition: 256 * 1024, ...opts.consumer };
    this.member = new GroupMember(
      { ...opts, consumer },
      {
        onRevoked: () => this.#onRevoked(),
        onSkippedRecords: (t, p, o) => {
          this.#commits.skip(this.#commits.lane(t, p), o);
          this.#opts.onBatchTaken?.(t, p, o);
        },
        busy: () => this.#commits.inFlight > 0 || this.member.failing !== undefined,
        run: (c) => this.#run(c, batched ? 64 : 16),
      },
    );
    this.#commits = new CommitCoordinator({
      commit: opts.commitOffsets === false ? undefined : (offsets) => this.member.commit(offsets),
      // Batched: each handler call's commit goes at once. Per record: a
      // commit every 100 ms covers thousands of records.
      delayMs: batched ? 0 : 100,
      maxInFlight: opts.batches ? 3 * opts.batches.maxMessages : opts.maxOutstanding,
    });
    this.#batches =
      opts.batches &&
      new GroupCommit(opts.batches, {
        member: this.member,
        commits: this.#commits,
        deadLetters: opts.deadLetters,
        onHandled: opts.onRecordAge && ((ageMs) => opts.onRecordAge!('handled', ageMs)),
        rewind: (items, err) => this.#rewind(items, err),
      });
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

  /** Stops fetching, finishes outstanding work (within `budgetMs`), commits what is done, leaves the group. */
  async stop(budgetMs = 10_000): Promise<void> {
    this.member.beginStop();
    for (const t of this.#timers) clearTimeout(t);
    this.#timers.clear();
    this.member.pauseAll();
    const drain = (async () => {
      await this.#batches?.drain();
      if (this.#unsettled > 0) await (this.#idle ??= Promise.withResolvers<void>()).promise;
    })();
    await Promise.race([drain, new Promise((r) => setTimeout(r, budgetMs).unref())]);
    await this.#commits.flush();
    await this.member.consumer.disconnect();
  }

  /** Runs `fn` until it succeeds, with a growing pause; gives up only when the consumer stops. */
  async untilDone(what: string, fn: () => Promise<void>): Promise<void> {
    await retry(fn, {
      schedule: DURABLE_HANDOFF,
      signal: this.member.stopSignal,
      onRetry: (err, _attempt, delay) => {
        this.member.transientFailure(err);
        this.member.log.warn({ err: { message: (err as Error).message }, what, retry_in_ms: delay }, 'consumer_work_retry');
      },
    });
    this.member.recovered();
  }

  #onRevoked(): void {
    // Work of the old assignment may still finish; its lanes are gone, so it
    // commits nothing. The new assignment starts afresh from the committed offsets.
    this.#commits.clear();
    this.#batches?.clear();
    this.#opts.onInFlight?.(0);
    this.member.noteBusy();
  }

  async #run(consumer: Consumer, partitionsConsumedConcurrently: number): Promise<void> {
    await consumer.run({ autoCommit: false, eachBatchAutoResolve: false, partitionsConsumedConcurrently, eachBatch: (p) => this.#eachBatch(p) });
  }

  async #eachBatch({ batch, resolveOffset, heartbeat, isRunning, isStale }: EachBatchPayload): Promise<void> {
    const { topic, partition, messages } = batch;
    const current = this.member.batchCheck({ isRunning, isStale });
    if (messages.length === 0 || !current()) return;
    this.#opts.onRecordAge?.('fetched', Date.now() - Number(messages[0]!.timestamp));
    const lane = this.#commits.lane(topic, partition);
    for (const message of messages) {
      // kafkajs hands over every partition's batch of a fetch response at
      // once: they are worked through in the process's shared slices of the loop.
      if (this.#slices.due) {
        await this.#slices.next();
        if (!current()) return;
      }
      // Backpressure, checked before a record is taken on so that the loops
      // of all partitions together stay within the bound.
      while (this.#commits.full) {
        this.#batches?.schedule();
        await this.#commits.freed(heartbeat);
        if (!current()) return;
      }
      if (!this.#take(lane, message)) return;
    }
    // Markers after the last record (a transaction's commit) commit once it is done.
    if (BigInt(batch.lastOffset()) > BigInt(messages.at(-1)!.offset)) this.#commits.skip(lane, batch.lastOffset());
    this.#opts.onBatchTaken?.(topic, partition, batch.lastOffset());
    resolveOffset(batch.lastOffset());
    this.#batches?.schedule();
    this.#opts.onInFlight?.(this.#commits.inFlight);
    this.member.noteBusy();
    await heartbeat();
  }

  /** Takes one record on; false when its partition is to be read again from it (the rest of the batch is left). */
  #take(lane: Lane, message: KafkaMessage): boolean {
    const { topic, partition } = lane;
    let handling: Handling;
    try {
      const outcome = this.member.outcome(topic, partition, message);
      if (outcome.kind === 'poison') {
        handling = { kind: 'work', done: this.untilDone('dead_letter', () => this.#opts.deadLetters.send([outcome.letter])) };
      } else if (this.#batches) {
        // Decoded on arrival, not when the handler call is made: decoding is
        // the consumer's main CPU cost, and done here it overlaps the running
        // handler call (a ClickHouse insert, on chdb's own threads).
        const item: BatchItem<T> = { lane, topic, partition, message, record: outcome.record, done: false };
        this.#commits.take(item);
        this.#batches.add(item);
        return true;
      } else {
        handling = this.#opts.handle!(outcome.record, message, partition, topic);
      }
    } catch (err) {
      // A decoder failure that is not poison (a schema registry that does
      // not answer yet) or a handler that throws: transient, never skipped.
      const delay = delayFor(RESTART_SCHEDULE, this.member.transientFailure(err));
      this.member.log.error({ err: { message: (err as Error).message }, topic, partition, offset: message.offset, retry_in_ms: delay }, 'record_failed');
      this.#readAgain(topic, partition, message.offset, delay);
      return false;
    }
    if (handling.kind === 'wait') {
      this.#readAgain(topic, partition, message.offset, Math.max(0, handling.dueAt - Date.now()) + (this.#opts.dueSlackMs ?? 0));
      this.member.progress();
      return false;
    }
    const ticket: Ticket = { lane, message, done: false };
    this.#commits.take(ticket);
    this.#unsettled++;
    handling.done.then(
      () => {
        this.#commits.finish(ticket);
        this.member.progress();
        if (this.member.failing !== undefined) this.member.recovered();
        this.#settled();
      },
      (err: unknown) => {
        // NOTE: the offset stays uncommitted, so the record is read again
        // after a restart or rebalance: at-least-once, never lost.
        const where = { err: { message: (err as Error).message }, topic, partition, offset: message.offset };
        if (this.member.stopping) {
          // Work cut short by stop() (its producer closed): expected, and read again after the restart.
          this.member.log.info(where, 'record_work_left_at_stop');
        } else {
          this.member.transientFailure(err);
          this.member.log.error(where, 'record_work_failed');
        }
        this.#settled();
      },
    );
    return true;
  }

  #settled(): void {
    if (--this.#unsettled > 0 || !this.#idle) return;
    this.#idle.resolve();
    this.#idle = undefined;
  }

  /** Pauses the partition and reads it again from `offset` after `ms`. */
  #readAgain(topic: string, partition: number, offset: string, ms: number): void {
    if (this.member.stopping) return;
    const { consumer } = this.member;
    try {
      consumer.pause([{ topic, partitions: [partition] }]);
      consumer.seek({ topic, partition, offset });
    } catch (err) {
      this.member.log.warn({ err: { message: (err as Error).message }, topic, partition }, 'consumer_seek_failed');
    }
    const timer = setTimeout(() => {
      this.#timers.delete(timer);
      try {
        consumer.resume([{ topic, partitions: [partition] }]);
      } catch (err) {
        // The consumer crashed meanwhile and is between runs: its restart
        // starts unpaused from the committed offset, so there is nothing to resume.
        this.member.log.warn({ err: { message: (err as Error).message }, topic, partition }, 'consumer_resume_failed');
      }
    }, ms);
    this.#timers.add(timer);
  }

  /**
   * A handler call failed transiently: nothing of `items` (nor what waits
   * behind them) is committed; after a growing pause every owned partition
   * involved is read again from its first record not done.
   */
  #rewind(items: BatchItem<T>[], err: unknown): void {
    const delay = delayFor(RESTART_SCHEDULE, this.member.transientFailure(err));
    this.member.log.error({ err: { message: (err as Error).message }, messages: items.length, retry_in_ms: delay }, 'consumer_batch_failed');
    for (const lane of new Set(items.map((i) => i.lane))) {
      const offset = this.#commits.rewind(lane);
      if (offset !== undefined && this.member.owns(lane.topic, lane.partition)) this.#readAgain(lane.topic, lane.partition, offset, delay);
    }
  }
}
