import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Kafka, logLevel } from 'kafkajs';
import { afterAll, describe, expect, it } from 'vitest';
import { startLocalBroker, type LocalBroker } from '../../infra/kafka/local-broker.ts';
import { randomUUID } from 'node:crypto';
import { SchemaRegistry } from '../../schemas/registry.ts';
import type { ApiKeyRecord } from '../../schemas/records.ts';
import { ConfigStore, ConfigWriter } from '../config-store/config-store.ts';
import { createLogger } from '../logger.ts';
import { createMetrics } from '../metrics.ts';
import { Changelog } from './changelog.ts';
import { ensureTopics, topicDefinitions, topicNames } from './topics.ts';

/**
 * Against a broker of its own, killed and started again: a follower of a
 * whole topic (a restore from the changelog, the config store) must never
 * see a key's older value once the newer one was read.
 */
describe('Whole-topic followers after a broker loss', () => {
  const dir = mkdtempSync(join(tmpdir(), 'va-changelog-'));
  let broker: LocalBroker | undefined;
  afterAll(async () => {
    await broker?.stop();
    rmSync(dir, { recursive: true, force: true });
  });

  it('keep the newest value of a key when their consumers restart and read the topics from the start again (a revoked API key stays revoked)', async () => {
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

    // The same for an API key: written, many other keys, then revoked.
    const topics = topicNames('follower.');
    await ensureTopics(admin, topicDefinitions(topics, 1));
    const registry = SchemaRegistry.fromManifest();
    const log = createLogger({ level: 'silent' });
    const store = new ConfigStore({ kafka, registry, log, metrics: createMetrics(), topics, stallMs: 60_000 });
    const writer = new ConfigWriter({ kafka, store, registry, topics });
    await writer.connect();
    const tenantId = randomUUID();
    const apiKey = (id: string): ApiKeyRecord => ({ id, tenant_id: tenantId, name: 'k', prefix: 'sk_test', key_hash: 'a'.repeat(64), created_at: 1, revoked_at: null });
    const keyId = randomUUID();
    await writer.put('apiKeys', keyId, apiKey(keyId), { waitApplied: false });
    const keyProducer = kafka.producer();
    await keyProducer.connect();
    for (let i = 0; i < 10; i++) {
      const messages = Array.from({ length: 1000 }, () => {
        const id = randomUUID();
        return { key: id, value: registry.encode('api-key', apiKey(id)) };
      });
      await keyProducer.send({ topic: topics.apiKeys, messages });
    }
    await keyProducer.disconnect();
    await writer.put('apiKeys', keyId, { ...apiKey(keyId), revoked_at: 2 }, { waitApplied: false });
    await writer.disconnect();

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
    await store.start(admin);
    try {
      await changelog.caughtUp(0);
      expect(changelog.values(0).get('k')?.toString()).toBe('new');
      expect(store.apiKeys.get(keyId)?.revoked_at).toBe(2);

      // Watched from the kill until well after the consumer is back and has read everything again.
      const seen = new Set<string>();
      const revoked = new Set<number | null | undefined>();
      const watch = setInterval(() => {
        seen.add(changelog.values(0).get('k')?.toString() ?? 'none');
        revoked.add(store.apiKeys.get(keyId)?.revoked_at);
      }, 2);
      try {
        broker.kill();
        await new Promise((r) => setTimeout(r, 1000));
        broker = await startLocalBroker({ dataDir: dir, partitions: 1 });
        // Back in its group and past the end again: it has read a value written after the restart.
        const after = kafka.producer();
        await after.connect();
        await after.send({ topic, messages: [{ key: 'marker', value: 'after' }] });
        const markerId = randomUUID();
        await after.send({ topic: topics.apiKeys, messages: [{ key: markerId, value: registry.encode('api-key', apiKey(markerId)) }] });
        await after.disconnect();
        await expect.poll(() => changelog.values(0).get('marker')?.toString(), { timeout: 90_000, interval: 100 }).toBe('after');
        await expect.poll(() => store.apiKeys.has(markerId), { timeout: 90_000, interval: 100 }).toBe(true);
      } finally {
        clearInterval(watch);
      }
      expect([...seen]).toEqual(['new']);
      expect([...revoked]).toEqual([2]);
    } finally {
      await changelog.stop();
      await store.stop();
      await admin.disconnect();
    }
  }, 240_000);
});
