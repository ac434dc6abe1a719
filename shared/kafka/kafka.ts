import { Kafka, logLevel, type Admin, type LogEntry, type Producer } from 'kafkajs';
import type { Logger } from '../logger.ts';
import { retry } from '../retry.ts';
import { JavaCompatiblePartitioner } from './partitioner.ts';

/**
 * The one place a Kafka client is built. kafkajs logs go through pino so the
 * process keeps a single JSON log stream.
 */
export type ProduceRetryCause = 'concurrent_transactions' | 'other';

/**
 * `onProduceRetry` hears of every produce attempt kafkajs retries inside one
 * send (it logs them, and nothing else tells): `concurrent_transactions` when
 * a transaction began while the previous commit's markers were still being
 * written.
 */
export function createKafka(opts: { brokers: string[]; clientId: string; log: Logger; onProduceRetry?: (cause: ProduceRetryCause) => void }): Kafka {
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
        const retriedProduce = message.startsWith('Failed to send messages');
        if (retriedProduce) {
          opts.onProduceRetry?.(message.includes('another concurrent operation on the same transaction') ? 'concurrent_transactions' : 'other');
        }
        // NOTE: kafkajs logs every retriable error response (coordinator
        // loading, leader moved) at ERROR and then retries, and so every
        // retried produce ("Failed to send messages": a transaction's markers
        // still being written, CONCURRENT_TRANSACTIONS, comes after each
        // commit); those are debug noise. Real failures surface as crashes or
        // failed sends, which the service logs itself (kafka_produce_failed,
        // fanout_produce_retry, consumer_crashed). The warning that an
        // idempotent producer's retries are limited is by design: a producer
        // that keeps failing is replaced instead (coalescing-sender.ts).
        if (retriedProduce || message.startsWith('Response ') || message.startsWith('Limiting retries for the idempotent producer')) log.debug(fields, message);
        else if (level <= logLevel.ERROR) log.error(fields, message);
        else if (level === logLevel.WARN) log.warn(fields, message);
        else log.debug(fields, message);
      },
  });
}

/**
 * The retry of a transactional producer. Right after a commit the
 * coordinator is still writing its markers, and the next transaction's
 * first request is refused with CONCURRENT_TRANSACTIONS until it is done,
 * so this schedule's first steps lie on the path of every transaction that
 * follows another: short steps growing slowly find the markers done soonest
 * (`npm run bench:txn-retry`, docs/performance.md).
 */
export const TRANSACTIONAL_RETRY = { retries: 15, initialRetryTime: 5, multiplier: 1.3, maxRetryTime: 200 };

/**
 * Every producer of the service: idempotent with one request in flight (a
 * retry neither duplicates nor reorders), keyed records on the partitions
 * the Java client would pick. A transactional one retries on
 * TRANSACTIONAL_RETRY.
 */
export function createProducer(kafka: Kafka, transactional?: { id: string; timeoutMs: number }): Producer {
  return kafka.producer({
    idempotent: true,
    maxInFlightRequests: 1,
    createPartitioner: JavaCompatiblePartitioner,
    ...(transactional && { transactionalId: transactional.id, transactionTimeout: transactional.timeoutMs, retry: TRANSACTIONAL_RETRY }),
  });
}

/**
 * Waits until the group coordinator answers: on a fresh broker it is still
 * loading __consumer_offsets for a moment, and consumers that join then crash
 * and restart with noisy errors.
 */
export async function waitForCoordinator(admin: Admin, timeoutMs = 30000): Promise<void> {
  await retry(
    async () => {
      const { groups } = await admin.describeGroups(['coordinator-probe']);
      if (groups.length === 0) throw new Error('group coordinator not answering');
    },
    { schedule: { initialMs: 200, maxMs: 200, factor: 1, giveUpAfterMs: timeoutMs } },
  );
}

/**
 * Retries a start-up call that can fail while a freshly created topic's
 * metadata spreads ("not the leader", "does not host this topic-partition").
 */
export function retryStartup<T>(fn: () => Promise<T>, timeoutMs = 30000): Promise<T> {
  return retry(fn, { schedule: { initialMs: 100, maxMs: 1000, giveUpAfterMs: timeoutMs }, isRetryable: (err) => (err as { retriable?: boolean }).retriable !== false });
}
