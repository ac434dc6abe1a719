/**
 * Command line for the local Kafka broker.
 *
 *   node infra/kafka/cli.ts fetch             download the jars once, print the libs dir
 *   node infra/kafka/cli.ts start [dataDir]   run a broker until SIGINT/SIGTERM
 *
 * `start` keeps its data in dataDir (default `.cache/kafka/data`, or
 * KAFKA_DATA_DIR), so topics survive between runs.
 */
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { ensureKafkaJars, KAFKA_VERSION, startLocalBroker } from './local-broker.ts';

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
      // The broker process is unref'd and signal listeners do not hold the
      // event loop either, so without this the CLI would exit (and take the
      // broker down with it) right after start-up.
      const keepAlive = setInterval(() => {}, 2 ** 30);
      await new Promise<void>((resolve) => {
        let stopping = false;
        const shutdown = (signal: NodeJS.Signals): void => {
          if (stopping) return;
          stopping = true;
          log(`${signal}: stopping the broker`);
          broker.stop().then(resolve, (err: unknown) => {
            log(`stop failed: ${err instanceof Error ? err.message : String(err)}`);
            resolve();
          });
        };
        process.on('SIGINT', shutdown);
        process.on('SIGTERM', shutdown);
      });
      clearInterval(keepAlive);
      log('stopped');
      return 0;
    }
    default: {
      console.error('usage: node infra/kafka/cli.ts fetch | start [dataDir]');
      return 2;
    }
  }
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
