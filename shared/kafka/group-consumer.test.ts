import { describe, expect, it } from 'vitest';
import { consumerFixture } from '../../test/helpers/consumer-fixture.ts';
import { loopTurns, mostPerTurn } from '../../test/helpers/loop-turns.ts';
import { createMetrics } from '../metrics.ts';
import type { Decoded } from './poison.ts';
import { GroupConsumer, type GroupConsumerOptions } from './group-consumer.ts';
import { TimeSlices } from '../time-slices.ts';
import { createLogger } from '../logger.ts';

type Options<T> = Pick<GroupConsumerOptions<T>, 'groupId' | 'decode'> &
  Pick<Extract<GroupConsumerOptions<T>, { maxOutstanding: number }>, 'handle' | 'maxOutstanding'> &
  Partial<Pick<GroupConsumerOptions<T>, 'metrics' | 'slices' | 'dueSlackMs' | 'log' | 'onBatchTaken'>>;

/** A per-record GroupConsumer of the fixture's topic with the tests' defaults (fresh metrics and dead letters, no stall alarm); `opts` gives the rest. */
function trackedConsumer<T>(fx: ReturnType<typeof consumerFixture>, opts: Options<T>): GroupConsumer<T> {
  const metrics = opts.metrics ?? createMetrics();
  return new GroupConsumer<T>({ kafka: fx.kafka, log: fx.log, topics: [fx.topic], stallMs: 60_000, metrics, deadLetters: fx.deadLetters(metrics), ...opts });
}

/** Each record's value as a string. */
const asString = (m: { value: Buffer | null }): Decoded<string> => ({ kind: 'value', value: m.value!.toString() });

/** Against the run's real broker: two members of one group and a rebalance in the middle of slow work. */
describe('A per-record GroupConsumer across a rebalance', () => {
  const fx = consumerFixture('tracked', 2);
  const { topic } = fx;
  const groupId = `tracked-group-${fx.id}`;

  const member = (handle: (partition: number, offset: string) => Promise<void>) =>
    trackedConsumer<string>(fx, {
      groupId,
      decode: asString,
      maxOutstanding: 100,
      handle: (_record, message, partition) => ({ kind: 'work', done: handle(partition, message.offset) }),
    });

  it("never commits work of an earlier generation or of a partition it no longer owns: committed offsets only move forward", async () => {
    const producer = fx.kafka.producer();
    await producer.connect();
    for (const partition of [0, 1]) {
      await producer.send({ topic, messages: Array.from({ length: 10 }, (_, i) => ({ partition, value: `p${partition}-${i}` })) });
    }
    await producer.disconnect();

    // Member A takes both partitions and holds every record's work until released:
    // the first record of each partition, then the rest.
    let releaseFirst!: () => void;
    let releaseRest!: () => void;
    const first = new Promise<void>((r) => (releaseFirst = r));
    const rest = new Promise<void>((r) => (releaseRest = r));
    let aStarted = 0;
    const a = member(async (_partition, offset) => {
      aStarted++;
      await (offset === '0' ? first : rest);
    });
    await a.start();
    await expect.poll(() => aStarted, { timeout: 30_000 }).toBe(20);

    /** The group's committed offset of each partition (-1: none). */
    const committed = async (): Promise<Map<number, number>> => {
      const [offsets] = await fx.admin.fetchOffsets({ groupId, topics: [topic] });
      return new Map(offsets!.partitions.map((p) => [p.partition, Number(p.offset)]));
    };
    // Watch the group's committed offsets from here on.
    const seen: Record<number, number[]> = { 0: [], 1: [] };
    const look = async () => {
      for (const [partition, o] of await committed()) {
        if (o >= 0 && seen[partition]!.at(-1) !== o) seen[partition]!.push(o);
      }
    };
    let watching = true;
    const watcher = (async () => {
      while (watching) {
        await look();
        await new Promise((r) => setTimeout(r, 25));
      }
    })();

    // Member B joins: the group rebalances and one partition moves to B, which finishes its records at once.
    const b = member(async () => undefined);
    await b.start();
    await expect.poll(async () => [...(await committed()).values()].includes(10), { timeout: 60_000 }).toBe(true);
    const toB = [...(await committed())].find(([, o]) => o === 10)![0];
    const keptByA = 1 - toB;

    // A's held work (read in the old generation) now finishes: it must commit
    // nothing. Its first records alone would commit offset 1: backwards, on
    // the partition B already committed to 10.
    releaseFirst();
    // NOTE: the sign that A has handled those completions. In the new
    // generation A read the partition it kept again from offset 0, and that
    // record waits on the same promise: its commit (offset 1) goes out with,
    // or after, any backward commit of the old generation's work. Releasing
    // the rest sooner could fold such a commit into a later one to 10.
    await expect.poll(async () => (await committed()).get(keptByA), { timeout: 30_000 }).toBe(1);
    releaseRest();
    await expect.poll(async () => [...(await committed()).values()], { timeout: 60_000 }).toEqual([10, 10]);
    // Once both members have stopped (outstanding work drained, last commits
    // flushed), nothing can commit any more: one last look sees the end state.
    await Promise.all([a.stop(2000), b.stop(2000)]);
    watching = false;
    await watcher;
    await look();

    const [final] = await fx.admin.fetchOffsets({ groupId, topics: [topic] });
    expect(final!.partitions.map((p) => Number(p.offset)).sort()).toEqual([10, 10]);
    for (const p of [0, 1]) {
      const history = seen[p]!;
      expect(history, `partition ${p} committed offsets over time`).toEqual([...history].sort((x, y) => x - y));
    }
  });
});

/** Against the run's real broker: a partition of records due a few ms apart (a retry tier behind a dead destination). */
describe('A per-record GroupConsumer waiting for records not yet due', () => {
  const fx = consumerFixture('due', 1);
  const { topic } = fx;

  it('with dueSlackMs, takes the records due within the slack in one fetch: a few waits, not one per record, and none handled early', async () => {
    const count = 400;
    const firstDue = Date.now() + 3000;
    const producer = fx.kafka.producer();
    await producer.connect();
    // 400 records due 5 ms apart: two seconds of a tier.
    await producer.send({ topic, messages: Array.from({ length: count }, (_, i) => ({ value: String(firstDue + i * 5) })) });
    await producer.disconnect();

    let decodes = 0;
    let waits = 0;
    const handledLate: number[] = [];
    const consumer = trackedConsumer<number>(fx, {
      groupId: `due-group-${fx.id}`,
      decode: (m): Decoded<number> => {
        decodes++;
        return { kind: 'value', value: Number(m.value!.toString()) };
      },
      maxOutstanding: 1000,
      dueSlackMs: 1000,
      handle: (record) => {
        const dueAt = (record as { value: number }).value;
        const now = Date.now();
        if (dueAt > now) {
          waits++;
          return { kind: 'wait', dueAt };
        }
        handledLate.push(now - dueAt);
        return { kind: 'work', done: Promise.resolve() };
      },
    });
    try {
      await consumer.start();
      await expect.poll(() => handledLate.length, { timeout: 30_000, interval: 100 }).toBe(count);
    } finally {
      await consumer.stop(2000);
    }
    // Never before its due time.
    expect(Math.min(...handledLate)).toBeGreaterThanOrEqual(0);
    // Each wait ends with a fetch. Every wait after the first (3 s ahead)
    // ends 1000 ms after a record's due time, so each covers at least that
    // much of the 2 s of records: at most 1 + 2 + 1 waits, however fast the
    // fetches. (Without the slack each fetch round, about 100 ms here, ends
    // in a wait: about 20.)
    expect(waits).toBeLessThanOrEqual(4);
    // A record is decoded once, and once more per wait it ended.
    expect(decodes).toBe(count + waits);
  }, 60_000);
});

/** Against the run's real broker: a wait that ends after the consumer crashed and before kafkajs runs it again. */
describe('A per-record GroupConsumer whose consumer is between runs when a wait ends', () => {
  const fx = consumerFixture('due-crash', 1);
  const { topic } = fx;

  it('logs the resume it cannot make instead of throwing from the timer, and commits nothing past the record', async () => {
    const producer = fx.kafka.producer();
    await producer.connect();
    const dueAt = Date.now() + 1500;
    await producer.send({ topic, messages: [{ value: String(dueAt) }] });
    await producer.disconnect();
    const lines: string[] = [];
    const log = createLogger({ level: 'warn', destination: { write: (line: string) => void lines.push(line) } });
    let waits = 0;
    const handled: number[] = [];
    const consumer = trackedConsumer<number>(fx, {
      groupId: `due-crash-group-${fx.id}`,
      log,
      decode: (m): Decoded<number> => ({ kind: 'value', value: Number(m.value!.toString()) }),
      maxOutstanding: 10,
      handle: (record) => {
        const due = (record as { value: number }).value;
        if (due > Date.now()) {
          waits++;
          return { kind: 'wait', dueAt: due };
        }
        handled.push(due);
        return { kind: 'work', done: Promise.resolve() };
      },
    });
    try {
      await consumer.start();
      await expect.poll(() => waits, { timeout: 30_000, interval: 50 }).toBe(1);
      // What kafkajs does to a crashed consumer before it restarts it: no consumer group until the next run.
      await consumer.member.consumer.stop();
      await expect.poll(() => lines.some((l) => l.includes('consumer_resume_failed')), { timeout: 10_000, interval: 100 }).toBe(true);
      // Nothing handled meanwhile, nothing committed: kafkajs's restart reads the record again from the committed offset.
      expect(handled).toEqual([]);
      const [offsets] = await fx.admin.fetchOffsets({ groupId: `due-crash-group-${fx.id}`, topics: [topic] });
      expect(offsets!.partitions[0]!.offset).toBe('-1');
    } finally {
      await consumer.stop(2000);
    }
  }, 60_000);
});

/** Against the run's real broker: a backlog whose records need no wait (a fan-out's events no destination selects). */
describe('A per-record GroupConsumer draining a backlog', () => {
  const fx = consumerFixture('drain', 2);
  const { topic } = fx;

  const produce = async (count: number) => {
    const producer = fx.kafka.producer();
    await producer.connect();
    for (let from = 0; from < count; from += 1000) {
      await producer.send({ topic, messages: Array.from({ length: Math.min(1000, count - from) }, (_, i) => ({ partition: (from + i) % 2, value: String(from + i) })) });
    }
    await producer.disconnect();
  };
  const committedTotal = async (groupId: string) => {
    const [offsets] = await fx.admin.fetchOffsets({ groupId, topics: [topic] });
    return offsets!.partitions.reduce((n, p) => n + Math.max(0, Number(p.offset)), 0);
  };
  /** A member of `groupId` reading the topic from its start; `opts` gives the handler and bounds. */
  const member = (groupId: string, opts: Omit<Options<string>, 'groupId' | 'decode'>) =>
    trackedConsumer<string>(fx, { groupId, decode: asString, ...opts });

  it('gives the event loop a turn after every slice of records, and handles and commits every record once', async () => {
    const count = 3000;
    await produce(count);
    const groupId = `drain-group-${fx.id}`;
    const turns = loopTurns();
    // The turn each record was handled in.
    const handledAt = new Map<string, number>();
    let handledTwice = 0;
    const consumer = member(groupId, {
      maxOutstanding: 10_000,
      slices: new TimeSlices(2),
      handle: (record) => {
        const value = (record as { value: string }).value;
        if (handledAt.has(value)) handledTwice++;
        handledAt.set(value, turns.count);
        // 0.25 ms of work per record, done before the handler returns.
        const end = performance.now() + 0.25;
        while (performance.now() < end);
        return { kind: 'work', done: Promise.resolve() };
      },
    });
    try {
      await consumer.start();
      await expect.poll(() => handledAt.size, { timeout: 60_000, interval: 100 }).toBe(count);
      await expect.poll(() => committedTotal(groupId), { timeout: 15_000, interval: 200 }).toBe(count);
    } finally {
      await turns.stop();
      await consumer.stop(2000);
    }
    expect(handledTwice).toBe(0);
    // A 2-ms slice holds at most nine records of 0.25 ms (checked before
    // each). Without slices, all of a fetched batch (here up to 1,500
    // records of a partition) is handled in one turn.
    expect(mostPerTurn(handledAt.values())).toBeLessThanOrEqual(9);
  }, 90_000);

  it('keeps at most maxOutstanding records in flight, and goes on as work finishes', async () => {
    // 200 more records; this test's group reads all of them, the first test's 3,000 included.
    const count = 3000 + 200;
    await produce(200);
    const groupId = `bound-group-${fx.id}`;
    let inFlight = 0;
    let peak = 0;
    let done = 0;
    const consumer = member(groupId, {
      maxOutstanding: 5,
      handle: () => {
        inFlight++;
        peak = Math.max(peak, inFlight);
        return {
          kind: 'work',
          done: new Promise<void>((r) =>
            setTimeout(() => {
              inFlight--;
              done++;
              r();
            }, 2),
          ),
        };
      },
    });
    try {
      await consumer.start();
      await expect.poll(() => done, { timeout: 60_000, interval: 100 }).toBe(count);
      await expect.poll(() => committedTotal(groupId), { timeout: 15_000, interval: 200 }).toBe(count);
    } finally {
      await consumer.stop(2000);
    }
    expect(peak).toBeLessThanOrEqual(5);
    expect(peak).toBeGreaterThanOrEqual(2);
  }, 120_000);
});

/**
 * A reader that tracks how far it has read (the changelog a restore waits
 * on) must not count a batch cut short: kafkajs ends it with the batch's
 * last offset all the same.
 */
describe('A per-record GroupConsumer whose batch is cut short', () => {
  const fx = consumerFixture('cut', 1);
  const { topic } = fx;

  it('reports a batch as taken only once every record of it was handled, though kafkajs ends the cut batch with its last offset', async () => {
    const producer = fx.kafka.producer();
    await producer.connect();
    // One send: one record batch, fetched whole.
    await producer.send({ topic, messages: Array.from({ length: 100 }, (_, i) => ({ partition: 0, value: String(i) })) });
    await producer.disconnect();

    const handled = new Set<number>();
    let failed = false;
    /** The records not handled at or below each offset reported as taken. */
    const missingAtTaken: number[] = [];
    let lastTaken = -1;
    const consumer = trackedConsumer<string>(fx, {
      groupId: `cut-group-${fx.id}`,
      decode: asString,
      maxOutstanding: 1000,
      // Offset 50 fails once: the consumer seeks back to it, which cuts the batch there.
      handle: (_record, message) => {
        const offset = Number(message.offset);
        if (offset === 50 && !failed) {
          failed = true;
          throw new Error('transient');
        }
        handled.add(offset);
        return { kind: 'work', done: Promise.resolve() };
      },
      onBatchTaken: (_topic, _partition, lastOffset) => {
        lastTaken = Math.max(lastTaken, Number(lastOffset));
        for (let o = 0; o <= Number(lastOffset); o++) if (!handled.has(o)) missingAtTaken.push(o);
      },
    });
    const ended: { lastOffset: number; handled: number }[] = [];
    consumer.member.consumer.on(consumer.member.consumer.events.END_BATCH_PROCESS, (e) => {
      ended.push({ lastOffset: Number(e.payload.lastOffset), handled: handled.size });
    });
    try {
      await consumer.start();
      await expect.poll(() => lastTaken, { timeout: 30_000, interval: 50 }).toBe(99);
    } finally {
      await consumer.stop(2000);
    }
    expect(failed).toBe(true);
    expect(handled.size).toBe(100);
    expect(missingAtTaken).toEqual([]);
    // The hazard the hook avoids: kafkajs ended the cut batch at offset 99 with 50 records handled.
    expect(ended.some((e) => e.lastOffset === 99 && e.handled < 100)).toBe(true);
  }, 60_000);
});
