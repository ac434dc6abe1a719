import { randomUUID } from 'node:crypto';
import { Partitioners, type Kafka, type Message, type Producer } from 'kafkajs';
import type { Logger } from '../logger.ts';
import { withTimeout } from '../timeout.ts';

/** Kafka did not take the records; none of them will be seen by consumers. */
export class KafkaUnavailableError extends Error {
  override name = 'KafkaUnavailableError';
}

/** Refused at once, before queueing: more is waiting than the producer can commit in time. */
export class ProducerOverloadedError extends Error {
  override name = 'ProducerOverloadedError';
}

interface Lane {
  /**
   * Kept by the lane's replacement producers: initialising a producer with
   * the same id fences the failed one and ends its open transaction at once
   * (a prepared commit completes, anything else aborts). A new id would leave
   * that transaction open until its timeout, and read_committed readers of
   * its partitions would wait that long (30 s) for every later record.
   */
  transactionalId: string;
  producer: Producer | undefined;
  running: Promise<void> | undefined;
}

interface Pending {
  topic: string;
  messages: Message[];
  /** performance.now() when queued. */
  queuedAt: number;
  resolve: () => void;
  reject: (err: Error) => void;
}

export interface GroupCommitProducerOptions {
  kafka: Kafka;
  log: Logger;
  /** How long a request may wait for others to share its transaction. */
  lingerMs: number;
  /** Upper bound on one request's wait for Kafka before it is answered 503. */
  timeoutMs: number;
  /** Most messages put in one transaction. */
  maxMessages?: number;
  /**
   * Transactions in flight at once, each on its own transactional producer:
   * one group fills while the previous one commits (default 2).
   */
  parallelTransactions?: number;
  /**
   * Most bytes put in one transaction. kafkajs sends each partition's share
   * as one record batch, which must stay under the topic's max.message.bytes.
   */
  maxBytes?: number;
  onCommit?: (messages: number, ms: number) => void;
  /**
   * Load shedding: while the oldest queued request has waited longer than
   * this (ms), or more than `maxQueuedMessages` wait, new requests are
   * refused at once with ProducerOverloadedError instead of queueing behind
   * a backlog they would time out in. Default: no bound.
   */
  maxQueueDelayMs?: number;
  maxQueuedMessages?: number;
}

/**
 * Produces each caller's records all-or-nothing. Callers' records are
 * grouped into one Kafka transaction (group commit), acknowledged by all
 * in-sync replicas; every caller in a group learns the same outcome. Readers
 * use read_committed (kafkajs' default), so an aborted or timed-out group is
 * never seen: nothing is half-accepted.
 */
export class GroupCommitProducer {
  readonly #opts: GroupCommitProducerOptions;
  readonly #lanes: Lane[];
  #queue: Pending[] = [];
  #queuedMessages = 0;
  #closed = false;

  constructor(opts: GroupCommitProducerOptions) {
    this.#opts = opts;
    this.#lanes = Array.from({ length: opts.parallelTransactions ?? 2 }, () => ({ transactionalId: `ingest-${randomUUID()}`, producer: undefined, running: undefined }));
  }

  async connect(): Promise<void> {
    await Promise.all(this.#lanes.map((lane) => this.#ensureProducer(lane)));
  }

  /**
   * Why a request would be refused now (see `maxQueueDelayMs`), or undefined.
   * Cheap enough to ask before a request's body is even read.
   */
  overloaded(extraMessages = 0): string | undefined {
    const oldest = this.#queue[0];
    const { maxQueueDelayMs, maxQueuedMessages } = this.#opts;
    if (oldest && maxQueueDelayMs !== undefined && performance.now() - oldest.queuedAt > maxQueueDelayMs) {
      return `the oldest queued request has waited over ${maxQueueDelayMs} ms`;
    }
    if (maxQueuedMessages !== undefined && this.#queuedMessages + extraMessages > maxQueuedMessages) {
      return `over ${maxQueuedMessages} messages are waiting`;
    }
    return undefined;
  }

  /**
   * Resolves once every message is durably committed; rejects with
   * KafkaUnavailableError otherwise, or at once with ProducerOverloadedError.
   */
  send(topic: string, messages: Message[]): Promise<void> {
    if (this.#closed) return Promise.reject(new KafkaUnavailableError('producer is shutting down'));
    const overloaded = this.overloaded(messages.length);
    if (overloaded) return Promise.reject(new ProducerOverloadedError(overloaded));
    this.#queuedMessages += messages.length;
    return new Promise<void>((resolve, reject) => {
      this.#queue.push({ topic, messages, queuedAt: performance.now(), resolve, reject });
      // One idle lane is enough to take it; the others join while it commits.
      const idle = this.#lanes.find((l) => !l.running);
      if (idle) idle.running = this.#drain(idle);
    });
  }

  /** Stops taking new records, finishes what is queued, disconnects. */
  async close(): Promise<void> {
    this.#closed = true;
    await Promise.all(this.#lanes.map((l) => l.running));
    await Promise.all(this.#lanes.map((l) => this.#reset(l)));
  }

  async #drain(lane: Lane): Promise<void> {
    try {
      while (this.#queue.length > 0) {
        if (this.#opts.lingerMs > 0) await sleep(this.#opts.lingerMs);
        const group = this.#take();
        if (group.length === 0) break;
        // While this lane commits, another idle lane takes whatever queues up.
        const idle = this.#lanes.find((l) => !l.running);
        const commit = this.#commitGroup(group, lane);
        if (idle && this.#queue.length > 0) idle.running = this.#drain(idle);
        await commit;
      }
    } finally {
      lane.running = undefined;
      if (this.#queue.length > 0) lane.running = this.#drain(lane);
    }
  }

  #take(): Pending[] {
    const maxMessages = this.#opts.maxMessages ?? 10000;
    const maxBytes = this.#opts.maxBytes ?? 2 * 1024 * 1024;
    const group: Pending[] = [];
    let count = 0;
    let bytes = 0;
    while (this.#queue.length > 0) {
      const next = this.#queue[0]!;
      const size = next.messages.reduce((n, m) => n + (m.value?.length ?? 0) + (m.key?.length ?? 0), 0);
      // A request is never split: the first one goes in whatever its size.
      if (group.length > 0 && (count + next.messages.length > maxMessages || bytes + size > maxBytes)) break;
      group.push(this.#queue.shift()!);
      this.#queuedMessages -= next.messages.length;
      count += next.messages.length;
      bytes += size;
    }
    return group;
  }

  async #commitGroup(group: Pending[], lane: Lane): Promise<void> {
    const started = performance.now();
    const count = group.reduce((n, p) => n + p.messages.length, 0);
    try {
      const attempt = this.#transact(group, lane);
      attempt.catch(() => undefined);
      // NOTE: past the timeout the outcome is unknown. The lane's producer is
      // replaced below and the uncommitted transaction is aborted by the
      // broker at its transaction timeout, so a 503 means "not accepted"
      // unless the commit was already on its way (docs/architecture.md).
      await withTimeout(attempt, this.#opts.timeoutMs, `no acknowledgement within ${this.#opts.timeoutMs} ms`);
      this.#opts.onCommit?.(count, performance.now() - started);
      for (const p of group) p.resolve();
    } catch (err) {
      const cause = err instanceof Error ? err.message : String(err);
      this.#opts.log.warn({ err: { message: cause }, messages: count }, 'kafka_produce_failed');
      const failure = new KafkaUnavailableError(`Kafka did not acknowledge the events: ${cause}`);
      for (const p of group) p.reject(failure);
      await this.#reset(lane);
    }
  }

  async #transact(group: Pending[], lane: Lane): Promise<void> {
    const producer = await this.#ensureProducer(lane);
    const tx = await producer.transaction();
    try {
      const byTopic = new Map<string, Message[]>();
      for (const p of group) {
        const list = byTopic.get(p.topic) ?? [];
        for (const m of p.messages) list.push(m);
        byTopic.set(p.topic, list);
      }
      await tx.sendBatch({ acks: -1, topicMessages: [...byTopic].map(([topic, messages]) => ({ topic, messages })) });
      await tx.commit();
    } catch (err) {
      await tx.abort().catch(() => undefined);
      throw err;
    }
  }

  async #ensureProducer(lane: Lane): Promise<Producer> {
    if (lane.producer) return lane.producer;
    const producer = this.#opts.kafka.producer({
      createPartitioner: Partitioners.DefaultPartitioner,
      transactionalId: lane.transactionalId,
      idempotent: true,
      maxInFlightRequests: 1,
      transactionTimeout: 30000,
      // NOTE: right after a commit the coordinator is still writing its
      // markers, and the next transaction's first produce is refused with
      // CONCURRENT_TRANSACTIONS until it is done (a few ms). The Java client
      // retries that after 20 ms; kafkajs's default 100 ms start would add
      // ~100 ms to most acknowledgements under steady load.
      retry: { retries: 5, initialRetryTime: 20, maxRetryTime: 1000 },
    });
    await producer.connect();
    lane.producer = producer;
    return producer;
  }

  /** A producer whose transaction failed is replaced: its state is unknown. */
  async #reset(lane: Lane): Promise<void> {
    const old = lane.producer;
    lane.producer = undefined;
    await old?.disconnect().catch(() => undefined);
  }
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
