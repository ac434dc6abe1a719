import { Kafka, logLevel, type LogEntry } from 'kafkajs';
import type { Logger } from '../logger.ts';

/**
 * The one place a Kafka client is built. kafkajs logs go through pino so the
 * process keeps a single JSON log stream.
 */
export function createKafka(opts: { brokers: string[]; clientId: string; log: Logger }): Kafka {
  const log = opts.log.child({ component: 'kafkajs' });
  return new Kafka({
    clientId: opts.clientId,
    brokers: opts.brokers,
    connectionTimeout: 3000,
    requestTimeout: 10000,
    retry: { initialRetryTime: 100, maxRetryTime: 2000, retries: 5 },
    logLevel: logLevel.WARN,
    logCreator:
      () =>
      ({ level, log: entry }: LogEntry) => {
        const { message, ...rest } = entry;
        const fields = { namespace: entry.namespace, broker: rest.broker, error: rest.error };
        if (level <= logLevel.ERROR) log.error(fields, message);
        else if (level === logLevel.WARN) log.warn(fields, message);
        else log.debug(fields, message);
      },
  });
}
