import type { Producer } from 'kafkajs';
import type { SchemaRegistry } from '../../schemas/registry.ts';
import { BoundedReads } from '../../shared/clickhouse/bounded-reads.ts';
import type { ClickHouseClient } from '../../shared/clickhouse/clickhouse.ts';
import type { Config } from '../../shared/config.ts';
import type { ConfigStore, ConfigWriter } from '../../shared/config-store/config-store.ts';
import { buildHttpApp, type App } from '../../shared/http/app.ts';
import { apiKeyAuth } from '../../shared/http/api-key-auth.ts';
import type { GroupCommitProducer } from '../../shared/kafka/group-commit-producer.ts';
import type { Topics } from '../../shared/kafka/topics.ts';
import type { Logger } from '../../shared/logger.ts';
import type { Metrics } from '../../shared/metrics.ts';
import { DeliveryLogRepository } from '../admin/delivery-log.repository.ts';
import { startAdmin } from '../admin/admin.service.ts';
import { AnalyticsRepository } from '../api/analytics.repository.ts';
import { startApi } from '../api/api.service.ts';
import { readModel } from '../api/cached-reads.ts';
import { EventsRepository } from '../api/events.repository.ts';
import type { ReadCache } from '../api/read-cache.ts';
import { VisitorsRepository } from '../api/visitors.repository.ts';
import { startDashboard } from '../dashboard/dashboard.service.ts';
import { startIngest } from '../ingest/intake.plugin.ts';
import type { Stoppable } from './shutdown-sequence.ts';
import type { StackSecrets } from './stack-secrets.ts';

const VERSION = '0.1.0';

/** The settings the HTTP services read. */
export type HttpConfig = Pick<
  Config,
  | 'SERVICES'
  | 'COLLECT_MAX_BODY_BYTES'
  | 'HTTP_HEADERS_TIMEOUT_MS'
  | 'HTTP_BODY_IDLE_TIMEOUT_MS'
  | 'HTTP_REQUEST_TIMEOUT_MS'
  | 'HTTP_KEEP_ALIVE_TIMEOUT_MS'
  | 'TRUST_PROXY'
  | 'RATE_LIMIT_PER_MINUTE'
  | 'MAX_DESTINATIONS_PER_TENANT'
  | 'INGEST_MAX_IN_FLIGHT_REQUESTS'
  | 'PLAYER_KEY_EVENTS_PER_MINUTE'
  | 'CLIENT_ADDRESS_REQUESTS_PER_MINUTE'
  | 'READ_MAX_EXECUTION_MS'
  | 'READ_MAX_MEMORY_BYTES'
  | 'READ_MAX_RESULT_ROWS'
  | 'CLICKHOUSE_URL'
  | 'READ_BATCH_MAX'
>;

/** The one Fastify app of a process, as the configuration sets it up; no routes of the services yet. */
export function buildStackApp(config: HttpConfig, log: Logger, metrics: Metrics): Promise<App> {
  return buildHttpApp({
    log,
    metrics,
    bodyLimit: config.COLLECT_MAX_BODY_BYTES,
    version: VERSION,
    trustProxy: config.TRUST_PROXY,
    rateLimit: { max: config.RATE_LIMIT_PER_MINUTE },
    timeouts: {
      headersMs: config.HTTP_HEADERS_TIMEOUT_MS,
      bodyIdleMs: config.HTTP_BODY_IDLE_TIMEOUT_MS,
      requestMs: config.HTTP_REQUEST_TIMEOUT_MS,
      keepAliveMs: config.HTTP_KEEP_ALIVE_TIMEOUT_MS,
    },
  });
}

/** What the HTTP services are built from; clients and producers come from the composition root. */
export interface HttpServicesDeps {
  config: HttpConfig;
  log: Logger;
  metrics: Metrics;
  registry: SchemaRegistry;
  topics: Topics;
  store: ConfigStore;
  writer: ConfigWriter;
  secrets: StackSecrets;
  /** Needed by api and admin. */
  clickhouse?: ClickHouseClient;
  /** Needed by ingest: the intake's transactional producer. */
  ingestProducer?: GroupCommitProducer;
  /** Needed by admin: the management API's producer (Test deliveries, reprocessing). */
  adminProducer?: Producer;
  /** The read API's cache (services/api/read-cache.ts); absent: every read goes to ClickHouse. */
  readCache?: ReadCache;
}

/**
 * Registers the HTTP services that SERVICES names (ingest, api, admin with
 * the dashboard) on `app`, each as its own plugin, and returns them in
 * registration order: the order their stop() runs in, first the intake.
 */
export async function mountHttpServices(app: App, deps: HttpServicesDeps): Promise<Stoppable[]> {
  const services = new Set(deps.config.SERVICES);
  const { store, writer, registry, log, metrics } = deps;
  const auth = apiKeyAuth({ store, writer, log });
  const reads = (ch: ClickHouseClient) => new BoundedReads(ch, deps.config, { server: deps.config.CLICKHOUSE_URL !== undefined });
  const mounted: Stoppable[] = [];
  if (services.has('ingest')) {
    const producer = required(deps.ingestProducer, 'ingestProducer', 'ingest');
    const ingest = startIngest({ app, store, registry, producer, metrics, apiKeyAuth: auth, topic: deps.topics.playerEvents, config: deps.config });
    mounted.push({ name: 'ingest', ...ingest });
  }
  if (services.has('api')) {
    const ch = required(deps.clickhouse, 'clickhouse', 'api');
    const model = readModel({
      events: new EventsRepository(reads(ch)),
      visitors: new VisitorsRepository(reads(ch)),
      cache: deps.readCache,
      batchMax: deps.config.READ_BATCH_MAX,
      // The embedded engine runs one query at a time: one batch running lets the next gather every read that arrives meanwhile.
      batchInFlight: deps.config.CLICKHOUSE_URL === undefined ? 1 : 4,
    });
    const api = startApi({ app, store, events: model.events, analytics: new AnalyticsRepository(reads(ch)), visitors: model.visitors, cursorSecret: required(deps.secrets.cursorSecret, 'CURSOR_SECRET', 'api'), apiKeyAuth: auth });
    mounted.push({ name: 'api', ...api });
  }
  if (services.has('admin')) {
    const ch = required(deps.clickhouse, 'clickhouse', 'admin');
    const adminToken = required(deps.secrets.adminToken, 'ADMIN_TOKEN', 'admin');
    const admin = startAdmin({
      app,
      store,
      writer,
      adminToken,
      webhooks: {
        registry,
        producer: required(deps.adminProducer, 'adminProducer', 'admin'),
        topics: deps.topics,
        secrets: required(deps.secrets.secretBox, 'SECRETS_KEY', 'admin'),
        log: new DeliveryLogRepository(reads(ch)),
        cursorSecret: required(deps.secrets.cursorSecret, 'CURSOR_SECRET', 'admin'),
        MAX_DESTINATIONS_PER_TENANT: deps.config.MAX_DESTINATIONS_PER_TENANT,
      },
      analytics: new AnalyticsRepository(reads(ch)),
      visitors: new VisitorsRepository(reads(ch)),
      intakeLimits: deps.config,
    });
    mounted.push({ name: 'admin', stop: admin.stop });
    mounted.push({ name: 'dashboard', ...(await startDashboard({ app, adminToken, log, admin })) });
  }
  return mounted;
}

function required<T>(value: T | undefined, dep: string, service: string): T {
  if (value === undefined) throw new Error(`the ${service} service needs ${dep}`);
  return value;
}
