import type { Consumer, ConsumerConfig, EachBatchPayload, Kafka, KafkaMessage } from 'kafkajs';
import type { SchemaRegistry } from '../../schemas/registry.ts';
import type { Logger } from '../logger.ts';
import type { Metrics } from '../metrics.ts';
import type { DeadLetter, DeadLetterSink } from './dead-letters.ts';
import { crashCause, CrashRestarts } from './crash-restarts.ts';
import { PoisonRecordError, type Decoded, type PoisonReason, type RecordDecoder } from './poison.ts';
import type { Topics } from './topics.ts';

/** What every consumer service (projector, fan-out, derived events) takes from the composition root. */
export interface ConsumerServiceDeps {
  kafka: Kafka;
  registry: SchemaRegistry;
  topics: Topics;
  /** Prefix of consumer group ids (the topic prefix). */
  groupPrefix: string;
  log: Logger;
  metrics: Metrics;
  deadLetters: DeadLetterSink;
  /** Work pending with no progress for this long makes a consumer unhealthy. */
  stallMs: number;
  /** Group session timeout of every consumer (KAFKA_SESSION_TIMEOUT_MS). */
  sessionTimeoutMs?: number;
}

export interface GroupMemberOptions<T> {
  kafka: Kafka;
  log: Logger;
  metrics: Metrics;
  groupId: string;
  topics: string[];
  /** Value decoder of every topic read (decode + schema validation). */
  decode: RecordDecoder<T>;
  /** Where poison goes (anything with DeadLetterSink's send). */
  deadLetters: Pick<DeadLetterSink, 'send'>;
  /** Work pending with no progress for this long makes the member unhealthy. */
  stallMs: number;
  /**
   * How long the group coordinator waits for a silent member before it hands
   * its partitions to others (default 30 s): after a kill -9, the time those
   * partitions stand still.
   */
  sessionTimeoutMs?: number;
  consumer?: Partial<ConsumerConfig>;
}

/** A record read from Kafka, decoded or found to be poison. */
export type Outcome<T> = { kind: 'record'; record: Decoded<T> } | { kind: 'poison'; letter: DeadLetter };

/** What a consumer built on a member tells it: how its own work stands, and how it reads. */
export interface MemberWork {
  /**
   * Records up to `lastOffset` carried nothing to process (transaction
   * markers, aborted records): commit past them once everything before them
   * is done.
   */
  onSkippedRecords(topic: string, partition: number, lastOffset: string): void;
  /** Drops what the consumer tracked for its previous assignment. */
  onRevoked(): void;
  /** Work fetched and not yet done (or failing). */
  busy(): boolean;
  /** Starts kafkajs' run loop on `consumer`. */
  run(consumer: Consumer): Promise<void>;
}

/**
 * What every consumer of the service holds (by composition, never by
 * inheritance): group membership and the assignment it owns, a generation
 * that changes on every rebalance (work of an older generation never
 * commits), the decision of each record's outcome (a record that cannot be
 * decoded becomes a dead letter, never an exception), and health: crashed,
 * out of the group, or work pending with no progress for `stallMs`. Its
 * state changes only through its methods.
 */
export class GroupMember<T> {
  readonly #opts: GroupMemberOptions<T>;
  readonly #work: MemberWork;
  readonly consumer: Consumer;
  readonly log: Logger;
  /** Bumped when a rebalance starts and when the member joins. */
  #generation = 0;
  /** Aborted once stop() begins: ends waits and retries, and refuses crash restarts. */
  readonly #stop = new AbortController();
  /** Set while the handler keeps failing (transient: retried, never skipped). */
  #failing: string | undefined;
  #failuresInRow = 0;
  readonly #assigned = new Set<string>();
  #started = false;
  #joined = false;
  #crashed: string | undefined;
  #lastProgress = Date.now();
  #busySince: number | undefined;
  #notJoinedSince: number | undefined = Date.now();
  readonly #restarts: CrashRestarts;

  constructor(opts: GroupMemberOptions<T>, work: MemberWork) {
    this.#opts = opts;
    this.#work = work;
    this.log = opts.log.child({ group: opts.groupId });
    const sessionTimeout = opts.sessionTimeoutMs ?? 30000;
    this.#restarts = new CrashRestarts({ signal: this.#stop.signal, onRestart: () => opts.metrics.consumerRestarts.inc({ group: opts.groupId }) });
    this.consumer = opts.kafka.consumer({
      groupId: opts.groupId,
      sessionTimeout,
      heartbeatInterval: Math.min(3000, Math.floor(sessionTimeout / 3)),
      ...opts.consumer,
      retry: this.#restarts.retry(opts.consumer?.retry),
    });
    this.#restarts.watch(this.consumer);
    const { events } = this.consumer;
    this.consumer.on(events.CRASH, (e) => {
      const message = crashCause(e.payload.error);
      this.#crashed = e.payload.restart || !this.stopping ? undefined : message;
      this.#joined = false;
      this.#notJoinedSince ??= Date.now();
      this.log.error({ err: { message }, restart: e.payload.restart, crashes_in_row: this.#restarts.inRow }, 'consumer_crashed');
      if (!e.payload.restart && !this.stopping) void this.#restartAfterCrash();
    });
    this.consumer.on(events.REBALANCING, () => {
      this.#generation++;
      this.#assigned.clear();
      this.#work.onRevoked();
    });
    this.consumer.on(events.GROUP_JOIN, (e) => {
      this.#generation++;
      this.#assigned.clear();
      for (const [topic, partitions] of Object.entries(e.payload.memberAssignment)) {
        for (const p of partitions) this.#assigned.add(`${topic}:${p}`);
      }
      this.#joined = true;
      this.#crashed = undefined;
      this.#notJoinedSince = undefined;
      this.progress();
      this.#work.onRevoked();
    });
    // A fetch that held only transaction markers (or aborted records) is not
    // handed to eachBatch; its end offset must still be committed, or the
    // group keeps a lag of one marker per transaction forever.
    this.consumer.on(events.END_BATCH_PROCESS, (e) => {
      // firstOffset is null when nothing at or past the fetch offset came back.
      if (e.payload.batchSize !== 0 || e.payload.firstOffset === null || this.stopping) return;
      if (!this.owns(e.payload.topic, e.payload.partition)) return;
      this.#work.onSkippedRecords(e.payload.topic, e.payload.partition, String(e.payload.lastOffset));
    });
  }

  get groupId(): string {
    return this.#opts.groupId;
  }

  get topics(): readonly string[] {
    return this.#opts.topics;
  }

  /** Why the handler keeps failing, while it does. */
  get failing(): string | undefined {
    return this.#failing;
  }

  /** Aborted once the member begins to stop. */
  get stopSignal(): AbortSignal {
    return this.#stop.signal;
  }

  get stopping(): boolean {
    return this.#stop.signal.aborted;
  }

  /** Marks the member as stopping: batches in hand end, waits are cut short. */
  beginStop(): void {
    this.#stop.abort();
  }

  /** Whether this member owns the partition in the current generation. */
  owns(topic: string, partition: number): boolean {
    return this.#assigned.has(`${topic}:${partition}`);
  }

  /**
   * Whether a batch handed over in the current generation may still be
   * worked on: the consumer runs, kafkajs has not sought its partition
   * since, and neither a stop nor a rebalance came. NOTE: ask after each
   * wait, not for every record: nothing of that changes while a loop runs
   * synchronously, and kafkajs' isStale builds a key per call.
   */
  batchCheck({ isRunning, isStale }: Pick<EachBatchPayload, 'isRunning' | 'isStale'>): () => boolean {
    const generation = this.#generation;
    return () => isRunning() && !isStale() && !this.stopping && generation === this.#generation;
  }

  /** Records that work moved on (a record finished or a commit went through). */
  progress(): void {
    this.#lastProgress = Date.now();
  }

  /** Call when busy may have changed. */
  noteBusy(): void {
    if (this.#work.busy()) this.#busySince ??= Date.now();
    else this.#busySince = undefined;
  }

  /** Undefined when healthy, else why not. */
  health(now = Date.now()): string | undefined {
    if (!this.#started) return 'not started';
    if (this.#crashed) return `crashed: ${this.#crashed}`;
    // A consumer that rejoins between crashes is in its group most of the time.
    const crashing = this.#restarts.problem(this.#opts.stallMs, now);
    if (crashing) return crashing;
    if (!this.#joined && this.#notJoinedSince !== undefined && now - this.#notJoinedSince > this.#opts.stallMs) {
      return `not in its group for ${Math.round((now - this.#notJoinedSince) / 1000)} s`;
    }
    this.noteBusy();
    if (this.#busySince !== undefined) {
      const idle = now - Math.max(this.#lastProgress, this.#busySince);
      if (idle > this.#opts.stallMs) {
        return `stalled: work pending and no progress for ${Math.round(idle / 1000)} s${this.#failing ? ` (${this.#failing})` : ''}`;
      }
    }
    return undefined;
  }

  async start(): Promise<void> {
    await this.consumer.connect();
    for (const topic of this.#opts.topics) {
      await this.consumer.subscribe({ topic, fromBeginning: true });
    }
    await this.#work.run(this.consumer);
    this.#started = true;
  }

  /**
   * kafkajs restarts a consumer only after a crash whose cause it calls
   * retriable. Any other (e.g. a TypeError in kafkajs' admin while a broker
   * is down) leaves the member out of its group for good while the process
   * lives on, so the member restarts itself, on the same schedule, until it stops.
   */
  async #restartAfterCrash(): Promise<void> {
    if (!(await this.#restarts.beforeRestart()) || this.stopping) return;
    try {
      await this.#work.run(this.consumer);
    } catch (err) {
      this.log.error({ err: { message: crashCause(err) } }, 'consumer_restart_failed');
      if (!this.stopping) void this.#restartAfterCrash();
    }
  }

  /** Decides a record's outcome: its decoded value, or a dead letter. */
  outcome(topic: string, partition: number, message: KafkaMessage): Outcome<T> {
    try {
      return { kind: 'record', record: this.#opts.decode(message) };
    } catch (err) {
      if (!(err instanceof PoisonRecordError)) throw err;
      return { kind: 'poison', letter: this.deadLetter(topic, partition, message, err.reason, err.message) };
    }
  }

  /** The dead letter of `message`: its own bytes and coordinates, why, and this group. */
  deadLetter(topic: string, partition: number, message: KafkaMessage, reason: PoisonReason, detail: string): DeadLetter {
    return { topic, partition, offset: message.offset, key: message.key, value: message.value, headers: message.headers, reason, detail, group: this.#opts.groupId };
  }

  /** Pauses fetching on every topic (the member stays in the group to commit). */
  pauseAll(): void {
    try {
      this.consumer.pause(this.#opts.topics.map((topic) => ({ topic })));
    } catch {
      // not running: nothing to pause
    }
  }

  /** The handler failed transiently: counted, and shown by health() if it lasts. Answers the failures in a row. */
  transientFailure(err: unknown): number {
    this.#failing = err instanceof Error ? err.message : String(err);
    this.#opts.metrics.consumerRetries.inc({ group: this.#opts.groupId });
    this.noteBusy();
    return ++this.#failuresInRow;
  }

  /**
   * Commits each of `offsets` (the next offset to read) whose partition the
   * member still owns. Kafka's classic protocol does not check ownership of
   * a commit, so a stale one could move another member's partition.
   */
  async commit(offsets: { topic: string; partition: number; offset: string }[]): Promise<void> {
    const owned = offsets.filter((o) => this.owns(o.topic, o.partition));
    if (owned.length === 0) return;
    try {
      await this.consumer.commitOffsets(owned);
    } catch (err) {
      // A rebalance moved a partition: its new owner re-reads from the last
      // commit, and what it re-does is idempotent.
      this.log.warn({ err: { message: (err as Error).message } }, 'offset_commit_failed');
    }
  }

  /** The handler went through again. */
  recovered(): void {
    this.#failing = undefined;
    this.#failuresInRow = 0;
  }
}

/** The problems of `members` by group id (healthy ones left out), for /readyz. */
export function groupProblems(members: readonly { groupId: string; health(): string | undefined }[]): Record<string, string> {
  const out: Record<string, string> = {};
  for (const m of members) {
    const problem = m.health();
    if (problem) out[m.groupId] = problem;
  }
  return out;
}
