import { describe, expect, it } from 'vitest';
import { readTopicToEnd } from '../../test/helpers/kafka-inspect.ts';
import { consumerFixture } from '../../test/helpers/consumer-fixture.ts';
import { createMetrics } from '../metrics.ts';
import { ensureTopics } from './topics.ts';
import { TransactionalStage, type StageOutput } from './transactional-stage.ts';

interface Seen {
  batches: number;
  records: number;
  commits: { records: number; outputs: number }[];
}
const noneSeen = (): Seen => ({ batches: 0, records: 0, commits: [] });

/** Against the run's real broker: how a stage's batches share transactions. */
describe('TransactionalStage commits', () => {
  const fx = consumerFixture('txn-stage', 1);

  /** A stage that writes, per record, an event and the compacted key `state` (the record's value). */
  const stage = (name: string, commitIntervalMs: number, out: string, seen: Seen) =>
    new TransactionalStage<string>({
      kafka: fx.kafka,
      admin: fx.admin,
      log: fx.log,
      metrics: createMetrics(),
      deadLetters: fx.deadLetters(),
      stallMs: 60_000,
      groupId: `${name}-${fx.id}`,
      transactionalIdPrefix: `${name}-${fx.id}`,
      topics: [fx.topic],
      decode: (m) => ({ kind: 'value', value: m.value!.toString() }),
      restore: async () => undefined,
      commitIntervalMs,
      process: (_p, records) => {
        seen.batches++;
        seen.records += records.length;
        const outputs: StageOutput[] = [];
        for (const { record } of records) {
          if (record.kind !== 'value') continue;
          outputs.push({ topic: out, key: `evt-${record.value}`, value: record.value });
          outputs.push({ topic: out, key: 'state', value: record.value, compacted: true });
        }
        return outputs;
      },
      onCommitted: (_p, records, outputs) => seen.commits.push({ records, outputs }),
    });

  const committedOffset = async (groupId: string) => {
    const [c] = await fx.admin.fetchOffsets({ groupId, topics: [fx.topic] });
    return c!.partitions[0]!.offset;
  };

  it('batches within the interval share one transaction: nothing is visible before it, and a compacted key is written once', async () => {
    const out = `${fx.topic}.out1`;
    await ensureTopics(fx.admin, [{ topic: out, numPartitions: 1, replicationFactor: 1 }]);
    const seen = noneSeen();
    const s = stage('linger', 8000, out, seen);
    const producer = fx.kafka.producer();
    await producer.connect();
    await s.start();
    try {
      // Three sends, each taken as its own batch before the next is sent.
      for (let round = 0; round < 3; round++) {
        await producer.send({ topic: fx.topic, messages: Array.from({ length: 10 }, (_, i) => ({ value: `r${round}-${i}` })) });
        await expect.poll(() => seen.batches, { timeout: 20_000, interval: 20 }).toBeGreaterThan(round);
      }
      expect(seen.batches).toBe(3);
      // Within the interval: processed, not committed, and no output visible to a read_committed reader.
      expect(seen.commits).toEqual([]);
      expect(await committedOffset(`linger-${fx.id}`)).toBe('-1');
      await expect.poll(() => seen.commits.length, { timeout: 20_000, interval: 100 }).toBe(1);
      // One transaction: 30 events and the last `state` of the three batches, not three.
      expect(seen.commits).toEqual([{ records: 30, outputs: 31 }]);
      // The transaction's markers reach the group coordinator just after the commit returns.
      await expect.poll(() => committedOffset(`linger-${fx.id}`), { timeout: 10_000, interval: 100 }).toBe('30');
      const written = await readTopicToEnd(fx.kafka, fx.admin, out);
      expect(written.filter((r) => r.key?.toString().startsWith('evt-'))).toHaveLength(30);
      expect(written.filter((r) => r.key?.toString() === 'state').map((r) => r.value?.toString())).toEqual(['r2-9']);
    } finally {
      await s.stop();
      await producer.disconnect();
    }
  }, 90_000);

  it('stop commits what was processed and is still waiting for the interval', async () => {
    const out = `${fx.topic}.out2`;
    await ensureTopics(fx.admin, [{ topic: out, numPartitions: 1, replicationFactor: 1 }]);
    const seen = noneSeen();
    const s = stage('stop', 600_000, out, seen);
    const producer = fx.kafka.producer();
    await producer.connect();
    await producer.send({ topic: fx.topic, messages: [{ value: 'last-1' }, { value: 'last-2' }] });
    await producer.disconnect();
    const end = (await fx.admin.fetchTopicOffsets(fx.topic))[0]!.high;
    await s.start();
    // Every record of the topic is taken (a new group reads from the start), none committed.
    await expect.poll(() => seen.records, { timeout: 20_000, interval: 20 }).toBe(Number(end));
    expect(seen.commits).toEqual([]);
    expect(await committedOffset(`stop-${fx.id}`)).toBe('-1');
    await s.stop();
    await expect.poll(() => committedOffset(`stop-${fx.id}`), { timeout: 10_000, interval: 100 }).toBe(end);
    const records = seen.commits.reduce((n, c) => n + c.records, 0);
    expect(records).toBe(Number(end));
    const written = await readTopicToEnd(fx.kafka, fx.admin, out);
    expect(written.filter((r) => r.key?.toString().startsWith('evt-'))).toHaveLength(Number(end));
    expect(written.filter((r) => r.key?.toString() === 'state').map((r) => r.value?.toString())).toEqual(['last-2']);
  }, 90_000);
});
