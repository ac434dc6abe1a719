import type { KafkaMessage } from 'kafkajs';
import { classifyFailure } from '../failure-class.ts';
import type { CommitCoordinator, Ticket } from './commit-coordinator.ts';
import type { DeadLetter, DeadLetterSink } from './dead-letters.ts';
import type { GroupMember } from './group-member.ts';
import type { Decoded } from './poison.ts';

/** A decoded record handed to a batch handler. */
export interface BatchItem<T> extends Ticket {
  readonly topic: string;
  readonly partition: number;
  readonly message: KafkaMessage;
  readonly record: Decoded<T>;
}

export interface GroupCommitOptions<T> {
  /** How long records may wait for others to share a handler call when none is running. */
  flushMs: number;
  /** Most records in one handler call; fetching pauses while three times this many are taken on and not done. */
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
}

/** What a group commit needs of the consumer that feeds it. */
export interface GroupCommitDeps<T> {
  member: GroupMember<T>;
  commits: CommitCoordinator;
  deadLetters: Pick<DeadLetterSink, 'send'>;
  /** The age (ms) of the oldest record of each handler call, once it resolved. */
  onHandled?: (ageMs: number) => void;
  /** Reads `items` (and every record after them on their partitions) again, after a growing pause. */
  rewind: (items: BatchItem<T>[], err: unknown) => void;
}

/**
 * Few, large handler calls out of many small fetched batches (so ClickHouse
 * sees few, large inserts). While one handler call runs, the next records
 * gather (and fetching goes on); the moment it finishes, everything
 * gathered goes in the next call. Records are done, for the commit
 * coordinator, once their call made them durable.
 */
export class GroupCommit<T> {
  readonly #opts: GroupCommitOptions<T>;
  readonly #deps: GroupCommitDeps<T>;
  #pending: BatchItem<T>[] = [];
  #flushing: Promise<void> | undefined;
  #timer: NodeJS.Timeout | undefined;

  constructor(opts: GroupCommitOptions<T>, deps: GroupCommitDeps<T>) {
    this.#opts = opts;
    this.#deps = deps;
  }

  add(item: BatchItem<T>): void {
    this.#pending.push(item);
  }

  /** Drops what waits (a rebalance or a rewind: it is read again). */
  clear(): BatchItem<T>[] {
    const dropped = this.#pending;
    this.#pending = [];
    return dropped;
  }

  /** Starts a handler call now if enough records wait, else after `flushMs`. */
  schedule(): void {
    if (this.#flushing || this.#timer || this.#deps.member.stopping || this.#pending.length === 0) return;
    if (this.#pending.length >= this.#opts.maxMessages) {
      void this.#flushLoop();
      return;
    }
    this.#timer = setTimeout(() => {
      this.#timer = undefined;
      void this.#flushLoop();
    }, this.#opts.flushMs);
  }

  /** At stop: ends the running handler call and makes what waits durable (unless the handler is failing). */
  async drain(): Promise<void> {
    clearTimeout(this.#timer);
    this.#timer = undefined;
    await this.#flushing?.catch(() => undefined);
    if (this.#pending.length > 0 && !this.#deps.member.failing) await this.#flush().catch(() => undefined);
  }

  /** Runs handler calls back to back while records are waiting. */
  async #flushLoop(): Promise<void> {
    if (this.#flushing) return;
    while (this.#pending.length > 0 && !this.#deps.member.stopping) {
      this.#flushing = this.#flush();
      try {
        await this.#flushing;
      } finally {
        this.#flushing = undefined;
        this.#deps.member.noteBusy();
      }
    }
  }

  async #flush(): Promise<void> {
    const items = this.#pending.splice(0, this.#opts.maxMessages);
    if (items.length === 0) return;
    const { member, commits } = this.#deps;
    // Kafka timestamps are decimal strings of one length (13 digits until
    // 2286), so the oldest is the least as a string: no number per record.
    let oldest = items[0]!.message.timestamp;
    for (const { message } of items) if (message.timestamp < oldest) oldest = message.timestamp;
    try {
      const letters = await this.#handleSplitting(items);
      this.#deps.onHandled?.(Date.now() - Number(oldest));
      await this.#deps.deadLetters.send(letters);
      member.recovered();
    } catch (err) {
      this.#deps.rewind([...items, ...this.clear()], err);
      return;
    }
    member.progress();
    // The commit runs while the next handler call starts: it is a round trip
    // to the broker that the next insert need not wait for. A handler call
    // ends only once the commit before its own is done, so at most one
    // waits (a broker that does not answer commits holds the handler calls
    // rather than piling commits up).
    const previous = commits.sending;
    commits.finishAll(items);
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
    const { member } = this.#deps;
    try {
      await this.#opts.handle(items);
      return [];
    } catch (err) {
      const failure = classifyFailure(err);
      if (failure.kind === 'transient' || member.stopping) throw err;
      if (items.length === 1) {
        const { topic, partition, message } = items[0]!;
        return [member.deadLetter(topic, partition, message, 'rejected_by_sink', failure.detail)];
      }
      member.log.warn({ detail: failure.detail, messages: items.length }, 'consumer_batch_refused_splitting');
      const half = Math.ceil(items.length / 2);
      // Each half handled is progress: a long bisection is not a stall.
      const first = await this.#handleSplitting(items.slice(0, half));
      member.progress();
      const second = await this.#handleSplitting(items.slice(half));
      member.progress();
      return [...first, ...second];
    }
  }
}
