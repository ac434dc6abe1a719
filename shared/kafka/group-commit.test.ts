import { parseError } from '@clickhouse/client';
import { describe, expect, it } from 'vitest';
import { consumerFixture } from '../../test/helpers/consumer-fixture.ts';
import { loopTurns, mostPerTurn } from '../../test/helpers/loop-turns.ts';
import { metricSum } from '../../test/helpers/kafka-inspect.ts';
import { createMetrics } from '../metrics.ts';
import { TimeSlices } from '../time-slices.ts';
import type { GroupCommitOptions } from './group-commit.ts';
import { GroupConsumer, type GroupConsumerOptions } from './group-consumer.ts';
import { PoisonRecordError, type Decoded } from './poison.ts';

type Options<T> = Pick<GroupConsumerOptions<T>, 'groupId' | 'decode'> & Partial<Pick<GroupConsumerOptions<T>, 'metrics' | 'slices' | 'onRecordAge'>> & GroupCommitOptions<T>;

/** A batched GroupConsumer of the fixture's topic with the tests' defaults (fresh metrics and dead letters, no stall alarm); `opts` gives the rest. */
function batchConsumer<T>(fx: ReturnType<typeof consumerFixture>, { flushMs, maxMessages, handle, ...opts }: Options<T>): GroupConsumer<T> {
  const metrics = opts.metrics ?? createMetrics();
  const common = { kafka: fx.kafka, log: fx.log, topics: [fx.topic], stallMs: 60_000, metrics, deadLetters: fx.deadLetters(metrics) };
  return new GroupConsumer<T>({ ...common, ...opts, batches: { flushMs, maxMessages, handle } });
}

/** The group's committed offset of each partition of the fixture's topic, as sorted [partition, offset] pairs. */
async function committedOffsets(fx: ReturnType<typeof consumerFixture>, groupId: string): Promise<(string | number)[][]> {
  const [offsets] = await fx.admin.fetchOffsets({ groupId, topics: [fx.topic] });
  return offsets!.partitions.map((p) => [p.partition, p.offset]).sort();
}

/** At least `count` records of topic `t`, read from its start, with their headers as text. */
async function readLetters(fx: ReturnType<typeof consumerFixture>, t: string, count: number): Promise<{ value: string; headers: Record<string, string> }[]> {
  const c = fx.kafka.consumer({ groupId: `read-${fx.id}-${t}` });
  const out: { value: string; headers: Record<string, string> }[] = [];
  await c.connect();
  await c.subscribe({ topic: t, fromBeginning: true });
  await c.run({
    eachMessage: async ({ message }) => {
      const headers = Object.fromEntries(Object.entries(message.headers ?? {}).map(([k, v]) => [k, String(v)]));
      out.push({ value: message.value?.toString() ?? '', headers });
    },
  });
  await expect.poll(() => out.length, { timeout: 20_000 }).toBeGreaterThanOrEqual(count);
  await c.disconnect();
  return out;
}

/** Against the run's real broker: a decoder that fails for a reason other than poison. */
describe('A batched GroupConsumer when decoding fails transiently', () => {
  const fx = consumerFixture('batch', 2);
  const { topic, dlq } = fx;
  const groupId = `batch-group-${fx.id}`;

  it('retries the records (never skips them, never crashes) and still dead-letters real poison', async () => {
    const producer = fx.kafka.producer();
    await producer.connect();
    const values = (partition: number) => Array.from({ length: 10 }, (_, i) => `p${partition}-${i}`);
    for (const partition of [0, 1]) {
      await producer.send({ topic, messages: [...values(partition), ...(partition === 0 ? ['poison'] : [])].map((value) => ({ partition, value })) });
    }
    await producer.disconnect();

    // p0-5 cannot be decoded on its first three tries (e.g. a schema registry
    // that does not answer yet): not poison, so it must come back.
    let failures = 0;
    const decode = (m: { value: Buffer | null }): Decoded<string> => {
      const value = m.value!.toString();
      if (value === 'poison') throw new PoisonRecordError('undecodable', 'not a record of this topic');
      if (value === 'p0-5' && failures < 3) {
        failures++;
        throw new Error('registry unavailable');
      }
      return { kind: 'value', value };
    };
    const handled: string[] = [];
    const metrics = createMetrics();
    const unhandled: unknown[] = [];
    const onUnhandled = (err: unknown) => unhandled.push(err);
    process.on('unhandledRejection', onUnhandled);
    const consumer = batchConsumer<string>(fx, {
      metrics,
      groupId,
      decode,
      flushMs: 20,
      maxMessages: 100,
      handle: async (items) => {
        for (const item of items) if (item.record.kind === 'value') handled.push(item.record.value);
      },
    });
    try {
      await consumer.start();
      // Every record handled, the one that failed included; the poison went to the dead letters.
      await expect.poll(() => new Set(handled).size, { timeout: 45_000, interval: 100 }).toBe(20);
      expect(new Set(handled)).toEqual(new Set([...values(0), ...values(1)]));
      expect(failures).toBe(3);
      expect(unhandled).toEqual([]);
      // Both partitions committed to their end (the poison's offset included).
      await expect
        .poll(() => committedOffsets(fx, groupId), { timeout: 15_000, interval: 200 })
        .toEqual([
          [0, '11'],
          [1, '10'],
        ]);
      expect(metricSum(await metrics.registry.metrics(), 'kafka_consumer_transient_failures_total', { group: groupId })).toBeGreaterThanOrEqual(1);
      // Healthy again once the record went through.
      expect(consumer.health()).toBeUndefined();
    } finally {
      process.off('unhandledRejection', onUnhandled);
      await consumer.stop(5_000);
    }
    const letters = await readLetters(fx, dlq, 1);
    expect(letters).toHaveLength(1);
  }, 90_000);
});

/** Against the run's real broker: a handler call the sink refuses for good, beside one that fails for a while. */
describe('A batched GroupConsumer when the handler fails permanently', () => {
  const fx = consumerFixture('batch-refused', 2);
  const { topic, dlq } = fx;
  const groupId = `batch-refused-group-${fx.id}`;

  it('splits the batch until the refused records stand alone, dead-letters them, stores and commits the rest', async () => {
    const producer = fx.kafka.producer();
    await producer.connect();
    const values = (partition: number) => Array.from({ length: 40 }, (_, i) => `p${partition}-${i}`);
    const refused = new Set(['p0-7', 'p1-33']);
    for (const partition of [0, 1]) await producer.send({ topic, messages: values(partition).map((value) => ({ partition, value, key: value })) });
    await producer.disconnect();

    // Like an insert: all of a call or nothing. A call holding a refused
    // record fails as ClickHouse fails a row it cannot parse; the first call
    // holding p1-20 fails transiently once (memory), which retries, not splits.
    const stored = new Set<string>();
    let calls = 0;
    let transient = 0;
    const consumer = batchConsumer<string>(fx, {
      groupId,
      decode: (m) => ({ kind: 'value', value: m.value!.toString() }),
      flushMs: 300,
      maxMessages: 1000,
      handle: async (items) => {
        calls++;
        const batch = items.map((i) => (i.record.kind === 'value' ? i.record.value : ''));
        if (batch.includes('p1-20') && transient === 0) {
          transient++;
          throw parseError('Code: 241. DB::Exception: Memory limit (total) exceeded. (MEMORY_LIMIT_EXCEEDED) (version 25.8.1.1)');
        }
        const bad = batch.find((v) => refused.has(v));
        if (bad) throw parseError(`Code: 27. DB::Exception: Cannot parse input: expected '"' before: '${bad}'. (CANNOT_PARSE_INPUT_ASSERTION_FAILED) (version 25.8.1.1)`);
        for (const v of batch) stored.add(v);
      },
    });
    try {
      await consumer.start();
      const expected = [...values(0), ...values(1)].filter((v) => !refused.has(v));
      await expect.poll(() => stored.size, { timeout: 45_000, interval: 100 }).toBe(expected.length);
      expect(new Set(stored)).toEqual(new Set(expected));
      expect(transient).toBe(1);
      // Bisection, not one call per record: two refused among 80 cost a few dozen calls at most.
      expect(calls).toBeLessThan(40);
      await expect
        .poll(() => committedOffsets(fx, groupId), { timeout: 15_000, interval: 200 })
        .toEqual([
          [0, '40'],
          [1, '40'],
        ]);
      expect(consumer.health()).toBeUndefined();
    } finally {
      await consumer.stop(5_000);
    }
    const letters = await readLetters(fx, dlq, 2);
    expect(letters.map((l) => l.value).sort()).toEqual([...refused].sort());
    for (const l of letters) {
      expect(l.headers['dlq-reason']).toBe('rejected_by_sink');
      expect(l.headers['dlq-detail']).toBe('clickhouse 27: cannot parse input');
      expect(l.headers['dlq-source-offset']).toBe(l.value === 'p0-7' ? '7' : '33');
    }
  }, 90_000);
});

/** Against the run's real broker: when offsets are committed, around handler calls, a failed call and stop(). */
describe('A batched GroupConsumer offset commits', () => {
  const fx = consumerFixture('batch-commit', 2);

  it('commits the offsets of a handler call only after it succeeded, in order, and before stop() returns', async () => {
    const group = `batch-commit-${fx.id}`;
    const { topic } = fx;
    const producer = fx.kafka.producer();
    await producer.connect();
    // 40 records per partition, sent in 4 sends each: several handler calls.
    for (let round = 0; round < 4; round++) {
      for (const partition of [0, 1]) {
        await producer.send({ topic, messages: Array.from({ length: 10 }, (_, i) => ({ partition, value: `c${partition}-${round * 10 + i}` })) });
      }
    }
    await producer.disconnect();
    const ends = await fx.admin.fetchTopicOffsets(topic);
    const end = new Map(ends.map((p) => [p.partition, Number(p.high)]));

    const handled = new Map<number, number>(); // partition → records handled (their next offset)
    const violations: string[] = [];
    let calls = 0;
    let failedOnce = false;
    let allHandled!: () => void;
    const done = new Promise<void>((r) => (allHandled = r));
    const consumer = batchConsumer<string>(fx, {
      groupId: group,
      decode: (m) => ({ kind: 'value', value: m.value!.toString() }),
      flushMs: 5,
      maxMessages: 15,
      handle: async (items) => {
        calls++;
        // What is committed now never goes past what earlier calls handled.
        const [committed] = await fx.admin.fetchOffsets({ groupId: group, topics: [topic] });
        for (const p of committed!.partitions) {
          const offset = Number(p.offset);
          if (offset > (handled.get(p.partition) ?? 0)) violations.push(`call ${calls}: partition ${p.partition} committed ${offset}, handled ${handled.get(p.partition) ?? 0}`);
        }
        // The third call fails once: its records must be neither committed nor skipped.
        if (calls === 3 && !failedOnce) {
          failedOnce = true;
          throw new Error('ClickHouse unavailable');
        }
        for (const item of items) handled.set(item.partition, Math.max(handled.get(item.partition) ?? 0, Number(item.message.offset) + 1));
        if ([0, 1].every((p) => handled.get(p) === end.get(p))) allHandled();
      },
    });
    await consumer.start();
    await done;
    // stop() right as the last call returns: its commit is still to be sent.
    await consumer.stop(10_000);
    expect(await committedOffsets(fx, group)).toEqual([
      [0, String(end.get(0))],
      [1, String(end.get(1))],
    ]);
    expect(failedOnce).toBe(true);
    expect(calls).toBeGreaterThanOrEqual(4);
    expect(violations).toEqual([]);
  }, 90_000);

  it('runs the next handler call during a commit, but no further while that commit is held; then commits everything', async () => {
    const group = `batch-held-commit-${fx.id}`;
    const { topic } = fx;
    const producer = fx.kafka.producer();
    await producer.connect();
    const send = async (round: string) => {
      for (const partition of [0, 1]) {
        await producer.send({ topic, messages: Array.from({ length: 60 }, (_, i) => ({ partition, value: `${round}${partition}-${i}` })) });
      }
    };
    await send('h');

    let calls = 0;
    const consumer = batchConsumer<string>(fx, {
      groupId: group,
      decode: (m) => ({ kind: 'value', value: m.value!.toString() }),
      flushMs: 5,
      maxMessages: 10,
      handle: async () => {
        calls++;
      },
    });
    // Fault: the broker holds the first commit (the real request goes out once released).
    const inner = consumer.member.consumer;
    const commit = inner.commitOffsets.bind(inner);
    let release!: () => void;
    const released = new Promise<void>((r) => (release = r));
    let callsAtHold: number | undefined;
    inner.commitOffsets = async (offsets) => {
      if (callsAtHold === undefined) {
        callsAtHold = calls;
        await released;
      }
      return commit(offsets);
    };
    try {
      await consumer.start();
      await expect.poll(() => callsAtHold, { timeout: 30_000, interval: 20 }).toBeDefined();
      // Records arrive while the commit is held (on a loaded machine the
      // first batch may all be handled before the commit goes out), yet only
      // the one call after the hold runs: it comes, and a second later it is
      // still the only one.
      await send('k');
      await producer.disconnect();
      const ends = await fx.admin.fetchTopicOffsets(topic);
      await expect.poll(() => calls - callsAtHold!, { timeout: 30_000, interval: 20 }).toBe(1);
      await new Promise((r) => setTimeout(r, 1000));
      expect(calls - callsAtHold!).toBe(1);
      release();
      await expect.poll(() => committedOffsets(fx, group), { timeout: 30_000, interval: 200 }).toEqual(ends.map((p) => [p.partition, p.high]).sort());
    } finally {
      release();
      await consumer.stop(10_000);
      await producer.disconnect();
    }
  }, 90_000);
});

/** Against the run's real broker: how a backlog is fetched and decoded. */
describe('A batched GroupConsumer fetches', () => {
  const fx = consumerFixture('batch-fetch', 2);

  it('decodes a fetch in slices with turns of the event loop between them, and takes a record larger than a fetch', async () => {
    const { topic } = fx;
    const producer = fx.kafka.producer();
    await producer.connect();
    for (const partition of [0, 1]) {
      await producer.send({ topic, messages: Array.from({ length: 200 }, (_, i) => ({ partition, value: `f${partition}-${i}` })) });
    }
    // One record past the consumer's per-partition fetch bound (256 KB).
    const big = 'x'.repeat(400 * 1024);
    await producer.send({ topic, messages: [{ partition: 1, value: big }] });
    await producer.disconnect();

    const turns = loopTurns();
    // The turn each record was decoded in.
    const decodedAt: number[] = [];
    const handled = new Set<string>();
    const consumer = batchConsumer<string>(fx, {
      groupId: `batch-fetch-${fx.id}`,
      slices: new TimeSlices(2),
      decode: (m) => {
        const until = performance.now() + 0.25; // a decoder's cost
        while (performance.now() < until);
        decodedAt.push(turns.count);
        return { kind: 'value', value: m.value!.toString() };
      },
      flushMs: 5,
      maxMessages: 1000,
      handle: async (items) => {
        for (const item of items) if (item.record.kind === 'value') handled.add(item.record.value);
      },
    });
    try {
      await consumer.start();
      await expect.poll(() => handled.size, { timeout: 30_000 }).toBe(401);
      expect(handled.has(big)).toBe(true);
    } finally {
      await turns.stop();
      await consumer.stop(5_000);
    }
    // A 2-ms slice holds at most nine records of 0.25 ms (checked before
    // each), whichever partitions they come from. Without slices, a fetch's
    // 400 records are decoded in one turn.
    expect(mostPerTurn(decodedAt)).toBeLessThanOrEqual(9);
  }, 90_000);
});

describe('A batched GroupConsumer record ages', () => {
  const fx = consumerFixture('batch-age', 1);

  it('reports the age of the oldest record of each fetch and of each handler call, once the call resolved', async () => {
    const { topic } = fx;
    const now = Date.now();
    const producer = fx.kafka.producer();
    await producer.connect();
    // One send, so one fetch and one handler call: the oldest record is in
    // the middle, and its age (not the first's or the last's) is the one reported.
    await producer.send({
      topic,
      messages: [
        { partition: 0, value: 'a', timestamp: String(now - 10_000) },
        { partition: 0, value: 'b', timestamp: String(now - 60_000) },
        { partition: 0, value: 'c', timestamp: String(now - 5_000) },
      ],
    });
    await producer.disconnect();

    const ages: { stage: string; ageMs: number; handled: number }[] = [];
    let handled = 0;
    const consumer = batchConsumer<string>(fx, {
      groupId: `batch-age-${fx.id}`,
      decode: (m) => ({ kind: 'value', value: m.value!.toString() }),
      flushMs: 20,
      maxMessages: 1000,
      handle: async (items) => {
        await new Promise((r) => setTimeout(r, 50));
        handled += items.length;
      },
      onRecordAge: (stage, ageMs) => ages.push({ stage, ageMs, handled }),
    });
    const started = Date.now();
    try {
      await consumer.start();
      await expect.poll(() => ages.filter((a) => a.stage === 'handled').length, { timeout: 30_000 }).toBe(1);
    } finally {
      await consumer.stop(5_000);
    }
    const bound = 60_000 + (Date.now() - started) + 1_000;
    const fetched = ages.filter((a) => a.stage === 'fetched');
    const done = ages.find((a) => a.stage === 'handled')!;
    expect(fetched).toHaveLength(1);
    // The first record of the fetched batch is 'a' (10 s old); the handler call's oldest is 'b'.
    expect(fetched[0]!.ageMs).toBeGreaterThanOrEqual(10_000);
    expect(fetched[0]!.ageMs).toBeLessThan(bound - 50_000);
    expect(done.ageMs).toBeGreaterThanOrEqual(60_000);
    expect(done.ageMs).toBeLessThan(bound);
    // Reported after the handler call resolved, not when it began.
    expect(done.handled).toBe(3);
  }, 60_000);
});
