/**
 * Chooses the Kafka (and possibly ClickHouse) that integration tests run
 * against, so that the same suite runs on a laptop with Docker, in CI, and on
 * machines with neither Docker nor a reachable container registry.
 */
import { KAFKA_VERSION, type LocalBroker, startLocalBroker } from '../kafka/local-broker.ts';

/** What {@link provideTestInfrastructure} started or found. */
export type TestInfrastructure = {
  /** `testcontainers` when containers run; `local` for the Maven Central broker or an external one. */
  kind: 'testcontainers' | 'local';
  kafkaBrokers: string[];
  /**
   * ClickHouse HTTP URL with credentials and database in it (accepted as-is
   * by `createClient({ url })` of `@clickhouse/client`); only set for
   * testcontainers, otherwise tests use embedded ClickHouse (chdb).
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

const noop = (): void => {};

/**
 * Provides Kafka for integration tests, in this order:
 * 1. `KAFKA_BROKERS` (comma-separated) set: that broker, as-is.
 * 2. Unless `TEST_INFRA=local`: testcontainers (Kafka, `TEST_KAFKA_IMAGE`,
 *    default cp-kafka 8.x in KRaft mode, and ClickHouse,
 *    `TEST_CLICKHOUSE_IMAGE`), if a container runtime works and the images
 *    can be pulled and started within `TEST_CONTAINERS_TIMEOUT_MS`.
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
      const infra = await startContainers(log);
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

async function startContainers(log: (m: string) => void): Promise<TestInfrastructure> {
  // Imported lazily: without a runtime, loading the docker client stack is
  // wasted start-up time.
  let testcontainers: typeof import('testcontainers');
  try {
    testcontainers = await import('testcontainers');
  } catch (err) {
    // testcontainers' HTTP stack (undici) needs a newer Node than 20 at import time.
    throw new Error(`testcontainers could not be loaded on Node ${process.versions.node}: ${errorText(err)}`, { cause: err });
  }
  const { getContainerRuntimeClient } = testcontainers;
  try {
    await withTimeout(getContainerRuntimeClient(), CONTAINER_RUNTIME_PROBE_TIMEOUT_MS, 'probing the container runtime');
  } catch (err) {
    throw new NoContainerRuntime(errorText(err), { cause: err });
  }

  const { KafkaContainer } = await import('@testcontainers/kafka');
  const { ClickHouseContainer } = await import('@testcontainers/clickhouse');
  const kafkaImage = process.env.TEST_KAFKA_IMAGE ?? DEFAULT_KAFKA_IMAGE;
  const clickhouseImage = process.env.TEST_CLICKHOUSE_IMAGE ?? DEFAULT_CLICKHOUSE_IMAGE;
  log(`container runtime found; starting ${kafkaImage} and ${clickhouseImage} (pulling if needed)`);

  // Same broker behaviour as the local broker, so tests do not depend on which one they got.
  const kafkaStart = new KafkaContainer(kafkaImage)
    .withKraft()
    .withEnvironment({
      KAFKA_AUTO_CREATE_TOPICS_ENABLE: 'false',
      KAFKA_NUM_PARTITIONS: '12',
      KAFKA_MIN_INSYNC_REPLICAS: '1',
      KAFKA_GROUP_INITIAL_REBALANCE_DELAY_MS: '0',
      KAFKA_TRANSACTION_STATE_LOG_REPLICATION_FACTOR: '1',
      KAFKA_LOG_RETENTION_MS: '-1',
    })
    .start();
  const clickhouseStart = new ClickHouseContainer(clickhouseImage).start();
  const starts = [kafkaStart, clickhouseStart];

  try {
    const [kafka, clickhouse] = await withTimeout(
      Promise.all([kafkaStart, clickhouseStart]),
      CONTAINER_START_TIMEOUT_MS,
      `pulling and starting ${kafkaImage} and ${clickhouseImage}`,
    );
    const kafkaBrokers = [`${kafka.getHost()}:${kafka.getMappedPort(9093)}`];
    const clickhouseUrl = clickhouse.getConnectionUrl();
    return {
      kind: 'testcontainers',
      kafkaBrokers,
      clickhouseUrl,
      describe: `testcontainers ${kafkaImage} at ${kafkaBrokers.join(',')} + ${clickhouseImage} at ${clickhouse.getHttpUrl()}`,
      async stop() {
        await Promise.all([kafka.stop(), clickhouse.stop()]);
      },
    };
  } catch (err) {
    // Whatever did or still will start must not outlive the fallback; the
    // Ryuk reaper would get it eventually, but not before the suite ends.
    for (const start of starts) {
      void start.then((container) => container.stop()).catch(noop);
    }
    throw err;
  }
}

async function withTimeout<T>(promise: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`timed out after ${Math.round(ms / 1000)} s ${what}`)), ms);
    timer.unref();
  });
  try {
    return await Promise.race([promise, timeout]);
  } finally {
    clearTimeout(timer);
  }
}

function errorText(err: unknown): string {
  const text = err instanceof Error ? err.message : String(err);
  return text.split('\n')[0] ?? text;
}
