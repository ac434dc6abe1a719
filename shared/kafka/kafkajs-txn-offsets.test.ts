import { randomBytes } from 'node:crypto';
import { Kafka, logLevel, type Consumer } from 'kafkajs';
import { afterAll, describe, expect, inject, it } from 'vitest';
import { TRANSACTIONAL_RETRY } from './kafka.ts';
import { ensureTopics } from './topics.ts';

/**
 * patches/kafkajs+2.2.4+010+transaction-offsets-generation.patch, against
 * the run's real broker: a transaction's offsets go with the consumer's
 * generation and member id (TxnOffsetCommit v3, KIP-447), and GROUP_JOIN
 * says the generation. Unpatched, kafkajs sends version 1, which carries
 * neither: the coordinator takes offsets from a member whose generation is
 * over, and the refusal below does not happen.
 */
describe('kafkajs transaction offsets (KIP-447)', () => {
  const id = randomBytes(4).toString('hex');
  const topic = `txn-offsets-${id}`;
  const groupId = `txn-offsets-${id}`;
  const kafka = new Kafka({ clientId: 'txn-offsets-test', brokers: inject('kafkaBrokers'), logLevel: logLevel.NOTHING });
  const admin = kafka.admin();
  const producer = kafka.producer({ transactionalId: `txn-offsets-${id}`, idempotent: true, maxInFlightRequests: 1, retry: TRANSACTIONAL_RETRY });
  const consumers: Consumer[] = [];

  afterAll(async () => {
    for (const c of consumers) await c.disconnect().catch(() => undefined);
    await producer.disconnect().catch(() => undefined);
    await admin.deleteTopics({ topics: [topic] }).catch(() => undefined);
    await admin.disconnect().catch(() => undefined);
  });

  /** A member of the group; its joins, newest last. */
  const join = async () => {
    const joins: { generationId: number; memberId: string }[] = [];
    const consumer = kafka.consumer({ groupId, sessionTimeout: 10_000, heartbeatInterval: 500, rebalanceTimeout: 10_000 });
    consumers.push(consumer);
    consumer.on(consumer.events.GROUP_JOIN, (e) => joins.push({ generationId: e.payload.generationId, memberId: e.payload.memberId }));
    await consumer.connect();
    await consumer.subscribe({ topic, fromBeginning: true });
    await consumer.run({ autoCommit: false, eachMessage: async () => undefined });
    return joins;
  };
  const commit = async (offset: string, member: { generationId: number; memberId: string }) => {
    const tx = await producer.transaction();
    try {
      await tx.sendOffsets({ consumerGroupId: groupId, ...member, topics: [{ topic, partitions: [{ partition: 0, offset }] }] });
      await tx.commit();
    } catch (err) {
      await tx.abort().catch(() => undefined);
      throw err;
    }
  };
  const committed = async () => (await admin.fetchOffsets({ groupId, topics: [topic] }))[0]!.partitions.find((p) => p.partition === 0)!.offset;

  it('commits the offsets of a member of the current generation and refuses those of an earlier one', async () => {
    await admin.connect();
    await ensureTopics(admin, [{ topic, numPartitions: 2, replicationFactor: 1 }]);
    await producer.connect();
    // Records under every offset committed below: a member that owns
    // partition 0 reads from the committed offset, and one past the end
    // would make kafkajs reset it to the earliest (-2) under the test.
    const tx = await producer.transaction();
    await tx.send({ topic, messages: Array.from({ length: 10 }, (_, i) => ({ partition: 0, value: String(i) })) });
    await tx.commit();

    const first = await join();
    await expect.poll(() => first.length, { timeout: 30_000 }).toBeGreaterThan(0);
    const before = first.at(-1)!;
    expect(before.generationId).toBeGreaterThan(0);
    expect(before.memberId).not.toBe('');
    await commit('5', before);
    // The coordinator writes a commit's markers after EndTxn answers: on a
    // loaded machine (a CI run beside the rest of the suite) well past the
    // poll's default second.
    await expect.poll(committed, { timeout: 15_000 }).toBe('5');

    // A second member joins: the first rejoins in a new generation.
    await join();
    await expect.poll(() => first.at(-1)!.generationId, { timeout: 30_000 }).toBeGreaterThan(before.generationId);

    await expect(commit('7', before)).rejects.toThrow(/generation/i);
    await commit('9', first.at(-1)!);
    await expect.poll(committed, { timeout: 15_000 }).toBe('9');
  }, 60_000);

  /**
   * patches/kafkajs+2.2.4+012+offset-fetch-require-stable.patch: OffsetFetch
   * version 7 with require_stable (KIP-447), and offsets of chosen
   * partitions. Unpatched, kafkajs sends version 4, which cannot ask for
   * stable offsets: the pending offset below reads as the previous one (-1).
   */
  it('fetches a partition\'s offset stable: refused while a transaction\'s offsets for it are pending, the committed one after; other partitions answer meanwhile', async () => {
    const group = `${groupId}-stable`;
    await admin.connect();
    await ensureTopics(admin, [{ topic, numPartitions: 2, replicationFactor: 1 }]);
    await producer.connect();
    const offsetOf = async (partition: number, requireStable: boolean) =>
      (await admin.fetchOffsets({ groupId: group, topics: [{ topic, partitions: [partition] }], requireStable }))[0]!.partitions.map((p) => [p.partition, p.offset]);

    // The group's coordinator answers once it has loaded its partition of __consumer_offsets.
    await expect.poll(() => offsetOf(0, false).catch(() => undefined), { timeout: 30_000 }).toEqual([[0, '-1']]);
    const tx = await producer.transaction();
    try {
      await tx.sendOffsets({ consumerGroupId: group, topics: [{ topic, partitions: [{ partition: 0, offset: '3' }] }] });
      expect(await offsetOf(0, false)).toEqual([[0, '-1']]);
      await expect(offsetOf(0, true)).rejects.toMatchObject({ type: 'UNSTABLE_OFFSET_COMMIT', retriable: true });
      expect(await offsetOf(1, true)).toEqual([[1, '-1']]);
      await tx.commit();
    } catch (err) {
      await tx.abort().catch(() => undefined);
      throw err;
    }
    // Refused until the commit's marker reaches the coordinator, never stale.
    await expect.poll(() => offsetOf(0, true).catch((err: { type?: string }) => err.type), { timeout: 15_000 }).toEqual([[0, '3']]);
  }, 60_000);
});
