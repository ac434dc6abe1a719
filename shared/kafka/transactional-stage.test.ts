import { KafkaJSNonRetriableError } from 'kafkajs';
import { describe, expect, it } from 'vitest';
import { consumerFixture } from '../../test/helpers/consumer-fixture.ts';
import { readTopicToEnd } from '../../test/helpers/kafka-inspect.ts';
import { createMetrics } from '../metrics.ts';
import { ensureTopics } from './topics.ts';
import { MAX_SEND_BYTES, sendRequests, TransactionalStage, type StageOutput, type TransactionalStageOptions } from './transactional-stage.ts';

/** Against the run's real broker. */
describe('TransactionalStage', () => {
  const fx = consumerFixture('stage', 1);
  /** A stage of string records from `input`, with its own group and transactional ids. */
  const stageOf = (name: string, input: string, opts: Pick<TransactionalStageOptions<string>, 'restore' | 'process' | 'checkpoint' | 'behindRefusals'>) => {
    const metrics = createMetrics();
    return new TransactionalStage<string>({
      kafka: fx.kafka,
      admin: fx.admin,
      log: fx.log,
      metrics,
      deadLetters: fx.deadLetters(metrics),
      stallMs: 60_000,
      groupId: `${name}-${fx.id}`,
      transactionalIdPrefix: `${name}-${fx.id}`,
      topics: [input],
      decode: (m) => ({ kind: 'value', value: m.value!.toString() }),
      ...opts,
    });
  };

  it('goes on after a take-on fails with an error kafkajs will not restart for, and copies every record exactly once', async () => {
    const out = `${fx.topic}.out`;
    await ensureTopics(fx.admin, [{ topic: out, numPartitions: 1, replicationFactor: 1 }]);
    const producer = fx.kafka.producer();
    await producer.connect();
    await producer.send({ topic: fx.topic, messages: Array.from({ length: 50 }, (_, i) => ({ value: String(i) })) });
    await producer.disconnect();

    // The first restore throws what kafkajs' admin threw while a broker
    // was down: a non-retriable error, after which kafkajs does not restart
    // the consumer by itself.
    let restores = 0;
    const stage = stageOf('stage', fx.topic, {
      restore: async () => {
        if (++restores === 1) throw new KafkaJSNonRetriableError("Cannot destructure property 'partitions' of 'high.pop(...)' as it is undefined.");
        return undefined;
      },
      process: (_partition, records) => records.map(({ record }) => ({ topic: out, value: record.kind === 'value' ? record.value : null })),
    });
    await stage.start();
    try {
      await expect.poll(async () => (await readTopicToEnd(fx.kafka, fx.admin, out, 10_000)).length, { timeout: 60_000, interval: 500 }).toBe(50);
      const values = (await readTopicToEnd(fx.kafka, fx.admin, out, 10_000)).map((r) => r.value?.toString());
      expect(values).toEqual(Array.from({ length: 50 }, (_, i) => String(i)));
      expect(restores).toBeGreaterThanOrEqual(2);
      expect(stage.health()).toBeUndefined();
    } finally {
      await stage.stop();
    }
  }, 120_000);

  it('writes a batch whose outputs exceed the broker\'s largest record batch (1 MiB) in several requests of one transaction, every record exactly once', async () => {
    // A topic at the broker's default max.message.bytes, as derived.state is.
    const [input, out] = [`${fx.topic}.big-in`, `${fx.topic}.big-out`];
    await ensureTopics(fx.admin, [input, out].map((topic) => ({ topic, numPartitions: 1, replicationFactor: 1 })));
    const producer = fx.kafka.producer();
    await producer.connect();
    await producer.send({ topic: input, messages: Array.from({ length: 400 }, (_, i) => ({ value: String(i) })) });
    await producer.disconnect();

    // Each small input becomes 4 KiB of output on one partition: the first
    // fetch's ~1.6 MiB in one request is refused for good (MESSAGE_TOO_LARGE).
    let largest = 0;
    const stage = stageOf('stage-big', input, {
      restore: async () => undefined,
      process: (_partition, records) => {
        largest = Math.max(largest, records.length);
        return records.map(({ record }) => ({ topic: out, partition: 0, key: record.kind === 'value' ? record.value : null, value: Buffer.alloc(4096, 120) }));
      },
    });
    await stage.start();
    try {
      await expect.poll(async () => (await readTopicToEnd(fx.kafka, fx.admin, out, 10_000)).length, { timeout: 60_000, interval: 500 }).toBe(400);
      const keys = (await readTopicToEnd(fx.kafka, fx.admin, out, 10_000)).map((r) => r.key?.toString());
      expect(keys).toEqual(Array.from({ length: 400 }, (_, i) => String(i)));
      // The case is real only if one batch's outputs were over the limit.
      expect(largest * 4096).toBeGreaterThan(1024 * 1024);
      expect(stage.health()).toBeUndefined();
    } finally {
      await stage.stop();
    }
  }, 120_000);

  it('reads a partition again from its first batch not committed after a transaction fails, though nothing new comes to it, and copies every record exactly once', async () => {
    // One output topic takes records of at most 2,000 bytes: a record over
    // it fails its transaction for good (MESSAGE_TOO_LARGE).
    const [input, out, small] = [`${fx.topic}.fail-in`, `${fx.topic}.fail-out`, `${fx.topic}.fail-small`];
    await ensureTopics(fx.admin, [input, out].map((topic) => ({ topic, numPartitions: 1, replicationFactor: 1 })));
    await ensureTopics(fx.admin, [{ topic: small, numPartitions: 1, replicationFactor: 1, configEntries: [{ name: 'max.message.bytes', value: '2000' }] }]);
    const producer = fx.kafka.producer();
    await producer.connect();
    await producer.send({ topic: input, messages: Array.from({ length: 50 }, (_, i) => ({ value: String(i) })) });
    await producer.disconnect();

    // The first batch also writes a record the broker refuses; nothing is
    // sent to the input after it, so only reading it again brings the
    // records of that batch back.
    let calls = 0;
    let restores = 0;
    const stage = stageOf('stage-fail', input, {
      restore: async () => {
        restores++;
        return undefined;
      },
      process: (_partition, records) => {
        const outputs: StageOutput[] = records.map(({ record }) => ({ topic: out, key: record.kind === 'value' ? record.value : null, value: 'v' }));
        if (++calls === 1) outputs.push({ topic: small, value: Buffer.alloc(3000, 120) });
        return outputs;
      },
    });
    await stage.start();
    try {
      await expect.poll(async () => (await readTopicToEnd(fx.kafka, fx.admin, out, 10_000)).length, { timeout: 60_000, interval: 500 }).toBe(50);
      const keys = (await readTopicToEnd(fx.kafka, fx.admin, out, 10_000)).map((r) => r.key?.toString());
      expect(keys).toEqual(Array.from({ length: 50 }, (_, i) => String(i)));
      expect(await readTopicToEnd(fx.kafka, fx.admin, small, 5_000)).toEqual([]);
      // Taken on twice: at the start, and after the failed transaction.
      expect(restores).toBeGreaterThanOrEqual(2);
      expect(calls).toBeGreaterThanOrEqual(2);
    } finally {
      await stage.stop();
    }
  }, 120_000);

  it('copies every record exactly once while partitions move between live members: a second member joins, then the first leaves', async () => {
    const [input, out, ck] = [`${fx.topic}.rb-in`, `${fx.topic}.rb-out`, `${fx.topic}.rb-ck`];
    await ensureTopics(fx.admin, [input, out, ck].map((topic) => ({ topic, numPartitions: 4, replicationFactor: 1 })));
    const producer = fx.kafka.producer();
    await producer.connect();
    let sent = 0;
    /** Records for `ms`, 50 every 50 ms, while the stages run. */
    const produceFor = async (ms: number) => {
      for (const end = Date.now() + ms; Date.now() < end; await new Promise((r) => setTimeout(r, 50))) {
        await producer.send({ topic: input, messages: Array.from({ length: 50 }, () => ({ key: String(sent), value: String(sent++) })) });
      }
    };
    // The stage's contract for exactly once across owners: each transaction
    // writes a checkpoint, and a restore reads the partition's checkpoints
    // read_committed to their end, which waits for the previous owner's
    // open transaction.
    const opts = {
      restore: async (partition: number) => (await readTopicToEnd(fx.kafka, fx.admin, ck, 10_000)).filter((r) => r.partition === partition).at(-1)?.value?.toString(),
      process: (_partition: number, records: Parameters<TransactionalStageOptions<string>['process']>[1]) =>
        records.map(({ record }) => ({ topic: out, value: record.kind === 'value' ? record.value : null })),
      checkpoint: (partition: number, next: string): StageOutput => ({ topic: ck, partition, value: Buffer.from(next) }),
    };
    const first = stageOf('stage-rb', input, opts);
    const second = stageOf('stage-rb', input, opts);
    await first.start();
    try {
      await produceFor(2000);
      await second.start();
      await produceFor(3000);
      await first.stop();
      await produceFor(2000);
      await expect.poll(async () => (await readTopicToEnd(fx.kafka, fx.admin, out, 10_000)).length, { timeout: 60_000, interval: 500 }).toBeGreaterThanOrEqual(sent);
      const values = (await readTopicToEnd(fx.kafka, fx.admin, out, 10_000)).map((r) => r.value!.toString());
      expect(values.length).toBe(sent);
      expect(new Set(values).size).toBe(sent);
      // The case is real only if the second member took partitions over.
      expect(second.owned.length).toBe(4);
    } finally {
      await first.stop();
      await second.stop();
      await producer.disconnect();
    }
  }, 120_000);

  it('takes a partition on only once its restored state is at the committed offset: a restore that comes back short is made again before any record is read, and after its refusals the stage goes on (offsets moved forward on purpose)', async () => {
    const [input, out] = [`${fx.topic}.cp-in`, `${fx.topic}.cp-out`];
    await ensureTopics(fx.admin, [input, out].map((topic) => ({ topic, numPartitions: 1, replicationFactor: 1 })));
    const producer = fx.kafka.producer();
    await producer.connect();
    const produce = (from: number, n: number) => producer.send({ topic: input, messages: Array.from({ length: n }, (_, i) => ({ value: String(from + i) })) });
    /** The checkpoints written, newest last: each transaction's input offset. */
    const checkpoints = async () => (await readTopicToEnd(fx.kafka, fx.admin, out, 10_000)).filter((r) => r.key?.toString() === 'checkpoint').map((r) => r.value!.toString());
    const copies = async () => (await readTopicToEnd(fx.kafka, fx.admin, out, 10_000)).filter((r) => r.key?.toString() !== 'checkpoint').map((r) => r.value!.toString());
    const opts = (restore: () => Promise<string | undefined>, processedAfter: (string | undefined)[], last: { at?: string }) => ({
      restore: async () => {
        last.at = await restore();
        return last.at;
      },
      process: (_partition: number, records: Parameters<TransactionalStageOptions<string>['process']>[1]) => {
        processedAfter.push(last.at);
        return records.map(({ record }) => ({ topic: out, partition: 0, value: record.kind === 'value' ? record.value : null }));
      },
      checkpoint: (partition: number, next: string): StageOutput => ({ topic: out, partition, key: 'checkpoint', value: Buffer.from(next) }),
    });

    await produce(0, 20);
    const first = stageOf('stage-cp', input, opts(async () => undefined, [], {}));
    await first.start();
    try {
      await expect.poll(async () => (await checkpoints()).at(-1), { timeout: 60_000, interval: 500 }).toBe('20');
    } finally {
      await first.stop();
    }

    // The next owner's first two restores come back short (offset 10, as a
    // changelog read cut short would), then whole (20).
    await produce(20, 10);
    let restores = 0;
    const processedAfter: (string | undefined)[] = [];
    const second = stageOf('stage-cp', input, opts(async () => (++restores <= 2 ? '10' : '20'), processedAfter, {}));
    await second.start();
    try {
      await expect.poll(async () => (await copies()).length, { timeout: 60_000, interval: 500 }).toBe(30);
      expect(await copies()).toEqual(Array.from({ length: 30 }, (_, i) => String(i)));
      expect(restores).toBeGreaterThanOrEqual(3);
      expect(processedAfter.length).toBeGreaterThan(0);
      expect(processedAfter.filter((at) => at !== '20')).toEqual([]);
      expect((await checkpoints()).at(-1)).toBe('30');
    } finally {
      await second.stop();
    }

    // An operator moved the group past records the state never saw (or a
    // restore can never reach them): after its refusals the stage goes on.
    await produce(30, 10);
    let behind = 0;
    const third = stageOf('stage-cp', input, { ...opts(async () => (behind++, '5'), [], {}), behindRefusals: 2 });
    await third.start();
    try {
      await expect.poll(async () => (await copies()).length, { timeout: 60_000, interval: 500 }).toBe(40);
      expect(behind).toBeGreaterThanOrEqual(3);
    } finally {
      await third.stop();
      await producer.disconnect();
    }
  }, 120_000);
});

describe('sendRequests', () => {
  const rec = (topic: string, bytes: number, i: number): StageOutput => ({ topic, key: String(i), value: Buffer.alloc(bytes) });

  it('cuts outputs into requests under the bound of a partition\'s share and of a request, in order, grouped by topic; a record over the bound goes alone', () => {
    const outputs = [rec('a', 300, 0), rec('b', 300, 1), rec('a', 300, 2), rec('a', 2000, 3), rec('b', 100, 4)];
    // Keyed to no partition: each topic is one share.
    const requests = sendRequests(outputs, 1200);
    expect(requests.map((r) => r.map(({ topic, messages }) => [topic, messages.map((m) => m.key)]))).toEqual([
      [['a', ['0', '2']], ['b', ['1']]],
      [['a', ['3']], ['b', ['4']]],
    ]);
    expect(sendRequests([], 1000)).toEqual([]);
    // Each partition has its share: ten partitions' 300 bytes in one request, under the request's bound.
    const spread = Array.from({ length: 10 }, (_, i) => ({ ...rec('a', 300, i), partition: i }));
    expect(sendRequests(spread, 1000).map((r) => r[0]!.messages.length)).toEqual([10]);
    expect(sendRequests(spread, 1000, 2000).map((r) => r[0]!.messages.length)).toEqual([5, 5]);
    // A second record of one partition over its share starts the next request.
    expect(sendRequests([0, 1, 2].map((i) => ({ ...rec('a', 400, i), partition: 7 })), 1000).map((r) => r[0]!.messages.length)).toEqual([2, 1]);
    // Headers count: each record's key, value and headers.
    const withHeaders = [0, 1, 2].map((i) => ({ topic: 'a', key: String(i), value: Buffer.alloc(200), headers: { src: Buffer.alloc(200) } }));
    expect(sendRequests(withHeaders, 1000).map((r) => r[0]!.messages.length)).toEqual([2, 1]);
    expect(MAX_SEND_BYTES).toBeLessThan(1024 * 1024);
  });
});
