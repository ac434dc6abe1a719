/**
 * Integration test of the local broker with a real Kafka JVM and no mocks.
 * Besides testing local-broker.ts it is the evidence that kafkajs 2.2.4 works
 * with KAFKA_VERSION for everything the service relies on.
 */
import { mkdtemp, readdir, readFile, rm } from 'node:fs/promises';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { type Admin, type Consumer, type KafkaMessage, Kafka, logLevel, type Message } from 'kafkajs';
import { afterAll, beforeAll, beforeEach, describe, expect, it, vi } from 'vitest';
import { retry } from '../../shared/retry.ts';
import { ensureKafkaJars, KAFKA_VERSION, type LocalBroker, startLocalBroker } from './local-broker.ts';

// The first run on a machine downloads about 45 MB of jars with Maven.
const FIRST_START_TIMEOUT_MS = 10 * 60_000;
const TEST_TIMEOUT_MS = 120_000;

const EVENTS = 'events';
const STATE = 'state';
const PARTITIONS = 3;
const DEFAULT_PARTITIONS = 4;

const log = (msg: string): void => console.log(`[local-broker] ${msg}`);

let dataDir: string;
let broker: LocalBroker;

function client(clientId: string): Kafka {
  return new Kafka({ clientId, brokers: broker.brokers, logLevel: logLevel.ERROR, retry: { retries: 5 } });
}

async function withAdmin<T>(fn: (admin: Admin) => Promise<T>): Promise<T> {
  const admin = client('test-admin').admin();
  await admin.connect();
  try {
    return await fn(admin);
  } finally {
    await admin.disconnect();
  }
}

/** Until `check` is true (a check that throws is tried again); fails naming `what` after `timeoutMs`. */
async function waitFor(what: string, check: () => boolean | Promise<boolean>, timeoutMs = 30_000): Promise<void> {
  await vi.waitFor(
    async () => {
      if (!(await check())) throw new Error('not yet');
    },
    { timeout: timeoutMs, interval: 100, message: `timed out waiting for ${what}` },
  );
}

async function produce(topic: string, messages: Message[], idempotent = false) {
  const producer = client('test-producer').producer(
    idempotent ? { idempotent: true, maxInFlightRequests: 1 } : { allowAutoTopicCreation: false },
  );
  await producer.connect();
  try {
    return await producer.send({ topic, acks: -1, messages });
  } finally {
    await producer.disconnect();
  }
}

async function highWatermarks(topic: string): Promise<Map<number, string>> {
  return withAdmin(async (admin) => {
    const offsets = await admin.fetchTopicOffsets(topic);
    return new Map(offsets.map((o) => [o.partition, o.high]));
  });
}

async function committedOffsets(groupId: string, topic: string): Promise<Map<number, string>> {
  return withAdmin(async (admin) => {
    // Right after a restart the group coordinator may still be loading its offsets: asked again until it answers.
    const [result] = await retry(() => admin.fetchOffsets({ groupId, topics: [topic] }), {
      schedule: { initialMs: 100, maxMs: 1000, giveUpAfterMs: 30_000 },
      isRetryable: (err) => /coordinator is loading|not the correct coordinator|coordinator is not available/i.test((err as Error).message),
    });
    return new Map((result?.partitions ?? []).map((p) => [p.partition, p.offset]));
  });
}

async function lag(groupId: string, topic: string): Promise<number> {
  const [high, committed] = await Promise.all([highWatermarks(topic), committedOffsets(groupId, topic)]);
  let total = 0;
  for (const [partition, end] of high) {
    const at = Number(committed.get(partition) ?? '-1');
    total += Number(end) - Math.max(at, 0);
  }
  return total;
}

/** Reads a topic from the beginning with a fresh group until `count` messages arrived. */
async function readAll(topic: string, count: number): Promise<KafkaMessage[]> {
  const consumer = client('test-reader').consumer({ groupId: `reader-${Date.now()}-${Math.random()}` });
  const seen: KafkaMessage[] = [];
  await consumer.connect();
  try {
    await consumer.subscribe({ topic, fromBeginning: true });
    await consumer.run({ eachMessage: async ({ message }) => void seen.push(message) });
    await waitFor(`${count} messages on ${topic} (got ${seen.length})`, () => seen.length >= count);
    return seen;
  } finally {
    await consumer.disconnect();
  }
}

function values(messages: KafkaMessage[]): string[] {
  return messages.map((m) => m.value?.toString() ?? '<null>').sort();
}

function numbered(prefix: string, count: number): { key: string; value: string }[] {
  return Array.from({ length: count }, (_, i) => ({ key: `k${i % 17}`, value: `${prefix}-${i}` }));
}

beforeAll(async () => {
  dataDir = await mkdtemp(path.join(os.tmpdir(), 'local-broker-test-'));
  broker = await startLocalBroker({ dataDir, partitions: DEFAULT_PARTITIONS, log, heapMb: 512 });
}, FIRST_START_TIMEOUT_MS);

// The data dir is deleted afterwards, so a failure must show the broker's side now.
beforeEach(({ onTestFailed }) => {
  onTestFailed(async () => {
    if (!broker) return;
    for (const file of [broker.logFile, path.join(broker.dataDir, 'logs', 'broker-stdout.log')]) {
      const text = await readFile(file, 'utf8').catch(() => '(missing)');
      console.error(`--- ${file} (broker pid ${broker.pid}) ---\n${text.trimEnd().split('\n').slice(-60).join('\n')}`);
    }
  });
});

afterAll(async () => {
  await broker?.stop();
  if (dataDir) await rm(dataDir, { recursive: true, force: true });
}, 60_000);

describe(`local Kafka ${KAFKA_VERSION} broker with kafkajs`, { timeout: TEST_TIMEOUT_MS }, () => {
  it('listens on 127.0.0.1 and serves cluster metadata', async () => {
    expect(broker.brokers).toEqual([`127.0.0.1:${broker.port}`]);
    expect(broker.pid).toBeGreaterThan(0);
    const cluster = await withAdmin((admin) => admin.describeCluster());
    expect(cluster.brokers).toHaveLength(1);
    expect(cluster.controller).toBe(1);
  });

  it('creates a normal and a compacted topic, and does not auto-create topics', async () => {
    await withAdmin(async (admin) => {
      const created = await admin.createTopics({
        waitForLeaders: true,
        topics: [
          { topic: EVENTS, numPartitions: PARTITIONS },
          {
            topic: STATE,
            numPartitions: 1,
            configEntries: [
              { name: 'cleanup.policy', value: 'compact' },
              // Small segments and no lag let the cleaner run within the test.
              { name: 'segment.ms', value: '100' },
              { name: 'min.cleanable.dirty.ratio', value: '0.01' },
              { name: 'min.compaction.lag.ms', value: '0' },
              { name: 'delete.retention.ms', value: '100' },
            ],
          },
          { topic: 'defaults' },
        ],
      });
      expect(created).toBe(true);

      const metadata = await admin.fetchTopicMetadata({ topics: [EVENTS, STATE, 'defaults'] });
      const partitionCount = Object.fromEntries(metadata.topics.map((t) => [t.name, t.partitions.length]));
      expect(partitionCount).toEqual({ [EVENTS]: PARTITIONS, [STATE]: 1, defaults: DEFAULT_PARTITIONS });

      const configs = await admin.describeConfigs({
        includeSynonyms: false,
        resources: [{ type: 2 /* ConfigResourceTypes.TOPIC */, name: STATE, configNames: ['cleanup.policy'] }],
      });
      expect(configs.resources[0]?.configEntries[0]?.configValue).toBe('compact');
    });

    const strict = new Kafka({ clientId: 'strict', brokers: broker.brokers, logLevel: logLevel.NOTHING, retry: { retries: 1 } });
    const producer = strict.producer({ allowAutoTopicCreation: true });
    await producer.connect();
    await expect(producer.send({ topic: 'not-created', messages: [{ value: 'x' }] })).rejects.toThrow();
    await producer.disconnect();
    expect(await withAdmin((admin) => admin.listTopics())).not.toContain('not-created');
  });

  it('produces with acks=-1 and consumes with a group via eachBatch, committing offsets', async () => {
    const sent = numbered('batch', 300);
    const results = await produce(EVENTS, sent);
    expect(results.every((r) => r.errorCode === 0)).toBe(true);

    const received: KafkaMessage[] = [];
    const consumer = client('test-batch').consumer({ groupId: 'g-batch' });
    await consumer.connect();
    await consumer.subscribe({ topic: EVENTS, fromBeginning: true });
    await consumer.run({
      eachBatchAutoResolve: false,
      eachBatch: async ({ batch, resolveOffset, heartbeat, commitOffsetsIfNecessary, isRunning, isStale }) => {
        for (const message of batch.messages) {
          if (!isRunning() || isStale()) break;
          received.push(message);
          resolveOffset(message.offset);
        }
        await heartbeat();
        await commitOffsetsIfNecessary();
      },
    });
    await waitFor('all 300 messages', () => received.length >= sent.length);
    await waitFor('group lag 0', async () => (await lag('g-batch', EVENTS)) === 0);
    await consumer.disconnect();

    expect(values(received)).toEqual(sent.map((m) => m.value).sort());
    const high = await highWatermarks(EVENTS);
    expect(await committedOffsets('g-batch', EVENTS)).toEqual(high);
    expect([...high.values()].reduce((sum, h) => sum + Number(h), 0)).toBe(300);
  });

  it('supports an idempotent producer', async () => {
    const results = await produce(EVENTS, numbered('idem', 30), true);
    expect(results.every((r) => r.errorCode === 0)).toBe(true);
  });

  it('pauses, resumes and seeks a running consumer, and pauses from inside eachBatch', async () => {
    const perPartition = new Map<number, string[]>();
    let pauseFromBatch: 'armed' | 'done' | 'off' = 'off';
    let pausedAt = 0;
    let pausedFirstOffset = '';
    let redeliveredAfterMs = -1;

    // A short long-poll, because pause/resume/seek take effect between fetches.
    const consumer: Consumer = client('test-control').consumer({ groupId: 'g-control', maxWaitTimeInMs: 500 });
    await consumer.connect();
    await consumer.subscribe({ topic: EVENTS, fromBeginning: true });
    await consumer.run({
      eachBatchAutoResolve: false,
      eachBatch: async ({ batch, resolveOffset, heartbeat, pause }) => {
        const first = batch.messages[0];
        if (pauseFromBatch === 'armed' && batch.partition === 1 && first) {
          // The retry-tier pattern: do not resolve, pause, and expect the
          // same messages again once the partition is resumed.
          pauseFromBatch = 'done';
          pausedAt = Date.now();
          pausedFirstOffset = first.offset;
          const resume = pause();
          setTimeout(resume, 1_500);
          return;
        }
        if (pauseFromBatch === 'done' && batch.partition === 1 && first?.offset === pausedFirstOffset && redeliveredAfterMs < 0) {
          redeliveredAfterMs = Date.now() - pausedAt;
        }
        const list = perPartition.get(batch.partition) ?? [];
        perPartition.set(batch.partition, list);
        for (const message of batch.messages) {
          list.push(message.offset);
          resolveOffset(message.offset);
        }
        await heartbeat();
      },
    });
    const total = (): number => [...perPartition.values()].reduce((sum, list) => sum + list.length, 0);
    await waitFor('existing 330 messages', () => total() >= 330);

    consumer.pause([{ topic: EVENTS }]);
    expect(consumer.paused()).toEqual([{ topic: EVENTS, partitions: expect.arrayContaining([0, 1, 2]) }]);
    await produce(EVENTS, numbered('while-paused', 20));
    // The fetch loop keeps turning while paused. A fetch that starts after the
    // produce would have returned the new messages, and the fetcher hands its
    // batches to eachBatch before it starts the next one: so two fetch starts
    // from now on prove a full round could have delivered them.
    let fetchStarts = 0;
    const stopCounting = consumer.on(consumer.events.FETCH_START, () => void fetchStarts++);
    await waitFor('two fetch rounds while paused', () => fetchStarts >= 2);
    stopCounting();
    expect(total()).toBe(330);
    consumer.resume([{ topic: EVENTS }]);
    await waitFor('messages produced while paused', () => total() >= 350);

    const partition0Before = perPartition.get(0)?.length ?? 0;
    consumer.seek({ topic: EVENTS, partition: 0, offset: '0' });
    await waitFor('partition 0 replayed after seek', () => (perPartition.get(0)?.length ?? 0) >= 2 * partition0Before);
    expect(perPartition.get(0)?.filter((offset) => offset === '0')).toHaveLength(2);

    pauseFromBatch = 'armed';
    await produce(EVENTS, [{ key: 'p1', value: 'to-partition-1', partition: 1 }]);
    await waitFor('batch redelivered after pause() from eachBatch', () => redeliveredAfterMs >= 0, 20_000);
    expect(redeliveredAfterMs).toBeGreaterThanOrEqual(1_400);
    log(`unresolved batch redelivered ${redeliveredAfterMs} ms after pause() from eachBatch`);
    await consumer.disconnect();
  });

  it('commits explicit offsets and reports them with fetchOffsets', async () => {
    const consumer = client('test-manual').consumer({ groupId: 'g-manual' });
    let assigned = false;
    consumer.on(consumer.events.GROUP_JOIN, () => {
      assigned = true;
    });
    await consumer.connect();
    await consumer.subscribe({ topic: EVENTS, fromBeginning: true });
    await consumer.run({ autoCommit: false, eachBatchAutoResolve: false, eachBatch: async () => {} });
    await waitFor('group join', () => assigned);
    await consumer.commitOffsets([
      { topic: EVENTS, partition: 0, offset: '5' },
      { topic: EVENTS, partition: 2, offset: '7' },
    ]);
    await consumer.disconnect();

    const committed = await committedOffsets('g-manual', EVENTS);
    expect(committed.get(0)).toBe('5');
    expect(committed.get(1)).toBe('-1');
    expect(committed.get(2)).toBe('7');
    const high = await highWatermarks(EVENTS);
    const expectedLag = [...high.values()].reduce((sum, h) => sum + Number(h), 0) - 12;
    expect(await lag('g-manual', EVENTS)).toBe(expectedLag);
  });

  it('compacts a compacted topic', async () => {
    await produce(STATE, [
      { key: 'a', value: 'a1' },
      { key: 'b', value: 'b1' },
    ]);
    await sleep(300);
    // Each append after segment.ms rolls a new segment, so the earlier values
    // end up in closed segments the cleaner may compact.
    await produce(STATE, [
      { key: 'a', value: 'a2' },
      { key: 'b', value: null },
    ]);
    await sleep(300);
    await produce(STATE, [{ key: 'c', value: 'c1' }]);
    await sleep(300);
    await produce(STATE, [{ key: 'd', value: 'd1' }]);

    const consumer = client('test-compaction').consumer({ groupId: 'g-compaction' });
    const seen: KafkaMessage[] = [];
    await consumer.connect();
    await consumer.subscribe({ topic: STATE, fromBeginning: true });
    await consumer.run({ eachMessage: async ({ message }) => void seen.push(message) });
    await waitFor(
      'the cleaner to drop a1 and b1',
      async () => {
        if (!seen.some((m) => m.value?.toString() === 'd1')) return false;
        const snapshot = values(seen.splice(0));
        if (!snapshot.includes('a1') && !snapshot.includes('b1')) return true;
        consumer.seek({ topic: STATE, partition: 0, offset: '0' });
        await sleep(1_000);
        return false;
      },
      60_000,
    );
    await consumer.disconnect();
  });

  it('keeps topics, data and committed offsets across stop() and restart', async () => {
    const high = await highWatermarks(EVENTS);
    const committed = await committedOffsets('g-batch', EVENTS);
    const port = broker.port;
    const before = await readAll(EVENTS, 351);

    await broker.stop();
    expect(() => process.kill(broker.pid, 0)).toThrow();
    const startedAt = performance.now();
    broker = await startLocalBroker({ dataDir, partitions: DEFAULT_PARTITIONS, log, heapMb: 512 });
    log(`restart after stop() took ${((performance.now() - startedAt) / 1000).toFixed(1)} s`);

    // A free port is reused, so clients that kept the old address reconnect.
    expect(broker.port).toBe(port);
    expect(await withAdmin((admin) => admin.listTopics())).toEqual(expect.arrayContaining([EVENTS, STATE, 'defaults']));
    expect(await highWatermarks(EVENTS)).toEqual(high);
    expect(await committedOffsets('g-batch', EVENTS)).toEqual(committed);
    expect(values(await readAll(EVENTS, 351))).toEqual(values(before));
  });

  it('restarts on new ports when the old one is taken', async () => {
    const high = await highWatermarks(EVENTS);
    const oldPort = broker.port;
    await broker.stop();

    const squatter = net.createServer();
    await new Promise<void>((resolve) => squatter.listen(oldPort, '127.0.0.1', resolve));
    try {
      broker = await startLocalBroker({ dataDir, partitions: DEFAULT_PARTITIONS, log, heapMb: 512 });
    } finally {
      await new Promise((resolve) => squatter.close(resolve));
    }
    expect(broker.port).not.toBe(oldPort);
    expect(await highWatermarks(EVENTS)).toEqual(high);
    const results = await produce(EVENTS, numbered('new-port', 10));
    expect(results.every((r) => r.errorCode === 0)).toBe(true);
  });

  it('keeps acknowledged messages when the broker is killed', async () => {
    const sent = numbered('before-crash', 500);
    const results = await produce(EVENTS, sent, true);
    expect(results.every((r) => r.errorCode === 0)).toBe(true);
    const high = await highWatermarks(EVENTS);
    const committed = await committedOffsets('g-batch', EVENTS);
    const oldPid = broker.pid;
    const oldPort = broker.port;

    broker.kill();
    const startedAt = performance.now();
    broker = await startLocalBroker({ dataDir, partitions: DEFAULT_PARTITIONS, log, heapMb: 512 });
    log(`restart after kill() took ${((performance.now() - startedAt) / 1000).toFixed(1)} s`);
    expect(broker.pid).not.toBe(oldPid);
    expect(broker.port).toBe(oldPort);

    expect(await highWatermarks(EVENTS)).toEqual(high);
    expect(await committedOffsets('g-batch', EVENTS)).toEqual(committed);
    const total = [...high.values()].reduce((sum, h) => sum + Number(h), 0);
    const all = values(await readAll(EVENTS, total));
    for (const message of sent) expect(all).toContain(message.value);
  });
});

describe('ensureKafkaJars', () => {
  it(
    'downloads once when called concurrently',
    async () => {
      const cacheDir = await mkdtemp(path.join(os.tmpdir(), 'kafka-jars-test-'));
      try {
        const messages: string[] = [];
        const [a, b] = await Promise.all([
          ensureKafkaJars({ cacheDir, log: (m) => messages.push(m) }),
          ensureKafkaJars({ cacheDir, log: (m) => messages.push(m) }),
        ]);
        expect(a).toBe(b);
        expect(messages.filter((m) => m.startsWith('downloading'))).toHaveLength(1);
        expect(await readdir(a)).toContain(`kafka_2.13-${KAFKA_VERSION}.jar`);
        expect((await readdir(path.dirname(a))).filter((name) => name.startsWith('.libs-partial-'))).toEqual([]);
      } finally {
        await rm(cacheDir, { recursive: true, force: true });
      }
    },
    FIRST_START_TIMEOUT_MS,
  );
});
