/**
 * Chooses the Kafka (and possibly ClickHouse) that integration tests run
 * against, so that the same suite runs on a laptop with Docker, in CI, and on
 * machines with neither Docker nor a reachable container registry.
 */
import type { StartedKafkaContainer } from '@testcontainers/kafka';
import type { StartedNetwork } from 'testcontainers';
import { withTimeout } from '../../shared/timeout.ts';
import { KAFKA_VERSION, type LocalBroker, startLocalBroker } from '../kafka/local-broker.ts';

/** What {@link provideTestInfrastructure} started or found. */
export type TestInfrastructure = {
  /** `testcontainers` when containers run; `local` for the Maven Central broker or an external one. */
  kind: 'testcontainers' | 'local';
  kafkaBrokers: string[];
  /**
   * ClickHouse HTTP URL with credentials and database in it (accepted as-is
   * by `createClient({ url })` of `@clickhouse/client`); only set when a
   * ClickHouse server container runs, otherwise tests use embedded
   * ClickHouse (chdb).
   */
  clickhouseUrl?: string;
  /** One human-readable line: what runs and why this was chosen. */
  describe: string;
  /** Stops whatever this call started; does nothing for an external broker. */
  stop(): Promise<void>;
  /** The local broker, when one was started, e.g. for tests that kill and restart it. */
  broker?: LocalBroker;
};

/** Options for {@link provideTestInfrastructure}. */
export type ProvideTestInfrastructureOptions = {
  /** Data directory for a local broker (unused for containers or an external broker). */
  dataDir: string;
  /** Receives the one line saying which infrastructure is used and why, plus start-up progress. */
  log?: (m: string) => void;
};

const CONTAINER_RUNTIME_PROBE_TIMEOUT_MS = 30_000;
/** Bounds image pulls and container start-up; a stuck pull must not stall the suite. */
const CONTAINER_START_TIMEOUT_MS = Number(process.env.TEST_CONTAINERS_TIMEOUT_MS ?? 180_000);
const DEFAULT_KAFKA_IMAGE = 'confluentinc/cp-kafka:8.0.0';
const DEFAULT_CLICKHOUSE_IMAGE = 'clickhouse/clickhouse-server:25.8';
/** `TEST_CLICKHOUSE_IMAGE=embedded`: Kafka from a container, ClickHouse embedded (chdb) in each test file's process. */
export const EMBEDDED_CLICKHOUSE = 'embedded';
/**
 * The broker's own "up" line in KRaft mode (`[KafkaRaftServer nodeId=1] Kafka
 * Server started`), printed by Confluent's image and by the local runtime's
 * cp-kafka compatible one alike.
 */
export const KAFKA_STARTED_LOG = /Kafka Server started/;

const noop = (): void => {};

/**
 * Provides Kafka for integration tests, in this order:
 * 1. `KAFKA_BROKERS` (comma-separated) set: that broker, as-is.
 * 2. Unless `TEST_INFRA=local`: testcontainers (Kafka, `TEST_KAFKA_IMAGE`,
 *    default cp-kafka 8.x in KRaft mode, and a ClickHouse server,
 *    `TEST_CLICKHOUSE_IMAGE`, or embedded ClickHouse with
 *    `TEST_CLICKHOUSE_IMAGE=embedded`), if a container runtime works and the
 *    images can be pulled and started within `TEST_CONTAINERS_TIMEOUT_MS`.
 *    With `TEST_INFRA=testcontainers` a failure here is an error instead of a
 *    fallback, so CI that expects containers cannot silently test less.
 * 3. Otherwise a local broker from Maven Central jars ({@link startLocalBroker}).
 *
 * Always logs one line naming the choice and the reason for it.
 */
export async function provideTestInfrastructure(opts: ProvideTestInfrastructureOptions): Promise<TestInfrastructure> {
  const log = opts.log ?? noop;

  const external = process.env.KAFKA_BROKERS?.trim();
  if (external) {
    const kafkaBrokers = external
      .split(',')
      .map((broker) => broker.trim())
      .filter((broker) => broker.length > 0);
    const describe = `external broker (KAFKA_BROKERS=${kafkaBrokers.join(',')}) + embedded ClickHouse (chdb)`;
    log(`test infrastructure: ${describe}`);
    return { kind: 'local', kafkaBrokers, describe, stop: async () => {} };
  }

  const mode = process.env.TEST_INFRA;
  let reason: string;
  if (mode === 'local') {
    reason = 'TEST_INFRA=local';
  } else {
    try {
      const infra = await startContainers();
      log(`test infrastructure: ${infra.describe}`);
      return infra;
    } catch (err) {
      if (mode === 'testcontainers') {
        throw new Error(`TEST_INFRA=testcontainers, but containers could not be started: ${errorText(err)}`, { cause: err });
      }
      reason = err instanceof NoContainerRuntime ? `no container runtime: ${err.message}` : `containers failed: ${errorText(err)}`;
    }
  }

  const broker = await startLocalBroker({ dataDir: opts.dataDir, log });
  const describe = `local Kafka ${KAFKA_VERSION} broker at ${broker.brokers.join(',')} (jars from Maven Central) + embedded ClickHouse (chdb); ${reason}`;
  log(`test infrastructure: ${describe}`);
  return { kind: 'local', kafkaBrokers: broker.brokers, describe, stop: () => broker.stop(), broker };
}

class NoContainerRuntime extends Error {}

async function startContainers(): Promise<TestInfrastructure> {
  const testcontainers = await loadTestcontainers();
  try {
    await withinTime(testcontainers.getContainerRuntimeClient(), CONTAINER_RUNTIME_PROBE_TIMEOUT_MS, 'probing the container runtime');
  } catch (err) {
    throw new NoContainerRuntime(errorText(err), { cause: err });
  }

  const clickhouseImage = process.env.TEST_CLICKHOUSE_IMAGE?.trim() || DEFAULT_CLICKHOUSE_IMAGE;
  const embeddedClickHouse = clickhouseImage === EMBEDDED_CLICKHOUSE;
  const kafkaStart = startKafkaContainer();
  const clickhouseStart = embeddedClickHouse
    ? undefined
    : import('@testcontainers/clickhouse').then(({ ClickHouseContainer }) => new ClickHouseContainer(clickhouseImage).start());
  const starts: Promise<{ stop(): Promise<unknown> }>[] = [kafkaStart, ...(clickhouseStart ? [clickhouseStart] : [])];

  try {
    const [kafka, clickhouse] = await withinTime(
      Promise.all([kafkaStart, clickhouseStart]),
      CONTAINER_START_TIMEOUT_MS,
      `pulling and starting ${kafkaImageName()}${embeddedClickHouse ? '' : ` and ${clickhouseImage}`}`,
    );
    const clickhouseDescribe = clickhouse ? `${clickhouseImage} at ${clickhouse.getHttpUrl()}` : 'embedded ClickHouse (chdb)';
    return {
      kind: 'testcontainers',
      kafkaBrokers: kafka.brokers,
      ...(clickhouse ? { clickhouseUrl: clickhouse.getConnectionUrl() } : {}),
      describe: `testcontainers ${kafka.image} at ${kafka.brokers.join(',')} (broker up in ${(kafka.startedInMs / 1000).toFixed(1)} s) + ${clickhouseDescribe}`,
      async stop() {
        await Promise.all([kafka.stop(), clickhouse?.stop()]);
      },
    };
  } catch (err) {
    // Whatever did or still will start must not outlive the fallback (there
    // may be no Ryuk reaper to get it, as with the podman runtime).
    for (const start of starts) {
      void start.then((container) => container.stop()).catch(noop);
    }
    throw err;
  }
}

async function loadTestcontainers(): Promise<typeof import('testcontainers')> {
  // Imported lazily: without a runtime, loading the docker client stack is
  // wasted start-up time.
  try {
    return await import('testcontainers');
  } catch (err) {
    // testcontainers' HTTP stack (undici) needs a newer Node than 20 at import time.
    throw new Error(`testcontainers could not be loaded on Node ${process.versions.node}: ${errorText(err)}`, { cause: err });
  }
}

function kafkaImageName(): string {
  return process.env.TEST_KAFKA_IMAGE?.trim() || DEFAULT_KAFKA_IMAGE;
}

/** A Kafka broker in a container, started by {@link startKafkaContainer}, ready for clients. */
export type KafkaContainerHandle = {
  container: StartedKafkaContainer;
  image: string;
  /** `host:port` reachable from this process (the mapped port on the test host). */
  brokers: string[];
  /** `alias:9092` reachable from other containers on `network`; only with a network. */
  networkBrokers?: string[];
  /** From creating the container to the broker answering a metadata request. */
  startedInMs: number;
  stop(): Promise<void>;
};

/**
 * Starts `TEST_KAFKA_IMAGE` (or `image`) with testcontainers in KRaft mode,
 * configured like the local broker, and resolves only once the broker
 * answers: `@testcontainers/kafka` 12.2 resolves `start()` as soon as its
 * starter script is copied in when the container has no wait strategy of its
 * own (it saves the strategy while it is still undefined), so this waits for
 * the broker's "Kafka Server started" log line and then asks the broker for
 * its metadata once, without retries, through the address tests will use.
 *
 * With `network`, the container joins it as `alias` (also its hostname, so
 * the advertised inter-broker listener `alias:9092` resolves for other
 * containers on that network).
 */
export async function startKafkaContainer(
  opts: { image?: string; network?: StartedNetwork; alias?: string; startupTimeoutMs?: number } = {},
): Promise<KafkaContainerHandle> {
  const { Wait } = await loadTestcontainers();
  const { KafkaContainer } = await import('@testcontainers/kafka');
  const image = opts.image ?? kafkaImageName();
  const startedAt = performance.now();
  // Same broker behaviour as the local broker, so tests do not depend on which one they got.
  let definition = new KafkaContainer(image)
    .withKraft()
    .withEnvironment({
      KAFKA_AUTO_CREATE_TOPICS_ENABLE: 'false',
      KAFKA_NUM_PARTITIONS: '12',
      KAFKA_MIN_INSYNC_REPLICAS: '1',
      KAFKA_GROUP_INITIAL_REBALANCE_DELAY_MS: '0',
      KAFKA_TRANSACTION_STATE_LOG_REPLICATION_FACTOR: '1',
      KAFKA_LOG_RETENTION_MS: '-1',
    })
    .withWaitStrategy(Wait.forLogMessage(KAFKA_STARTED_LOG))
    .withStartupTimeout(opts.startupTimeoutMs ?? CONTAINER_START_TIMEOUT_MS);
  if (opts.network) {
    const alias = opts.alias ?? 'kafka';
    definition = definition.withNetwork(opts.network).withNetworkAliases(alias).withHostname(alias);
  }
  const container = await definition.start();
  try {
    const brokers = [`${container.getHost()}:${container.getMappedPort(9093)}`];
    await assertBrokerAnswers(brokers);
    const alias = opts.alias ?? 'kafka';
    return {
      container,
      image,
      brokers,
      ...(opts.network ? { networkBrokers: [`${alias}:9092`] } : {}),
      startedInMs: performance.now() - startedAt,
      async stop() {
        await container.stop();
      },
    };
  } catch (err) {
    await container.stop().catch(noop);
    throw err;
  }
}

/** One metadata request, no retries: fails at once if the broker is not listening yet. */
async function assertBrokerAnswers(brokers: string[]): Promise<void> {
  const { Kafka, logLevel } = await import('kafkajs');
  const admin = new Kafka({ brokers, clientId: 'test-infrastructure', logLevel: logLevel.NOTHING, retry: { retries: 0 }, connectionTimeout: 5000 }).admin();
  try {
    await admin.connect();
    const cluster = await admin.describeCluster();
    if (cluster.brokers.length === 0) throw new Error('the broker reported no brokers');
  } catch (err) {
    throw new Error(`Kafka container at ${brokers.join(',')} not ready after start: ${errorText(err)}`, { cause: err });
  } finally {
    await admin.disconnect().catch(noop);
  }
}

/** shared/timeout.ts's bound, its message saying what took too long. */
function withinTime<T>(promise: Promise<T>, ms: number, what: string): Promise<T> {
  return withTimeout(promise, ms, `timed out after ${Math.round(ms / 1000)} s ${what}`);
}

function errorText(err: unknown): string {
  const text = err instanceof Error ? err.message : String(err);
  return text.split('\n')[0] ?? text;
}
