import { randomBytes } from 'node:crypto';
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { Partitioners, type Admin } from 'kafkajs';
import { SchemaRegistry } from '../schemas/registry.ts';
import { createClickHouse, migrate, type ClickHouseClient } from '../shared/clickhouse/clickhouse.ts';
import type { Config } from '../shared/config.ts';
import { ConfigStore, ConfigWriter } from '../shared/config-store/config-store.ts';
import { buildHttpApp } from '../shared/http/app.ts';
import { apiKeyAuth } from '../shared/http/api-key-auth.ts';
import { GroupCommitProducer } from '../shared/kafka/group-commit-producer.ts';
import { createKafka, waitForCoordinator } from '../shared/kafka/kafka.ts';
import { CoalescingSender } from '../shared/kafka/coalescing-sender.ts';
import { DeadLetterSink } from '../shared/kafka/dead-letters.ts';
import { LagMonitor } from '../shared/kafka/lag-monitor.ts';
import { ensureTopics, topicDefinitions, topicNames } from '../shared/kafka/topics.ts';
import type { Logger } from '../shared/logger.ts';
import { createMetrics } from '../shared/metrics.ts';
import { withTimeout } from '../shared/timeout.ts';
import { startLocalBroker, type LocalBroker } from '../infra/kafka/local-broker.ts';
import { startAdmin } from './admin/admin.service.ts';
import { EventsRepository } from './api/events.repository.ts';
import { AnalyticsRepository } from './api/analytics.repository.ts';
import { startApi } from './api/api.service.ts';
import { startIngest } from './ingest/ingest.service.ts';
import { startProjector } from './projector/projector.service.ts';
import { startFanout } from './fanout/fanout.service.ts';
import { startDashboard } from './dashboard/dashboard.service.ts';
import { DeliveryLogRepository } from './admin/delivery-log.repository.ts';
import { SecretBox } from '../shared/secrets.ts';
import { HttpsDeliveryClient } from '../shared/webhooks/https-delivery.ts';
import { parseCidrList } from '../shared/webhooks/address-policy.ts';

const VERSION = '0.1.0';

export interface Stack {
  url: string;
  port: number;
  adminToken: string;
  kafkaBrokers: string[];
  kafkaDescribe: string;
  clickhouseDescribe: string;
  stop(): Promise<void>;
}

interface Stoppable {
  name: string;
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
  mkdirSync(dataDir, { recursive: true });
  const adminToken = config.ADMIN_TOKEN ?? persistentSecret(join(dataDir, 'admin-token'), 'adm_');
  const cursorSecret = config.CURSOR_SECRET ?? persistentSecret(join(dataDir, 'cursor-secret'), '');
  const secrets = SecretBox.fromString(config.SECRETS_KEY ?? persistentSecret(join(dataDir, 'secrets-key'), ''));
  const allowList = parseCidrList(config.WEBHOOK_ALLOWED_CIDRS);
  const extraCaPem = config.WEBHOOK_CA_FILE ? readFileSync(config.WEBHOOK_CA_FILE, 'utf8') : undefined;
  const services = new Set(config.SERVICES);
  const stoppers: Stoppable[] = [];
  // Shutdown has SHUTDOWN_TIMEOUT_MS in all (services/main.ts exits after it):
  // consumers get shares of what remains to finish work in flight, leaving
  // time to commit and close clients.
  let shutdownDeadline = Number.POSITIVE_INFINITY;
  const drainBudget = (share: number) => Math.max(200, Math.floor((shutdownDeadline - Date.now()) * share));
  const stopAll = async () => {
    shutdownDeadline = Date.now() + Math.floor(config.SHUTDOWN_TIMEOUT_MS * 0.8);
    for (const s of stoppers.reverse()) {
      try {
        await s.stop();
      } catch (err) {
        log.warn({ err, component: s.name }, 'stop_failed');
      }
    }
    stoppers.length = 0;
  };

  try {
    let brokers = config.KAFKA_BROKERS;
    let kafkaDescribe = `Kafka at ${brokers?.join(',')}`;
    if (!brokers) {
      const broker: LocalBroker = await startLocalBroker({
        dataDir: join(dataDir, 'kafka'),
        partitions: config.KAFKA_TOPIC_PARTITIONS,
        log: (m) => log.info({ component: 'local-kafka' }, m),
      });
      stoppers.push({ name: 'local-kafka', stop: () => broker.stop() });
      brokers = broker.brokers;
      kafkaDescribe = `local Kafka broker at ${brokers.join(',')} (data in ${join(dataDir, 'kafka')})`;
    }

    const metrics = createMetrics();
    const registry = SchemaRegistry.fromManifest();
    const topics = topicNames(config.KAFKA_TOPIC_PREFIX);
    const kafka = createKafka({ brokers, clientId: config.KAFKA_CLIENT_ID, log });
    const admin: Admin = kafka.admin();
    await admin.connect();
    stoppers.push({ name: 'kafka-admin', stop: () => admin.disconnect() });
    await ensureTopics(admin, topicDefinitions(topics, config.KAFKA_TOPIC_PARTITIONS));
    await waitForCoordinator(admin);

    let clickhouse: ClickHouseClient | undefined;
    let clickhouseDescribe = 'not used by these services';
    if (services.has('api') || services.has('projector') || services.has('admin')) {
      const ch = await createClickHouse({
        url: config.CLICKHOUSE_URL,
        username: config.CLICKHOUSE_USER,
        password: config.CLICKHOUSE_PASSWORD,
        database: config.CLICKHOUSE_DATABASE,
        dataDir,
      });
      clickhouse = ch.client;
      clickhouseDescribe = ch.describe;
      stoppers.push({ name: 'clickhouse', stop: () => ch.client.close() });
      await migrate(ch.client, log);
    }

    // Records no consumer can read go here, with their bytes (shared/kafka/dead-letters.ts).
    const deadLetterSender = new CoalescingSender({
      kafka,
      log,
      name: 'dead-letters',
      onFailure: (topic) => metrics.produceFailures.inc({ producer: 'dead-letters', topic }),
    });
    await deadLetterSender.connect();
    stoppers.push({ name: 'dead-letter-producer', stop: () => deadLetterSender.close() });
    const deadLetters = new DeadLetterSink({ sender: deadLetterSender, topic: topics.deadLetters, metrics, log });
    const lag = new LagMonitor({ admin, metrics, log });

    const store = new ConfigStore({ kafka, registry, log, topics, deadLetters });
    await store.start(admin);
    stoppers.push({ name: 'config-store', stop: () => store.stop() });
    const writer = new ConfigWriter({ kafka, store, registry, topics });
    await writer.connect();
    stoppers.push({ name: 'config-writer', stop: () => writer.disconnect() });

    const app = await buildHttpApp({
      log,
      metrics,
      bodyLimit: config.COLLECT_MAX_BODY_BYTES,
      version: VERSION,
      trustProxy: config.TRUST_PROXY,
      rateLimit: { max: config.RATE_LIMIT_PER_MINUTE },
    });
    const auth = apiKeyAuth({ store, writer, log });
    // Each entry answers its problems by component name ({} when healthy); /readyz names them.
    const health: { name: string; problems: () => Record<string, string> }[] = [
      { name: 'config_store', problems: (): Record<string, string> => (store.healthy ? {} : { config_store: 'not running' }) },
      {
        name: 'dead_letters',
        problems: (): Record<string, string> =>
          deadLetterSender.consecutiveFailures >= config.PRODUCER_FAILURES_UNHEALTHY
            ? { 'dead-letters': `producer failing: ${deadLetterSender.consecutiveFailures} requests in a row` }
            : {},
      },
    ];

    let projector: Awaited<ReturnType<typeof startProjector>> | undefined;
    if (services.has('projector')) {
      projector = await startProjector({
        kafka,
        clickhouse: clickhouse!,
        registry,
        log,
        metrics,
        flushMs: config.PROJECTOR_FLUSH_MS,
        maxRows: config.PROJECTOR_MAX_ROWS,
        topics,
        groupPrefix: config.KAFKA_TOPIC_PREFIX,
        deadLetters,
        stallMs: config.CONSUMER_STALL_TIMEOUT_MS,
        sessionTimeoutMs: config.KAFKA_SESSION_TIMEOUT_MS,
      });
      const p = projector;
      for (const c of p.consumers) lag.watch(c.groupId, [...c.topics]);
      stoppers.push({ name: 'projector', stop: () => p.stop(drainBudget(0.6)) });
      health.push({ name: 'projector', problems: () => p.health() });
    }

    if (services.has('fanout')) {
      const client = new HttpsDeliveryClient({
        timeoutMs: config.WEBHOOK_TIMEOUT_MS,
        extraCaPem,
        allowList,
        dnsTimeoutMs: config.WEBHOOK_DNS_TIMEOUT_MS,
        dnsMaxConcurrent: config.WEBHOOK_DNS_MAX_CONCURRENT,
      });
      stoppers.push({ name: 'webhook-client', stop: async () => client.close() });
      const fanout = await startFanout({
        kafka,
        registry,
        store,
        topics,
        groupPrefix: config.KAFKA_TOPIC_PREFIX,
        secrets,
        client,
        delaysMs: config.WEBHOOK_RETRY_DELAYS_S.map((s) => s * 1000),
        log,
        metrics,
        maxInFlight: config.FANOUT_MAX_IN_FLIGHT,
        perDestinationConcurrency: config.FANOUT_PER_DESTINATION_CONCURRENCY,
        perDestinationQueue: config.FANOUT_PER_DESTINATION_QUEUE,
        deadLetters,
        stallMs: config.CONSUMER_STALL_TIMEOUT_MS,
        sessionTimeoutMs: config.KAFKA_SESSION_TIMEOUT_MS,
        producerFailuresUnhealthy: config.PRODUCER_FAILURES_UNHEALTHY,
      });
      for (const c of fanout.consumers) lag.watch(c.groupId, [...c.topics]);
      stoppers.push({ name: 'fanout', stop: () => fanout.stop(drainBudget(0.4)) });
      health.push({ name: 'fanout', problems: () => fanout.health() });
    }

    let producer: GroupCommitProducer | undefined;
    const httpServices: Stoppable[] = [];
    if (services.has('ingest')) {
      producer = new GroupCommitProducer({
        kafka,
        log,
        lingerMs: config.INGEST_LINGER_MS,
        timeoutMs: config.INGEST_PRODUCE_TIMEOUT_MS,
        onCommit: (_n, ms) => metrics.produceDuration.observe(ms / 1000),
      });
      await producer.connect();
      const p = producer;
      stoppers.push({ name: 'producer', stop: () => p.close() });
      httpServices.push({ name: 'ingest', ...startIngest({ app, store, registry, producer, metrics, apiKeyAuth: auth, topic: topics.playerEvents }) });
    }
    if (services.has('api')) {
      httpServices.push({ name: 'api', ...startApi({ app, store, events: new EventsRepository(clickhouse!), analytics: new AnalyticsRepository(clickhouse!), cursorSecret, apiKeyAuth: auth }) });
    }
    if (services.has('admin')) {
      const adminProducer = kafka.producer({ idempotent: true, maxInFlightRequests: 1, createPartitioner: Partitioners.DefaultPartitioner });
      await adminProducer.connect();
      stoppers.push({ name: 'admin-producer', stop: () => adminProducer.disconnect() });
      const admin = startAdmin({
          app,
          store,
          writer,
          adminToken,
          webhooks: {
            registry,
            producer: adminProducer,
            topics,
            secrets,
            log: new DeliveryLogRepository(clickhouse!),
            cursorSecret,
            maxDestinationsPerTenant: config.MAX_DESTINATIONS_PER_TENANT,
          },
          analytics: new AnalyticsRepository(clickhouse!),
      });
      httpServices.push({ name: 'admin', stop: admin.stop });
      httpServices.push({ name: 'dashboard', ...(await startDashboard({ app, adminToken, log, admin })) });
    }

    lag.start();
    stoppers.push({ name: 'lag-monitor', stop: () => lag.stop() });

    app.get('/healthz', { schema: { hide: true } }, async () => ({ status: 'ok' }));
    app.get('/readyz', { schema: { hide: true } }, async (_req, reply) => {
      const checks: Record<string, string> = {};
      checks.kafka = await withTimeout(admin.describeCluster().then(() => 'ok'), 2000).catch((e: Error) => `error: ${e.message}`);
      if (clickhouse) {
        checks.clickhouse = await withTimeout(clickhouse.ping().then((r) => (r.success ? 'ok' : 'error: ping failed')), 2000).catch(
          (e: Error) => `error: ${e.message}`,
        );
      }
      for (const h of health) {
        const problems = Object.entries(h.problems());
        checks[h.name] = problems.length === 0 ? 'ok' : `error: ${problems.map(([component, why]) => `${component}: ${why}`).join('; ')}`;
      }
      const ready = Object.values(checks).every((v) => v === 'ok');
      return reply.code(ready ? 200 : 503).send({ status: ready ? 'ready' : 'not_ready', checks });
    });
    app.get('/metrics', { schema: { hide: true } }, async (_req, reply) => {
      return reply.header('Content-Type', metrics.registry.contentType).send(await metrics.registry.metrics());
    });

    // NOTE: registered before listen, stopped first: intake closes before
    // the HTTP server drains, so nothing new is accepted while shutting down.
    stoppers.push({
      name: 'http',
      stop: async () => {
        for (const s of httpServices) await s.stop();
        await app.close();
      },
    });
    await app.listen({ port: config.PORT, host: config.HOST });
    const address = app.server.address();
    const port = typeof address === 'object' && address ? address.port : config.PORT;
    const host = config.HOST === '0.0.0.0' || config.HOST === '::' ? '127.0.0.1' : config.HOST;
    const url = `http://${host.includes(':') ? `[${host}]` : host}:${port}`;
    log.info({ url, services: [...services], kafka: kafkaDescribe, clickhouse: clickhouseDescribe }, 'stack_started');
    return { url, port, adminToken, kafkaBrokers: brokers, kafkaDescribe, clickhouseDescribe, stop: stopAll };
  } catch (err) {
    await stopAll();
    throw err;
  }
}

/** Reads a secret kept in the data directory, creating it (mode 0600) on first run. */
function persistentSecret(path: string, prefix: string): string {
  if (existsSync(path)) {
    const stored = readFileSync(path, 'utf8').trim();
    // An empty file would make the empty string the secret (an admin token anyone can send).
    if (stored === '') throw new Error(`${path} is empty: write a secret into it, or delete it to have one generated`);
    return stored;
  }
  const secret = `${prefix}${randomBytes(32).toString('base64url')}`;
  writeFileSync(path, `${secret}\n`, { mode: 0o600, flag: 'wx' });
  return secret;
}
