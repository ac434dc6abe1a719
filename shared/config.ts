import { isIP } from 'node:net';
import ipaddr from 'ipaddr.js';
import { z } from 'zod';

export const SERVICE_NAMES = ['ingest', 'projector', 'fanout', 'derived', 'api', 'admin'] as const;
export type ServiceName = (typeof SERVICE_NAMES)[number];
/** The derived-events service's two stages (services/derived/derived.service.ts). */
export const DERIVED_STAGE_NAMES = ['repartition', 'intent'] as const;
export type DerivedStage = (typeof DERIVED_STAGE_NAMES)[number];

const intFrom = (def: number, min = 0) => z.coerce.number().int().min(min).default(def);
/** A comma list of some of `all` (by default all of them). */
const namesOf = <const T extends readonly [string, ...string[]]>(all: T) =>
  z
    .string()
    .default(all.join(','))
    .transform((v) => v.split(',').map((s) => s.trim()).filter(Boolean))
    .pipe(z.array(z.enum(all)).min(1));
const optionalString = z
  .string()
  .optional()
  .transform((v) => (v === undefined || v.trim() === '' ? undefined : v.trim()));

/** Names proxy-addr (Fastify's trustProxy) knows for address ranges. */
const PROXY_RANGE_NAMES = ['loopback', 'linklocal', 'uniquelocal'];

/**
 * TRUST_PROXY: `false` (default), `true` (every hop: only when nothing but
 * the proxy can reach the service), a hop count, or the proxies' addresses
 * and CIDR ranges (comma-separated; also loopback, linklocal, uniquelocal).
 */
const TrustProxy = z
  .string()
  .default('false')
  .transform((v, ctx): boolean | number | string[] => {
    const t = v.trim().toLowerCase();
    if (t === '' || t === 'false') return false;
    if (t === 'true') return true;
    if (/^\d+$/.test(t)) return Number(t);
    const entries = t.split(',').map((e) => e.trim()).filter(Boolean);
    const bad = entries.find((e) => !PROXY_RANGE_NAMES.includes(e) && !(e.includes('/') ? isCidr(e) : isIP(e) !== 0));
    if (bad !== undefined) {
      ctx.addIssue({ code: 'custom', message: `"${bad}" is not true, false, a hop count, an address, a CIDR range or one of ${PROXY_RANGE_NAMES.join(', ')}` });
      return z.NEVER;
    }
    return entries;
  });

/** node:net judges the address (strict: no `1.2.3`), ipaddr.js the prefix. */
const isCidr = (text: string): boolean => isIP(text.slice(0, text.indexOf('/'))) !== 0 && ipaddr.isValidCIDR(text);

/**
 * Every setting the service reads from its environment. Parsed once at
 * start-up by the composition root and passed down; nothing else reads
 * process.env.
 */
export const ConfigSchema = z.object({
  PORT: intFrom(3000).pipe(z.number().max(65535)),
  HOST: z.string().default('127.0.0.1'),
  /** Listening sockets on PORT (SO_REUSEPORT): each turn of the event loop accepts one connection per socket (acceptors.ts). */
  HTTP_ACCEPTORS: intFrom(4, 1).pipe(z.number().max(64)),
  TRUST_PROXY: TrustProxy,
  /** A request's headers must all arrive within this of its first byte (else 408). */
  HTTP_HEADERS_TIMEOUT_MS: intFrom(10_000, 10),
  /** A connection silent this long while the server waits on the client: 408 mid-body, else closed. */
  HTTP_BODY_IDLE_TIMEOUT_MS: intFrom(10_000, 10),
  /** A whole request, headers and body, must arrive within this of its first byte (else 408). */
  HTTP_REQUEST_TIMEOUT_MS: intFrom(30_000, 10),
  /**
   * An idle kept-alive connection is closed after this. NOTE: longer than a
   * TLS proxy's idle timeout for its upstream connections (commonly a
   * minute), so that the proxy closes them, not the service: a request
   * sent as the service closes the connection fails at the client.
   */
  HTTP_KEEP_ALIVE_TIMEOUT_MS: intFrom(72_000, 10),
  DATA_DIR: z.string().min(1).default('.data'),
  ADMIN_TOKEN: optionalString.pipe(z.string().min(16, 'must be at least 16 characters').optional()),
  KAFKA_BROKERS: optionalString.transform((v) => (v ? v.split(',').map((b) => b.trim()).filter(Boolean) : undefined)),
  KAFKA_CLIENT_ID: z.string().default('video-analytics'),
  KAFKA_TOPIC_PREFIX: z.string().regex(/^[A-Za-z0-9._-]*$/, 'letters, digits, . _ - only').default(''),
  KAFKA_TOPIC_PARTITIONS: intFrom(12, 1),
  CLICKHOUSE_URL: optionalString.pipe(z.url().optional()),
  CLICKHOUSE_USER: optionalString,
  CLICKHOUSE_PASSWORD: optionalString,
  CLICKHOUSE_DATABASE: z.string().regex(/^[A-Za-z_][A-Za-z0-9_]*$/).default('default'),
  SERVICES: namesOf(SERVICE_NAMES),
  CURSOR_SECRET: optionalString.pipe(z.string().min(16, 'must be at least 16 characters').optional()),
  RATE_LIMIT_PER_MINUTE: intFrom(1000, 1),
  /** Events a minute one player key may send to /v1/collect, per process; 0: no limit. */
  PLAYER_KEY_EVENTS_PER_MINUTE: intFrom(120_000),
  /** Requests a minute one client address may send to /v1/collect, per process; 0: no limit. */
  CLIENT_ADDRESS_REQUESTS_PER_MINUTE: intFrom(600),
  COLLECT_MAX_BODY_BYTES: intFrom(1024 * 1024, 1024),
  INGEST_LINGER_MS: intFrom(2),
  INGEST_PRODUCE_TIMEOUT_MS: intFrom(5000, 100),
  INGEST_MAX_QUEUE_DELAY_MS: intFrom(1000, 10),
  INGEST_MAX_QUEUED_EVENTS: intFrom(100_000, 500),
  INGEST_MAX_IN_FLIGHT_REQUESTS: intFrom(256, 1),
  INGEST_MAX_TX_EVENTS: intFrom(1000, 100),
  PROJECTOR_FLUSH_MS: intFrom(100, 1),
  PROJECTOR_MAX_ROWS: intFrom(20000, 1),
  SHUTDOWN_TIMEOUT_MS: intFrom(15000, 100),
  WEBHOOK_RETRY_DELAYS_S: z
    .string()
    .default('60,300,1800')
    .transform((v) => v.split(',').map((s) => Number(s.trim())))
    .pipe(z.array(z.number().positive().max(7 * 24 * 3600)).length(3, 'three delays, one per retry tier (seconds)')),
  WEBHOOK_TIMEOUT_MS: intFrom(10000, 1),
  WEBHOOK_CA_FILE: optionalString,
  WEBHOOK_ALLOWED_CIDRS: z.string().default(''),
  WEBHOOK_DNS_TIMEOUT_MS: intFrom(5000, 1),
  SECRETS_KEY: optionalString.pipe(
    z
      .string()
      .regex(/^(?:[0-9a-fA-F]{64}|[A-Za-z0-9+/_-]{43}=?)$/, 'must be 32 bytes as 64 hex characters or base64')
      .optional(),
  ),
  FANOUT_MAX_IN_FLIGHT: intFrom(256, 1),
  FANOUT_PER_DESTINATION_CONCURRENCY: intFrom(8, 1),
  FANOUT_PER_DESTINATION_QUEUE: intFrom(1000, 1),
  /** A queued delivery (retry tier, deferral) runs up to this long after its due time, with every other one due by then. */
  WEBHOOK_DUE_BATCH_MS: intFrom(1000, 0),
  MAX_DESTINATIONS_PER_TENANT: intFrom(100, 1),
  /** A session with no event (heartbeats included) for this long has ended, for the derived events. */
  DERIVED_SESSION_IDLE_MS: intFrom(60_000, 100),
  /** How often the derived-events service writes a tick (its stream time) onto each partition it owns. */
  DERIVED_TICK_MS: intFrom(5000, 50),
  /** A tick says the time this long ago: events may reach the by-visitor log this late and still count before a session ends. */
  DERIVED_LATENESS_MS: intFrom(30_000, 0),
  /** A visitor with no event for this long (stream time) is forgotten by the derived events: back later, it starts from zero. */
  DERIVED_VISITOR_TTL_MS: intFrom(30 * 24 * 3600 * 1000, 60_000),
  /** Most visitors, and most sessions, whose derived-events state is kept per tenant; past it the least recently seen are forgotten. */
  DERIVED_MAX_VISITORS_PER_TENANT: intFrom(500_000, 1),
  DERIVED_MAX_SESSIONS_PER_TENANT: intFrom(500_000, 1),
  /** The derived-events stages this process runs: both, or one, so that each stage of a busy service can have a core (a process) of its own. */
  DERIVED_STAGES: namesOf(DERIVED_STAGE_NAMES),
  CONSUMER_STALL_TIMEOUT_MS: intFrom(60000, 1000),
  KAFKA_SESSION_TIMEOUT_MS: intFrom(30000, 6000),
  PRODUCER_FAILURES_UNHEALTHY: intFrom(5, 1),
  /** Most time one read query of the API may run in ClickHouse (max_execution_time). */
  READ_MAX_EXECUTION_MS: intFrom(10_000, 1),
  /** Most memory one read query of the API may use in ClickHouse (max_memory_usage). */
  READ_MAX_MEMORY_BYTES: intFrom(1024 * 1024 * 1024, 1024 * 1024),
  /** Most rows one read query of the API may answer (max_result_rows). */
  READ_MAX_RESULT_ROWS: intFrom(100_000, 10_000),
  /**
   * Bytes of answers the API's in-process read cache may hold in all (each
   * entry its JSON body and a fixed share for its key); 0: no cache. Entries
   * are dropped by the projector's own notice of what each insert touched
   * (services/api/read-cache.ts).
   */
  READ_CACHE_MAX_BYTES: intFrom(256 * 2 ** 20),
  /** Most of READ_CACHE_MAX_BYTES one tenant may hold: beyond it the tenant evicts its own entries. */
  READ_CACHE_TENANT_MAX_BYTES: intFrom(64 * 2 ** 20, 1),
  /**
   * Without a projector in the same process (the API apart, against a
   * ClickHouse server), nothing tells the cache what changed: entries then
   * live this long, which adds up to this much to the freshness bound. 0
   * (default): no cache in such a process.
   */
  READ_CACHE_TTL_MS: intFrom(0),
  /** Visitors whose scores one ClickHouse query reads at once (concurrent misses share it); 1: one query per visitor. */
  READ_BATCH_MAX: intFrom(64, 1).pipe(z.number().max(1000)),
  LOG_LEVEL: z.enum(['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent']).default('info'),
});

export type Config = z.infer<typeof ConfigSchema>;

/** The player intake's settings: its in-flight bound and its own limits, per process (0: no limit). */
export type IntakeConfig = Pick<Config, 'INGEST_MAX_IN_FLIGHT_REQUESTS' | 'PLAYER_KEY_EVENTS_PER_MINUTE' | 'CLIENT_ADDRESS_REQUESTS_PER_MINUTE'>;

/** Node refuses a headers timeout longer than the whole request's. */
const ConsistentConfig = ConfigSchema.refine((c) => c.HTTP_HEADERS_TIMEOUT_MS <= c.HTTP_REQUEST_TIMEOUT_MS, {
  path: ['HTTP_HEADERS_TIMEOUT_MS'],
  message: 'must not exceed HTTP_REQUEST_TIMEOUT_MS',
});

/** Thrown when the environment does not describe a valid configuration. */
export class ConfigError extends Error {
  override name = 'ConfigError';
}

/**
 * Parses the configuration from `env` and fails with a message that names
 * every bad variable.
 */
export function loadConfig(env: Record<string, string | undefined> = process.env): Config {
  const result = ConsistentConfig.safeParse(env);
  if (result.success) return result.data;
  const lines = result.error.issues.map((issue) => `  ${issue.path.join('.') || '(root)'}: ${issue.message}`);
  throw new ConfigError(`invalid configuration:\n${lines.join('\n')}`);
}
