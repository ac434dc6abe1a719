import type { Consumer, EachBatchPayload, KafkaMessage } from 'kafkajs';
import { OffsetTracker } from './offset-tracker.ts';
import { GroupMember, type GroupMemberOptions } from './group-member.ts';
import { DURABLE_HANDOFF, retry } from '../retry.ts';
import type { Decoded } from './poison.ts';
import { eventLoopSlices, type TimeSlices } from '../time-slices.ts';

/** What a handler does with one record. */
export type Handling =
  /** Work taken on; the offset may be committed once the promise resolves. */
  | { kind: 'work'; done: Promise<void> }
  /** Not due yet: pause the partition and come back to this record at `dueAt`. */
  | { kind: 'wait'; dueAt: number };

export interface TrackedConsumerOptions<T> extends GroupMemberOptions<T> {
  /** Most records taken on and not yet done before fetching pauses (backpressure). */
  maxOutstanding: number;
  /**
   * Decides what to do with a decoded record. The work must not reject
   * except while the consumer stops: a transient failure is retried inside
   * it (a rejected record stays uncommitted and holds its partition's commit
   * point, which /readyz reports as a stall).
   */
  handle: (record: Decoded<T>, message: KafkaMessage, partition: number, topic: string) => Handling;
  /**
   * Whether done offsets are committed (default true). A reader that reads
   * its topics whole at every start (the config store) commits nothing.
   */
  commitOffsets?: boolean;
  onInFlight?: (n: number) => void;
  /**
   * A partition waiting for a record that is not yet due is fetched again
   * this long after the record falls due (default 0), so that one fetch takes
   * every record due in that window. Without it, records due a few ms apart
   * each cost a fetch of the whole partition batch (up to
   * maxBytesPerPartition) to handle one record.
   */
  dueSlackMs?: number;
  /** Time between turns of the event loop while records are handled (default: the process's eventLoopSlices). */
  slices?: TimeSlices;
}

/**
 * A consumer whose records finish out of order. It commits a partition's
 * offset only past records whose work is done (or durably handed on), keeps
 * fetching while slow work is outstanding up to `maxOutstanding`, and waits
 * for not-yet-due records by pausing the partition and seeking back: never
 * by sleeping in the handler, which would cost the group membership. A
 * poison record's work is its dead letter.
 */
export class TrackedConsumer<T> {
  readonly #opts: TrackedConsumerOptions<T>;
  /** Membership, generations, outcomes and health, shared by every consumer. */
  readonly member: GroupMember<T>;
  readonly #tracker = new OffsetTracker();
  readonly #toCommit = new Map<string, { topic: string; partition: number; offset: string }>();
  readonly #timers = new Set<NodeJS.Timeout>();
  readonly #work = new Set<Promise<void>>();
  #commitTimer: NodeJS.Timeout | undefined;
  #rejected = 0;
  readonly #slices: TimeSlices;
  /** Resolved when some work finishes; awaited while `maxOutstanding` records are in flight. */
  #finished: { promise: Promise<void>; resolve: () => void } | undefined;

  constructor(opts: TrackedConsumerOptions<T>) {
    // Small fetches, as in BatchConsumer: kafkajs decodes a whole fetch
    // response in one turn of the event loop. With its 10 MB default, the
    // fan-out draining a backlog held the loop for 1.4-2.0 s at a time
    // (docs/performance.md).
    this.#opts = opts;
    this.member = new GroupMember(
      { ...opts, consumer: { maxWaitTimeInMs: 100, maxBytes: 1024 * 1024, maxBytesPerPartition: 256 * 1024, ...opts.consumer } },
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
    // Work of the old assignment may still finish; its generation no longer
    // matches, so it commits nothing. The new assignment starts afresh.
    this.#tracker.clear();
    this.#toCommit.clear();
    this.#opts.onInFlight?.(0);
    this.member.noteBusy();
  }

  #onSkippedRecords(topic: string, partition: number, lastOffset: string): void {
    this.#tracker.start(topic, partition, lastOffset);
    const point = this.#tracker.finish(topic, partition, lastOffset);
    if (point && this.member.owns(topic, partition)) this.#scheduleCommit(topic, partition, point);
  }

  #busy(): boolean {
    return this.#tracker.inFlight > 0 || this.#rejected > 0;
  }

  async #run(consumer: Consumer): Promise<void> {
    await consumer.run({
      autoCommit: false,
      eachBatchAutoResolve: false,
      partitionsConsumedConcurrently: 16,
      eachBatch: (p) => this.#eachBatch(p),
    });
  }

  /** Stops fetching, waits for outstanding work (at most `budgetMs`), commits what is done, leaves. */
  async stop(budgetMs = 10_000): Promise<void> {
    this.member.beginStop();
    for (const t of this.#timers) clearTimeout(t);
    this.#timers.clear();
    this.member.pauseAll();
    await Promise.race([Promise.allSettled([...this.#work]), new Promise((r) => setTimeout(r, budgetMs).unref())]);
    await this.#flushCommits();
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

  async #eachBatch({ batch, resolveOffset, heartbeat, isRunning, isStale, pause }: EachBatchPayload): Promise<void> {
    const { topic, partition } = batch;
    const generation = this.member.generation;
    const current = this.member.batchCheck({ isRunning, isStale });
    if (!current()) return;
    for (const message of batch.messages) {
      // Records that need no wait (none selected by a destination, say) are
      // handled without one: a turn of the event loop every slice.
      if (this.#slices.due) {
        await this.#slices.next();
        if (!current()) return;
      }
      // Backpressure, checked before a record is taken on so that the loops
      // of all partitions together stay within the bound.
      while (this.#tracker.inFlight >= this.#opts.maxOutstanding) {
        // One shared promise for every waiting loop, not a race over all the
        // work in flight (thousands of reactions per record at the bound).
        this.#finished ??= settles();
        let beat: NodeJS.Timeout | undefined;
        try {
          await Promise.race([this.#finished.promise, new Promise<void>((r) => (beat = setTimeout(r, 1000)))]);
        } finally {
          clearTimeout(beat);
        }
        await heartbeat();
        if (!current()) return;
      }
      const outcome = this.member.outcome(topic, partition, message);
      let handling: Handling;
      if (outcome.kind === 'poison') {
        handling = { kind: 'work', done: this.untilDone('dead_letter', () => this.#opts.deadLetters.send([outcome.letter])) };
      } else {
        try {
          handling = this.#opts.handle(outcome.record, message, partition, topic);
        } catch (err) {
          // A handler that throws for a decoded record has a bug, not bad
          // input; the record stays uncommitted and the stall shows.
          this.#rejected++;
          this.member.transientFailure(err);
          this.member.log.error({ err, topic, partition, offset: message.offset }, 'record_handler_threw');
          return;
        }
      }
      if (handling.kind === 'wait') {
        const resume = pause();
        this.member.consumer.seek({ topic, partition, offset: message.offset });
        const timer = setTimeout(() => {
          this.#timers.delete(timer);
          resume();
        }, Math.max(0, handling.dueAt - Date.now()) + (this.#opts.dueSlackMs ?? 0));
        this.#timers.add(timer);
        this.member.progress();
        return;
      }
      this.#tracker.start(topic, partition, message.offset);
      this.#opts.onInFlight?.(this.#tracker.inFlight);
      this.member.noteBusy();
      const done = handling.done.then(
        () => {
          if (generation !== this.member.generation) return;
          const point = this.#tracker.finish(topic, partition, message.offset);
          this.#opts.onInFlight?.(this.#tracker.inFlight);
          this.member.progress();
          this.member.noteBusy();
          if (point && this.member.owns(topic, partition)) this.#scheduleCommit(topic, partition, point);
        },
        (err: unknown) => {
          // NOTE: the offset stays uncommitted, so the record is read again
          // after a restart or rebalance: at-least-once, never lost.
          const where = { err: { message: (err as Error).message }, topic, partition, offset: message.offset };
          if (this.member.stopping) {
            // Work cut short by stop() (its producer closed): expected, and read again after the restart.
            this.member.log.info(where, 'record_work_left_at_stop');
            return;
          }
          this.#rejected++;
          this.member.transientFailure(err);
          this.member.log.error(where, 'record_work_failed');
        },
      );
      this.#work.add(done);
      void done.finally(() => {
        this.#work.delete(done);
        this.#finished?.resolve();
        this.#finished = undefined;
      });
      resolveOffset(message.offset);
    }
    // Markers after the last record (a transaction's commit) commit once it is done.
    const last = batch.messages.at(-1);
    if (last && BigInt(batch.lastOffset()) > BigInt(last.offset) && generation === this.member.generation && !this.member.stopping) {
      this.#onSkippedRecords(topic, partition, batch.lastOffset());
      resolveOffset(batch.lastOffset());
    }
    await heartbeat();
  }

  #scheduleCommit(topic: string, partition: number, offset: string): void {
    if (this.#opts.commitOffsets === false) return;
    this.#toCommit.set(`${topic}:${partition}`, { topic, partition, offset });
    this.#commitTimer ??= setTimeout(() => void this.#flushCommits(), 100);
  }

  async #flushCommits(): Promise<void> {
    clearTimeout(this.#commitTimer);
    this.#commitTimer = undefined;
    const offsets = [...this.#toCommit.values()];
    this.#toCommit.clear();
    await this.member.commit(offsets);
  }
}

/** A promise and the function that resolves it. */
function settles(): { promise: Promise<void>; resolve: () => void } {
  let resolve!: () => void;
  const promise = new Promise<void>((r) => (resolve = r));
  return { promise, resolve };
}
