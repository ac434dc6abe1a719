import { createRequire } from 'node:module';
import { describe, expect, it } from 'vitest';

/**
 * kafkajs's own produce path (src/producer/sendMessages.js) as patched by
 * patches/kafkajs+2.2.4+001+produce-per-partition.patch, driven with a
 * two-broker cluster whose leadership moves between attempts. Unpatched, kafkajs 2.2.4 kept one
 * response per broker across retries: a partition whose leader moved to a
 * broker that had already answered was never sent, and send() resolved
 * (tulios/kafkajs#1303). These tests fail on the unpatched file.
 */
const require = createRequire(import.meta.url);
const sendMessages = require('kafkajs/src/producer/sendMessages.js') as (opts: object) => (req: object) => Promise<Array<{ topicName: string; partition: number }>>;
const createRetry = require('kafkajs/src/retry') as (opts: object) => unknown;
const { createErrorFromCode } = require('kafkajs/src/protocol/error') as { createErrorFromCode: (code: number) => Error };
const { KafkaJSProtocolError } = require('kafkajs/src/errors') as { KafkaJSProtocolError: new (e: Error) => Error };

const NOT_LEADER_OR_FOLLOWER = 6;
const TOPIC = 'events';

interface Sent {
  broker: number;
  partition: number;
  values: string[];
}

/** A cluster of fake brokers; `leaders` maps partition → node and changes when `refreshMetadata` runs. */
function fakeCluster(opts: { leaders: number[]; afterRefresh: number[]; failOnce: Set<number>; hiddenUntilRefresh?: number }) {
  const sent: Sent[] = [];
  let leaders = opts.leaders;
  let refreshed = false;
  const failed = new Set<number>();
  const brokers = new Map<number, object>();
  const broker = (nodeId: number) => {
    if (!brokers.has(nodeId)) {
      brokers.set(nodeId, {
        nodeId,
        produce: async ({ topicData }: { topicData: Array<{ topic: string; partitions: Array<{ partition: number; messages: Array<{ value: string }> }> }> }) => {
          if (opts.failOnce.has(nodeId) && !failed.has(nodeId)) {
            failed.add(nodeId);
            throw new KafkaJSProtocolError(createErrorFromCode(NOT_LEADER_OR_FOLLOWER));
          }
          for (const t of topicData) for (const p of t.partitions) sent.push({ broker: nodeId, partition: p.partition, values: p.messages.map((m) => m.value) });
          return {
            topics: topicData.map((t) => ({
              topicName: t.topic,
              partitions: t.partitions.map((p) => ({ partition: p.partition, errorCode: 0, baseOffset: '0', logAppendTime: '-1', logStartOffset: '0' })),
            })),
          };
        },
      });
    }
    return brokers.get(nodeId)!;
  };
  const metadata = () => leaders.map((leader, partitionId) => ({ partitionId, leader, replicas: [leader], isr: [leader] }));
  const cluster = {
    targetTopics: new Set([TOPIC]),
    refreshMetadataIfNecessary: async () => {},
    refreshMetadata: async () => {
      leaders = opts.afterRefresh;
      refreshed = true;
    },
    addMultipleTargetTopics: async () => {},
    isConnected: () => true,
    removeBroker: () => {},
    findTopicPartitionMetadata: () => metadata(),
    findLeaderForPartitions: (_topic: string, partitions: Array<number | string>) => {
      const out: Record<string, number[]> = {};
      for (const p of partitions.map(Number)) {
        if (p === opts.hiddenUntilRefresh && !refreshed) continue; // as kafkajs does for a partition it has no metadata for
        (out[leaders[p]!] ??= []).push(p);
      }
      return out;
    },
    findBroker: async ({ nodeId }: { nodeId: number }) => broker(Number(nodeId)),
  };
  return { cluster, sent };
}

const eosManager = {
  isTransactional: () => false,
  getSequence: () => 0,
  updateSequence: () => {},
  acquireBrokerLock: async () => {},
  releaseBrokerLock: async () => {},
  getProducerId: () => -1,
  getProducerEpoch: () => 0,
  getTransactionalId: () => undefined,
};
const logger = { debug() {}, info() {}, warn() {}, error() {} };

function send(cluster: object, partitioner: (a: { message: { value: string; partition?: number } }) => number, values: Array<{ value: string; partition?: number }>) {
  const retrier = createRetry({ retries: 3, initialRetryTime: 1, maxRetryTime: 5 });
  return sendMessages({ logger, cluster, partitioner, eosManager, retrier })({ acks: -1, timeout: 1000, topicMessages: [{ topic: TOPIC, messages: values }] });
}

describe('kafkajs produce across a leader change (patched sendMessages)', () => {
  it('sends a partition whose leader moved to a broker that had already answered', async () => {
    // p0 on broker 1 (fails once with NOT_LEADER), p1 on broker 2 (answers);
    // after the refresh p0 is led by broker 2 too.
    const { cluster, sent } = fakeCluster({ leaders: [1, 2], afterRefresh: [2, 2], failOnce: new Set([1]) });
    const results = await send(cluster, ({ message }) => message.partition!, [
      { value: 'a', partition: 0 },
      { value: 'b', partition: 1 },
    ]);

    expect(results.map((r) => r.partition).sort()).toEqual([0, 1]);
    const delivered = sent.flatMap((s) => s.values).sort();
    expect(delivered).toEqual(['a', 'b']); // each once: p1 was not sent again
    expect(sent.find((s) => s.partition === 0)?.broker).toBe(2);
  });

  it('keeps each message in the partition first chosen, so a retry never moves it into one that already answered', async () => {
    // A partitioner that picks a different partition on every call, as the
    // default one does for keyless messages.
    let turn = 0;
    const { cluster, sent } = fakeCluster({ leaders: [1, 2], afterRefresh: [2, 2], failOnce: new Set([1]) });
    const results = await send(cluster, () => turn++ % 2, [{ value: 'a' }, { value: 'b' }, { value: 'c' }, { value: 'd' }]);

    expect(sent.flatMap((s) => s.values).sort()).toEqual(['a', 'b', 'c', 'd']);
    expect(results).toHaveLength(2);
  });

  it('retries a partition missing from the metadata instead of dropping its messages', async () => {
    // kafkajs 2.2.4 skipped such a partition and resolved without sending it.
    const { cluster, sent } = fakeCluster({ leaders: [1, 2], afterRefresh: [1, 2], failOnce: new Set(), hiddenUntilRefresh: 1 });
    const results = await send(cluster, ({ message }) => message.partition!, [
      { value: 'a', partition: 0 },
      { value: 'b', partition: 1 },
    ]);
    expect(sent.flatMap((s) => s.values).sort()).toEqual(['a', 'b']);
    expect(results.map((r) => r.partition).sort()).toEqual([0, 1]);
  });
});
