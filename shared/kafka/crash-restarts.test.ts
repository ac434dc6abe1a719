import { describe, expect, it } from 'vitest';
import { consumerFixture } from '../../test/helpers/consumer-fixture.ts';
import { metricSum } from '../../test/helpers/kafka-inspect.ts';
import { eventually } from '../../test/helpers/stack.ts';
import { createMetrics } from '../metrics.ts';
import { GroupConsumer } from './group-consumer.ts';
import { delayFor } from '../retry.ts';
import { RESTART_SCHEDULE } from './crash-restarts.ts';
import { ensureTopics } from './topics.ts';

describe('RESTART_SCHEDULE', () => {
  it('waits 250 ms after the first crash in a row, doubling up to 10 s', () => {
    expect([1, 2, 3, 4, 5, 6, 7, 50, 5000].map((n) => delayFor(RESTART_SCHEDULE, n))).toEqual([250, 500, 1000, 2000, 4000, 8000, 10_000, 10_000, 10_000]);
  });
});

/** Against the run's real broker: the topic a consumer reads is deleted under it, then comes back. */
describe('a consumer whose topic is deleted under it', () => {
  const fx = consumerFixture('crash', 2);

  it('restarts with a growing wait (not ten times a second), reports it by name, and reads again once the topic is back', async () => {
    const { topic } = fx;
    const groupId = `crash-${fx.id}`;
    const metrics = createMetrics();
    const restarts = async () => metricSum(await metrics.registry.metrics(), 'kafka_consumer_restarts_total', { group: groupId });
    const seen: string[] = [];
    const consumer = new GroupConsumer<string>({
      kafka: fx.kafka,
      log: fx.log,
      metrics,
      topics: [topic],
      groupId,
      stallMs: 3000,
      deadLetters: fx.deadLetters(metrics),
      decode: (m) => ({ kind: 'value', value: m.value!.toString() }),
      batches: {
        flushMs: 5,
        maxMessages: 100,
        handle: async (items) => {
          for (const i of items) if (i.record.kind === 'value') seen.push(i.record.value);
        },
      },
    });
    const producer = fx.kafka.producer();
    await producer.connect();
    try {
      await consumer.start();
      await producer.send({ topic, messages: [{ value: 'before' }] });
      await eventually(async () => (seen.includes('before') ? true : undefined), 30_000, 100);
      expect(consumer.health()).toBeUndefined();

      await fx.admin.deleteTopics({ topics: [topic] });
      // Reported once the crashes have gone on for stallMs (3 s), with the count and the cause.
      const problem = await eventually(async () => consumer.health()?.startsWith('crashing: ') ? consumer.health() : undefined, 60_000, 100);
      expect(problem).toMatch(/^crashing: \d+ restarts in a row for \d+ s \(.+\)$/);
      // 3 s of crashes: 250 + 500 + 1000 + 2000 ms of waits allow about 4 restarts;
      // kafkajs' own 100 ms restart made 10 a second (30 or more).
      const during = await restarts();
      expect(during).toBeGreaterThanOrEqual(2);
      expect(during).toBeLessThanOrEqual(8);

      await ensureTopics(fx.admin, [{ topic, numPartitions: 2, replicationFactor: 1 }]);
      await producer.send({ topic, messages: [{ value: 'after' }] });
      await eventually(async () => (seen.includes('after') ? true : undefined), 60_000, 100);
      await eventually(async () => (consumer.health() === undefined ? true : undefined), 30_000, 100);
    } finally {
      await producer.disconnect();
      await consumer.stop(5_000);
    }
  }, 180_000);
});
