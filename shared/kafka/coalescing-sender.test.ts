import { randomBytes } from 'node:crypto';
import { Kafka, logLevel, type Admin } from 'kafkajs';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { createLogger } from '../logger.ts';
import { RecordTooLargeError } from '../failure-class.ts';
import { CoalescingSender } from './coalescing-sender.ts';

/** Against the run's real broker: a topic that accepts record batches of at most 20 kB. */
describe('CoalescingSender within the broker limits', () => {
  const topic = `sender-${randomBytes(4).toString('hex')}`;
  let kafka: Kafka;
  let admin: Admin;
  const failures: string[] = [];

  beforeAll(async () => {
    kafka = new Kafka({ clientId: 'sender-test', brokers: inject('kafkaBrokers'), logLevel: logLevel.NOTHING });
    admin = kafka.admin();
    await admin.connect();
    await admin.createTopics({
      waitForLeaders: true,
      topics: [{ topic, numPartitions: 1, replicationFactor: 1, configEntries: [{ name: 'max.message.bytes', value: '20000' }] }],
    });
  });
  afterAll(async () => {
    await admin?.disconnect();
  });

  const endOffset = async () => Number((await admin.fetchTopicOffsets(topic))[0]!.high);

  it('splits a request the broker refuses for its size, and every caller is acknowledged', async () => {
    // The request limit is set far above the topic's, so only the broker's refusal can split it.
    const sender = new CoalescingSender({ kafka, log: createLogger({ level: 'silent' }), name: 'test', maxRequestBytes: 10 * 1024 * 1024, onFailure: (t) => failures.push(t) });
    await sender.connect();
    const before = await endOffset();
    const value = randomBytes(3000);
    await Promise.all(Array.from({ length: 40 }, (_, i) => sender.send([{ topic, messages: [{ key: `k${i}`, value }] }])));
    expect((await endOffset()) - before).toBe(40);
    expect(failures).toEqual([]);
    expect(sender.consecutiveFailures).toBe(0);
    await sender.close();
  });

  it('fails one record too large for the topic with RecordTooLargeError, without holding back the others', async () => {
    const sender = new CoalescingSender({ kafka, log: createLogger({ level: 'silent' }), name: 'test' });
    await sender.connect();
    const before = await endOffset();
    const results = await Promise.allSettled([
      sender.send([{ topic, messages: [{ key: 'small-1', value: randomBytes(100) }] }]),
      sender.send([{ topic, messages: [{ key: 'huge', value: randomBytes(50_000) }] }]),
      sender.send([{ topic, messages: [{ key: 'small-2', value: randomBytes(100) }] }]),
    ]);
    expect(results.map((r) => r.status)).toEqual(['fulfilled', 'rejected', 'fulfilled']);
    expect((results[1] as PromiseRejectedResult).reason).toBeInstanceOf(RecordTooLargeError);
    expect((await endOffset()) - before).toBe(2);
    // A refusal for size is not a producer failure: the producer stays healthy.
    expect(sender.consecutiveFailures).toBe(0);
    // And the same sender goes on producing.
    await sender.send([{ topic, messages: [{ key: 'after', value: randomBytes(100) }] }]);
    expect((await endOffset()) - before).toBe(3);
    await sender.close();
  });

  it('counts failures and replaces its producer, then produces again when the topic is back', async () => {
    const sender = new CoalescingSender({ kafka, log: createLogger({ level: 'silent' }), name: 'test', onFailure: (t) => failures.push(t) });
    await sender.connect();
    const gone = `sender-gone-${randomBytes(4).toString('hex')}`;
    await expect(sender.send([{ topic: gone, messages: [{ key: 'x', value: 'y' }] }])).rejects.toThrow();
    expect(sender.consecutiveFailures).toBe(1);
    expect(failures).toContain(gone);
    await admin.createTopics({ waitForLeaders: true, topics: [{ topic: gone, numPartitions: 1, replicationFactor: 1 }] });
    await sender.send([{ topic: gone, messages: [{ key: 'x', value: 'y' }] }]);
    expect(sender.consecutiveFailures).toBe(0);
    await sender.close();
  });
});
