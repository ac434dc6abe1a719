import { randomBytes } from 'node:crypto';
import { createRequire } from 'node:module';
import { Kafka, logLevel } from 'kafkajs';
import { describe, expect, inject, it } from 'vitest';
import { ensureTopics } from './topics.ts';

/**
 * kafkajs's transaction manager (src/producer/eosManager) as patched by
 * patches/kafkajs+2.2.4+004+transaction-coordinator-cache.patch (and the
 * real-broker case, by +005+concurrent-transactions-no-refresh.patch): the
 * transaction coordinator is looked up once and kept, instead of a FindCoordinator round trip before every
 * AddPartitionsToTxn, EndTxn and AddOffsetsToTxn, and a failed request to it
 * makes the next one look it up again. Unpatched, every transaction made two
 * lookups (the intake's trace: 2 per transaction, 3-4 ms each under load),
 * and every CONCURRENT_TRANSACTIONS retry refreshed the metadata first.
 */
const require = createRequire(import.meta.url);
const createEosManager = require('kafkajs/src/producer/eosManager') as (opts: object) => EosManager;
const { createErrorFromCode } = require('kafkajs/src/protocol/error') as { createErrorFromCode: (code: number) => Error };
const { KafkaJSProtocolError } = require('kafkajs/src/errors') as { KafkaJSProtocolError: new (e: Error) => Error };

const NOT_COORDINATOR = 16;
const CONCURRENT_TRANSACTIONS = 51;

interface EosManager {
  initProducerId(): Promise<void>;
  beginTransaction(): void;
  addPartitionsToTransaction(topicData: Array<{ topic: string; partitions: Array<{ partition: number }> }>): Promise<void>;
  commit(): Promise<void>;
  abort(): Promise<void>;
}

const silent = { debug() {}, info() {}, warn() {}, error() {} };

/** A one-broker cluster whose coordinator requests can be made to fail; counts lookups and requests by kind. */
function fakeCluster() {
  const calls = { lookups: 0, findBroker: 0, addPartitions: 0, endTxn: 0 };
  const failNext: { addPartitions: number | undefined; findBroker: boolean } = { addPartitions: undefined, findBroker: false };
  const broker = {
    nodeId: 7,
    initProducerId: async () => ({ producerId: 1000, producerEpoch: 0 }),
    addPartitionsToTxn: async () => {
      calls.addPartitions++;
      const code = failNext.addPartitions;
      if (code !== undefined) {
        failNext.addPartitions = undefined;
        throw new KafkaJSProtocolError(createErrorFromCode(code));
      }
    },
    endTxn: async () => void calls.endTxn++,
  };
  const cluster = {
    retry: { retries: 0 },
    refreshMetadataIfNecessary: async () => {},
    findGroupCoordinator: async () => {
      calls.lookups++;
      return broker;
    },
    findBroker: async ({ nodeId }: { nodeId: number }) => {
      calls.findBroker++;
      if (failNext.findBroker) {
        failNext.findBroker = false;
        throw Object.assign(new Error(`broker ${nodeId} not found`), { name: 'KafkaJSBrokerNotFound' });
      }
      if (nodeId !== broker.nodeId) throw new Error(`unknown node ${nodeId}`);
      return broker;
    },
  };
  return { cluster, calls, failNext };
}

async function transaction(eos: EosManager, partitions: number[]): Promise<void> {
  eos.beginTransaction();
  await eos.addPartitionsToTransaction([{ topic: 't', partitions: partitions.map((partition) => ({ partition })) }]);
  await eos.commit();
}

describe('kafkajs transaction coordinator (patched eosManager)', () => {
  it('looks the coordinator up once for initProducerId and keeps it across transactions', async () => {
    const { cluster, calls } = fakeCluster();
    const eos = createEosManager({ logger: silent, cluster, transactional: true, transactionalId: 'tx-a' });
    await eos.initProducerId();
    expect(calls.lookups).toBe(1);
    for (let i = 0; i < 5; i++) await transaction(eos, [0, 1]);
    expect(calls).toEqual({ lookups: 1, findBroker: 10, addPartitions: 5, endTxn: 5 });
  });

  it('looks it up again after a request to it failed, and keeps the new answer', async () => {
    const { cluster, calls, failNext } = fakeCluster();
    const eos = createEosManager({ logger: silent, cluster, transactional: true, transactionalId: 'tx-b' });
    await eos.initProducerId();
    await transaction(eos, [0]);
    eos.beginTransaction();
    await eos.addPartitionsToTransaction([{ topic: 't', partitions: [{ partition: 0 }] }]);
    failNext.addPartitions = NOT_COORDINATOR;
    await expect(eos.addPartitionsToTransaction([{ topic: 't', partitions: [{ partition: 1 }] }])).rejects.toThrow(/coordinator/i);
    expect(calls.lookups).toBe(1);
    // The abort's EndTxn goes to a coordinator looked up afresh.
    await eos.abort();
    expect(calls.lookups).toBe(2);
    expect(calls.endTxn).toBe(2);
    await transaction(eos, [0]);
    await transaction(eos, [0]);
    expect(calls.lookups).toBe(2);
  });

  it('keeps it after an error that says nothing against it (CONCURRENT_TRANSACTIONS, retried by kafkajs)', async () => {
    const { cluster, calls, failNext } = fakeCluster();
    const eos = createEosManager({ logger: silent, cluster, transactional: true, transactionalId: 'tx-d' });
    await eos.initProducerId();
    eos.beginTransaction();
    failNext.addPartitions = CONCURRENT_TRANSACTIONS;
    await expect(eos.addPartitionsToTransaction([{ topic: 't', partitions: [{ partition: 0 }] }])).rejects.toThrow(/concurrent/i);
    await eos.addPartitionsToTransaction([{ topic: 't', partitions: [{ partition: 0 }] }]);
    await eos.commit();
    expect(calls).toEqual({ lookups: 1, findBroker: 3, addPartitions: 2, endTxn: 1 });
  });

  it('looks it up again when the kept node is no longer known to the client', async () => {
    const { cluster, calls, failNext } = fakeCluster();
    const eos = createEosManager({ logger: silent, cluster, transactional: true, transactionalId: 'tx-c' });
    await eos.initProducerId();
    failNext.findBroker = true;
    await transaction(eos, [0]);
    expect(calls.lookups).toBe(2);
    expect(calls.endTxn).toBe(1);
    await transaction(eos, [0]);
    expect(calls.lookups).toBe(2);
  });

  it('against the real broker: no lookup and no metadata refresh per transaction once the producer is up, and every record committed', async () => {
    const topic = `txn-coord-${randomBytes(4).toString('hex')}`;
    const kafka = new Kafka({ clientId: 'txn-coord-test', brokers: inject('kafkaBrokers'), logLevel: logLevel.NOTHING });
    const admin = kafka.admin();
    await admin.connect();
    const producer = kafka.producer({ transactionalId: `txn-coord-${randomBytes(4).toString('hex')}`, idempotent: true, maxInFlightRequests: 1, retry: { retries: 5, initialRetryTime: 20 } });
    const requests = new Map<string, number>();
    producer.on(producer.events.REQUEST, (e) => requests.set(e.payload.apiName, (requests.get(e.payload.apiName) ?? 0) + 1));
    const transact = async (i: number) => {
      const tx = await producer.transaction();
      await tx.send({ topic, acks: -1, messages: [0, 1, 2].map((partition) => ({ partition, value: `v${i}-${partition}` })) });
      await tx.commit();
    };
    try {
      await ensureTopics(admin, [{ topic, numPartitions: 3, replicationFactor: 1 }]);
      await producer.connect();
      // The first transaction initialises the producer id (lookups, and on a
      // fresh broker retries while the transaction log loads).
      await transact(0);
      requests.clear();
      const transactions = 20;
      for (let i = 1; i <= transactions; i++) await transact(i);
      expect(requests.get('EndTxn')).toBe(transactions);
      // Back-to-back transactions: most AddPartitionsToTxn are refused once
      // with CONCURRENT_TRANSACTIONS while the markers are written, and retried.
      expect(requests.get('AddPartitionsToTxn')).toBeGreaterThanOrEqual(transactions);
      // Unpatched: two lookups per transaction, and a metadata refresh per retry.
      expect(requests.get('GroupCoordinator') ?? 0).toBe(0);
      expect(requests.get('Metadata') ?? 0).toBeLessThanOrEqual(1);
      const committed = async () => (await admin.fetchTopicOffsets(topic)).reduce((n, p) => n + Number(p.high), 0);
      // Three records and three commit markers per transaction, once the markers are written.
      await expect.poll(committed).toBe((transactions + 1) * 3 * 2);
    } finally {
      await producer.disconnect();
      await admin.deleteTopics({ topics: [topic] }).catch(() => undefined);
      await admin.disconnect();
    }
  });
});
