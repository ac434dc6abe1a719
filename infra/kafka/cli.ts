/**
 * Command line for the local Kafka broker.
 *
 *   node infra/kafka/cli.ts fetch               download the jars once, print the libs dir
 *   node infra/kafka/cli.ts start [dataDir]     run a broker until SIGINT/SIGTERM
 *   node infra/kafka/cli.ts cluster [dataDir]   run a three-node cluster until SIGINT/SIGTERM
 *
 * `start` keeps its data in dataDir (default `.cache/kafka/data`, or
 * KAFKA_DATA_DIR), `cluster` in dataDir (default `.cache/kafka/cluster`, or
 * KAFKA_CLUSTER_DIR; KAFKA_CLUSTER_NODES changes the node count), so topics
 * survive between runs.
 */
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { ensureKafkaJars, KAFKA_VERSION, startLocalBroker, startLocalCluster } from './local-broker.ts';

const REPO_ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..');
const log = (msg: string): void => console.error(`[kafka] ${msg}`);

async function main(argv: string[]): Promise<number> {
  const [command, ...rest] = argv;
  switch (command) {
    case 'fetch': {
      console.log(await ensureKafkaJars({ log }));
      return 0;
    }
    case 'start': {
      const dataDir = path.resolve(rest[0] ?? process.env.KAFKA_DATA_DIR ?? path.join(REPO_ROOT, '.cache', 'kafka', 'data'));
      const broker = await startLocalBroker({ dataDir, log });
      // stdout carries only the result, so `$(...)` or a process manager can read it.
      console.log(`KAFKA_BROKERS=${broker.brokers.join(',')}`);
      log(`Kafka ${KAFKA_VERSION} running (pid ${broker.pid}), data in ${dataDir}, log in ${broker.logFile}; Ctrl-C stops it`);
      await untilSignal(() => broker.stop(), 'the broker');
      return 0;
    }
    case 'cluster': {
      const dataDir = path.resolve(rest[0] ?? process.env.KAFKA_CLUSTER_DIR ?? path.join(REPO_ROOT, '.cache', 'kafka', 'cluster'));
      const nodes = Number(process.env.KAFKA_CLUSTER_NODES ?? 3);
      const cluster = await startLocalCluster({ dataDir, nodes, log });
      console.log(`KAFKA_BROKERS=${cluster.brokers.join(',')}`);
      for (const node of cluster.nodes()) {
        log(`node ${node.nodeId}: 127.0.0.1:${node.port} (controller ${node.controllerPort}), pid ${node.pid}, log ${node.logFile}`);
      }
      log(`Kafka ${KAFKA_VERSION} cluster ${cluster.clusterId} of ${cluster.size} nodes running, data in ${dataDir}; Ctrl-C stops it`);
      await untilSignal(() => cluster.stop(), 'the cluster');
      return 0;
    }
    default: {
      console.error('usage: node infra/kafka/cli.ts fetch | start [dataDir] | cluster [dataDir]');
      return 2;
    }
  }
}

/** Runs until SIGINT or SIGTERM, then calls `stop`. */
async function untilSignal(stop: () => Promise<void>, what: string): Promise<void> {
  // The JVMs are unref'd and signal listeners do not hold the event loop
  // either, so without this the CLI would exit (and take the brokers down
  // with it) right after start-up.
  const keepAlive = setInterval(() => {}, 2 ** 30);
  await new Promise<void>((resolve) => {
    let stopping = false;
    const shutdown = (signal: NodeJS.Signals): void => {
      if (stopping) return;
      stopping = true;
      log(`${signal}: stopping ${what}`);
      stop().then(resolve, (err: unknown) => {
        log(`stop failed: ${err instanceof Error ? err.message : String(err)}`);
        resolve();
      });
    };
    process.on('SIGINT', shutdown);
    process.on('SIGTERM', shutdown);
  });
  clearInterval(keepAlive);
  log('stopped');
}

main(process.argv.slice(2)).then(
  (code) => {
    process.exitCode = code;
  },
  (err: unknown) => {
    console.error(err instanceof Error ? err.message : err);
    process.exitCode = 1;
  },
);
