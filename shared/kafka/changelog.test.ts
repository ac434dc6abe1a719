import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Kafka, logLevel } from 'kafkajs';
import { afterAll, describe, expect, it } from 'vitest';
import { startLocalBroker, type LocalBroker } from '../../infra/kafka/local-broker.ts';
import { createLogger } from '../logger.ts';
import { createMetrics } from '../metrics.ts';
import { Changelog } from './changelog.ts';
import { ensureTopics } from './topics.ts';

/**
 * Against a broker of its own, killed and started again: a restore must
 * never see a key's older value once the newer one was read.
 */
describe('Changelog', () => {
  const dir = mkdtempSync(join(tmpdir(), 'va-changelog-'));
  let broker: LocalBroker | undefined;
  afterAll(async () => {
    await broker?.stop();
    rmSync(dir, { recursive: true, force: true });
  });

  it('keeps the newest value of a key when its consumer restarts after a broker loss and reads the topic from the start again', async () => {
    broker = await startLocalBroker({ dataDir: dir, partitions: 1 });
    const kafka = new Kafka({ clientId: 'changelog-test', brokers: broker.brokers, logLevel: logLevel.NOTHING, retry: { retries: 3, initialRetryTime: 100 } });
    const admin = kafka.admin();
    await admin.connect();
    const topic = 'state.v1';
    await ensureTopics(admin, [{ topic, numPartitions: 1, replicationFactor: 1 }]);
    // `k` first, many other keys, then `k` again: a re-read from the start
    // would hold the old `k` for as long as it takes to read past them.
    const producer = kafka.producer();
    await producer.connect();
    await producer.send({ topic, messages: [{ key: 'k', value: 'old' }] });
    for (let i = 0; i < 20; i++) await producer.send({ topic, messages: Array.from({ length: 1000 }, (_, j) => ({ key: `other-${i}-${j}`, value: 'x'.repeat(200) })) });
    await producer.send({ topic, messages: [{ key: 'k', value: 'new' }] });
    await producer.disconnect();

    const changelog = new Changelog({
      kafka,
      admin,
      topic,
      log: createLogger({ level: 'silent' }),
      metrics: createMetrics(),
      deadLetters: { send: async () => undefined },
      stallMs: 60_000,
    });
    await changelog.start();
    try {
      await changelog.caughtUp(0);
      expect(changelog.values(0).get('k')?.toString()).toBe('new');

      // Watched from the kill until well after the consumer is back and has read everything again.
      const seen = new Set<string>();
      const watch = setInterval(() => seen.add(changelog.values(0).get('k')?.toString() ?? 'none'), 2);
      try {
        broker.kill();
        await new Promise((r) => setTimeout(r, 1000));
        broker = await startLocalBroker({ dataDir: dir, partitions: 1 });
        // Back in its group and past the end again: it has read a value written after the restart.
        const after = kafka.producer();
        await after.connect();
        await after.send({ topic, messages: [{ key: 'marker', value: 'after' }] });
        await after.disconnect();
        await expect.poll(() => changelog.values(0).get('marker')?.toString(), { timeout: 90_000, interval: 100 }).toBe('after');
      } finally {
        clearInterval(watch);
      }
      expect([...seen]).toEqual(['new']);
    } finally {
      await changelog.stop();
      await admin.disconnect();
    }
  }, 240_000);
});
