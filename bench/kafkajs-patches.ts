/**
 * `npm run bench:kafkajs`: what each speed patch of patches/ (kafkajs+2.2.4+004
 * to +008, and +011) saves, against the same kafkajs without that one patch,
 * in one run.
 *
 * For every speed patch the bench copies node_modules/kafkajs (as installed:
 * every patch applied) to a scratch directory, takes every patch off there
 * and puts back all but that one, with patch-package's own reader and
 * applier; both copies are loaded side by side by absolute path. Rounds are interleaved (A B, B A, ...) and each line
 * prints the median of the rounds for both copies and their ratio
 * (time without the patch / time with it: above 1.00 the patch pays).
 *
 * Where each patch acts, and the path it sits on:
 *   - 007 CRC-32C: the checksum over buffers of record-batch sizes; the
 *     producer's encoding of a produce request (grouping, records, batch, CRC);
 *     a producer sending 1,000-record batches to the broker.
 *   - 006 grouping by partition: the grouping of 1,000 messages; the same
 *     encoding and sending paths.
 *   - 011 presized encoder: the same encoding and sending paths, and the
 *     encoding of 4,000 records of 1 KiB (a transaction of the intent stage's
 *     state records);
 *   - 008 record decoder: the decoding of a fetch response of 2,500 records;
 *     a consumer draining a topic of BENCH_KAFKAJS_DRAIN (50,000) records.
 *   - 004 coordinator kept, 005 no metadata refresh on CONCURRENT_TRANSACTIONS:
 *     transactions of three records (send + commit) with the intake's lane
 *     settings, back to back on one producer and in turn over two.
 *
 * The broker parts use KAFKA_BROKERS, or else start a local broker.
 * BENCH_KAFKAJS_ROUNDS (default 9) sets the rounds of every line.
 */
import { randomBytes } from 'node:crypto';
import { createRequire } from 'node:module';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { JavaCompatiblePartitioner } from '../shared/kafka/partitioner.ts';
import { kafkajsWithout } from '../test/helpers/kafkajs-copy.ts';
import { benchBrokers, runBench, startBenchRun } from './harness.ts';
import { fmtRatio, median, table } from './stats.ts';

const require = createRequire(import.meta.url);
const ROOT = fileURLToPath(new URL('..', import.meta.url));
const ROUNDS = Number(process.env.BENCH_KAFKAJS_ROUNDS ?? 9);
const DRAIN = Number(process.env.BENCH_KAFKAJS_DRAIN ?? 50_000);

const PATCH = {
  coordinator: 'kafkajs+2.2.4+004+transaction-coordinator-cache.patch',
  concurrent: 'kafkajs+2.2.4+005+concurrent-transactions-no-refresh.patch',
  grouping: 'kafkajs+2.2.4+006+group-messages-in-place.patch',
  crc: 'kafkajs+2.2.4+007+crc32c-slicing-by-8.patch',
  decoder: 'kafkajs+2.2.4+008+record-decoder-numbers.patch',
  encoder: 'kafkajs+2.2.4+011+presized-encoder.patch',
} as const;
type PatchKey = keyof typeof PATCH;

// kafkajs's internals (src/...) have no types.
type Any = any;

const progress = (msg: string) => process.stderr.write(`[bench:kafkajs] ${msg}\n`);

/** The modules a measurement uses, loaded from one copy of kafkajs. */
function load(dir: string) {
  const r = (p: string) => require(join(dir, p));
  return {
    Kafka: r('index.js').Kafka as Any,
    logLevel: r('index.js').logLevel as Any,
    crc32C: r('src/protocol/recordBatch/crc32C/index.js') as (b: Buffer) => number,
    groupMessagesPerPartition: r('src/producer/groupMessagesPerPartition.js') as (o: object) => Record<string, unknown[]>,
    createTopicData: r('src/producer/createTopicData.js') as (o: object) => Any[],
    produceRequest: r('src/protocol/requests/produce/v3/request.js') as (o: object) => { encode(): Promise<Any> },
    fetchResponse: r('src/protocol/requests/fetch/v11/response.js') as { decode(b: Buffer): Promise<Any> },
    Record: r('src/protocol/recordBatch/record/v0/index.js') as (o: object) => Any,
    RecordBatch: r('src/protocol/recordBatch/v0/index.js').RecordBatch as (o: object) => Promise<Any>,
    Long: r('src/utils/long.js') as Any,
  };
}
type Kjs = ReturnType<typeof load>;

/** Milliseconds taken by `fn` run `reps` times. */
async function timed(reps: number, fn: () => unknown): Promise<number> {
  const start = performance.now();
  for (let i = 0; i < reps; i++) await fn();
  return performance.now() - start;
}

/** Interleaved A/B rounds (after one warm-up of each): the medians of `measure` on both copies. */
async function paired(with_: Kjs, without: Kjs, measure: (k: Kjs) => Promise<number>): Promise<{ a: number; b: number }> {
  await measure(with_);
  await measure(without);
  const a: number[] = [];
  const b: number[] = [];
  for (let r = 0; r < ROUNDS; r++) {
    if (r % 2 === 0) {
      a.push(await measure(with_));
      b.push(await measure(without));
    } else {
      b.push(await measure(without));
      a.push(await measure(with_));
    }
  }
  return { a: median(a), b: median(b) };
}

// The service's partitioner (every producer of the service uses it): kafkajs's
// own DefaultPartitioner costs far more than the grouping around it.
const partitioner = JavaCompatiblePartitioner();

const messages = (n: number) =>
  Array.from({ length: n }, () => ({ key: randomBytes(18).toString('hex'), value: randomBytes(200), timestamp: String(Date.now()) }));

/** Metadata of a topic with `n` partitions, as the partitioner and the grouping see it. */
const partitionMetadata = (n: number) => Array.from({ length: n }, (_, i) => ({ partitionId: i, leader: 0, replicas: [0], isr: [0] }));

/** The producer's CPU path of one send, without the network: grouping, records, batches and their CRCs, the request. */
async function encodeProduce(k: Kjs, msgs: Any[], partitions: number): Promise<void> {
  const topic = 'bench';
  const messagesPerPartition = k.groupMessagesPerPartition({ topic, partitionMetadata: partitionMetadata(partitions), messages: msgs, partitioner });
  const topicData = k.createTopicData([{ topic, partitions: Object.keys(messagesPerPartition).map(Number), messagesPerPartition }]);
  for (const t of topicData) for (const p of t.partitions) p.firstSequence = 0;
  await k.produceRequest({ acks: -1, timeout: 30000, topicData }).encode();
}

/** A fetch response (v11) of `batches` record batches of `perBatch` records each, as the broker sends it. */
async function fetchResponse(k: Kjs, batches: number, perBatch: number): Promise<Buffer> {
  const now = Date.now();
  const sets: Buffer[] = [];
  for (let b = 0; b < batches; b++) {
    const records = messages(perBatch).map((m, i) => k.Record({ key: m.key, value: m.value, offsetDelta: i, timestampDelta: i }));
    const batch = await k.RecordBatch({ records, firstOffset: k.Long.fromValue(1_000_000 + b * perBatch), firstTimestamp: now, maxTimestamp: now + perBatch, lastOffsetDelta: perBatch - 1 });
    sets.push(batch.buffer);
  }
  const recordSet = Buffer.concat(sets);
  const topic = Buffer.from('bench');
  const head = Buffer.alloc(4 + 2 + 4 + 4 + 2 + topic.length + 4 + 4 + 2 + 8 + 8 + 8 + 4 + 4 + 4);
  let o = 0;
  o = head.writeInt32BE(0, o); // throttle time
  o = head.writeInt16BE(0, o); // error code
  o = head.writeInt32BE(0, o); // session id
  o = head.writeInt32BE(1, o); // topics
  o = head.writeInt16BE(topic.length, o);
  o += topic.copy(head, o);
  o = head.writeInt32BE(1, o); // partitions
  o = head.writeInt32BE(0, o); // partition
  o = head.writeInt16BE(0, o); // error code
  o = head.writeBigInt64BE(BigInt(1_000_000 + batches * perBatch), o); // high watermark
  o = head.writeBigInt64BE(BigInt(1_000_000 + batches * perBatch), o); // last stable offset
  o = head.writeBigInt64BE(0n, o); // log start offset
  o = head.writeInt32BE(0, o); // aborted transactions
  o = head.writeInt32BE(-1, o); // preferred read replica
  o = head.writeInt32BE(recordSet.length, o);
  return Buffer.concat([head, recordSet]);
}

async function main(): Promise<void> {
  const run = startBenchRun({ tmpPrefix: 'va-bench-kafkajs-', maxRunMs: 20 * 60_000, progress });
  try {
    const patched = load(join(ROOT, 'node_modules/kafkajs'));
    // A patch that cannot be left out alone has no copy: its lines are not measured.
    const without: Partial<Record<PatchKey, Kjs>> = {};
    const unmeasured: string[] = [];
    for (const key of Object.keys(PATCH) as PatchKey[]) {
      try {
        without[key] = load(kafkajsWithout(join(run.tmp, key), PATCH[key]));
      } catch (err) {
        if (!(err instanceof Error) || !err.message.includes('does not apply without')) throw err;
        unmeasured.push(err.message);
        progress(`${key}: not measured: ${err.message}`);
      }
    }
    const rows: string[][] = [['patch', 'measured', 'with', 'without', 'without/with']];
    const report = (patch: PatchKey, what: string, unit: string, { a, b }: { a: number; b: number }) => {
      rows.push([patch, what, `${a.toFixed(unit === 'ms' ? 2 : 1)} ${unit}`, `${b.toFixed(unit === 'ms' ? 2 : 1)} ${unit}`, fmtRatio(b / a)]);
      progress(`${patch}: ${what}: ${a.toFixed(3)} vs ${b.toFixed(3)} ${unit}`);
    };

    // In-process paths: no broker.
    for (const size of [1024, 16 * 1024, 1024 * 1024]) {
      const buf = randomBytes(size);
      const reps = Math.max(20, Math.round((64 * 1024 * 1024) / size / 8));
      if (without.crc) report('crc', `CRC-32C of ${size / 1024} KiB, µs per call`, 'µs', await paired(patched, without.crc, async (k) => ((await timed(reps, () => k.crc32C(buf))) * 1000) / reps));
    }
    const thousand = messages(1000);
    for (const key of ['grouping', 'crc', 'encoder'] as const) {
      const other = without[key];
      if (!other) continue;
      report(key, 'produce request of 1,000 records over 12 partitions encoded, ms', 'ms', await paired(patched, other, async (k) => (await timed(20, () => encodeProduce(k, thousand, 12))) / 20));
    }
    const states = Array.from({ length: 4000 }, () => ({ key: `v:ten_${randomBytes(11).toString('hex')}:vis_${randomBytes(8).toString('hex')}`, value: randomBytes(1024) }));
    if (without.encoder) report('encoder', 'produce request of 4,000 records of 1 KiB over 12 partitions encoded, ms', 'ms', await paired(patched, without.encoder, async (k) => (await timed(10, () => encodeProduce(k, states, 12))) / 10));
    if (without.grouping) report('grouping', 'grouping of 1,000 messages over 12 partitions, µs', 'µs', await paired(patched, without.grouping, async (k) => {
      const meta = partitionMetadata(12);
      return ((await timed(200, () => k.groupMessagesPerPartition({ topic: 'bench', partitionMetadata: meta, messages: thousand, partitioner }))) * 1000) / 200;
    }));
    const fetched = await fetchResponse(patched, 5, 500);
    if (without.decoder) report('decoder', 'fetch response of 2,500 records decoded, ms', 'ms', await paired(patched, without.decoder, async (k) => (await timed(20, () => k.fetchResponse.decode(fetched))) / 20));

    // Against a broker.
    const { brokers } = await benchBrokers(run, process.env.KAFKA_BROKERS, 12, progress);
    const admin = new patched.Kafka({ clientId: 'bench-kafkajs', brokers, logLevel: patched.logLevel.NOTHING }).admin();
    await admin.connect();
    run.cleanups.push(() => admin.disconnect());
    const topic = (name: string) => `bench-kafkajs-${name}-${run.runId}`;
    const created: string[] = [];
    run.cleanups.push(() => admin.deleteTopics({ topics: created }).catch(() => undefined));
    const createTopic = async (name: string, numPartitions: number) => {
      created.push(topic(name));
      await admin.createTopics({ waitForLeaders: true, topics: [{ topic: topic(name), numPartitions, replicationFactor: 1 }] });
      return topic(name);
    };

    const connectProducer = async (k: Kjs, opts: object) => {
      const producer = new k.Kafka({ clientId: 'bench-kafkajs', brokers, logLevel: k.logLevel.NOTHING }).producer({ createPartitioner: JavaCompatiblePartitioner, ...opts });
      await producer.connect();
      run.cleanups.push(() => producer.disconnect());
      return producer;
    };

    // Transactions of three records, one per partition (004, 005), with the
    // intake's lane settings: back to back on one producer (the next one's
    // AddPartitionsToTxn meets the markers of the last: CONCURRENT_TRANSACTIONS),
    // and in turn over the intake's two lanes, as it hands requests out.
    const txTopic = await createTopic('tx', 3);
    const LANES = 2; // the intake's parallelTransactions default
    const transactions = 20;
    for (const key of ['coordinator', 'concurrent'] as const) {
      const other = without[key];
      if (!other) continue;
      const lanes = new Map<Kjs, Any[]>();
      // Requests sent by each copy's producers: the round trips a patch saves
      // are counted exactly, where their time on a shared machine is noisy.
      const requests = new Map<Kjs, number>();
      for (const k of [patched, other]) {
        const producers: Any[] = [];
        for (let i = 0; i < LANES; i++) {
          const producer = await connectProducer(k, {
            transactionalId: `bench-kafkajs-${key}-${lanes.size}-${i}-${run.runId}`,
            idempotent: true,
            maxInFlightRequests: 1,
            transactionTimeout: 30000,
            retry: { retries: 5, initialRetryTime: 20, maxRetryTime: 1000 },
          });
          producer.on(producer.events.REQUEST, () => requests.set(k, (requests.get(k) ?? 0) + 1));
          producers.push(producer);
        }
        lanes.set(k, producers);
      }
      const transact = async (producer: Any) => {
        const tx = await producer.transaction();
        await tx.send({ topic: txTopic, acks: -1, messages: [0, 1, 2].map((partition) => ({ partition, value: 'v' })) });
        await tx.commit();
      };
      for (const k of lanes.keys()) for (const producer of lanes.get(k)!) await transact(producer);
      for (const [how, pick] of [
        ['back to back on one producer', (k: Kjs) => lanes.get(k)![0]],
        [`in turn over ${LANES} lanes`, (k: Kjs, i: number) => lanes.get(k)![i % LANES]],
      ] as const) {
        const perTransaction = new Map<Kjs, number[]>();
        const ms = await paired(patched, other, async (k) => {
          const before = requests.get(k) ?? 0;
          let i = 0;
          const took = (await timed(transactions, () => transact(pick(k, i++)))) / transactions;
          perTransaction.set(k, [...(perTransaction.get(k) ?? []), ((requests.get(k) ?? 0) - before) / transactions]);
          return took;
        });
        report(key, `transaction of 3 records, ${transactions} ${how}, ms each`, 'ms', ms);
        report(key, `  requests per transaction, ${how}`, 'req', { a: median(perTransaction.get(patched)!), b: median(perTransaction.get(other)!) });
      }
    }

    // A producer sending 1,000-record batches over 12 partitions (006, 007, 011).
    const sendTopic = await createTopic('send', 12);
    for (const key of ['grouping', 'crc', 'encoder'] as const) {
      const other = without[key];
      if (!other) continue;
      const producers = new Map<Kjs, Any>();
      for (const k of [patched, other]) producers.set(k, await connectProducer(k, {}));
      report(key, 'send of 1,000 records over 12 partitions (acks -1), ms', 'ms', await paired(patched, other, async (k) => (await timed(10, () => producers.get(k).send({ topic: sendTopic, acks: -1, messages: thousand }))) / 10));
    }

    // A consumer draining a topic from its start (008): first record to last.
    const drainTopic = await createTopic('drain', 1);
    const filler = await connectProducer(patched, {});
    for (let sent = 0; sent < DRAIN; sent += 1000) await filler.send({ topic: drainTopic, acks: -1, messages: thousand.map((m) => ({ key: m.key, value: m.value })) });
    let group = 0;
    if (without.decoder) report('decoder', `consumer draining ${DRAIN.toLocaleString('en-US')} records, ms`, 'ms', await paired(patched, without.decoder, async (k) => {
      const consumer = new k.Kafka({ clientId: 'bench-kafkajs', brokers, logLevel: k.logLevel.NOTHING }).consumer({ groupId: `bench-kafkajs-${run.runId}-${group++}` });
      await consumer.connect();
      await consumer.subscribe({ topic: drainTopic, fromBeginning: true });
      let seen = 0;
      let first = 0;
      const done = new Promise<number>((resolve) => {
        void consumer.run({
          eachBatch: async ({ batch }: Any) => {
            if (seen === 0) first = performance.now();
            seen += batch.messages.length;
            if (seen >= DRAIN) resolve(performance.now() - first);
          },
        });
      });
      const ms = await done;
      await consumer.disconnect();
      return ms;
    }));

    process.stdout.write(`\nkafkajs speed patches, ${ROUNDS} interleaved rounds, medians (${new Date().toISOString().slice(0, 10)})\n\n${table(rows)}\n`);
    for (const line of unmeasured) process.stdout.write(`not measured: ${line}\n`);
  } finally {
    await run.cleanup();
  }
}

runBench(main);
