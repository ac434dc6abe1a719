import { KafkaJSNonRetriableError } from 'kafkajs';
import { describe, expect, it } from 'vitest';
import { consumerFixture } from '../../test/helpers/consumer-fixture.ts';
import { readTopicToEnd } from '../../test/helpers/kafka-inspect.ts';
import { createMetrics } from '../metrics.ts';
import { ensureTopics } from './topics.ts';
import { TransactionalStage } from './transactional-stage.ts';

/** Against the run's real broker. */
describe('TransactionalStage', () => {
  const fx = consumerFixture('stage', 1);

  it('goes on after a take-on fails with an error kafkajs will not restart for, and copies every record exactly once', async () => {
    const out = `${fx.topic}.out`;
    await ensureTopics(fx.admin, [{ topic: out, numPartitions: 1, replicationFactor: 1 }]);
    const producer = fx.kafka.producer();
    await producer.connect();
    await producer.send({ topic: fx.topic, messages: Array.from({ length: 50 }, (_, i) => ({ value: String(i) })) });
    await producer.disconnect();

    // The first restore throws what kafkajs' admin threw while a broker
    // was down: a non-retriable error, after which kafkajs does not restart
    // the consumer by itself.
    let restores = 0;
    const metrics = createMetrics();
    const stage = new TransactionalStage<string>({
      kafka: fx.kafka,
      admin: fx.admin,
      log: fx.log,
      metrics,
      deadLetters: fx.deadLetters(metrics),
      stallMs: 60_000,
      groupId: `stage-${fx.id}`,
      transactionalIdPrefix: `stage-${fx.id}`,
      topics: [fx.topic],
      decode: (m) => ({ kind: 'value', value: m.value!.toString() }),
      restore: async () => {
        if (++restores === 1) throw new KafkaJSNonRetriableError("Cannot destructure property 'partitions' of 'high.pop(...)' as it is undefined.");
      },
      process: (_partition, records) => records.map(({ record }) => ({ topic: out, value: record.kind === 'value' ? record.value : null })),
    });
    await stage.start();
    try {
      await expect.poll(async () => (await readTopicToEnd(fx.kafka, fx.admin, out, 10_000)).length, { timeout: 60_000, interval: 500 }).toBe(50);
      const values = (await readTopicToEnd(fx.kafka, fx.admin, out, 10_000)).map((r) => r.value?.toString());
      expect(values).toEqual(Array.from({ length: 50 }, (_, i) => String(i)));
      expect(restores).toBeGreaterThanOrEqual(2);
      expect(stage.health()).toBeUndefined();
    } finally {
      await stage.stop();
    }
  }, 120_000);
});
