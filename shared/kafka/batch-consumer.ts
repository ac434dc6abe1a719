import type { Consumer, EachBatchPayload, Kafka, KafkaMessage } from 'kafkajs';
import type { Logger } from '../logger.ts';

export interface ConsumedMessage {
  topic: string;
  partition: number;
  message: KafkaMessage;
}

export interface BatchConsumerOptions {
  kafka: Kafka;
  log: Logger;
  groupId: string;
  topics: string[];
  fromBeginning?: boolean;
  /** How long messages may wait for others to share a handler call when none is running. */
  flushMs: number;
  /** Most messages in one handler call; fetching pauses while twice this many wait. */
  maxMessages: number;
  /**
   * Makes the messages' effect durable (e.g. one ClickHouse insert). Offsets
   * are committed only after it resolves; if it throws, nothing is committed
   * and the consumer restarts from the last commit.
   */
  handle: (messages: ConsumedMessage[]) => Promise<void>;
  onLag?: (topic: string, partition: number, lag: number) => void;
  onFlush?: (messages: number, ms: number) => void;
}

/**
 * A consumer-group member that turns kafkajs' per-partition batches into few,
 * large handler calls (so ClickHouse sees few, large inserts) and commits
 * each partition's offset only after the handler made its messages durable.
 *
 * Group commit: while one handler call runs, the next batches gather (and
 * fetching goes on); the moment it finishes, everything gathered goes in the
 * next call. An event therefore waits for at most one running call plus its
 * own, not for a fixed window.
 */
export class BatchConsumer {
  readonly #opts: BatchConsumerOptions;
  readonly #consumer: Consumer;
  #pending: ConsumedMessage[] = [];
  #flushing: Promise<void> | undefined;
  #timer: NodeJS.Timeout | undefined;
  #running = false;
  #crashed: string | undefined;
  #retryDelayMs = 0;

  constructor(opts: BatchConsumerOptions) {
    this.#opts = opts;
    this.#consumer = opts.kafka.consumer({
      groupId: opts.groupId,
      sessionTimeout: 30000,
      heartbeatInterval: 3000,
      maxWaitTimeInMs: 50,
      maxBytesPerPartition: 4 * 1024 * 1024,
    });
    const { events } = this.#consumer;
    this.#consumer.on(events.CRASH, (e) => {
      this.#crashed = String(e.payload.error?.message ?? e.payload.error);
      this.#running = e.payload.restart;
      opts.log.error({ err: { message: this.#crashed }, restart: e.payload.restart }, 'consumer_crashed');
    });
    this.#consumer.on(events.GROUP_JOIN, () => {
      this.#running = true;
      this.#crashed = undefined;
      // Whatever was fetched before the (re)join is fetched again from the
      // committed offsets; dropping it here avoids committing stale positions.
      this.#pending = [];
    });
  }

  /** True while the group member is joined and fetching. */
  get healthy(): boolean {
    return this.#running && this.#crashed === undefined;
  }

  async start(): Promise<void> {
    await this.#consumer.connect();
    for (const topic of this.#opts.topics) {
      await this.#consumer.subscribe({ topic, fromBeginning: this.#opts.fromBeginning ?? true });
    }
    await this.#consumer.run({
      autoCommit: false,
      eachBatchAutoResolve: false,
      partitionsConsumedConcurrently: 64,
      eachBatch: (payload) => this.#eachBatch(payload),
    });
    this.#running = true;
  }

  /** Stops fetching, makes what was fetched durable and commits it, leaves the group. */
  async stop(): Promise<void> {
    this.#consumer.pause(this.#opts.topics.map((topic) => ({ topic })));
    clearTimeout(this.#timer);
    this.#timer = undefined;
    await this.#flushing;
    if (this.#pending.length > 0) await this.#flush().catch(() => undefined);
    await this.#consumer.disconnect();
    this.#running = false;
  }

  async #eachBatch({ batch, resolveOffset, heartbeat, isRunning, isStale }: EachBatchPayload): Promise<void> {
    if (batch.messages.length === 0 || !isRunning() || isStale()) return;
    for (const message of batch.messages) this.#pending.push({ topic: batch.topic, partition: batch.partition, message });
    resolveOffset(batch.lastOffset());
    this.#opts.onLag?.(batch.topic, batch.partition, Number(batch.offsetLag()));
    this.#schedule();
    // Backpressure: stop fetching while too much waits for the handler.
    while (this.#pending.length >= 2 * this.#opts.maxMessages && this.#flushing && isRunning()) {
      await this.#flushing.catch(() => undefined);
      await heartbeat();
    }
  }

  #schedule(): void {
    if (this.#flushing || this.#timer) return;
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
    while (this.#pending.length > 0) {
      this.#flushing = this.#flush();
      try {
        await this.#flushing;
      } finally {
        this.#flushing = undefined;
      }
    }
  }

  async #flush(): Promise<void> {
    const items = this.#pending.splice(0, this.#opts.maxMessages);
    if (items.length === 0) return;
    const started = performance.now();
    try {
      await this.#opts.handle(items);
      this.#retryDelayMs = 0;
    } catch (err) {
      await this.#rewind(items, err);
      return;
    }
    this.#opts.onFlush?.(items.length, performance.now() - started);
    const next = new Map<string, { topic: string; partition: number; offset: string }>();
    for (const { topic, partition, message } of items) {
      const offset = (BigInt(message.offset) + 1n).toString();
      const key = `${topic}:${partition}`;
      const seen = next.get(key);
      if (!seen || BigInt(seen.offset) < BigInt(offset)) next.set(key, { topic, partition, offset });
    }
    try {
      await this.#consumer.commitOffsets([...next.values()]);
    } catch (err) {
      // A rebalance moved a partition: its new owner re-reads from the last
      // commit, and the rows it re-inserts collapse (same event ids).
      this.#opts.log.warn({ err, group: this.#opts.groupId }, 'offset_commit_failed');
    }
  }

  /**
   * The handler failed: nothing of `items` (nor what waits behind them) is
   * committed; after a growing pause every partition involved is sought back
   * to its first unhandled offset, so the messages are fetched again.
   */
  async #rewind(items: ConsumedMessage[], err: unknown): Promise<void> {
    const all = [...items, ...this.#pending];
    this.#pending = [];
    this.#retryDelayMs = Math.min(Math.max(this.#retryDelayMs * 2, 250), 10_000);
    this.#opts.log.error({ err, messages: items.length, retry_in_ms: this.#retryDelayMs }, 'consumer_batch_failed');
    const first = new Map<string, { topic: string; partition: number; offset: bigint }>();
    for (const { topic, partition, message } of all) {
      const key = `${topic}:${partition}`;
      const o = BigInt(message.offset);
      const seen = first.get(key);
      if (!seen || o < seen.offset) first.set(key, { topic, partition, offset: o });
    }
    await new Promise((r) => setTimeout(r, this.#retryDelayMs));
    for (const { topic, partition, offset } of first.values()) {
      this.#consumer.seek({ topic, partition, offset: offset.toString() });
    }
  }
}
