import { randomBytes } from 'node:crypto';
import { Kafka, logLevel, type Admin } from 'kafkajs';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { createLogger } from '../logger.ts';
import { GroupCommitProducer, ProducerOverloadedError } from './group-commit-producer.ts';
import { ensureTopics } from './topics.ts';

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
    await ensureTopics(admin, [{ topic, numPartitions: 2, replicationFactor: 1 }]);
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

/**
 * A lane whose producer failed leaves its transaction open on the broker;
 * read_committed readers of the partition see nothing written after it until
 * the transaction ends. The lane's replacement, initialised under the same
 * transactional id, ends it: that must happen without waiting for the lane's
 * next request, or an idle lane stalls readers for the transaction timeout.
 */
describe('GroupCommitProducer after a failed transaction', () => {
  const topic = `gcp-fence-${randomBytes(4).toString('hex')}`;
  const log = createLogger({ level: 'silent', service: 'gcp-test' });
  let kafka: Kafka;
  let admin: Admin;
  const cleanups: Array<() => Promise<unknown>> = [];

  beforeAll(async () => {
    kafka = new Kafka({ clientId: 'gcp-fence-test', brokers: inject('kafkaBrokers'), logLevel: logLevel.NOTHING });
    admin = kafka.admin();
    await admin.connect();
    await ensureTopics(admin, [{ topic, numPartitions: 1, replicationFactor: 1 }]);
  });
  afterAll(async () => {
    for (const c of cleanups.reverse()) await c().catch(() => undefined);
    await admin?.disconnect();
  });

  /** read_committed end offset (the last stable offset) and high watermark. */
  const offsets = async () => {
    const [committed] = await admin.fetchTopicOffsets(topic);
    return Number(committed!.high);
  };

  it('ends the open transaction of a fenced lane at once, without waiting for the lane to be used again', async () => {
    const prefix = `gcp-fence-${randomBytes(4).toString('hex')}`;
    const p = new GroupCommitProducer({ kafka, log, lingerMs: 0, timeoutMs: 10_000, parallelTransactions: 1, transactionalIdPrefix: prefix });
    cleanups.push(() => p.close());
    await p.connect();
    await p.send(topic, [{ key: 'warm', value: 'warm' }]);

    // Another producer takes the lane's transactional id (as a lane's own
    // failed attempt would have left it) and leaves a transaction open for
    // far longer than this test waits.
    const other = kafka.producer({ transactionalId: `${prefix}-0`, idempotent: true, maxInFlightRequests: 1, transactionTimeout: 300_000 });
    await other.connect();
    cleanups.push(() => other.disconnect());
    const open = await other.transaction();
    await open.send({ topic, messages: [{ key: 'open', value: 'open' }] });
    const stuckAt = await offsets();

    // The lane's producer is fenced now: its next transaction fails.
    await expect(p.send(topic, [{ key: 'fenced', value: 'fenced' }])).rejects.toThrow(/did not acknowledge/);

    // A record written after the open transaction becomes readable once that
    // transaction has ended. Nothing more is sent through the lane.
    const plain = kafka.producer();
    await plain.connect();
    cleanups.push(() => plain.disconnect());
    await plain.send({ topic, acks: -1, messages: [{ key: 'after', value: 'after' }] });
    await expect.poll(offsets, { timeout: 30_000, interval: 250 }).toBeGreaterThan(stuckAt + 1);
    // And the lane works again, under its id.
    await expect(p.send(topic, [{ key: 'again', value: 'again' }])).resolves.toBeUndefined();
  }, 60_000);

  it('commits an empty transaction over every partition the lane has written to when it replaces a failed producer', async () => {
    const wide = `gcp-heal-${randomBytes(4).toString('hex')}`;
    await ensureTopics(admin, [{ topic: wide, numPartitions: 3, replicationFactor: 1 }]);
    const ends = async () => (await admin.fetchTopicOffsets(wide)).sort((a, b) => a.partition - b.partition).map((o) => Number(o.high));
    const prefix = `gcp-heal-${randomBytes(4).toString('hex')}`;
    const p = new GroupCommitProducer({ kafka, log, lingerMs: 0, timeoutMs: 10_000, parallelTransactions: 1, transactionalIdPrefix: prefix });
    cleanups.push(() => p.close());
    await p.connect();
    // Enough keys to land on all three partitions.
    await p.send(wide, Array.from({ length: 30 }, (_, i) => ({ key: `k${i}`, value: `v${i}` })));
    await expect.poll(async () => (await ends()).every((n) => n > 1)).toBe(true);
    const before = await ends();

    // Fenced by another producer's initialisation (no transaction left open).
    const other = kafka.producer({ transactionalId: `${prefix}-0`, idempotent: true, maxInFlightRequests: 1 });
    await other.connect();
    cleanups.push(() => other.disconnect());
    await (await other.transaction()).abort();
    await expect(p.send(wide, [{ key: 'fenced', value: 'fenced' }])).rejects.toThrow(/did not acknowledge/);

    // The replacement's commit writes one marker on each of the three partitions, and nothing else.
    await expect.poll(ends, { timeout: 30_000, interval: 250 }).toEqual(before.map((n) => n + 1));
  }, 60_000);
});

/** Which lane takes a transaction, against the run's real broker. */
describe('GroupCommitProducer lanes', () => {
  it('gives each request, one after another, to the lane that rested longest, and commits every record', async () => {
    const topic = `gcp-lanes-${randomBytes(4).toString('hex')}`;
    const log = createLogger({ level: 'silent', service: 'gcp-test' });
    const kafka = new Kafka({ clientId: 'gcp-lanes', brokers: inject('kafkaBrokers'), logLevel: logLevel.NOTHING });
    const admin = kafka.admin();
    await admin.connect();
    const lanes: number[] = [];
    const p = new GroupCommitProducer({ kafka, log, timeoutMs: 10_000, lingerMs: 0, parallelTransactions: 3, onCommit: (_n, _ms, lane) => lanes.push(lane) });
    try {
      await ensureTopics(admin, [{ topic, numPartitions: 3, replicationFactor: 1 }]);
      await p.connect();
      const requests = 12;
      for (let i = 0; i < requests; i++) await p.send(topic, [0, 1, 2].map((k) => ({ key: `k${k}`, value: `v${i}-${k}` })));
      // Right after a commit the coordinator is still writing that lane's
      // markers; the next request goes to another lane, the one idle longest.
      // Unchanged, every request went to the first idle lane: lane 0.
      expect(lanes).toEqual(Array.from({ length: requests }, (_, i) => i % 3));
      const committed = async () => (await admin.fetchTopicOffsets(topic)).reduce((n, x) => n + Number(x.high), 0);
      // Every record of every request, and commit markers after them.
      await expect.poll(committed).toBeGreaterThanOrEqual(requests * 3 + requests);
    } finally {
      await p.close();
      await admin.deleteTopics({ topics: [topic] }).catch(() => undefined);
      await admin.disconnect();
    }
  });
});
