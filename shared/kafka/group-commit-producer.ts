import { randomUUID } from 'node:crypto';
import { type Kafka, type Message, type Producer } from 'kafkajs';
import type { Logger } from '../logger.ts';
import { withTimeout } from '../timeout.ts';
import { retry, sleep } from '../retry.ts';
import { createProducer } from './kafka.ts';

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
   * The replacement is made as soon as the broker answers again, not when
   * the lane next has work: a lane idle after a failure would otherwise
   * leave its transaction open until the timeout.
   */
  transactionalId: string;
  producer: Producer | undefined;
  /** The producer being connected and initialised, shared by every caller. */
  connecting: Promise<Producer> | undefined;
  /** Partitions the lane's transactions have written to, by topic (see `#connectLane`). */
  written: Map<string, Set<number>>;
  /** A background replacement is under way (see `#replaceInBackground`). */
  replacing: boolean;
  running: Promise<void> | undefined;
  /** performance.now() when the lane's last transaction ended (0: never ran). */
  endedAt: number;
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
  /** After each committed transaction: its messages, its time and the lane (0-based) it ran on. */
  onCommit?: (messages: number, ms: number, lane: number) => void;
  /**
   * Load shedding: while the oldest queued request has waited longer than
   * this (ms), or more than `maxQueuedMessages` wait, new requests are
   * refused at once with ProducerOverloadedError instead of queueing behind
   * a backlog they would time out in. Default: no bound.
   */
  maxQueueDelayMs?: number;
  maxQueuedMessages?: number;
  /** Lane i uses transactional id `${prefix}-${i}` (default: a random prefix). */
  transactionalIdPrefix?: string;
}

/**
 * Most record bytes in one transaction: kafkajs sends each partition's share
 * as one record batch, which must stay under the topic's max.message.bytes.
 */
const MAX_TRANSACTION_BYTES = 2 * 1024 * 1024;

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
    const prefix = opts.transactionalIdPrefix ?? `ingest-${randomUUID()}`;
    this.#lanes = Array.from({ length: opts.parallelTransactions ?? 2 }, (_, i) => ({ transactionalId: `${prefix}-${i}`, producer: undefined, connecting: undefined, replacing: false, written: new Map(), running: undefined, endedAt: 0 }));
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
      const idle = this.#restedLane();
      if (idle) idle.running = this.#drain(idle);
    });
  }

  /** Stops taking new records, finishes what is queued, disconnects. */
  async close(): Promise<void> {
    this.#closed = true;
    // A lane that finds more queued as it finishes starts a new drain: wait
    // until none runs, not only for the drains running now.
    while (this.#lanes.some((l) => l.running)) await Promise.all(this.#lanes.map((l) => l.running));
    await Promise.all(this.#lanes.map((l) => l.connecting?.catch(() => undefined)));
    await Promise.all(this.#lanes.map((l) => this.#reset(l)));
  }

  async #drain(lane: Lane): Promise<void> {
    try {
      while (this.#queue.length > 0) {
        if (this.#opts.lingerMs > 0) await sleep(this.#opts.lingerMs);
        const group = this.#take();
        if (group.length === 0) break;
        // While this lane commits, another idle lane takes whatever queues up.
        const idle = this.#restedLane();
        const commit = this.#commitGroup(group, lane);
        if (idle && this.#queue.length > 0) idle.running = this.#drain(idle);
        await commit;
        lane.endedAt = performance.now();
      }
    } finally {
      lane.running = undefined;
      if (this.#queue.length > 0) lane.running = this.#drain(lane);
    }
  }

  /**
   * The idle lane whose last transaction ended longest ago, or undefined
   * when all run. Right after a commit the coordinator is still writing
   * that lane's markers: a transaction begun on it then is refused with
   * CONCURRENT_TRANSACTIONS and retried, and meanwhile holds back the later
   * records of its partitions from read_committed readers. The first idle
   * lane is nearly always the one that has just committed.
   */
  #restedLane(): Lane | undefined {
    let best: Lane | undefined;
    for (const l of this.#lanes) if (!l.running && (!best || l.endedAt < best.endedAt)) best = l;
    return best;
  }

  #take(): Pending[] {
    const maxMessages = this.#opts.maxMessages ?? 10000;
    const group: Pending[] = [];
    let count = 0;
    let bytes = 0;
    while (this.#queue.length > 0) {
      const next = this.#queue[0]!;
      const size = next.messages.reduce((n, m) => n + (m.value?.length ?? 0) + (m.key?.length ?? 0), 0);
      // A request is never split: the first one goes in whatever its size.
      if (group.length > 0 && (count + next.messages.length > maxMessages || bytes + size > MAX_TRANSACTION_BYTES)) break;
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
    const answered = { timedOut: false };
    try {
      const attempt = this.#transact(group, lane, answered);
      attempt.catch(() => undefined);
      // NOTE: past the timeout the outcome is unknown. The lane's producer is
      // replaced below, and the replacement's initialisation aborts the
      // uncommitted transaction, so a 503 means "not accepted" unless the
      // commit was already on its way (docs/architecture.md).
      await withTimeout(attempt, this.#opts.timeoutMs, `no acknowledgement within ${this.#opts.timeoutMs} ms`);
      this.#opts.onCommit?.(count, performance.now() - started, this.#lanes.indexOf(lane));
      for (const p of group) p.resolve();
    } catch (err) {
      answered.timedOut = true;
      const cause = err instanceof Error ? err.message : String(err);
      this.#opts.log.warn({ err: { message: cause }, messages: count }, 'kafka_produce_failed');
      const failure = new KafkaUnavailableError(`Kafka did not acknowledge the events: ${cause}`);
      for (const p of group) p.reject(failure);
      await this.#reset(lane);
    }
  }

  /**
   * `answered.timedOut` is set once the group was answered 503: an attempt
   * still running then (waiting for a producer, or in kafkajs' retries) must
   * not begin a transaction on the lane's replacement producer, where it
   * would run beside the lane's next group on the same transactional state.
   */
  async #transact(group: Pending[], lane: Lane, answered: { timedOut: boolean }): Promise<void> {
    const producer = await this.#ensureProducer(lane);
    if (answered.timedOut) throw new KafkaUnavailableError('answered already');
    const tx = await producer.transaction();
    try {
      const byTopic = Map.groupBy(group, (p) => p.topic);
      const written = await tx.sendBatch({ acks: -1, topicMessages: [...byTopic].map(([topic, ps]) => ({ topic, messages: ps.flatMap((p) => p.messages) })) });
      for (const { topicName, partition } of written) {
        const set = lane.written.get(topicName) ?? new Set<number>();
        set.add(partition);
        lane.written.set(topicName, set);
      }
      // Answered 503 meanwhile: abort rather than commit what the callers were told was not accepted.
      if (answered.timedOut) throw new KafkaUnavailableError('answered already');
      await tx.commit();
    } catch (err) {
      await tx.abort().catch(() => undefined);
      throw err;
    }
  }

  #ensureProducer(lane: Lane): Promise<Producer> {
    if (lane.producer) return Promise.resolve(lane.producer);
    lane.connecting ??= this.#connectLane(lane).finally(() => {
      lane.connecting = undefined;
    });
    return lane.connecting;
  }

  async #connectLane(lane: Lane): Promise<Producer> {
    const producer = createProducer(this.#opts.kafka, { id: lane.transactionalId, timeoutMs: 30000 });
    try {
      await producer.connect();
      // kafkajs initialises the transactional id (InitProducerId, which
      // fences a previous producer of the lane and ends its open
      // transaction) only at the first transaction(), so one begins now.
      // A new lane aborts it: nothing is sent beyond the initialisation.
      const tx = await producer.transaction();
      if (lane.written.size === 0) await tx.abort();
      else {
        // NOTE: a replacement commits it instead. A broker killed right
        // after acknowledging a commit can come back with the commit's
        // partitions still holding the transaction open while its
        // coordinator takes it for finished: no timeout ends such a
        // transaction, and read_committed readers of those partitions stop
        // at it, acknowledged records included. A commit marker of the
        // lane's producer id ends it, so the replacement commits an empty
        // transaction over every partition the lane has written to
        // (patches/kafkajs+2.2.4+003+transaction-add-partitions.patch adds
        // addPartitions). On partitions
        // without such a transaction this writes one marker each and changes
        // nothing else.
        await tx.addPartitions([...lane.written].map(([topic, partitions]) => ({ topic, partitions: [...partitions] })));
        await tx.commit();
      }
    } catch (err) {
      await producer.disconnect().catch(() => undefined);
      throw err;
    }
    lane.producer = producer;
    return producer;
  }

  /**
   * A producer whose transaction failed is replaced: its state is unknown.
   * The replacement is connected in the background until the broker answers
   * (see Lane.transactionalId), unless the producer is closing.
   */
  async #reset(lane: Lane): Promise<void> {
    const old = lane.producer;
    lane.producer = undefined;
    await old?.disconnect().catch(() => undefined);
    if (!this.#closed) this.#replaceInBackground(lane);
  }

  #replaceInBackground(lane: Lane): void {
    if (lane.replacing) return;
    lane.replacing = true;
    void retry(
      async () => {
        if (this.#closed || lane.producer) return;
        await this.#ensureProducer(lane);
        this.#opts.log.info({ lane: this.#lanes.indexOf(lane) }, 'kafka_producer_replaced');
      },
      {
        schedule: { initialMs: 250, maxMs: 5000 },
        onRetry: (err) => this.#opts.log.debug({ err: { message: err instanceof Error ? err.message : String(err) } }, 'kafka_producer_replace_retry'),
      },
    ).finally(() => {
      lane.replacing = false;
    });
  }
}
