import { type Kafka, type Message, type Producer } from 'kafkajs';
import { errorTypes, RecordTooLargeError } from '../failure-class.ts';
import type { Logger } from '../logger.ts';
import { createProducer } from './kafka.ts';

export type TopicMessages = { topic: string; messages: Message[] }[];

interface Waiting {
  batch: TopicMessages;
  bytes: number;
  resolve: () => void;
  reject: (err: unknown) => void;
}

export interface CoalescingSenderOptions {
  kafka: Kafka;
  log: Logger;
  /** Names the producer in logs, metrics and /readyz. */
  name: string;
  /**
   * Most record bytes in one request. kafkajs sends each partition's share of
   * a request as one record batch, which must stay under the topic's
   * max.message.bytes (1 MiB by default), so requests stay well below it.
   */
  maxRequestBytes?: number;
  onFailure?: (topic: string) => void;
}

/** Most callers' batches in one request. */
const MAX_WAITERS = 500;

const SIZE_ERRORS = new Set(['MESSAGE_TOO_LARGE', 'RECORD_LIST_TOO_LARGE', 'INVALID_RECORD']);

/** Byte size of a message as it goes on the wire, closely enough to bound a request. */
export function messageBytes(m: Message): number {
  let n = 70;
  if (m.key) n += typeof m.key === 'string' ? Buffer.byteLength(m.key) : m.key.length;
  if (m.value) n += typeof m.value === 'string' ? Buffer.byteLength(m.value) : m.value.length;
  for (const [k, v] of Object.entries(m.headers ?? {})) n += k.length + (v ? String(v).length : 0) + 8;
  return n;
}

/** True when the broker refused the request for the size of a record or batch. */
export function isSizeError(err: unknown): boolean {
  return err instanceof RecordTooLargeError || errorTypes(err).some((t) => SIZE_ERRORS.has(t));
}

/**
 * Many small produces as few requests: while one request is in flight,
 * everything sent meanwhile waits and goes out together in the next one
 * (acks from all in-sync replicas). Each caller learns its own outcome.
 *
 * It stays inside the broker's limits: a request holds at most
 * `maxRequestBytes`; a request the broker refuses for its size is split in
 * halves and sent again, and a single caller's batch that is still refused
 * fails with RecordTooLargeError (the caller dead-letters it: resending the
 * same bytes can never succeed). After any other failure the idempotent
 * producer's sequence state is unknown, so it is replaced by a new one
 * before the next request.
 */
export class CoalescingSender {
  readonly #opts: Required<Omit<CoalescingSenderOptions, 'onFailure'>> & Pick<CoalescingSenderOptions, 'onFailure'>;
  #producer: Producer | undefined;
  #queue: Waiting[] = [];
  #busy = false;
  #closed = false;
  #consecutiveFailures = 0;

  constructor(opts: CoalescingSenderOptions) {
    this.#opts = { maxRequestBytes: 512 * 1024, ...opts };
  }

  /** Failed requests since the last one that succeeded. */
  get consecutiveFailures(): number {
    return this.#consecutiveFailures;
  }

  get name(): string {
    return this.#opts.name;
  }

  /** Why the producer counts as unhealthy once `failuresUnhealthy` requests in a row failed; undefined before. */
  problem(failuresUnhealthy: number): string | undefined {
    const n = this.#consecutiveFailures;
    return n >= failuresUnhealthy ? `producer failing: ${n} requests in a row` : undefined;
  }

  async connect(): Promise<void> {
    await this.#ensureProducer();
  }

  async close(): Promise<void> {
    this.#closed = true;
    const p = this.#producer;
    this.#producer = undefined;
    await p?.disconnect().catch(() => undefined);
  }

  send(batch: TopicMessages): Promise<void> {
    if (this.#closed) return Promise.reject(new Error(`${this.#opts.name} producer is closed`));
    let bytes = 0;
    for (const { messages } of batch) for (const m of messages) bytes += messageBytes(m);
    return new Promise((resolve, reject) => {
      this.#queue.push({ batch, bytes, resolve, reject });
      if (!this.#busy) void this.#loop();
    });
  }

  async #ensureProducer(): Promise<Producer> {
    if (this.#producer) return this.#producer;
    const producer = createProducer(this.#opts.kafka);
    await producer.connect();
    this.#producer = producer;
    return producer;
  }

  /** Takes waiters from the head of the queue up to the request limits (at least one). */
  #take(): Waiting[] {
    let bytes = 0;
    let n = 0;
    while (n < this.#queue.length && n < MAX_WAITERS) {
      const next = this.#queue[n]!;
      if (n > 0 && bytes + next.bytes > this.#opts.maxRequestBytes) break;
      bytes += next.bytes;
      n++;
    }
    return this.#queue.splice(0, n);
  }

  async #loop(): Promise<void> {
    this.#busy = true;
    try {
      while (this.#queue.length > 0) await this.#sendGroup(this.#take());
    } finally {
      this.#busy = false;
    }
  }

  async #sendGroup(group: Waiting[]): Promise<void> {
    const byTopic = Map.groupBy(group.flatMap((w) => w.batch), (b) => b.topic);
    try {
      const producer = await this.#ensureProducer();
      await producer.sendBatch({ acks: -1, topicMessages: [...byTopic].map(([topic, batches]) => ({ topic, messages: batches.flatMap((b) => b.messages) })) });
      this.#consecutiveFailures = 0;
      for (const w of group) w.resolve();
    } catch (err) {
      if (isSizeError(err)) {
        if (group.length > 1) {
          // Split and try each half on its own; the rest of the queue waits.
          const half = Math.ceil(group.length / 2);
          await this.#sendGroup(group.slice(0, half));
          await this.#sendGroup(group.slice(half));
          return;
        }
        for (const w of group) w.reject(new RecordTooLargeError(`record batch of ${w.bytes} bytes refused by the broker for its size`));
        return;
      }
      this.#consecutiveFailures++;
      for (const topic of byTopic.keys()) this.#opts.onFailure?.(topic);
      this.#opts.log.warn({ err: { message: (err as Error).message, types: errorTypes(err) }, producer: this.#opts.name }, 'produce_failed');
      // NOTE: the sequence numbers of an idempotent producer whose request
      // failed are in an unknown state (kafkajs keeps resending with numbers
      // the broker then refuses as out of order): start a new producer id.
      const old = this.#producer;
      this.#producer = undefined;
      await old?.disconnect().catch(() => undefined);
      for (const w of group) w.reject(err);
    }
  }
}
