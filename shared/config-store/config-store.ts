import { type Admin, type Kafka, type KafkaMessage, type Producer } from 'kafkajs';
import type { SchemaRegistry, Subject } from '../../schemas/registry.ts';
import { ApiKeyRecord, ApiKeyUsageRecord, DestinationRecord, TenantRecord, VideoRecord } from '../../schemas/records.ts';
import type { DeadLetter, DeadLetterSink } from '../kafka/dead-letters.ts';
import type { Metrics } from '../metrics.ts';
import { PoisonRecordError, recordDecoder, type RecordDecoder } from '../kafka/poison.ts';
import { CONFIG_KINDS, type ConfigKind, type Topics } from '../kafka/topics.ts';
import { createProducer } from '../kafka/kafka.ts';
import { TopicFollower } from '../kafka/topic-follower.ts';
import type { Logger } from '../logger.ts';
import { selects } from '../webhooks/fanout-plan.ts';

const SCHEMA_OF = { tenants: TenantRecord, apiKeys: ApiKeyRecord, videos: VideoRecord, apiKeyUsage: ApiKeyUsageRecord, destinations: DestinationRecord };

const SUBJECT_OF: Record<ConfigKind, Subject> = {
  tenants: 'tenant',
  apiKeys: 'api-key',
  videos: 'video',
  apiKeyUsage: 'api-key-usage',
  destinations: 'destination',
};

/** The keys a tenant's player key lookup answers for: its current key and, after a rotation, the previous one. */
const playerKeysOf = (t: TenantRecord): string[] => (t.previous_player_key ? [t.player_key, t.previous_player_key] : [t.player_key]);

/**
 * The configuration (tenants, API keys, videos, key usage) materialised in
 * memory from the compacted config topics, the way Kafka Connect keeps its
 * configs: every process reads the topics from the beginning at start-up and
 * follows them. Lookups are synchronous map reads on the request path.
 */
export class ConfigStore {
  readonly tenants = new Map<string, TenantRecord>();
  readonly apiKeys = new Map<string, ApiKeyRecord>();
  readonly videos = new Map<string, VideoRecord>();
  readonly usage = new Map<string, number>();
  readonly destinations = new Map<string, DestinationRecord>();
  readonly #tenantByPlayerKey = new Map<string, TenantRecord>();
  readonly #keyByHash = new Map<string, ApiKeyRecord>();
  readonly #videosByTenant = new Map<string, Map<string, VideoRecord>>();
  readonly #destinationsByTenant = new Map<string, Map<string, DestinationRecord>>();
  readonly #follower: TopicFollower;
  readonly #log: Logger;
  readonly #topics: Topics;
  readonly #kindOf = new Map<string, ConfigKind>();
  readonly #decoders = new Map<ConfigKind, RecordDecoder<unknown>>();
  readonly #deadLetters: Pick<DeadLetterSink, 'send'>;
  /** Records skipped as unreadable since start. */
  skipped = 0;

  /** `stallMs`: how long crashing and restarting, or out of its group, before problem() reports it. */
  constructor(opts: { kafka: Kafka; registry: SchemaRegistry; log: Logger; metrics: Metrics; topics: Topics; stallMs: number; deadLetters?: DeadLetterSink }) {
    for (const kind of CONFIG_KINDS) this.#decoders.set(kind, recordDecoder(opts.registry, SUBJECT_OF[kind], SCHEMA_OF[kind], { tombstones: true }));
    this.#topics = opts.topics;
    for (const kind of CONFIG_KINDS) this.#kindOf.set(opts.topics[kind], kind);
    this.#log = opts.log.child({ component: 'config-store' });
    this.#deadLetters = opts.deadLetters ?? {
      send: async (letters: DeadLetter[]) => {
        for (const { topic, partition, offset, reason, detail } of letters) this.#log.error({ topic, partition, offset, reason, detail }, 'config_record_unreadable');
      },
    };
    // NOTE: the follower hands over each message as it is: what this
    // version cannot read is skipped here, not dead-lettered as poison by
    // the consumer, since config topics outlive code versions and a process
    // must always start.
    this.#follower = new TopicFollower({
      kafka: opts.kafka,
      log: this.#log,
      metrics: opts.metrics,
      name: 'config-store',
      topics: CONFIG_KINDS.map((k) => opts.topics[k]),
      deadLetters: this.#deadLetters,
      stallMs: opts.stallMs,
      maxOutstanding: 1000,
      consumer: { maxWaitTimeInMs: 50 },
      apply: (topic, partition, message) => this.#apply(this.#kindOf.get(topic)!, topic, partition, message),
    });
  }

  /** Undefined when it follows its topics, else why not (not started, crashed, crashing, out of its group: GroupMember.health). */
  problem(): string | undefined {
    return this.#follower.consumer.health();
  }

  /** Reads every config topic to its end before resolving, then keeps following. */
  async start(admin: Admin, timeoutMs = 60000): Promise<void> {
    await this.#follower.consumer.start();
    const signal = AbortSignal.timeout(timeoutMs);
    await Promise.all(CONFIG_KINDS.map((kind) => this.#follower.caughtUp(admin, this.#topics[kind], { signal }))).catch((err: unknown) => {
      throw signal.aborted ? new Error(`config topics not read to their end in ${timeoutMs} ms`) : err;
    });
    this.#log.info({ tenants: this.tenants.size, api_keys: this.apiKeys.size, videos: this.videos.size }, 'config_loaded');
  }

  /** Leaves the group, giving dead letters in flight up to 2 s (a letter left unsent is sent again by the next start, which reads the topics again). */
  async stop(): Promise<void> {
    await this.#follower.consumer.stop(2000);
  }

  /** Resolves once the record at `offset` of the `kind` topic (one partition) is applied. */
  waitFor(kind: ConfigKind, offset: bigint): Promise<void> {
    return this.#follower.readThrough(this.#topics[kind], 0, offset);
  }

  /**
   * The tenant of a current or previous player key. NOTE: a previous key
   * stays indexed after its overlap ends (until the next rotation), so the
   * intake can tell a retired key from an unknown one; the caller decides
   * whether it still holds (services/ingest/player-access.ts).
   */
  tenantByPlayerKey(key: string): TenantRecord | undefined {
    return this.#tenantByPlayerKey.get(key);
  }

  apiKeyByHash(hash: string): ApiKeyRecord | undefined {
    return this.#keyByHash.get(hash);
  }

  /** The tenant's destinations (the fan-out asks for every event, so this is an index read). */
  destinationsOf(tenantId: string): DestinationRecord[] {
    return [...(this.#destinationsByTenant.get(tenantId)?.values() ?? [])];
  }

  /** Whether the tenant has a destination at all (the fan-out skips the events of one that has none). */
  hasDestinations(tenantId: string): boolean {
    return (this.#destinationsByTenant.get(tenantId)?.size ?? 0) > 0;
  }

  /** Whether any of the tenant's destinations selects `eventName` (the fan-out skips, unread, the events none selects). */
  selectedByAny(tenantId: string, eventName: string): boolean {
    for (const d of this.#destinationsByTenant.get(tenantId)?.values() ?? []) if (selects(d, eventName)) return true;
    return false;
  }

  videosOf(tenantId: string): VideoRecord[] {
    return [...(this.#videosByTenant.get(tenantId)?.values() ?? [])];
  }

  /** Puts or removes `id` in `all`, and its value under each of its `keysOf` in `byKey`. */
  #put<T>(all: Map<string, T>, byKey: Map<string, T>, keysOf: (value: T) => string[], id: string, value: T | null): void {
    const old = all.get(id);
    if (old) for (const key of keysOf(old)) byKey.delete(key);
    if (value) {
      all.set(id, value);
      for (const key of keysOf(value)) byKey.set(key, value);
    } else all.delete(id);
  }

  /** Puts or removes `id` in `all` and in its tenant's entry of `byTenant`. */
  #index<T extends { tenant_id: string }>(all: Map<string, T>, byTenant: Map<string, Map<string, T>>, id: string, value: T | null): void {
    const old = all.get(id);
    if (old) byTenant.get(old.tenant_id)?.delete(id);
    if (value) {
      all.set(id, value);
      let own = byTenant.get(value.tenant_id);
      if (!own) byTenant.set(value.tenant_id, (own = new Map()));
      own.set(id, value);
    } else all.delete(id);
  }

  /** Applies a record (or skips it), and answers the work left: its dead letter, if any. */
  #apply(kind: ConfigKind, topic: string, partition: number, message: KafkaMessage): Promise<void> | undefined {
    const id = message.key?.toString() ?? '';
    try {
      const decoded = this.#decoders.get(kind)!(message);
      const value = decoded.kind === 'value' ? decoded.value : null;
      switch (kind) {
        case 'tenants':
          this.#put(this.tenants, this.#tenantByPlayerKey, playerKeysOf, id, value as TenantRecord | null);
          break;
        case 'apiKeys':
          this.#put(this.apiKeys, this.#keyByHash, (k) => [k.key_hash], id, value as ApiKeyRecord | null);
          break;
        case 'videos':
          this.#index(this.videos, this.#videosByTenant, id, value as VideoRecord | null);
          break;
        case 'apiKeyUsage':
          if (value) {
            const u = value as ApiKeyUsageRecord;
            this.usage.set(id, Math.max(this.usage.get(id) ?? 0, u.last_used_at));
          } else this.usage.delete(id);
          break;
        case 'destinations':
          this.#index(this.destinations, this.#destinationsByTenant, id, value as DestinationRecord | null);
          break;
        default: {
          const unreachable: never = kind;
          throw new Error(`unexpected config kind ${String(unreachable)}`);
        }
      }
    } catch (err) {
      // A record this version cannot read is skipped, never fatal (config
      // topics outlive code versions, and a process must always start), and
      // dead-lettered with its bytes for an operator to look at.
      this.skipped++;
      return this.#deadLetter(topic, partition, message, err);
    }
    return undefined;
  }

  #deadLetter(topic: string, partition: number, message: KafkaMessage, err: unknown): Promise<void> {
    const reason = err instanceof PoisonRecordError ? err.reason : 'undecodable';
    const detail = err instanceof Error ? err.message : String(err);
    // NOTE: every process reads the config topics whole at start-up, so each
    // one dead-letters the same record (same source coordinates); readers of
    // the dead-letter topic count distinct (topic, partition, offset).
    const letter = { ...this.#follower.consumer.member.deadLetter(topic, partition, message, reason, detail), group: 'config-store' };
    return this.#follower.consumer.untilDone('dead_letter', () => this.#deadLetters.send([letter]));
  }
}

/**
 * Writes config changes to the compacted topics and waits until the local
 * store has applied them, so a change is visible to this process's read API
 * as soon as the write returns.
 */
export class ConfigWriter {
  readonly #producer: Producer;
  readonly #store: ConfigStore;
  readonly #registry: SchemaRegistry;
  readonly #topics: Topics;

  constructor(opts: { kafka: Kafka; store: ConfigStore; registry: SchemaRegistry; topics: Topics }) {
    this.#producer = createProducer(opts.kafka);
    this.#store = opts.store;
    this.#registry = opts.registry;
    this.#topics = opts.topics;
  }

  async connect(): Promise<void> {
    await this.#producer.connect();
  }

  async disconnect(): Promise<void> {
    await this.#producer.disconnect();
  }

  /** Puts the latest state of `id` (or a tombstone for null) and waits until it is applied locally. */
  async put(kind: ConfigKind, id: string, value: object | null, opts: { waitApplied?: boolean } = {}): Promise<void> {
    const [meta] = await this.#producer.send({
      topic: this.#topics[kind],
      acks: -1,
      messages: [{ key: id, value: value === null ? null : this.#registry.encode(SUBJECT_OF[kind], value) }],
    });
    if (opts.waitApplied === false || !meta?.baseOffset) return;
    await this.#store.waitFor(kind, BigInt(meta.baseOffset));
  }
}
