import type { Admin, ITopicConfig } from 'kafkajs';
import { retry } from '../retry.ts';

/** Logical names of every topic the service owns. */
export const TOPIC_BASE = {
  playerEvents: 'player.events.v1',
  tenants: 'config.tenants.v1',
  apiKeys: 'config.api-keys.v1',
  videos: 'config.videos.v1',
  apiKeyUsage: 'api-keys.usage.v1',
  destinations: 'config.destinations.v1',
  retry1: 'webhooks.retry.1m',
  retry2: 'webhooks.retry.5m',
  retry3: 'webhooks.retry.30m',
  webhooksManual: 'webhooks.manual.v1',
  webhooksFailed: 'webhooks.failed.v1',
  webhookAttempts: 'webhooks.attempts.v1',
  securityEvents: 'security.events.v1',
  deadLetters: 'dead-letters.v1',
  derivedByVisitor: 'derived.by-visitor.v1',
  derivedState: 'derived.state.v1',
} as const;

/** The retry tiers in order: attempt n+1 after a failed attempt n waits on RETRY_TIERS[n-1]. */
export const RETRY_TIERS = ['retry1', 'retry2', 'retry3'] as const satisfies readonly TopicKey[];

export type TopicKey = keyof typeof TOPIC_BASE;
export type Topics = Record<TopicKey, string>;

/** Config topics, compacted, read whole by every process. */
export const CONFIG_KINDS = ['tenants', 'apiKeys', 'videos', 'apiKeyUsage', 'destinations'] as const satisfies readonly TopicKey[];
export type ConfigKind = (typeof CONFIG_KINDS)[number];

/**
 * Topic names under an optional prefix (KAFKA_TOPIC_PREFIX), so several
 * deployments or test runs can share one cluster. Consumer groups take the
 * same prefix.
 */
export function topicNames(prefix = ''): Topics {
  return Object.fromEntries(Object.entries(TOPIC_BASE).map(([k, v]) => [k, `${prefix}${v}`])) as Topics;
}

/**
 * Topic definitions. Player events are the source of truth the read model is
 * rebuilt from, so they are kept (retention -1) until an operator decides
 * otherwise; config topics are compacted: the latest record per key wins and
 * a tombstone deletes. Replication (`replicationFactor: -1`) is left to
 * {@link ensureTopics}, which sizes it to the cluster it creates them on.
 */
export function topicDefinitions(topics: Topics, partitions: number): ITopicConfig[] {
  const def = (topic: string, numPartitions: number, config: Record<string, string>): ITopicConfig => ({
    topic,
    numPartitions,
    replicationFactor: -1,
    configEntries: Object.entries(config).map(([name, value]) => ({ name, value })),
  });
  const compacted = { 'cleanup.policy': 'compact', 'min.compaction.lag.ms': '0', 'segment.ms': String(60 * 60 * 1000) };
  const forever = { 'retention.ms': '-1' };
  const week = { 'retention.ms': String(7 * 24 * 3600 * 1000) };
  return [
    // Room for a whole intake transaction in one partition's record batch
    // (the producer caps a transaction at 2 MiB; one request is ≤ 1 MiB of JSON).
    def(topics.playerEvents, partitions, { ...forever, 'max.message.bytes': String(8 * 1024 * 1024) }),
    ...CONFIG_KINDS.map((k) => def(topics[k], 1, compacted)),
    // Deliveries waiting for a retry, or queued by hand (Test, reprocess):
    // kept 7 days, longer than the whole retry schedule.
    ...(['retry1', 'retry2', 'retry3', 'webhooksManual'] as const).map((k) => def(topics[k], partitions, week)),
    ...(['webhooksFailed', 'webhookAttempts', 'securityEvents'] as const).map((k) => def(topics[k], partitions, forever)),
    // The derived-events service: player events keyed by visitor (its
    // repartition), and its state's changelog, compacted, one partition per
    // partition of the repartition (its visitor records are also the source
    // of the visitor read model).
    def(topics.derivedByVisitor, partitions, { ...week, 'max.message.bytes': String(8 * 1024 * 1024) }),
    def(topics.derivedState, partitions, compacted),
    // Records no consumer could read, with their original bytes: room for
    // the largest record any source topic accepts, plus the dlq-* headers.
    def(topics.deadLetters, 1, { ...forever, 'max.message.bytes': String(9 * 1024 * 1024) }),
  ];
}

/**
 * Replication for a cluster of `brokers` brokers: three replicas and
 * `min.insync.replicas` 2 from three brokers on, so an acks=-1 write (the
 * intake's transactions, every producer here) is on two brokers before it is
 * acknowledged and goes on while one broker is down; on smaller clusters one
 * replica per broker and 1.
 */
export function replicationFor(brokers: number): { replicationFactor: number; minInsyncReplicas: number } {
  const replicationFactor = Math.max(1, Math.min(3, Math.floor(brokers)));
  return { replicationFactor, minInsyncReplicas: replicationFactor >= 3 ? 2 : 1 };
}

/**
 * The definitions with replication filled in for a cluster of `brokers`
 * brokers where a definition leaves it open (`replicationFactor` -1 or unset,
 * no replica assignment); a `min.insync.replicas` a definition sets itself is
 * kept.
 */
export function withReplication(defs: ITopicConfig[], brokers: number): ITopicConfig[] {
  const { replicationFactor, minInsyncReplicas } = replicationFor(brokers);
  return defs.map((d) => {
    if ((d.replicationFactor !== undefined && d.replicationFactor !== -1) || (d.replicaAssignment?.length ?? 0) > 0) return d;
    const entries = d.configEntries ?? [];
    const own = entries.some((e) => e.name === 'min.insync.replicas');
    return {
      ...d,
      replicationFactor,
      configEntries: own ? entries : [...entries, { name: 'min.insync.replicas', value: String(minInsyncReplicas) }],
    };
  });
}

/**
 * Creates missing topics; existing ones are left as they are. Several
 * processes may start at once against one cluster: a create that loses the
 * race, or whose leaders are still being elected, is retried until every
 * topic is listed with a leader for each partition. Replication left open is
 * sized to the brokers the cluster lists now ({@link replicationFor}).
 *
 * NOTE: a broker that is down when the topics are first created is not
 * counted; topics then get fewer replicas, which a later start does not
 * change (kafka-reassign-partitions can).
 */
export async function ensureTopics(admin: Admin, defs: ITopicConfig[], timeoutMs = 60_000): Promise<void> {
  await retry(
    async () => {
      const existing = new Set(await admin.listTopics());
      const missing = defs.filter((d) => !existing.has(d.topic));
      if (missing.length > 0) {
        const { brokers } = await admin.describeCluster();
        await admin.createTopics({ topics: withReplication(missing, brokers.length), waitForLeaders: true });
      }
      const { topics } = await admin.fetchTopicMetadata({ topics: defs.map((d) => d.topic) });
      if (!topics.every((t) => t.partitions.length > 0 && t.partitions.every((p) => p.leader >= 0))) throw new Error('topics have no leaders in time');
    },
    { schedule: { initialMs: 100, maxMs: 2000, giveUpAfterMs: timeoutMs } },
  );
}
