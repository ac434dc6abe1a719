import { describe, expect, it } from 'vitest';
import { consumerFixture } from '../../test/helpers/consumer-fixture.ts';
import { metricSum } from '../../test/helpers/kafka-inspect.ts';
import { createMetrics } from '../metrics.ts';
import { BatchConsumer } from './batch-consumer.ts';
import { PoisonRecordError, type Decoded } from './poison.ts';

/** Against the run's real broker: a decoder that fails for a reason other than poison. */
describe('BatchConsumer when decoding fails transiently', () => {
  const fx = consumerFixture('batch', 2);
  const { topic, dlq, log } = fx;
  const groupId = `batch-group-${fx.id}`;

  it('retries the records (never skips them, never crashes) and still dead-letters real poison', async () => {
    const producer = fx.kafka.producer();
    await producer.connect();
    const values = (partition: number) => Array.from({ length: 10 }, (_, i) => `p${partition}-${i}`);
    for (const partition of [0, 1]) {
      await producer.send({ topic, messages: [...values(partition), ...(partition === 0 ? ['poison'] : [])].map((value) => ({ partition, value })) });
    }
    await producer.disconnect();

    // p0-5 cannot be decoded on its first three tries (e.g. a schema registry
    // that does not answer yet): not poison, so it must come back.
    let failures = 0;
    const decode = (m: { value: Buffer | null }): Decoded<string> => {
      const value = m.value!.toString();
      if (value === 'poison') throw new PoisonRecordError('undecodable', 'not a record of this topic');
      if (value === 'p0-5' && failures < 3) {
        failures++;
        throw new Error('registry unavailable');
      }
      return { kind: 'value', value };
    };
    const handled: string[] = [];
    const metrics = createMetrics();
    const unhandled: unknown[] = [];
    const onUnhandled = (err: unknown) => unhandled.push(err);
    process.on('unhandledRejection', onUnhandled);
    const consumer = new BatchConsumer<string>({
      kafka: fx.kafka,
      log,
      metrics,
      groupId,
      topics: [topic],
      decode,
      deadLetters: fx.deadLetters(metrics),
      stallMs: 60_000,
      flushMs: 20,
      maxMessages: 100,
      handle: async (items) => {
        for (const item of items) if (item.record.kind === 'value') handled.push(item.record.value);
      },
    });
    try {
      await consumer.start();
      // Every record handled, the one that failed included; the poison went to the dead letters.
      await expect.poll(() => new Set(handled).size, { timeout: 45_000, interval: 100 }).toBe(20);
      expect(new Set(handled)).toEqual(new Set([...values(0), ...values(1)]));
      expect(failures).toBe(3);
      expect(unhandled).toEqual([]);
      // Both partitions committed to their end (the poison's offset included).
      await expect
        .poll(
          async () => {
            const [offsets] = await fx.admin.fetchOffsets({ groupId, topics: [topic] });
            return offsets!.partitions.map((p) => [p.partition, p.offset]).sort();
          },
          { timeout: 15_000, interval: 200 },
        )
        .toEqual([
          [0, '11'],
          [1, '10'],
        ]);
      expect(metricSum(await metrics.registry.metrics(), 'kafka_consumer_transient_failures_total', { group: groupId })).toBeGreaterThanOrEqual(1);
      // Healthy again once the record went through.
      expect(consumer.health()).toBeUndefined();
    } finally {
      process.off('unhandledRejection', onUnhandled);
      await consumer.stop(5_000);
    }
    const letters = await readAll(dlq, 1);
    expect(letters).toHaveLength(1);
  }, 90_000);

  async function readAll(t: string, count: number): Promise<string[]> {
    const c = fx.kafka.consumer({ groupId: `read-${fx.id}-${t}` });
    const out: string[] = [];
    await c.connect();
    await c.subscribe({ topic: t, fromBeginning: true });
    await c.run({ eachMessage: async ({ message }) => void out.push(message.value?.toString() ?? '') });
    await expect.poll(() => out.length, { timeout: 20_000 }).toBeGreaterThanOrEqual(count);
    await c.disconnect();
    return out;
  }
});
