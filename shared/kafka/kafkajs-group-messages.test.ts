import { createRequire } from 'node:module';
import { describe, expect, it } from 'vitest';
import { seededRandom } from '../../test/helpers/kafkajs-copy.ts';
import { JavaCompatiblePartitioner } from './partitioner.ts';

/**
 * kafkajs's grouping of a send's messages by partition
 * (src/producer/groupMessagesPerPartition.js) as patched by
 * patches/kafkajs+2.2.4+006+group-messages-in-place.patch: appended in place
 * instead of copying the partition's array for every message. The result must be the one of
 * kafkajs 2.2.4's own code, kept below as the reference.
 */
const require = createRequire(import.meta.url);
type Msg = { key: string | null; value: string };
type Group = (opts: { topic: string; partitionMetadata: unknown[]; messages: Msg[]; partitioner: (a: { topic: string; partitionMetadata: unknown[]; message: Msg }) => number }) => Record<string, Msg[]>;
const groupMessagesPerPartition = require('kafkajs/src/producer/groupMessagesPerPartition.js') as Group;

/** kafkajs 2.2.4's groupMessagesPerPartition, unpatched. */
const upstream: Group = ({ topic, partitionMetadata, messages, partitioner }) => {
  if (partitionMetadata.length === 0) return {};
  return messages.reduce<Record<string, Msg[]>>((result, message) => {
    const partition = partitioner({ topic, partitionMetadata, message });
    const current = result[partition] ?? [];
    return Object.assign(result, { [partition]: [...current, message] });
  }, {});
};

const metadata = (n: number) => Array.from({ length: n }, (_, i) => ({ partitionId: i, leader: 0 }));

describe('kafkajs groupMessagesPerPartition (patched)', () => {
  it('groups like kafkajs 2.2.4 did: the same partitions, the same messages in the same order, keys in the same order', () => {
    for (let seed = 1; seed <= 200; seed++) {
      const next = seededRandom(seed);
      const partitions = 1 + Math.floor(next() * 24);
      const messages: Msg[] = Array.from({ length: Math.floor(next() * 300) }, (_, i) => ({
        key: next() < 0.2 ? null : `t:${Math.floor(next() * 50)}`,
        value: `m${seed}-${i}`,
      }));
      // Keyless messages go round-robin from a random start: each message's
      // partition is chosen once, and both sides are given the same choice.
      const args = { topic: 'events', partitionMetadata: metadata(partitions), messages };
      const choose = JavaCompatiblePartitioner();
      const chosen = new Map(messages.map((message) => [message, choose({ ...args, message } as never)]));
      const partitioner = ({ message }: { message: Msg }) => chosen.get(message)!;
      const got = groupMessagesPerPartition({ ...args, partitioner });
      const want = upstream({ ...args, partitioner });
      expect(Object.keys(got)).toEqual(Object.keys(want));
      for (const p of Object.keys(want)) {
        expect(got[p]!.length).toBe(want[p]!.length);
        got[p]!.forEach((m, i) => expect(m).toBe(want[p]![i]));
      }
    }
  });

  it('keeps every message of a transaction-sized send exactly once', () => {
    const messages: Msg[] = Array.from({ length: 5000 }, (_, i) => ({ key: `tenant:${i % 997}`, value: `v${i}` }));
    const got = groupMessagesPerPartition({ topic: 'events', partitionMetadata: metadata(12), messages, partitioner: JavaCompatiblePartitioner() as never });
    const all = Object.values(got).flat();
    expect(all).toHaveLength(messages.length);
    expect(new Set(all).size).toBe(messages.length);
  });

  it('has no partitions when the topic has no metadata', () => {
    expect(groupMessagesPerPartition({ topic: 'events', partitionMetadata: [], messages: [{ key: 'a', value: 'b' }], partitioner: () => 0 })).toEqual({});
  });
});
