/**
 * `npm run bench:txn-retry`: what the transactional producers' retry schedule
 * costs a stage of consume-transform-produce. After a commit the broker still
 * writes its markers, and the next transaction's first request is refused
 * with CONCURRENT_TRANSACTIONS until it is done; kafkajs waits its retry
 * schedule before asking again, so the schedule's first steps are on the
 * path of every transaction that follows another.
 *
 * Each round runs N transactional producers side by side (BENCH_TXN_PRODUCERS,
 * "1,12": one alone, and one per input partition as a stage has), each doing
 * BENCH_TXN_PER_ROUND (30) transactions back to back in the stage's shape:
 * 10 records sent, the input offset added, commit. Rounds alternate between
 * the schedules (A B, B A, ...); printed: median per schedule over the
 * rounds of transactions/s, each step's median and the retries per
 * transaction, and the ratio against the first schedule.
 *
 * The broker is KAFKA_BROKERS, or else a local one. BENCH_TXN_ROUNDS (6).
 */
import type { RetryOptions } from 'kafkajs';
import { createKafka, TRANSACTIONAL_RETRY, waitForCoordinator } from '../shared/kafka/kafka.ts';
import { createLogger } from '../shared/logger.ts';
import { benchBrokers, runBench, startBenchRun } from './harness.ts';
import { fmtMs, fmtRatio, median, table } from './stats.ts';

const PRODUCERS = (process.env.BENCH_TXN_PRODUCERS ?? '1,12').split(',').map(Number);
const PER_ROUND = Number(process.env.BENCH_TXN_PER_ROUND ?? 30);
const ROUNDS = Number(process.env.BENCH_TXN_ROUNDS ?? 6);

/** The schedules compared: the one in use first; the others against it. */
const SCHEDULES: { name: string; retry: RetryOptions }[] = [
  { name: 'in use (TRANSACTIONAL_RETRY)', retry: TRANSACTIONAL_RETRY },
  { name: 'before: 20 ms doubling', retry: { retries: 5, initialRetryTime: 20, maxRetryTime: 1000 } },
  { name: 'client default: 100 ms doubling', retry: { retries: 5, initialRetryTime: 100, maxRetryTime: 1000 } },
];

const progress = (msg: string) => process.stderr.write(`[bench:txn-retry] ${msg}\n`);

interface Round {
  perSec: number;
  send: number;
  offsets: number;
  commit: number;
  retriesPerTx: number;
}

async function main(): Promise<void> {
  const run = startBenchRun({ tmpPrefix: 'va-bench-txn-', maxRunMs: 15 * 60_000, progress });
  try {
    const { brokers } = await benchBrokers(run, process.env.KAFKA_BROKERS, Math.max(...PRODUCERS), progress);
    let retries = 0;
    const kafka = createKafka({
      brokers,
      clientId: 'bench-txn-retry',
      log: createLogger({ level: 'warn' }),
      onProduceRetry: (cause) => {
        if (cause === 'concurrent_transactions') retries++;
      },
    });
    const admin = kafka.admin();
    await admin.connect();
    await waitForCoordinator(admin);
    const [input, output] = [`bench-txn-in-${run.runId}`, `bench-txn-out-${run.runId}`];
    await admin.createTopics({ waitForLeaders: true, topics: [input, output].map((topic) => ({ topic, numPartitions: Math.max(...PRODUCERS) })) });
    run.cleanups.push(() => admin.disconnect());

    const round = async (size: number, s: number, r: number): Promise<Round> => {
      const producers = await Promise.all(
        Array.from({ length: size }, async (_, i) => {
          const p = kafka.producer({ transactionalId: `bench-txn-${run.runId}-${size}-${s}-${r}-${i}`, idempotent: true, maxInFlightRequests: 1, retry: SCHEDULES[s]!.retry });
          await p.connect();
          return p;
        }),
      );
      const send: number[] = [];
      const offsets: number[] = [];
      const commit: number[] = [];
      retries = 0;
      const t = performance.now();
      await Promise.all(
        producers.map(async (p, i) => {
          for (let n = 0; n < PER_ROUND; n++) {
            const tx = await p.transaction();
            const t0 = performance.now();
            const messages = Array.from({ length: 10 }, (_, k) => ({ key: `v${i}-${n}-${k}`, value: 'x'.repeat(200) }));
            await tx.sendBatch({ topicMessages: [{ topic: output, messages }] });
            const t1 = performance.now();
            await tx.sendOffsets({ consumerGroupId: `bench-txn-${run.runId}`, topics: [{ topic: input, partitions: [{ partition: i, offset: String(n + 1) }] }] });
            const t2 = performance.now();
            await tx.commit();
            send.push(t1 - t0);
            offsets.push(t2 - t1);
            commit.push(performance.now() - t2);
          }
        }),
      );
      const elapsed = (performance.now() - t) / 1000;
      await Promise.all(producers.map((p) => p.disconnect()));
      const n = size * PER_ROUND;
      return { perSec: n / elapsed, send: median(send), offsets: median(offsets), commit: median(commit), retriesPerTx: retries / n };
    };

    await round(Math.max(...PRODUCERS), 0, -1); // warm-up: the coordinator's partitions and the connections
    for (const size of PRODUCERS) {
      const rounds: Round[][] = SCHEDULES.map(() => []);
      for (let r = 0; r < ROUNDS; r++) {
        const order = SCHEDULES.map((_, s) => s);
        if (r % 2 === 1) order.reverse();
        for (const s of order) {
          const got = await round(size, s, r);
          rounds[s]!.push(got);
          progress(`${size} producers, round ${r + 1}/${ROUNDS}, ${SCHEDULES[s]!.name}: ${got.perSec.toFixed(0)} transactions/s`);
        }
      }
      const med = (s: number, k: keyof Round) => median(rounds[s]!.map((x) => x[k]));
      const rows = [['schedule', 'transactions/s', 'vs in use', 'send', 'offsets', 'commit', 'CONCURRENT_TRANSACTIONS retries/tx']];
      SCHEDULES.forEach((sch, s) =>
        rows.push([
          `${sch.name} ${JSON.stringify(sch.retry)}`,
          med(s, 'perSec').toFixed(0),
          fmtRatio(med(s, 'perSec') / med(0, 'perSec')),
          fmtMs(med(s, 'send')),
          fmtMs(med(s, 'offsets')),
          fmtMs(med(s, 'commit')),
          med(s, 'retriesPerTx').toFixed(2),
        ]),
      );
      process.stdout.write(`\n${size} transactional producer(s) side by side, ${PER_ROUND} transactions each per round (10 records, offsets, commit), medians of ${ROUNDS} rounds\n\n${table(rows)}\n`);
    }
  } finally {
    await run.cleanup();
  }
}

runBench(main);
