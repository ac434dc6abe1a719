import type { Subject } from '../../schemas/registry.ts';
import type { TopicKey } from '../../shared/kafka/topics.ts';
import { randomBytes } from 'node:crypto';
import type { Admin, Kafka, Producer } from 'kafkajs';
import { vi } from 'vitest';

/** One record as read back from a topic. */
export interface ReadRecord {
  partition: number;
  offset: string;
  key: Buffer | null;
  value: Buffer | null;
  headers: Record<string, string>;
}

/**
 * Every committed record of `topic`, read from the start with a fresh group
 * up to the high watermarks taken when the call starts. The end is found by
 * offset, so it is reached even when a partition ends in a transaction
 * marker (which consumers never see as a record).
 */
export async function readTopicToEnd(kafka: Kafka, admin: Admin, topic: string, timeoutMs = 30_000): Promise<ReadRecord[]> {
  const ends = new Map((await admin.fetchTopicOffsets(topic)).map((o) => [o.partition, { low: BigInt(o.low), high: BigInt(o.high) }]));
  const position = new Map<number, bigint>();
  for (const [partition, { low }] of ends) position.set(partition, low);
  const done = () => [...ends].every(([partition, { high }]) => (position.get(partition) ?? 0n) >= high);
  if (done()) return [];
  const out: ReadRecord[] = [];
  const consumer = kafka.consumer({ groupId: `reader-${randomBytes(6).toString('hex')}`, maxWaitTimeInMs: 100 });
  const advance = (partition: number, next: bigint) => {
    if (next > (position.get(partition) ?? 0n)) position.set(partition, next);
  };
  consumer.on(consumer.events.END_BATCH_PROCESS, (e) => {
    if (e.payload.topic === topic && e.payload.lastOffset !== null && e.payload.lastOffset !== undefined) advance(e.payload.partition, BigInt(e.payload.lastOffset) + 1n);
  });
  await consumer.connect();
  try {
    await consumer.subscribe({ topic, fromBeginning: true });
    await consumer.run({
      eachMessage: async ({ partition, message }) => {
        if (BigInt(message.offset) >= (ends.get(partition)?.high ?? 0n)) return;
        const headers: Record<string, string> = {};
        for (const [k, v] of Object.entries(message.headers ?? {})) headers[k] = Array.isArray(v) ? String(v[0]) : String(v ?? '');
        out.push({ partition, offset: message.offset, key: message.key, value: message.value, headers });
        advance(partition, BigInt(message.offset) + 1n);
      },
    });
    await vi.waitFor(
      () => {
        if (!done()) throw new Error(`${topic} not read to its end within ${timeoutMs} ms`);
      },
      { timeout: timeoutMs, interval: 100 },
    );
  } finally {
    await consumer.disconnect();
  }
  return out;
}

/** Lag of one group on one partition, from the broker: high watermark minus committed offset. */
export interface PartitionLag {
  group: string;
  topic: string;
  partition: number;
  committed: string;
  high: string;
  lag: number;
}

/**
 * The lag of each group on each partition of its topics, as the broker sees
 * it (committed offsets against high watermarks; a partition the group never
 * committed counts whole). `groups` maps a group id to the topics it reads.
 */
export async function groupLags(admin: Admin, groups: Record<string, string[]>): Promise<PartitionLag[]> {
  const ends = new Map<string, { partition: number; low: string; high: string }[]>();
  for (const topic of new Set(Object.values(groups).flat())) ends.set(topic, await admin.fetchTopicOffsets(topic));
  const out: PartitionLag[] = [];
  for (const [group, topics] of Object.entries(groups)) {
    const committed = await admin.fetchOffsets({ groupId: group, topics });
    for (const topic of topics) {
      const byPartition = new Map((committed.find((c) => c.topic === topic)?.partitions ?? []).map((p) => [p.partition, p.offset]));
      for (const end of ends.get(topic) ?? []) {
        const at = byPartition.get(end.partition) ?? '-1';
        const from = BigInt(at) >= 0n ? BigInt(at) : BigInt(end.low);
        const lag = BigInt(end.high) > from ? Number(BigInt(end.high) - from) : 0;
        out.push({ group, topic, partition: end.partition, committed: at, high: end.high, lag });
      }
    }
  }
  return out;
}

/** The kinds of poison: bytes no consumer of the service can decode. */
export type PoisonKind = 'garbage' | 'unknown_schema' | 'truncated' | 'empty';

/**
 * Four poison values for a topic whose records use schema `writerId`:
 * garbage bytes; the wire format with an unknown schema id (99999); the
 * right schema id with an Avro body cut short (a string that promises 36
 * bytes and has 2); an empty value (an empty buffer, not null: null is a
 * tombstone on compacted topics).
 */
export function poisonValues(writerId: number): { kind: PoisonKind; value: Buffer }[] {
  const header = Buffer.alloc(5);
  header.writeUInt32BE(writerId, 1);
  const unknown = Buffer.alloc(5);
  unknown.writeUInt32BE(99_999, 1);
  return [
    { kind: 'garbage', value: Buffer.from('not a record \u0000\u00ff\u00fe at all', 'utf8') },
    { kind: 'unknown_schema', value: Buffer.concat([unknown, Buffer.from([2, 4, 6, 8])]) },
    { kind: 'truncated', value: Buffer.concat([header, Buffer.from([0x48, 0x61, 0x62])]) },
    { kind: 'empty', value: Buffer.alloc(0) },
  ];
}

/** A poison record as written, with the coordinates the broker gave it. */
export interface WrittenPoison {
  topic: string;
  partition: number;
  offset: string;
  kind: PoisonKind;
  key: string;
  value: Buffer;
}

/** Writes each value as its own record (acks=-1) and returns where each one landed. */
export async function writePoison(producer: Producer, topic: string, values: { kind: PoisonKind; value: Buffer }[]): Promise<WrittenPoison[]> {
  const out: WrittenPoison[] = [];
  for (const { kind, value } of values) {
    const key = `poison-${kind}-${randomBytes(4).toString('hex')}`;
    const [meta] = await producer.send({ topic, acks: -1, messages: [{ key, value }] });
    if (!meta || meta.baseOffset === undefined) throw new Error(`no offset for the ${kind} poison record on ${topic}`);
    out.push({ topic, partition: meta.partition, offset: meta.baseOffset, kind, key, value });
  }
  return out;
}

// NOTE: re-exported for the tests under shared/kafka/ that import it from
// here; the parser lives in prometheus-text.ts.
export { metricSum } from './prometheus-text.ts';

/** Every topic the service reads (consumer groups and the config store), with the subject of its records. */
export const READ_TOPIC_SUBJECTS: Partial<Record<TopicKey, Subject>> = {
  playerEvents: 'player-event',
  tenants: 'tenant',
  apiKeys: 'api-key',
  videos: 'video',
  apiKeyUsage: 'api-key-usage',
  destinations: 'destination',
  webhookAttempts: 'webhook-attempt',
  securityEvents: 'security-event',
  webhooksManual: 'delivery',
  retry1: 'delivery',
  retry2: 'delivery',
  retry3: 'delivery',
};
