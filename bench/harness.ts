import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import { join } from 'node:path';
import { startLocalBroker, type LocalBroker } from '../infra/kafka/local-broker.ts';

/** What a bench run sets up first, shared by `npm run bench` and `npm run bench:webhooks`. */
export interface BenchRun {
  /** Scratch directory under the OS temp dir, removed by `cleanup` (kept with BENCH_KEEP_TMP=1). */
  tmp: string;
  runId: string;
  /** Undone by `cleanup` in reverse order; push what each step starts. */
  cleanups: (() => Promise<void>)[];
  /** Runs every cleanup once, however often it is called; failures are reported, not thrown. */
  cleanup: () => Promise<void>;
}

/**
 * Makes the scratch directory and the run id, and cleans up then exits on
 * SIGINT (130), SIGTERM (143) or once `maxRunMs` has passed (1), whatever hangs.
 */
export function startBenchRun({ tmpPrefix, maxRunMs, progress }: { tmpPrefix: string; maxRunMs: number; progress: (msg: string) => void }): BenchRun {
  const tmp = mkdtempSync(join(os.tmpdir(), tmpPrefix));
  const runId = randomBytes(4).toString('hex');
  // BENCH_KEEP_TMP=1 keeps the stacks' logs and data for a post-mortem.
  const cleanups: (() => Promise<void>)[] = [
    async () => {
      if (process.env.BENCH_KEEP_TMP === '1') progress(`kept ${tmp}`);
      else rmSync(tmp, { recursive: true, force: true });
    },
  ];
  let cleaning: Promise<void> | undefined;
  const cleanup = () =>
    (cleaning ??= (async () => {
      for (const c of cleanups.reverse()) await c().catch((err: unknown) => progress(`cleanup: ${String(err)}`));
    })());
  const abort = (why: string, code: number) => {
    progress(why);
    void cleanup().finally(() => process.exit(code));
  };
  process.once('SIGINT', () => abort('interrupted, cleaning up', 130));
  process.once('SIGTERM', () => abort('terminated, cleaning up', 143));
  const watchdog = setTimeout(() => abort(`run exceeded ${maxRunMs / 60000} min, aborting`, 1), maxRunMs);
  watchdog.unref();
  return { tmp, runId, cleanups, cleanup };
}

/** Runs a bench's main and exits: 0, or 1 with the error on stderr. */
export function runBench(main: () => Promise<void>): void {
  main().then(
    () => process.exit(0),
    (err: unknown) => {
      process.stderr.write(`bench failed: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`);
      process.exit(1);
    },
  );
}

/**
 * The brokers of KAFKA_BROKERS (`external`, comma-separated) or else a fresh
 * local broker with its data in the run's temp dir, stopped by its cleanup.
 */
export async function benchBrokers(
  run: Pick<BenchRun, 'tmp' | 'cleanups'>,
  external: string | undefined,
  partitions: number,
  progress: (msg: string) => void,
): Promise<{ brokers: string[]; brokerPid: number | undefined }> {
  if (external) return { brokers: external.split(',').map((b) => b.trim()), brokerPid: undefined };
  progress('starting a local Kafka broker');
  const broker: LocalBroker = await startLocalBroker({ dataDir: join(run.tmp, 'kafka'), partitions, log: progress });
  run.cleanups.push(() => broker.stop());
  return { brokers: broker.brokers, brokerPid: broker.pid };
}
