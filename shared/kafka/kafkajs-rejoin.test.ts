import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Kafka, logLevel, type Consumer } from 'kafkajs';
import { afterAll, describe, expect, it } from 'vitest';
import { startLocalBroker, type LocalBroker } from '../../infra/kafka/local-broker.ts';
import { ensureTopics } from './topics.ts';

/**
 * A consumer whose broker was killed crashes without leaving its group
 * (LeaveGroup cannot reach the coordinator) and kafkajs restarts it. Unpatched,
 * kafkajs 2.2.4 restarts under a new member id: the coordinator keeps the old
 * member until its session times out and holds the rebalance for it, so the
 * group consumes nothing for up to a session timeout after the broker is back.
 * patches/kafkajs+2.2.4+002+consumer-rejoin-member-id.patch rejoins under the
 * old member id. With a session timeout of 90 s, a record produced after the
 * restart must arrive well within it; unpatched this test fails at its 45 s
 * bound.
 */
describe('kafkajs consumer restarted after its broker died', () => {
  const dir = mkdtempSync(join(tmpdir(), 'va-rejoin-'));
  let broker: LocalBroker | undefined;
  let consumer: Consumer | undefined;

  afterAll(async () => {
    await consumer?.disconnect().catch(() => undefined);
    await broker?.stop().catch(() => undefined);
    rmSync(dir, { recursive: true, force: true });
  });

  it('rejoins its group under its member id and consumes again without waiting for the old session to expire', async () => {
    broker = await startLocalBroker({ dataDir: dir, partitions: 1 });
    const kafka = new Kafka({ clientId: 'rejoin-test', brokers: broker.brokers, logLevel: logLevel.NOTHING, retry: { retries: 3, initialRetryTime: 100, maxRetryTime: 1000 } });
    const topic = 'rejoin-test';
    const admin = kafka.admin();
    await admin.connect();
    await ensureTopics(admin, [{ topic, numPartitions: 1, replicationFactor: 1 }]);
    await admin.disconnect();

    const seen: string[] = [];
    const joins: string[] = [];
    consumer = kafka.consumer({ groupId: 'rejoin-test', sessionTimeout: 90_000, heartbeatInterval: 3000, rebalanceTimeout: 90_000 });
    consumer.on(consumer.events.GROUP_JOIN, (e) => joins.push(e.payload.memberId));
    await consumer.connect();
    await consumer.subscribe({ topic, fromBeginning: true });
    await consumer.run({ eachMessage: async ({ message }) => void seen.push(String(message.value)) });

    const produce = async (value: string) => {
      const p = kafka.producer();
      await p.connect();
      await p.send({ topic, acks: -1, messages: [{ value }] });
      await p.disconnect();
    };
    await produce('before');
    await expect.poll(() => seen, { timeout: 30_000, interval: 100 }).toContain('before');
    const firstMember = joins.at(-1);

    broker.kill();
    // Long enough for the consumer's retries to run out: it crashes and restarts.
    await new Promise((r) => setTimeout(r, 8000));
    broker = await startLocalBroker({ dataDir: dir, partitions: 1 });
    await produce('after');
    await expect.poll(() => seen, { timeout: 45_000, interval: 200 }).toContain('after');
    expect(joins.at(-1), 'the restarted consumer rejoined under its member id').toBe(firstMember);
  }, 120_000);
});
