import {
  Counter,
  Gauge,
  Histogram,
  Registry,
  collectDefaultMetrics,
  type CounterConfiguration,
  type GaugeConfiguration,
  type HistogramConfiguration,
} from 'prom-client';

/** Bucket bounds (s) of projector_record_age_seconds; the benchmark reads them by these bounds. */
export const RECORD_AGE_BUCKETS = [0.01, 0.025, 0.05, 0.1, 0.15, 0.2, 0.3, 0.5, 1, 2, 5, 10, 30, 60];

/** The guards of the player intake, as labels of intake_refused_total. */
export const INTAKE_LIMITS = ['player_key_rate', 'client_address_rate', 'origin', 'suspended', 'retired_player_key'] as const;
export type IntakeLimit = (typeof INTAKE_LIMITS)[number];

/** Prometheus metrics of one process; built by the composition root, passed down. */
export function createMetrics() {
  const registry = new Registry();
  collectDefaultMetrics({ register: registry });
  // Each process (and each test) has its own registry, never prom-client's global one.
  const counter = <T extends string>(c: CounterConfiguration<T>) => new Counter<T>({ ...c, registers: [registry] });
  const gauge = <T extends string>(c: GaugeConfiguration<T>) => new Gauge<T>({ ...c, registers: [registry] });
  const histogram = <T extends string>(c: HistogramConfiguration<T>) => new Histogram<T>({ ...c, registers: [registry] });
  const m = {
    registry,
    httpRequests: counter({
      name: 'http_requests_total',
      help: 'HTTP requests by route and status',
      labelNames: ['method', 'route', 'status'] as const,
    }),
    httpDuration: histogram({
      name: 'http_request_duration_seconds',
      help: 'HTTP request latency',
      labelNames: ['method', 'route'] as const,
      buckets: [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10],
    }),
    ingestEvents: counter({
      name: 'ingest_events_total',
      help: 'Events accepted (acknowledged by Kafka) by intake path',
      labelNames: ['path'] as const,
    }),
    ingestRejected: counter({
      name: 'ingest_requests_rejected_total',
      help: 'Intake requests refused, by reason',
      labelNames: ['reason'] as const,
    }),
    intakeRefused: counter({
      name: 'intake_refused_total',
      help: 'Intake requests refused by a player-key guard: player_key_rate, client_address_rate, origin, suspended or retired_player_key',
      labelNames: ['limit'] as const,
    }),
    produceDuration: histogram({
      name: 'kafka_produce_commit_duration_seconds',
      help: 'Time for one group-commit transaction to be acknowledged',
      buckets: [0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5],
    }),
    consumerLag: gauge({
      name: 'kafka_consumer_lag',
      help: 'Records between the committed offset of a consumer group and the high watermark, per partition (sampled)',
      labelNames: ['group', 'topic', 'partition'] as const,
    }),
    deadLettered: counter({
      name: 'dead_lettered_records_total',
      help: 'Records moved to the dead-letter topic, by source topic and reason',
      labelNames: ['topic', 'reason'] as const,
    }),
    produceFailures: counter({
      name: 'kafka_produce_failures_total',
      help: 'Produce requests that failed, by producer and topic',
      labelNames: ['producer', 'topic'] as const,
    }),
    produceRetries: counter({
      name: 'kafka_produce_retries_total',
      help: 'Produce attempts kafkajs retried inside one send, by cause: concurrent_transactions (a commit\'s markers still being written) or other',
      labelNames: ['cause'] as const,
    }),
    consumerRetries: counter({
      name: 'kafka_consumer_transient_failures_total',
      help: 'Handler failures retried with backoff (the records are read again, never skipped), by group',
      labelNames: ['group'] as const,
    }),
    consumerRestarts: counter({
      name: 'kafka_consumer_restarts_total',
      help: 'Consumer crashes kafkajs restarts from (after a backoff that grows while the crashes come in a row), by group',
      labelNames: ['group'] as const,
    }),
    batchSize: histogram({
      name: 'projector_batch_size',
      help: 'Messages per ClickHouse insert',
      buckets: [1, 10, 50, 100, 500, 1000, 5000, 10000, 50000],
    }),
    recordAge: histogram({
      name: 'projector_record_age_seconds',
      help: 'Age of the oldest player event (since its produce request) when the projector fetched its batch (stage="fetched") and when its insert made it readable (stage="readable"); one observation per fetched batch and per insert',
      labelNames: ['stage'] as const,
      buckets: RECORD_AGE_BUCKETS,
    }),
    readCacheRequests: counter({
      name: 'read_cache_requests_total',
      help: 'Reads of the API through its cache, by outcome: hit, miss (read from ClickHouse), joined (shared a read already running)',
      labelNames: ['outcome'] as const,
    }),
    insertDuration: histogram({
      name: 'clickhouse_insert_duration_seconds',
      help: 'ClickHouse insert latency',
      labelNames: ['table'] as const,
      buckets: [0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5],
    }),
    webhookAttempts: counter({
      name: 'webhook_attempts_total',
      help: 'Webhook delivery attempts by outcome (succeeded, retrying, failed) and error class',
      labelNames: ['outcome', 'error_class'] as const,
    }),
    webhookAttemptDuration: histogram({
      name: 'webhook_attempt_duration_seconds',
      help: 'Webhook attempt latency up to the response status and headers',
      buckets: [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10],
    }),
    webhookInFlight: gauge({
      name: 'webhook_deliveries_in_flight',
      help: 'Deliveries taken from Kafka and not yet done or handed to a retry tier',
    }),
    derivedEvents: counter({
      name: 'derived_events_total',
      help: 'Events the derived-events service raised, by name',
      labelNames: ['event'] as const,
    }),
    derivedRecords: counter({
      name: 'derived_records_total',
      help: 'Player events the derived-events service handled, by stage (repartition: read and copied by visitor, or its own and left; intent: committed)',
      labelNames: ['stage'] as const,
    }),
    derivedTransactionSteps: histogram({
      name: 'derived_transaction_step_seconds',
      help: 'Steps of the derived-events intent stage\'s transactions (each takes the batches of every partition fetched meanwhile), by stage (intent) and step (send: outputs, partitions added first; offsets: the input offsets added; commit)',
      labelNames: ['stage', 'step'] as const,
      buckets: [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5],
    }),
    derivedTransactionBatches: histogram({
      name: 'derived_transaction_batches',
      help: 'Fetched batches (one partition each) a derived-events transaction took, by stage (intent)',
      labelNames: ['stage'] as const,
      buckets: [1, 2, 4, 8, 16, 32, 64],
    }),
    derivedStateEvicted: counter({
      name: 'derived_state_evicted_total',
      help: 'Visitors and sessions the derived-events service forgot because their tenant reached its bound (DERIVED_MAX_*_PER_TENANT), by kind',
      labelNames: ['kind'] as const,
    }),
    derivedStateKeys: gauge({
      name: 'derived_state_keys',
      help: 'Visitors and sessions whose state the derived-events service holds for the partitions it owns, by kind',
      labelNames: ['kind'] as const,
    }),
    securityEvents: counter({
      name: 'security_events_total',
      help: 'Security events recorded, by kind',
      labelNames: ['kind'] as const,
    }),
  };
  // Every guard's series from the start, so a dashboard sees 0 rather than nothing.
  for (const limit of INTAKE_LIMITS) m.intakeRefused.inc({ limit }, 0);
  return m;
}

export type Metrics = ReturnType<typeof createMetrics>;
