import { readFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { type Admin, type Kafka, type Producer } from 'kafkajs';
import { SchemaRegistry } from '../schemas/registry.ts';
import { createClickHouse, migrate, type ClickHouseClient } from '../shared/clickhouse/clickhouse.ts';
import type { Config, ServiceName } from '../shared/config.ts';
import { ConfigStore, ConfigWriter } from '../shared/config-store/config-store.ts';
import type { App } from '../shared/http/app.ts';
import type { FastifyListenOptions } from 'fastify';
import { addAcceptors } from '../shared/http/acceptors.ts';
import { GroupCommitProducer } from '../shared/kafka/group-commit-producer.ts';
import { createKafka, createProducer, waitForCoordinator } from '../shared/kafka/kafka.ts';
import type { ConsumerServiceDeps } from '../shared/kafka/group-member.ts';
import { CoalescingSender } from '../shared/kafka/coalescing-sender.ts';
import { DeadLetterSink } from '../shared/kafka/dead-letters.ts';
import { LagMonitor } from '../shared/kafka/lag-monitor.ts';
import { ensureTopics, topicDefinitions, topicNames, type Topics } from '../shared/kafka/topics.ts';
import type { Logger } from '../shared/logger.ts';
import { createMetrics, type Metrics } from '../shared/metrics.ts';
import type { SecretBox } from '../shared/secrets.ts';
import { HttpsDeliveryClient } from '../shared/webhooks/https-delivery.ts';
import { parseCidrList } from '../shared/webhooks/address-policy.ts';
import { startLocalBroker } from '../infra/kafka/local-broker.ts';
import { startProjector } from './projector/projector.service.ts';
import { startFanout } from './fanout/fanout.service.ts';
import { buildStackApp, mountHttpServices } from './stack/http-services.ts';
import { opsRoutes, probe, type Probe } from './stack/ops.routes.ts';
import { startDerived } from './derived/derived.service.ts';
import type { HealthSource, Problems } from './stack/readiness.ts';
import { ShutdownSequence } from './stack/shutdown-sequence.ts';
import { privateDataDir } from './stack/data-dir.ts';
import { stackSecrets, type StackSecrets } from './stack/stack-secrets.ts';
import { ReadCache } from './api/read-cache.ts';
import { clientGone } from '../shared/clickhouse/bounded-reads.ts';

export interface Stack {
  url: string;
  port: number;
  /** Set when this process runs the admin service. */
  adminToken?: string;
  kafkaBrokers: string[];
  kafkaDescribe: string;
  clickhouseDescribe: string;
  stop(): Promise<void>;
}

/**
 * The composition root: the only place that builds Kafka and ClickHouse
 * clients. Starts the services named in SERVICES behind one HTTP server and
 * returns a handle whose stop() shuts down in order: stop intake, drain HTTP,
 * flush the producer, commit consumers, close clients, stop the broker.
 */
export async function startStack(config: Config, log: Logger): Promise<Stack> {
  const dataDir = resolve(config.DATA_DIR);
  privateDataDir(dataDir);
  const secrets = stackSecrets(config, dataDir);
  const network = webhookNetwork(config);
  // Shutdown has SHUTDOWN_TIMEOUT_MS in all (services/main.ts exits after it):
  // consumers get shares of what remains to finish work in flight, leaving
  // time to commit and close clients (stack/shutdown-sequence.ts).
  const shutdown = new ShutdownSequence({
    timeoutMs: config.SHUTDOWN_TIMEOUT_MS,
    onStopFailed: (component, err) => log.warn({ err, component }, 'stop_failed'),
  });
  try {
    const cluster = await kafkaCluster(config, dataDir, log, shutdown);
    const core = await connectKafka(config, log, cluster.brokers, shutdown);
    const clickhouse = await startClickHouse(core, dataDir);
    const shared = await startShared(core);
    const health = sharedHealth(config, shared);
    const readCache = startReadCache(core);
    if (core.services.has('projector')) health.push(await startProjectorService(core, clickhouse.client, shared, readCache));
    if (core.services.has('fanout')) health.push(await startFanoutService(core, shared, secrets.secretBox!, network));
    if (core.services.has('derived')) health.push(await startDerivedService(core, shared));
    const { url, port } = await startHttp(core, shared, clickhouse.client, secrets, health, readCache);
    log.info({ url, services: [...core.services], kafka: cluster.describe, clickhouse: clickhouse.describe }, 'stack_started');
    return {
      url,
      port,
      adminToken: secrets.adminToken,
      kafkaBrokers: cluster.brokers,
      kafkaDescribe: cluster.describe,
      clickhouseDescribe: clickhouse.describe,
      stop: () => shutdown.run(),
    };
  } catch (err) {
    await shutdown.run();
    throw err;
  }
}

/** What every component is built from: the configuration and the Kafka clients of the process. */
interface Core {
  config: Config;
  log: Logger;
  services: Set<ServiceName>;
  shutdown: ShutdownSequence;
  metrics: Metrics;
  registry: SchemaRegistry;
  topics: Topics;
  kafka: Kafka;
  admin: Admin;
}

/** Parts every process has, whatever SERVICES names. */
interface Shared {
  deadLetterSender: CoalescingSender;
  deadLetters: DeadLetterSink;
  lag: LagMonitor;
  store: ConfigStore;
  writer: ConfigWriter;
}

/** The webhook client's network settings, read before anything starts so that a bad file stops the start at once. */
function webhookNetwork(config: Config): { allowList: ReturnType<typeof parseCidrList>; extraCaPem: string | undefined } {
  return {
    allowList: parseCidrList(config.WEBHOOK_ALLOWED_CIDRS),
    extraCaPem: config.WEBHOOK_CA_FILE ? readFileSync(config.WEBHOOK_CA_FILE, 'utf8') : undefined,
  };
}

/** KAFKA_BROKERS, or a local broker under DATA_DIR/kafka when it is unset. */
async function kafkaCluster(config: Config, dataDir: string, log: Logger, shutdown: ShutdownSequence): Promise<{ brokers: string[]; describe: string }> {
  if (config.KAFKA_BROKERS) return { brokers: config.KAFKA_BROKERS, describe: `Kafka at ${config.KAFKA_BROKERS.join(',')}` };
  const broker = await startLocalBroker({
    dataDir: join(dataDir, 'kafka'),
    partitions: config.KAFKA_TOPIC_PARTITIONS,
    log: (m) => log.info({ component: 'local-kafka' }, m),
  });
  shutdown.add('local-kafka', () => broker.stop());
  return { brokers: broker.brokers, describe: `local Kafka broker at ${broker.brokers.join(',')} (data in ${join(dataDir, 'kafka')})` };
}

/** The Kafka client and its admin, with every topic created and a group coordinator available. */
async function connectKafka(config: Config, log: Logger, brokers: string[], shutdown: ShutdownSequence): Promise<Core> {
  const topics = topicNames(config.KAFKA_TOPIC_PREFIX);
  const metrics = createMetrics();
  const kafka = createKafka({ brokers, clientId: config.KAFKA_CLIENT_ID, log, onProduceRetry: (cause) => metrics.produceRetries.inc({ cause }) });
  const admin = kafka.admin();
  const core: Core = { config, log, services: new Set(config.SERVICES), shutdown, metrics, registry: SchemaRegistry.fromManifest(), topics, kafka, admin };
  await admin.connect();
  shutdown.add('kafka-admin', () => admin.disconnect());
  await ensureTopics(admin, topicDefinitions(topics, config.KAFKA_TOPIC_PARTITIONS));
  await waitForCoordinator(admin);
  return core;
}

/** ClickHouse, migrated, for the services that use it (api, projector, admin); none otherwise. */
async function startClickHouse(core: Core, dataDir: string): Promise<{ client?: ClickHouseClient; describe: string }> {
  const { config, services } = core;
  if (!services.has('api') && !services.has('projector') && !services.has('admin')) return { describe: 'not used by these services' };
  const ch = await createClickHouse({
    url: config.CLICKHOUSE_URL,
    username: config.CLICKHOUSE_USER,
    password: config.CLICKHOUSE_PASSWORD,
    database: config.CLICKHOUSE_DATABASE,
    dataDir,
  });
  core.shutdown.add('clickhouse', () => ch.client.close());
  await migrate(ch.client, core.log);
  return { client: ch.client, describe: ch.describe };
}

/** The dead-letter producer, the lag monitor (started last) and the config store read to its end. */
async function startShared(core: Core): Promise<Shared> {
  const { config, kafka, log, metrics, registry, topics, admin, shutdown } = core;
  // Records no consumer can read go here, with their bytes (shared/kafka/dead-letters.ts).
  const deadLetterSender = new CoalescingSender({
    kafka,
    log,
    name: 'dead-letters',
    onFailure: (topic) => metrics.produceFailures.inc({ producer: 'dead-letters', topic }),
  });
  await deadLetterSender.connect();
  shutdown.add('dead-letter-producer', () => deadLetterSender.close());
  const deadLetters = new DeadLetterSink({ sender: deadLetterSender, topic: topics.deadLetters, metrics, log });
  const lag = new LagMonitor({ admin, metrics, log });

  const store = new ConfigStore({ kafka, registry, log, metrics, topics, stallMs: config.CONSUMER_STALL_TIMEOUT_MS, deadLetters });
  await store.start(admin);
  shutdown.add('config-store', () => store.stop());
  const writer = new ConfigWriter({ kafka, store, registry, topics });
  await writer.connect();
  shutdown.add('config-writer', () => writer.disconnect());
  return { deadLetterSender, deadLetters, lag, store, writer };
}

/** /readyz entries of the shared parts; each answers its problems by component name ({} when healthy). */
function sharedHealth(config: Config, shared: Shared): HealthSource[] {
  const { store, deadLetterSender } = shared;
  return [
    {
      name: 'config_store',
      problems: (): Problems => {
        const problem = store.problem();
        return problem ? { config_store: problem } : {};
      },
    },
    {
      name: 'dead_letters',
      problems: (): Problems => {
        const problem = deadLetterSender.problem(config.PRODUCER_FAILURES_UNHEALTHY);
        return problem ? { 'dead-letters': problem } : {};
      },
    },
  ];
}

/**
 * The read API's cache, when this process serves the read API and has it on:
 * with the projector in the same process, each entry lives until the
 * projector reports an insert that touched it; without, for
 * READ_CACHE_TTL_MS, and not at all when that is 0 (docs/scaling.md).
 */
function startReadCache(core: Core): ReadCache | undefined {
  const { config, services, metrics } = core;
  if (!services.has('api') || config.READ_CACHE_MAX_BYTES === 0) return undefined;
  const invalidated = services.has('projector');
  if (!invalidated && config.READ_CACHE_TTL_MS === 0) return undefined;
  const cache = new ReadCache({
    maxWeight: config.READ_CACHE_MAX_BYTES,
    tenantMaxWeight: Math.min(config.READ_CACHE_TENANT_MAX_BYTES, config.READ_CACHE_MAX_BYTES),
    ttlMs: invalidated ? 0 : config.READ_CACHE_TTL_MS,
    clientGone,
  });
  cache.onOutcome = (outcome) => metrics.readCacheRequests.inc({ outcome });
  return cache;
}

/** The options every consumer service (projector, fan-out, derived events) takes from the core and the shared parts. */
function consumerOptions(core: Core, shared: Shared): ConsumerServiceDeps {
  const { config, kafka, registry, topics, log, metrics } = core;
  return {
    kafka,
    registry,
    topics,
    groupPrefix: config.KAFKA_TOPIC_PREFIX,
    log,
    metrics,
    deadLetters: shared.deadLetters,
    stallMs: config.CONSUMER_STALL_TIMEOUT_MS,
    sessionTimeoutMs: config.KAFKA_SESSION_TIMEOUT_MS,
  };
}

/** A started consumer service: its groups' lag watched, its stop a shutdown step, its health a /readyz entry. */
function consumerService(
  core: Core,
  shared: Shared,
  name: string,
  service: { consumers: readonly { groupId: string; topics: readonly string[] }[]; health(): Problems },
  stop: () => Promise<void>,
): HealthSource {
  for (const c of service.consumers) shared.lag.watch(c.groupId, [...c.topics]);
  core.shutdown.add(name, stop);
  return { name, problems: () => service.health() };
}

async function startProjectorService(core: Core, clickhouse: ClickHouseClient | undefined, shared: Shared, readCache: ReadCache | undefined): Promise<HealthSource> {
  const { config } = core;
  if (!clickhouse) throw new Error('the projector needs ClickHouse');
  const projector = await startProjector({
    ...consumerOptions(core, shared),
    clickhouse,
    flushMs: config.PROJECTOR_FLUSH_MS,
    maxRows: config.PROJECTOR_MAX_ROWS,
    onInsert: readCache,
  });
  return consumerService(core, shared, 'projector', projector, () => projector.stop(core.shutdown.budget(0.6)));
}

async function startFanoutService(core: Core, shared: Shared, secrets: SecretBox, network: ReturnType<typeof webhookNetwork>): Promise<HealthSource> {
  const { config } = core;
  const client = new HttpsDeliveryClient({
    timeoutMs: config.WEBHOOK_TIMEOUT_MS,
    extraCaPem: network.extraCaPem,
    allowList: network.allowList,
    dnsTimeoutMs: config.WEBHOOK_DNS_TIMEOUT_MS,
    connectionsPerPool: config.FANOUT_PER_DESTINATION_CONCURRENCY,
  });
  core.shutdown.add('webhook-client', async () => client.close());
  const fanout = await startFanout({
    ...consumerOptions(core, shared),
    store: shared.store,
    secrets,
    client,
    delaysMs: config.WEBHOOK_RETRY_DELAYS_S.map((s) => s * 1000),
    maxInFlight: config.FANOUT_MAX_IN_FLIGHT,
    perDestinationConcurrency: config.FANOUT_PER_DESTINATION_CONCURRENCY,
    perDestinationQueue: config.FANOUT_PER_DESTINATION_QUEUE,
    dueBatchMs: config.WEBHOOK_DUE_BATCH_MS,
    producerFailuresUnhealthy: config.PRODUCER_FAILURES_UNHEALTHY,
  });
  return consumerService(core, shared, 'fanout', fanout, () => fanout.stop(core.shutdown.budget(0.4)));
}

async function startDerivedService(core: Core, shared: Shared): Promise<HealthSource> {
  const { config } = core;
  const derived = await startDerived({
    ...consumerOptions(core, shared),
    admin: core.admin,
    store: shared.store,
    log: core.log.child({ component: 'derived' }),
    sessionIdleMs: config.DERIVED_SESSION_IDLE_MS,
    tickMs: config.DERIVED_TICK_MS,
    latenessMs: config.DERIVED_LATENESS_MS,
    visitorTtlMs: config.DERIVED_VISITOR_TTL_MS,
    maxVisitorsPerTenant: config.DERIVED_MAX_VISITORS_PER_TENANT,
    maxSessionsPerTenant: config.DERIVED_MAX_SESSIONS_PER_TENANT,
    stages: config.DERIVED_STAGES,
  });
  return consumerService(core, shared, 'derived', derived, () => derived.stop());
}

/**
 * The HTTP services' producers, the services on one app with /healthz,
 * /readyz and /metrics, then listen. The HTTP step is added last, so it is
 * the first to stop.
 */
async function startHttp(
  core: Core,
  shared: Shared,
  clickhouse: ClickHouseClient | undefined,
  secrets: StackSecrets,
  health: HealthSource[],
  readCache: ReadCache | undefined,
): Promise<{ url: string; port: number }> {
  const { config, log, metrics, registry, topics, services, shutdown } = core;
  const app = await buildStackApp(config, log, metrics);
  const ingestProducer = services.has('ingest') ? await startIngestProducer(core) : undefined;
  const adminProducer = services.has('admin') ? await startAdminProducer(core) : undefined;
  const { store, writer } = shared;
  const httpServices = await mountHttpServices(app, { config, log, metrics, registry, topics, store, writer, secrets, clickhouse, ingestProducer, adminProducer, readCache });

  shared.lag.start();
  shutdown.add('lag-monitor', () => shared.lag.stop());
  void app.register(opsRoutes, { probes: readinessProbes(core.admin, clickhouse), components: health, metrics, log });

  // NOTE: registered before listen, stopped first: intake closes before
  // the HTTP server drains, so nothing new is accepted while shutting down.
  let acceptors: { close(): Promise<void> } | undefined;
  shutdown.add('http', async () => {
    await acceptors?.close();
    for (const s of httpServices) await s.stop();
    await app.close();
  });
  // SO_REUSEPORT where Node offers it for sharing one port (Linux, the
  // image's platform); elsewhere one socket. reusePort goes through to
  // Node's server.listen (Fastify's types do not list it).
  const sockets = process.platform === 'linux' ? config.HTTP_ACCEPTORS : 1;
  await app.listen({ port: config.PORT, host: config.HOST, reusePort: sockets > 1 } as FastifyListenOptions);
  acceptors = await addAcceptors(app.server, sockets - 1);
  return listeningAt(app, config);
}

async function startIngestProducer(core: Core): Promise<GroupCommitProducer> {
  const { config, kafka, log, metrics } = core;
  const producer = new GroupCommitProducer({
    kafka,
    log,
    lingerMs: config.INGEST_LINGER_MS,
    timeoutMs: config.INGEST_PRODUCE_TIMEOUT_MS,
    maxQueueDelayMs: config.INGEST_MAX_QUEUE_DELAY_MS,
    maxQueuedMessages: config.INGEST_MAX_QUEUED_EVENTS,
    maxMessages: config.INGEST_MAX_TX_EVENTS,
    onCommit: (_n, ms) => metrics.produceDuration.observe(ms / 1000),
  });
  await producer.connect();
  core.shutdown.add('producer', () => producer.close());
  return producer;
}

async function startAdminProducer(core: Core): Promise<Producer> {
  const producer = createProducer(core.kafka);
  await producer.connect();
  core.shutdown.add('admin-producer', () => producer.disconnect());
  return producer;
}

/**
 * How long ClickHouse, having answered, may then stay slow and still count
 * as up: a long insert holds the embedded engine's one query slot (and
 * loads a server), so a `SELECT 1` can queue behind it for seconds.
 */
const CLICKHOUSE_PROBE_GRACE_MS = 30_000;

/** /readyz's reachability checks: Kafka always, ClickHouse when this process uses it. */
function readinessProbes(admin: Admin, clickhouse: ClickHouseClient | undefined): Probe[] {
  const probes = [probe('kafka', () => admin.describeCluster().then(() => 'ok'))];
  if (clickhouse) probes.push(probe('clickhouse', () => clickhouse.ping().then((r) => (r.success ? 'ok' : 'error: ping failed')), { graceMs: CLICKHOUSE_PROBE_GRACE_MS }));
  return probes;
}

/** The URL clients reach the listening server at (a wildcard HOST is reached on loopback). */
function listeningAt(app: App, config: Config): { url: string; port: number } {
  const address = app.server.address();
  const port = typeof address === 'object' && address ? address.port : config.PORT;
  const host = config.HOST === '0.0.0.0' || config.HOST === '::' ? '127.0.0.1' : config.HOST;
  return { url: `http://${host.includes(':') ? `[${host}]` : host}:${port}`, port };
}
