import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { InjectOptions, LightMyRequestResponse } from 'fastify';
import type { Admin, Producer } from 'kafkajs';
import { inject } from 'vitest';
import { SchemaRegistry } from '../../schemas/registry.ts';
import { createClickHouse, migrate, type ClickHouseClient } from '../../shared/clickhouse/clickhouse.ts';
import { loadConfig, type Config } from '../../shared/config.ts';
import { ConfigStore, ConfigWriter } from '../../shared/config-store/config-store.ts';
import type { App } from '../../shared/http/app.ts';
import { GroupCommitProducer } from '../../shared/kafka/group-commit-producer.ts';
import { createKafka, createProducer, waitForCoordinator } from '../../shared/kafka/kafka.ts';
import { CONFIG_KINDS, ensureTopics, topicDefinitions, topicNames, type Topics } from '../../shared/kafka/topics.ts';
import { createLogger, type Logger } from '../../shared/logger.ts';
import { createMetrics, type Metrics } from '../../shared/metrics.ts';
import { buildStackApp, mountHttpServices, type HttpConfig } from '../../services/stack/http-services.ts';
import type { Stoppable } from '../../services/stack/shutdown-sequence.ts';
import { stackSecrets, type StackSecrets } from '../../services/stack/stack-secrets.ts';
import type { TestTenant } from './stack.ts';

/** What the apps of an InjectStack share: a real config store and clients. */
interface Backing {
  config: Config;
  log: Logger;
  dataDir: string;
  topics: Topics;
  registry: SchemaRegistry;
  admin: Admin;
  store: ConfigStore;
  writer: ConfigWriter;
  clickhouse: ClickHouseClient;
  secrets: StackSecrets;
  intakeProducer: GroupCommitProducer;
  adminProducer: Producer;
}

/** An app with its services (stop() them to close intake) and its metrics. */
export interface Mounted {
  app: App;
  services: Stoppable[];
  metrics: Metrics;
}

/**
 * The service's HTTP apps in the test file's process, for `app.inject()`:
 * the app and plugins the stack serves (services/stack/http-services.ts),
 * on a real config store (the run's Kafka, config topics under a prefix of
 * the file's own) and embedded ClickHouse, never listening on a port, with
 * no consumers (projector, fan-out) running.
 *
 * NOTE: for refusal tests only. The intake's producer is a real
 * GroupCommitProducer that is closed before the app starts: it refuses every
 * send as Kafka being unavailable (503), as it does during shutdown. A
 * refusal is decided before anything is produced, so a 4xx from the intake
 * also shows the request never reached Kafka; an event that should have been
 * accepted is answered 503 here, never 202.
 */
export class InjectStack {
  readonly #b: Backing;
  readonly #apps: Mounted[] = [];
  /** The app with every HTTP service (ingest, api, admin and the dashboard) and the configured limits. */
  main!: Mounted;

  private constructor(backing: Backing) {
    this.#b = backing;
  }

  /** `env` as in the environment of `npm start`, over this helper's defaults. */
  static async start(env: Record<string, string> = {}): Promise<InjectStack> {
    const dataDir = mkdtempSync(join(tmpdir(), 'va-inject-'));
    const prefix = `i${randomBytes(4).toString('hex')}.`;
    const clickhouseUrl = inject('clickhouseUrl');
    const config = loadConfig({
      KAFKA_BROKERS: inject('kafkaBrokers').join(','),
      KAFKA_TOPIC_PREFIX: prefix,
      DATA_DIR: dataDir,
      ADMIN_TOKEN: `adm_${randomBytes(16).toString('hex')}`,
      SERVICES: 'ingest,api,admin',
      LOG_LEVEL: process.env.TEST_LOG_LEVEL ?? 'error',
      // Tests send from one address with a few player keys, far faster than
      // players do: the intake's own limits are off unless a test sets them.
      PLAYER_KEY_EVENTS_PER_MINUTE: '0',
      CLIENT_ADDRESS_REQUESTS_PER_MINUTE: '0',
      ...(clickhouseUrl ? { CLICKHOUSE_URL: clickhouseUrl, CLICKHOUSE_DATABASE: prefix.replace('.', '') } : {}),
      ...env,
    });
    const s = new InjectStack(await backing(config, dataDir));
    s.main = await s.extraApp();
    return s;
  }

  get app(): App {
    return this.main.app;
  }

  get adminToken(): string {
    if (!this.#b.secrets.adminToken) throw new Error('this stack runs no admin service');
    return this.#b.secrets.adminToken;
  }

  /** Another app on the same config store and clients, with some settings changed (a lower limit, fewer services). */
  async extraApp(overrides: Partial<HttpConfig> = {}): Promise<Mounted> {
    const b = this.#b;
    const config = { ...b.config, ...overrides };
    const metrics = createMetrics();
    const app = await buildStackApp(config, b.log, metrics);
    const services = await mountHttpServices(app, {
      config,
      log: b.log,
      metrics,
      registry: b.registry,
      topics: b.topics,
      store: b.store,
      writer: b.writer,
      secrets: b.secrets,
      clickhouse: b.clickhouse,
      ingestProducer: b.intakeProducer,
      adminProducer: b.adminProducer,
    });
    await app.ready();
    const mounted = { app, services, metrics };
    this.#apps.push(mounted);
    return mounted;
  }

  async stop(): Promise<void> {
    for (const { app, services } of this.#apps.splice(0)) {
      for (const s of services) await s.stop();
      await app.close();
    }
    const b = this.#b;
    await b.writer.disconnect();
    await b.store.stop();
    await b.adminProducer.disconnect();
    await b.clickhouse.close();
    await b.admin.disconnect();
    rmSync(b.dataDir, { recursive: true, force: true });
  }

  /** A management call with the admin token; JSON in and out. */
  async admin(method: InjectOptions['method'], path: string, body?: unknown): Promise<LightMyRequestResponse> {
    return this.app.inject({ method, url: `/admin/v1${path}`, headers: { authorization: `Bearer ${this.adminToken}` }, ...(body === undefined ? {} : { payload: body as object }) });
  }

  /** A tenant with one API key and one video, made through the management API. */
  async createTenant(name = `tenant-${randomBytes(3).toString('hex')}`): Promise<TestTenant> {
    const t = created(await this.admin('POST', '/tenants', { name }));
    const key = created(await this.admin('POST', `/tenants/${t.id}/api-keys`, { name: 'test key' }));
    const video = created(await this.admin('POST', `/tenants/${t.id}/videos`, { title: 'A video', duration_sec: 120 }));
    return { ...(t as { id: string; name: string; player_key: string }), apiKey: key.key as string, apiKeyId: key.id as string, videoId: video.id as string };
  }

  /** Another API key of the tenant; returns the key itself. */
  async newApiKey(tenantId: string): Promise<{ key: string; id: string }> {
    const k = created(await this.admin('POST', `/tenants/${tenantId}/api-keys`, { name: `k-${randomBytes(2).toString('hex')}` }));
    return { key: k.key as string, id: k.id as string };
  }
}

function created(res: LightMyRequestResponse): Record<string, unknown> & { id: string } {
  if (res.statusCode !== 201) throw new Error(`expected 201, got ${res.statusCode}: ${res.body}`);
  return res.json();
}

async function backing(config: Config, dataDir: string): Promise<Backing> {
  const log = createLogger({ level: config.LOG_LEVEL });
  const topics = topicNames(config.KAFKA_TOPIC_PREFIX);
  const registry = SchemaRegistry.fromManifest();
  const kafka = createKafka({ brokers: config.KAFKA_BROKERS!, clientId: 'inject-app', log });
  const admin = kafka.admin();
  await admin.connect();
  // Only the config topics: nothing here consumes, and refusals produce nothing.
  const configTopics = new Set(CONFIG_KINDS.map((k) => topics[k]));
  await ensureTopics(admin, topicDefinitions(topics, 1).filter((d) => configTopics.has(d.topic)));
  await waitForCoordinator(admin);
  const store = new ConfigStore({ kafka, registry, log, metrics: createMetrics(), topics, stallMs: config.CONSUMER_STALL_TIMEOUT_MS });
  await store.start(admin);
  const writer = new ConfigWriter({ kafka, store, registry, topics });
  await writer.connect();
  const adminProducer = createProducer(kafka);
  await adminProducer.connect();
  const intakeProducer = new GroupCommitProducer({ kafka, log, lingerMs: 0, timeoutMs: 1000 });
  await intakeProducer.close();
  const ch = await createClickHouse({ url: config.CLICKHOUSE_URL, database: config.CLICKHOUSE_DATABASE, dataDir });
  await migrate(ch.client, log);
  return { config, log, dataDir, topics, registry, admin, store, writer, clickhouse: ch.client, secrets: stackSecrets(config, dataDir), intakeProducer, adminProducer };
}
