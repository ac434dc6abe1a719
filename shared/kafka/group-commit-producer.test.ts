import { randomBytes } from 'node:crypto';
import { Kafka, logLevel, type Admin } from 'kafkajs';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { createLogger } from '../logger.ts';
import { GroupCommitProducer, ProducerOverloadedError } from './group-commit-producer.ts';

/** Load shedding of the intake's producer, against the run's real broker. */
describe('GroupCommitProducer load shedding', () => {
  const topic = `gcp-${randomBytes(4).toString('hex')}`;
  const log = createLogger({ level: 'silent', service: 'gcp-test' });
  let kafka: Kafka;
  let admin: Admin;
  const producers: GroupCommitProducer[] = [];

  beforeAll(async () => {
    kafka = new Kafka({ clientId: 'gcp-test', brokers: inject('kafkaBrokers'), logLevel: logLevel.NOTHING });
    admin = kafka.admin();
    await admin.connect();
    await admin.createTopics({ waitForLeaders: true, topics: [{ topic, numPartitions: 2, replicationFactor: 1 }] });
  });
  afterAll(async () => {
    await Promise.all(producers.map((p) => p.close().catch(() => undefined)));
    await admin?.disconnect();
  });

  const producer = (opts: { lingerMs: number; maxQueueDelayMs?: number; maxQueuedMessages?: number }) => {
    const p = new GroupCommitProducer({ kafka, log, timeoutMs: 10_000, parallelTransactions: 1, ...opts });
    producers.push(p);
    return p;
  };
  const messages = (n: number, tag: string) => Array.from({ length: n }, (_, i) => ({ key: `${tag}-${i}`, value: `${tag}-${i}` }));
  const endOffsets = async () => (await admin.fetchTopicOffsets(topic)).reduce((n, p) => n + Number(p.high), 0);

  it('refuses at once, and sends nothing of, a request that would queue more than maxQueuedMessages; the queued ones commit', async () => {
    // A long linger keeps the first requests queued while the next arrives.
    const p = producer({ lingerMs: 1500, maxQueuedMessages: 10 });
    await p.connect();
    const before = await endOffsets();
    let firstDone = false;
    const first = p.send(topic, messages(6, 'first')).then(() => void (firstDone = true));
    const second = p.send(topic, messages(4, 'second'));
    expect(p.overloaded(1)).toMatch(/over 10 messages/);
    await expect(p.send(topic, messages(1, 'third'))).rejects.toBeInstanceOf(ProducerOverloadedError);
    expect(firstDone, 'refused without waiting behind the queued ones').toBe(false);
    await Promise.all([first, second]);
    expect(p.overloaded(1)).toBeUndefined();
    // The two accepted requests, in one transaction (its commit marker takes
    // an offset per partition touched). The end offsets kafkajs reads are the
    // last stable ones, which move once the coordinator has written the
    // markers, a moment after the commit returned.
    await expect.poll(async () => (await endOffsets()) - before).toBeGreaterThanOrEqual(10);
    expect((await endOffsets()) - before).toBeLessThanOrEqual(12);
  });

  it('refuses new requests while the oldest queued one has waited longer than maxQueueDelayMs', async () => {
    const p = producer({ lingerMs: 1500, maxQueueDelayMs: 100 });
    await p.connect();
    const queued = p.send(topic, messages(1, 'old'));
    expect(p.overloaded()).toBeUndefined();
    await expect.poll(() => p.overloaded(), { timeout: 1400, interval: 20 }).toMatch(/waited over 100 ms/);
    await expect(p.send(topic, messages(1, 'late'))).rejects.toBeInstanceOf(ProducerOverloadedError);
    await queued;
    expect(p.overloaded()).toBeUndefined();
    await expect(p.send(topic, messages(1, 'after'))).resolves.toBeUndefined();
  });
});
