import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from 'prom-client';

/** Bucket bounds (s) of projector_record_age_seconds; the benchmark reads them by these bounds. */
export const RECORD_AGE_BUCKETS = [0.01, 0.025, 0.05, 0.1, 0.15, 0.2, 0.3, 0.5, 1, 2, 5, 10, 30, 60];

/** The guards of the player intake, as labels of intake_refused_total. */
export const INTAKE_LIMITS = ['player_key_rate', 'client_address_rate', 'origin', 'suspended', 'retired_player_key'] as const;
export type IntakeLimit = (typeof INTAKE_LIMITS)[number];

/** Prometheus metrics of one process; built by the composition root, passed down. */
export function createMetrics() {
  const registry = new Registry();
  collectDefaultMetrics({ register: registry });
  const m = {
    registry,
    httpRequests: new Counter({
      name: 'http_requests_total',
      help: 'HTTP requests by route and status',
      labelNames: ['method', 'route', 'status'] as const,
      registers: [registry],
    }),
    httpDuration: new Histogram({
      name: 'http_request_duration_seconds',
      help: 'HTTP request latency',
      labelNames: ['method', 'route'] as const,
      buckets: [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10],
      registers: [registry],
    }),
    ingestEvents: new Counter({
      name: 'ingest_events_total',
      help: 'Events accepted (acknowledged by Kafka) by intake path',
      labelNames: ['path'] as const,
      registers: [registry],
    }),
    ingestRejected: new Counter({
      name: 'ingest_requests_rejected_total',
      help: 'Intake requests refused, by reason',
      labelNames: ['reason'] as const,
      registers: [registry],
    }),
    intakeRefused: new Counter({
      name: 'intake_refused_total',
      help: 'Intake requests refused by a player-key guard: player_key_rate, client_address_rate, origin, suspended or retired_player_key',
      labelNames: ['limit'] as const,
      registers: [registry],
    }),
    produceDuration: new Histogram({
      name: 'kafka_produce_commit_duration_seconds',
      help: 'Time for one group-commit transaction to be acknowledged',
      buckets: [0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5],
      registers: [registry],
    }),
    consumerLag: new Gauge({
      name: 'kafka_consumer_lag',
      help: 'Records between the committed offset of a consumer group and the high watermark, per partition (sampled)',
      labelNames: ['group', 'topic', 'partition'] as const,
      registers: [registry],
    }),
    deadLettered: new Counter({
      name: 'dead_lettered_records_total',
      help: 'Records moved to the dead-letter topic, by source topic and reason',
      labelNames: ['topic', 'reason'] as const,
      registers: [registry],
    }),
    produceFailures: new Counter({
      name: 'kafka_produce_failures_total',
      help: 'Produce requests that failed, by producer and topic',
      labelNames: ['producer', 'topic'] as const,
      registers: [registry],
    }),
    produceRetries: new Counter({
      name: 'kafka_produce_retries_total',
      help: 'Produce attempts kafkajs retried inside one send, by cause: concurrent_transactions (a commit\'s markers still being written) or other',
      labelNames: ['cause'] as const,
      registers: [registry],
    }),
    consumerRetries: new Counter({
      name: 'kafka_consumer_transient_failures_total',
      help: 'Handler failures retried with backoff (the records are read again, never skipped), by group',
      labelNames: ['group'] as const,
      registers: [registry],
    }),
    consumerRestarts: new Counter({
      name: 'kafka_consumer_restarts_total',
      help: 'Consumer crashes kafkajs restarts from (after a backoff that grows while the crashes come in a row), by group',
      labelNames: ['group'] as const,
      registers: [registry],
    }),
    batchSize: new Histogram({
      name: 'projector_batch_size',
      help: 'Messages per ClickHouse insert',
      buckets: [1, 10, 50, 100, 500, 1000, 5000, 10000, 50000],
      registers: [registry],
    }),
    recordAge: new Histogram({
      name: 'projector_record_age_seconds',
      help: 'Age of the oldest player event (since its produce request) when the projector fetched its batch (stage="fetched") and when its insert made it readable (stage="readable"); one observation per fetched batch and per insert',
      labelNames: ['stage'] as const,
      buckets: RECORD_AGE_BUCKETS,
      registers: [registry],
    }),
    insertDuration: new Histogram({
      name: 'clickhouse_insert_duration_seconds',
      help: 'ClickHouse insert latency',
      labelNames: ['table'] as const,
      buckets: [0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5],
      registers: [registry],
    }),
    webhookAttempts: new Counter({
      name: 'webhook_attempts_total',
      help: 'Webhook delivery attempts by outcome (succeeded, retrying, failed) and error class',
      labelNames: ['outcome', 'error_class'] as const,
      registers: [registry],
    }),
    webhookAttemptDuration: new Histogram({
      name: 'webhook_attempt_duration_seconds',
      help: 'Webhook attempt latency up to the response status and headers',
      buckets: [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10],
      registers: [registry],
    }),
    webhookInFlight: new Gauge({
      name: 'webhook_deliveries_in_flight',
      help: 'Deliveries taken from Kafka and not yet done or handed to a retry tier',
      registers: [registry],
    }),
    securityEvents: new Counter({
      name: 'security_events_total',
      help: 'Security events recorded, by kind',
      labelNames: ['kind'] as const,
      registers: [registry],
    }),
  };
  // Every guard's series from the start, so a dashboard sees 0 rather than nothing.
  for (const limit of INTAKE_LIMITS) m.intakeRefused.inc({ limit }, 0);
  return m;
}

export type Metrics = ReturnType<typeof createMetrics>;
