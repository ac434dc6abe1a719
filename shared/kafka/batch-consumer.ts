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
  /** Gathers messages of all partitions for up to this long before one handler call. */
  flushMs: number;
  /** Flushes at once when this many messages are waiting. */
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

interface Waiter {
  items: ConsumedMessage[];
  resolve: () => void;
  reject: (err: unknown) => void;
}

/**
 * A consumer-group member that turns kafkajs' per-partition batches into one
 * handler call per flush window across partitions (so ClickHouse sees few,
 * large inserts) and commits each partition's offset only after the handler
 * made its messages durable.
 */
export class BatchConsumer {
  readonly #opts: BatchConsumerOptions;
  readonly #consumer: Consumer;
  #waiting: Waiter[] = [];
  #waitingCount = 0;
  #timer: NodeJS.Timeout | undefined;
  #running = false;
  #crashed: string | undefined;

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

  /** Stops fetching, lets in-flight batches finish and commit, leaves the group. */
  async stop(): Promise<void> {
    this.#flush();
    await this.#consumer.disconnect();
    this.#running = false;
  }

  async #eachBatch({ batch, resolveOffset, heartbeat, isRunning, isStale }: EachBatchPayload): Promise<void> {
    if (batch.messages.length === 0 || !isRunning() || isStale()) return;
    const items = batch.messages.map((message) => ({ topic: batch.topic, partition: batch.partition, message }));
    await new Promise<void>((resolve, reject) => {
      this.#waiting.push({ items, resolve, reject });
      this.#waitingCount += items.length;
      if (this.#waitingCount >= this.#opts.maxMessages) this.#flush();
      else this.#timer ??= setTimeout(() => this.#flush(), this.#opts.flushMs);
    });
    const last = batch.lastOffset();
    resolveOffset(last);
    await this.#consumer.commitOffsets([
      { topic: batch.topic, partition: batch.partition, offset: (BigInt(last) + 1n).toString() },
    ]);
    this.#opts.onLag?.(batch.topic, batch.partition, Number(batch.offsetLag()));
    await heartbeat();
  }

  #flush(): void {
    clearTimeout(this.#timer);
    this.#timer = undefined;
    const waiters = this.#waiting;
    if (waiters.length === 0) return;
    this.#waiting = [];
    this.#waitingCount = 0;
    const items = waiters.flatMap((w) => w.items);
    const started = performance.now();
    this.#opts.handle(items).then(
      () => {
        this.#opts.onFlush?.(items.length, performance.now() - started);
        for (const w of waiters) w.resolve();
      },
      (err: unknown) => {
        this.#opts.log.error({ err, messages: items.length }, 'consumer_batch_failed');
        for (const w of waiters) w.reject(err);
      },
    );
  }
}
