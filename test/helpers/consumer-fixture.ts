import { randomBytes } from 'node:crypto';
import { Kafka, logLevel, type Admin } from 'kafkajs';
import { afterAll, beforeAll, inject } from 'vitest';
import { CoalescingSender } from '../../shared/kafka/coalescing-sender.ts';
import { DeadLetterSink } from '../../shared/kafka/dead-letters.ts';
import { createLogger } from '../../shared/logger.ts';
import { createMetrics, type Metrics } from '../../shared/metrics.ts';
import { ensureTopics } from '../../shared/kafka/topics.ts';

/**
 * What a consumer test against the run's real broker needs: a topic of its
 * own (and its dead-letter topic), an admin, and a dead-letter sink. Call
 * inside a `describe`: it registers the beforeAll/afterAll that create and
 * release them.
 */
export function consumerFixture(name: string, partitions: number) {
  const id = randomBytes(4).toString('hex');
  const topic = `${name}-${id}`;
  const dlq = `${topic}.dlq`;
  const log = createLogger({ level: 'silent' });
  const state: { kafka?: Kafka; admin?: Admin; sender?: CoalescingSender } = {};

  beforeAll(async () => {
    const kafka = new Kafka({ clientId: `${name}-test`, brokers: inject('kafkaBrokers'), logLevel: logLevel.NOTHING });
    const admin = kafka.admin();
    await admin.connect();
    await ensureTopics(admin, [{ topic, numPartitions: partitions, replicationFactor: 1 }, { topic: dlq, numPartitions: 1, replicationFactor: 1 }]);
    const sender = new CoalescingSender({ kafka, log, name: 'test' });
    await sender.connect();
    Object.assign(state, { kafka, admin, sender });
  });
  afterAll(async () => {
    await state.sender?.close();
    await state.admin?.disconnect();
  });

  const need = <T>(v: T | undefined): T => {
    if (v === undefined) throw new Error('the consumer fixture is used before its beforeAll ran');
    return v;
  };
  return {
    id,
    topic,
    dlq,
    log,
    get kafka(): Kafka {
      return need(state.kafka);
    },
    get admin(): Admin {
      return need(state.admin);
    },
    /** A dead-letter sink onto `dlq`, counting in `metrics`. */
    deadLetters(metrics: Metrics = createMetrics()): DeadLetterSink {
      return new DeadLetterSink({ sender: need(state.sender), topic: dlq, metrics, log });
    },
  };
}
