/**
 * The three-node local cluster with real Kafka JVMs and no mocks: the
 * service's topics get three replicas and min.insync.replicas 2, a node
 * killed with SIGKILL costs neither acknowledged writes nor committed
 * offsets, writes and reads go on while it is down, and once restarted it
 * rejoins every ISR.
 */
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { type Admin, Kafka, type KafkaMessage, logLevel } from 'kafkajs';
import { afterAll, beforeAll, beforeEach, describe, expect, it, onTestFinished, vi } from 'vitest';
import { retry } from '../../shared/retry.ts';
import { ensureTopics, replicationFor, topicDefinitions, topicNames, withReplication } from '../../shared/kafka/topics.ts';
import { KAFKA_VERSION, type LocalCluster, startLocalCluster } from './local-broker.ts';

const FIRST_START_TIMEOUT_MS = 10 * 60_000;
const TEST_TIMEOUT_MS = 150_000;
const TOPIC = 'cluster-events';
const PARTITIONS = 6;
const TOPIC_CONFIG = 2; // kafkajs ConfigResourceTypes.TOPIC

const log = (msg: string): void => console.log(`[local-cluster] ${msg}`);

let dataDir: string;
let cluster: LocalCluster;

function client(clientId: string): Kafka {
  return new Kafka({
    clientId,
    brokers: cluster.brokers,
    logLevel: logLevel.NOTHING,
    connectionTimeout: 2_000,
    requestTimeout: 10_000,
    retry: { retries: 10, initialRetryTime: 200, maxRetryTime: 2_000 },
  });
}

async function withAdmin<T>(fn: (admin: Admin) => Promise<T>): Promise<T> {
  const admin = client('cluster-test-admin').admin();
  await admin.connect();
  try {
    return await fn(admin);
  } finally {
    await admin.disconnect();
  }
}

/** Until `check` returns a value (a check that throws is tried again); fails naming `what` and the last error after `timeoutMs`. */
function waitFor<T>(what: string, check: () => Promise<T | undefined>, timeoutMs = 60_000): Promise<T> {
  return vi.waitFor(
    async () => {
      const value = await check();
      if (value === undefined) throw new Error('not yet');
      return value;
    },
    { timeout: timeoutMs, interval: 250, message: `timed out waiting for ${what}` },
  );
}

type PartitionState = { partition: number; leader: number; replicas: number[]; isr: number[] };

async function partitionsOf(topic: string): Promise<PartitionState[]> {
  // NOTE: a node learns of a new topic a moment after the controller created
  // it, and until then answers UNKNOWN_TOPIC_OR_PARTITION ("This server does
  // not host this topic-partition") to the metadata request kafkajs may send
  // it: asked again, it knows. Any other error fails at once.
  return retry(
    () =>
      withAdmin(async (admin) => {
        const { topics } = await admin.fetchTopicMetadata({ topics: [topic] });
        return (topics[0]?.partitions ?? [])
          .map((p) => ({ partition: p.partitionId, leader: p.leader, replicas: [...p.replicas].sort(), isr: [...p.isr].sort() }))
          .sort((a, b) => a.partition - b.partition);
      }),
    { schedule: { initialMs: 250, maxMs: 250, giveUpAfterMs: 30_000 }, isRetryable: (err) => (err as { type?: unknown }).type === 'UNKNOWN_TOPIC_OR_PARTITION' },
  );
}

async function minIsrOf(topics: string[]): Promise<Record<string, string | undefined>> {
  return withAdmin(async (admin) => {
    const { resources } = await admin.describeConfigs({
      includeSynonyms: false,
      resources: topics.map((name) => ({ type: TOPIC_CONFIG, name, configNames: ['min.insync.replicas'] })),
    });
    return Object.fromEntries(resources.map((r) => [r.resourceName, r.configEntries[0]?.configValue]));
  });
}

async function highWatermarks(topic: string): Promise<Map<number, string>> {
  return withAdmin(async (admin) => new Map((await admin.fetchTopicOffsets(topic)).map((o) => [o.partition, o.high])));
}

async function committedOffsets(groupId: string, topic: string): Promise<Map<number, string>> {
  return withAdmin(async (admin) => {
    const [result] = await admin.fetchOffsets({ groupId, topics: [topic] });
    return new Map((result?.partitions ?? []).map((p) => [p.partition, p.offset]));
  });
}

/**
 * Sends `values` in transactions of 50 (acks=-1, like the intake) and returns
 * once each one committed. Like a real client: a transaction that fails before
 * its commit is sent again by a new producer with the same transactional id
 * (its initialisation fences the old one and aborts the open transaction, so
 * read_committed readers never see it); kafkajs does not retry a commit or an
 * abort whose coordinator died. A commit that fails is ambiguous: the new
 * producer's initialisation settles it (a commit already prepared completes),
 * and `committed` tells whether the batch arrived; only then is it sent again.
 */
async function produceTransactionally(values: string[], transactionalId: string, committed?: (batch: string[]) => Promise<boolean>): Promise<void> {
  const deadline = Date.now() + 90_000;
  // A fresh producer for each try, until one connects or the deadline passes.
  const open = () =>
    retry(
      async () => {
        const producer = client('cluster-test-tx').producer({ transactionalId, idempotent: true, maxInFlightRequests: 1 });
        try {
          await producer.connect();
          return producer;
        } catch (err) {
          await producer.disconnect().catch(() => undefined);
          throw err;
        }
      },
      { schedule: { initialMs: 500, maxMs: 500, giveUpAfterMs: Math.max(0, deadline - Date.now()) } },
    );
  let producer = await open();
  const replace = async () => {
    await producer.disconnect().catch(() => undefined);
    producer = await open();
  };
  try {
    for (let i = 0; i < values.length; i += 50) {
      const batch = values.slice(i, i + 50);
      for (;;) {
        let tx: Awaited<ReturnType<typeof producer.transaction>>;
        try {
          tx = await producer.transaction();
          await tx.send({ topic: TOPIC, messages: batch.map((value) => ({ key: value, value })) });
        } catch (err) {
          // Not committed: the new producer's initialisation aborts it.
          if (Date.now() > deadline) throw err;
          await replace();
          continue;
        }
        try {
          await tx.commit();
          break;
        } catch (err) {
          if (!committed || Date.now() > deadline) throw err;
          await replace();
          if (await committed(batch)) break;
        }
      }
    }
  } finally {
    await producer.disconnect().catch(() => undefined);
  }
}

/**
 * For a commit that failed: whether `group` (read_committed, running) gets the
 * batch. Once the new producer's initialisation has settled the transaction,
 * a committed batch reaches a running group within seconds; 45 s covers the
 * group's own recovery after a node kill.
 */
function arrivedAt(group: { seen: KafkaMessage[] }) {
  return async (batch: string[]): Promise<boolean> => {
    log(`a commit failed: waiting to see whether its ${batch.length} records arrive`);
    const arrived = await waitFor('the batch of an ambiguous commit', async () => {
      const seen = new Set(group.seen.map((m) => m.value?.toString()));
      return batch.every((v) => seen.has(v)) ? true : undefined;
    }, 45_000).catch(() => false);
    log(`the batch ${arrived ? 'was committed' : 'was not committed: sending it again'}`);
    return arrived;
  };
}

/** A read_committed consumer group that commits every batch it has seen. */
async function startGroup(groupId: string) {
  const seen: (KafkaMessage & { partition: number })[] = [];
  const consumer = client('cluster-test-consumer').consumer({ groupId, maxWaitTimeInMs: 200, readUncommitted: false });
  await consumer.connect();
  await consumer.subscribe({ topic: TOPIC, fromBeginning: true });
  await consumer.run({ eachMessage: async ({ message, partition }) => void seen.push({ ...message, partition }) });
  return { seen, stop: () => consumer.disconnect() };
}

function numbered(prefix: string, count: number): string[] {
  return Array.from({ length: count }, (_, i) => `${prefix}-${i}`);
}

/** The node that leads the most partitions of TOPIC: killing it moves the most leaderships. */
async function busiestLeader(): Promise<number> {
  const counts = new Map<number, number>();
  for (const p of await partitionsOf(TOPIC)) counts.set(p.leader, (counts.get(p.leader) ?? 0) + 1);
  return [...counts].sort((a, b) => b[1] - a[1])[0]![0];
}

beforeAll(async () => {
  dataDir = await mkdtemp(path.join(os.tmpdir(), 'local-cluster-test-'));
  cluster = await startLocalCluster({ dataDir, nodes: 3, partitions: 3, heapMb: 384, log });
}, FIRST_START_TIMEOUT_MS);

// The data dir is deleted afterwards, so a failure must show the brokers' side now.
beforeEach(({ onTestFailed }) => {
  onTestFailed(async () => {
    for (const node of cluster?.nodes() ?? []) {
      const text = await readFile(node.logFile, 'utf8').catch(() => '(missing)');
      const lines = text.trimEnd().split('\n').slice(-30).map((line) => (line.length > 400 ? `${line.slice(0, 400)}…` : line));
      console.error(`--- node ${node.nodeId} ${node.logFile} (pid ${node.pid ?? 'down'}) ---\n${lines.join('\n')}`);
    }
  });
});

afterAll(async () => {
  await cluster?.stop();
  if (dataDir) await rm(dataDir, { recursive: true, force: true });
}, 60_000);

describe('replication for a cluster size', () => {
  it('is three replicas with min.insync.replicas 2 from three brokers on, else what the cluster has', () => {
    expect(replicationFor(1)).toEqual({ replicationFactor: 1, minInsyncReplicas: 1 });
    expect(replicationFor(2)).toEqual({ replicationFactor: 2, minInsyncReplicas: 1 });
    expect(replicationFor(3)).toEqual({ replicationFactor: 3, minInsyncReplicas: 2 });
    expect(replicationFor(7)).toEqual({ replicationFactor: 3, minInsyncReplicas: 2 });
    const [own, open] = withReplication(
      [
        { topic: 'own', replicationFactor: 1, configEntries: [] },
        { topic: 'open', replicationFactor: -1, configEntries: [{ name: 'retention.ms', value: '-1' }] },
      ],
      3,
    );
    expect(own).toEqual({ topic: 'own', replicationFactor: 1, configEntries: [] });
    const assigned = { topic: 'assigned', replicaAssignment: [{ partition: 0, replicas: [1, 2] }] };
    expect(withReplication([assigned], 3)).toEqual([assigned]);
    expect(open?.replicationFactor).toBe(3);
    expect(open?.configEntries).toEqual([
      { name: 'retention.ms', value: '-1' },
      { name: 'min.insync.replicas', value: '2' },
    ]);
  });
});

describe(`local Kafka ${KAFKA_VERSION} cluster of three nodes`, { timeout: TEST_TIMEOUT_MS }, () => {
  it('runs three registered nodes on distinct 127.0.0.1 ports', async () => {
    const nodes = cluster.nodes();
    expect(nodes.map((n) => n.nodeId)).toEqual([1, 2, 3]);
    expect(nodes.every((n) => n.running && (n.pid ?? 0) > 0)).toBe(true);
    expect(new Set(nodes.flatMap((n) => [n.port, n.controllerPort])).size).toBe(6);
    expect(cluster.brokers).toEqual(nodes.map((n) => `127.0.0.1:${n.port}`));
    const described = await withAdmin((admin) => admin.describeCluster());
    expect(described.brokers.map((b) => b.nodeId).sort()).toEqual([1, 2, 3]);
    expect(described.clusterId).toBe(cluster.clusterId);
  });

  it("creates the service's topics with three replicas and min.insync.replicas 2", async () => {
    const topics = topicNames('svc.');
    const defs = topicDefinitions(topics, 3);
    await withAdmin((admin) => ensureTopics(admin, defs));
    for (const def of defs) {
      const partitions = await partitionsOf(def.topic);
      expect(partitions.length, def.topic).toBe(def.numPartitions);
      for (const p of partitions) expect(p.replicas, `${def.topic}/${p.partition}`).toEqual([1, 2, 3]);
    }
    const minIsr = await minIsrOf(defs.map((d) => d.topic));
    expect(Object.values(minIsr)).toEqual(defs.map(() => '2'));
  });

  it('replicates internal topics (offsets, transactions) three times with min.insync.replicas 2', async () => {
    // NOTE: ensureTopics, not a bare createTopics: with several brokers, the
    // one kafkajs asks for leaders may not know the new topic yet, and
    // kafkajs does not retry that.
    await withAdmin((admin) => ensureTopics(admin, [{ topic: TOPIC, numPartitions: PARTITIONS, replicationFactor: -1 }]));
    expect((await partitionsOf(TOPIC)).map((p) => p.replicas)).toEqual(Array.from({ length: PARTITIONS }, () => [1, 2, 3]));
    await produceTransactionally(numbered('warm-up', 10), 'cluster-test-warm-up');
    const group = await startGroup('g-warm-up');
    await waitFor('the warm-up records', async () => (group.seen.length >= 10 ? true : undefined));
    await waitFor('a committed offset', async () => ([...(await committedOffsets('g-warm-up', TOPIC)).values()].some((o) => o !== '-1') ? true : undefined));
    await group.stop();
    for (const internal of ['__consumer_offsets', '__transaction_state']) {
      const partitions = await partitionsOf(internal);
      expect(partitions.length, internal).toBe(10);
      for (const p of partitions) expect(p.replicas, `${internal}/${p.partition}`).toEqual([1, 2, 3]);
    }
    expect(await minIsrOf(['__consumer_offsets', '__transaction_state'])).toEqual({ __consumer_offsets: '2', __transaction_state: '2' });
  });

  it('keeps producing and consuming while a node is killed with SIGKILL, and the node rejoins every ISR after a restart', async () => {
    const group = await startGroup('g-kill');
    onTestFinished(() => group.stop().catch(() => undefined));
    const before = numbered('before-kill', 300);
    await produceTransactionally(before, 'cluster-test-before', arrivedAt(group));
    await waitFor('records before the kill', async () => (group.seen.length >= 310 ? true : undefined));

    const victim = await busiestLeader();
    const led = (await partitionsOf(TOPIC)).filter((p) => p.leader === victim).length;
    const highBefore = await highWatermarks(TOPIC);
    const victimPid = cluster.node(victim).pid!;
    expect(victimPid).toBeGreaterThan(0);
    const killedAt = performance.now();
    onTestFinished(async () => {
      if (!cluster.node(victim).running) await cluster.restart(victim);
    });
    await cluster.kill(victim);
    expect(cluster.node(victim)).toMatchObject({ running: false, pid: undefined });
    expect(() => process.kill(victimPid, 0)).toThrow();

    // Acknowledged writes survive, and writes go on (acks=-1 with two of three in sync).
    const during = numbered('while-down', 300);
    await produceTransactionally(during, 'cluster-test-during', arrivedAt(group));
    const writableAfterMs = performance.now() - killedAt;
    const partitionsDown = await waitFor(
      'the killed node to leave every ISR and leadership',
      async () => {
        const partitions = await partitionsOf(TOPIC);
        return partitions.every((p) => !p.isr.includes(victim) && p.leader !== victim && p.isr.length === 2) ? partitions : undefined;
      },
      30_000,
    );
    expect(partitionsDown.every((p) => p.replicas.length === 3)).toBe(true);
    await waitFor('records written while the node is down', async () => (group.seen.length >= 610 ? true : undefined));
    const high = await highWatermarks(TOPIC);
    for (const [partition, end] of highBefore) expect(BigInt(high.get(partition) ?? '0')).toBeGreaterThanOrEqual(BigInt(end));
    log(`node ${victim} (leader of ${led}/${PARTITIONS}) killed; 300 records in 6 transactions committed ${(writableAfterMs / 1000).toFixed(1)} s after the kill`);

    const restartedAt = performance.now();
    await cluster.restart(victim);
    expect(cluster.node(victim).running).toBe(true);
    const rejoined = await waitFor(
      'the restarted node to rejoin every ISR',
      async () => {
        const partitions = await partitionsOf(TOPIC);
        return partitions.every((p) => p.isr.length === 3) ? partitions : undefined;
      },
      60_000,
    );
    expect(rejoined.every((p) => p.isr.includes(victim))).toBe(true);
    await waitFor(
      'the restarted node to rejoin the internal topics\' ISRs',
      async () => {
        const internal = [...(await partitionsOf('__consumer_offsets')), ...(await partitionsOf('__transaction_state'))];
        return internal.every((p) => p.isr.length === 3) ? true : undefined;
      },
      60_000,
    );
    log(`node ${victim} restarted and back in every ISR after ${((performance.now() - restartedAt) / 1000).toFixed(1)} s`);

    const after = numbered('after-restart', 100);
    await produceTransactionally(after, 'cluster-test-after', arrivedAt(group));
    await waitFor('records after the restart', async () => (group.seen.length >= 710 ? true : undefined));
    await sleep(1_000);
    await group.stop();

    // Every committed record exactly once in the log: one offset per value,
    // none missing. The group itself reads at least once: when the node that
    // coordinated it dies, a batch whose offset commit had not reached it is
    // read again (same partition and offset). A group that lost its offsets
    // would re-read everything from the start, which the bound below rules out.
    const byOffset = new Map(group.seen.map((m) => [`${m.partition}/${m.offset}`, m]));
    const reread = group.seen.length - byOffset.size;
    log(`the group read ${reread} records a second time (same partition and offset) across the kill`);
    expect(reread).toBeLessThan(before.length);
    const values = [...byOffset.values()].map((m) => m.value?.toString() ?? '').filter((v) => !v.startsWith('warm-up'));
    expect(values.sort()).toEqual([...before, ...during, ...after].sort());
    // Committed past the last record of each partition, and at most a commit
    // marker short of the end. NOTE: a transaction's commit marker takes an
    // offset of its own, which kafkajs skips without always committing.
    const committed = await committedOffsets('g-kill', TOPIC);
    const ends = await highWatermarks(TOPIC);
    for (const [partition, end] of ends) {
      const last = group.seen.filter((m) => m.partition === partition).reduce((max, m) => (BigInt(m.offset) > max ? BigInt(m.offset) : max), -1n);
      const at = BigInt(committed.get(partition) ?? '-1');
      expect(at, `partition ${partition}`).toBeGreaterThan(last);
      expect(BigInt(end) - at, `partition ${partition}: only a commit marker may follow`).toBeLessThanOrEqual(1n);
      expect(at, `partition ${partition}`).toBeLessThanOrEqual(BigInt(end));
    }
  });

  it('refuses acks=-1 writes when fewer than min.insync.replicas are in sync', async () => {
    // Two nodes down would also cost the controller majority; a topic whose
    // replicas live on one node only (the others' copies removed) shows the
    // min ISR rule without that. Here: replicas on nodes 1 and 2, node 2 killed.
    await withAdmin((admin) =>
      ensureTopics(admin, [
        { topic: 'min-isr', replicaAssignment: [{ partition: 0, replicas: [1, 2] }], configEntries: [{ name: 'min.insync.replicas', value: '2' }] },
      ]),
    );
    expect((await partitionsOf('min-isr')).map((p) => p.replicas)).toEqual([[1, 2]]);
    const producer = client('cluster-test-min-isr').producer({ idempotent: true, maxInFlightRequests: 1, retry: { retries: 2 } });
    await producer.connect();
    try {
      await producer.send({ topic: 'min-isr', acks: -1, messages: [{ value: 'in-sync' }] });
      await cluster.kill(2);
      await waitFor('node 2 out of the ISR', async () => ((await partitionsOf('min-isr'))[0]?.isr.join() === '1' ? true : undefined), 30_000);
      await expect(producer.send({ topic: 'min-isr', acks: -1, messages: [{ value: 'under-replicated' }] })).rejects.toThrow(/NOT_ENOUGH_REPLICAS|not enough|replicas/i);
    } finally {
      await producer.disconnect();
      await cluster.restart(2);
    }
    await waitFor('node 2 back in the ISR', async () => ((await partitionsOf('min-isr'))[0]?.isr.length === 2 ? true : undefined), 60_000);
  });

  it('restarts as a whole on the same data directory with its topics and data', async () => {
    const high = await highWatermarks(TOPIC);
    const ports = cluster.nodes().map((n) => n.port);
    await cluster.stop();
    expect(cluster.nodes().every((n) => !n.running)).toBe(true);
    const startedAt = performance.now();
    cluster = await startLocalCluster({ dataDir, nodes: 3, partitions: 3, heapMb: 384, log });
    log(`whole-cluster restart took ${((performance.now() - startedAt) / 1000).toFixed(1)} s`);
    expect(cluster.nodes().map((n) => n.port)).toEqual(ports);
    expect(await highWatermarks(TOPIC)).toEqual(high);
    await expect(startLocalCluster({ dataDir, nodes: 5 })).rejects.toThrow(/3-node cluster/);
  }, 240_000);
});
