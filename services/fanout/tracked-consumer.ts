import type { Consumer, EachBatchPayload, Kafka, KafkaMessage } from 'kafkajs';
import { OffsetTracker } from '../../shared/kafka/offset-tracker.ts';
import type { Logger } from '../../shared/logger.ts';

/** What a handler does with one message. */
export type Handling =
  /** Work taken on; the offset may be committed once the promise resolves. */
  | { kind: 'work'; done: Promise<void> }
  /** Not due yet: pause the partition and come back to this message at `dueAt`. */
  | { kind: 'wait'; dueAt: number };

export interface TrackedConsumerOptions {
  kafka: Kafka;
  log: Logger;
  groupId: string;
  topic: string;
  /** Most messages taken on and not yet done before fetching pauses (backpressure). */
  maxOutstanding: number;
  handle: (message: KafkaMessage, partition: number) => Handling;
  onInFlight?: (n: number) => void;
}

/**
 * A consumer whose messages finish out of order. It commits a partition's
 * offset only past messages whose work is done (or durably handed on), keeps
 * fetching while slow work is outstanding up to `maxOutstanding`, and waits
 * for not-yet-due messages by pausing the partition and seeking back: never
 * by sleeping in the handler, which would cost the group membership.
 */
export class TrackedConsumer {
  readonly #opts: TrackedConsumerOptions;
  readonly #consumer: Consumer;
  readonly #tracker = new OffsetTracker();
  readonly #toCommit = new Map<number, string>();
  readonly #timers = new Set<NodeJS.Timeout>();
  #commitTimer: NodeJS.Timeout | undefined;
  #running = false;
  #stopping = false;
  #work = new Set<Promise<void>>();

  constructor(opts: TrackedConsumerOptions) {
    this.#opts = opts;
    this.#consumer = opts.kafka.consumer({ groupId: opts.groupId, maxWaitTimeInMs: 100, sessionTimeout: 30000, heartbeatInterval: 3000 });
    this.#consumer.on(this.#consumer.events.CRASH, (e) => {
      this.#running = e.payload.restart;
      opts.log.error({ err: { message: String(e.payload.error) }, group: opts.groupId }, 'consumer_crashed');
    });
    this.#consumer.on(this.#consumer.events.GROUP_JOIN, () => {
      this.#running = true;
    });
  }

  get healthy(): boolean {
    return this.#running;
  }

  async start(): Promise<void> {
    await this.#consumer.connect();
    await this.#consumer.subscribe({ topic: this.#opts.topic, fromBeginning: true });
    await this.#consumer.run({
      autoCommit: false,
      eachBatchAutoResolve: false,
      partitionsConsumedConcurrently: 16,
      eachBatch: (p) => this.#eachBatch(p),
    });
    this.#running = true;
  }

  /** Stops fetching, waits for outstanding work (bounded by the caller), commits, leaves. */
  async stop(drainMs = 10_000): Promise<void> {
    this.#stopping = true;
    for (const t of this.#timers) clearTimeout(t);
    this.#timers.clear();
    // Paused, not stopped: the member must stay in the group to commit.
    this.#consumer.pause([{ topic: this.#opts.topic }]);
    await Promise.race([Promise.allSettled([...this.#work]), new Promise((r) => setTimeout(r, drainMs))]);
    await this.#flushCommits();
    await this.#consumer.disconnect();
    this.#running = false;
  }

  async #eachBatch({ batch, resolveOffset, heartbeat, isRunning, isStale, pause }: EachBatchPayload): Promise<void> {
    const { topic, partition } = batch;
    for (const message of batch.messages) {
      if (!isRunning() || isStale() || this.#stopping) return;
      const handling = this.#opts.handle(message, partition);
      if (handling.kind === 'wait') {
        const resume = pause();
        this.#consumer.seek({ topic, partition, offset: message.offset });
        const timer = setTimeout(() => {
          this.#timers.delete(timer);
          resume();
        }, Math.max(0, handling.dueAt - Date.now()));
        this.#timers.add(timer);
        return;
      }
      this.#tracker.start(topic, partition, message.offset);
      this.#opts.onInFlight?.(this.#tracker.inFlight);
      const done = handling.done.then(
        () => {
          const point = this.#tracker.finish(topic, partition, message.offset);
          this.#opts.onInFlight?.(this.#tracker.inFlight);
          if (point) this.#scheduleCommit(partition, point);
        },
        (err: unknown) => {
          // NOTE: the offset stays uncommitted, so the message is read again
          // after a restart: at-least-once, never lost.
          this.#opts.log.error({ err, group: this.#opts.groupId, partition, offset: message.offset }, 'message_work_failed');
        },
      );
      this.#work.add(done);
      void done.finally(() => this.#work.delete(done));
      resolveOffset(message.offset);
      while (this.#tracker.inFlight >= this.#opts.maxOutstanding && isRunning() && !isStale()) {
        await Promise.race([...this.#work, new Promise((r) => setTimeout(r, 1000))]);
        await heartbeat();
      }
    }
    await heartbeat();
  }

  #scheduleCommit(partition: number, offset: string): void {
    this.#toCommit.set(partition, offset);
    this.#commitTimer ??= setTimeout(() => void this.#flushCommits(), 100);
  }

  async #flushCommits(): Promise<void> {
    clearTimeout(this.#commitTimer);
    this.#commitTimer = undefined;
    if (this.#toCommit.size === 0) return;
    const offsets = [...this.#toCommit].map(([partition, offset]) => ({ topic: this.#opts.topic, partition, offset }));
    this.#toCommit.clear();
    try {
      await this.#consumer.commitOffsets(offsets);
    } catch (err) {
      // A rebalance moved the partition: its new owner redoes the uncommitted part.
      this.#opts.log.warn({ err, group: this.#opts.groupId }, 'offset_commit_failed');
    }
  }
}
