/**
 * `npm run bench`: one run of every performance figure of docs/performance.md
 * against a fresh local Kafka broker (or KAFKA_BROKERS) and fresh embedded
 * ClickHouse data directories under the OS temp dir, all removed at the end.
 *
 *   1. intake events/s through POST /v1/collect beside an HTTP passthrough
 *      (Fastify JSON → produce, acks=-1) and raw kafkajs producers
 *   2. projector events/s beside raw chdb inserts of the same rows
 *   3. freshness (202 ack → readable through the API) at a fixed rate, with
 *      every service in one process (and with BENCH_FRESHNESS_SPLIT_RATES
 *      also with the intake in a process of its own)
 *   4. events-page and score latency over 1 million stored events
 *      (BENCH_READ_EVENTS), and each read's SQL straight to ClickHouse;
 *      with BENCH_PHASES=reads and two sizes (1000000,10000000), both side
 *      by side and the ratios between them
 *   5. the fan-out draining a backlog of events no destination selects:
 *      events/s and the event-loop delay meanwhile
 *   6. the derived-events service draining a backlog through both of its
 *      stages, and the projector over the same backlog, each round in turn
 *
 * BENCH_QUICK=1 shrinks every phase (for checking the harness, not for figures).
 * BENCH_DERIVED_PROFILE=1 profiles the derived-events process in the last drain round;
 * BENCH_DERIVED_EVENTS and BENCH_DERIVED_ROUNDS set that phase's backlog and rounds.
 * BENCH_PHASES=intake, projector, fanout, derived, freshness or reads runs that phase alone.
 * BENCH_PHASES=reads-concurrency runs only that phase (bench/reads-concurrency.ts, not in the
 * default run): each read at 1/4/16/64 connections with the read cache off and on, beside the
 * HTTP layer's and the engine's ceilings, then the same reads beside the intake.
 */
import { randomBytes } from 'node:crypto';
import os from 'node:os';
import { join } from 'node:path';
import { version as chdbVersion } from 'chdb';
import { KAFKA_VERSION } from '../infra/kafka/local-broker.ts';
import { ConfigSchema, SERVICE_NAMES, loadConfig } from '../shared/config.ts';
import { createKafka } from '../shared/kafka/kafka.ts';
import { createLogger } from '../shared/logger.ts';
import { setupTenant, type BenchContext } from './context.ts';
import { fmtCores } from './cpu.ts';
import { benchFreshness, playerKeyKnown, type FreshnessResult, type FreshnessTargets } from './freshness.ts';
import { benchBrokers, runBench, startBenchRun } from './harness.ts';
import { HttpClient } from './http-client.ts';
import { formatProfileComparison, formatProfileSummary } from './cpu-profile.ts';
import { benchIntake, INTAKE_MODES, intakeRoundRatio, MODE_LABEL, type IntakeResult } from './intake.ts';
import { benchProjector, roundRatio, type ProjectorResult } from './projector.ts';
import { benchFanoutDrain, type FanoutDrainResult } from './fanout-drain.ts';
import { benchDerivedDrain, type DerivedDrainResult } from './derived-drain.ts';
import { benchReadGrowth, benchReadLatency, READ_KINDS, READ_LABEL, type ReadKind, type ReadLatencyResult, type ReadOptions } from './read-latency.ts';
import { fmtInt, fmtMs, fmtRatio, median, table } from './stats.ts';
import { benchReadsConcurrency, RC_KINDS, RC_LABEL, type Cell, type RcResult } from './reads-concurrency.ts';
import { StackWorker } from './worker-client.ts';

const QUICK = process.env.BENCH_QUICK === '1';
/** BENCH_PHASES=intake runs (and reports) the intake phase alone, for a shorter run on a busy machine. */
const ONLY_INTAKE = process.env.BENCH_PHASES === 'intake';
/** BENCH_PHASES=reads runs (and reports) the read-latency phase alone, e.g. at BENCH_READ_EVENTS=10000000. */
const ONLY_READS = process.env.BENCH_PHASES === 'reads';
/** BENCH_PHASES=projector runs (and reports) the projector phase alone. */
const ONLY_PROJECTOR = process.env.BENCH_PHASES === 'projector';
/** BENCH_PHASES=freshness runs (and reports) the freshness phases alone, both deployments. */
const ONLY_FRESHNESS = process.env.BENCH_PHASES === 'freshness';
/** BENCH_PHASES=fanout runs (and reports) the fan-out drain phase alone. */
const ONLY_FANOUT = process.env.BENCH_PHASES === 'fanout';
/** BENCH_PHASES=derived runs (and reports) the derived-events drain phase alone. */
const ONLY_DERIVED = process.env.BENCH_PHASES === 'derived';
/** BENCH_PHASES=reads-concurrency runs (and reports) the reads-concurrency phase alone; it is not part of the default run. */
const ONLY_READS_CONCURRENCY = process.env.BENCH_PHASES === 'reads-concurrency';
if (process.env.BENCH_PHASES && !ONLY_INTAKE && !ONLY_READS && !ONLY_PROJECTOR && !ONLY_FRESHNESS && !ONLY_FANOUT && !ONLY_DERIVED && !ONLY_READS_CONCURRENCY) {
  throw new Error(`BENCH_PHASES must be intake, projector, fanout, derived, freshness, reads or reads-concurrency, not ${process.env.BENCH_PHASES}`);
}
/**
 * BENCH_READ_EVENTS: stored events of the read phase. Several sizes, comma
 * separated (with BENCH_PHASES=reads, e.g. 1000000,10000000), load one stack
 * per size and send the requests to them in turn, so the ratios between sizes
 * come from one stretch of time (the reads' growth figures of issue 9).
 */
const READ_SIZES = process.env.BENCH_READ_EVENTS === undefined ? undefined : process.env.BENCH_READ_EVENTS.split(',').map(Number);
if (READ_SIZES !== undefined && !READ_SIZES.every((n) => Number.isInteger(n) && n >= 40_000)) {
  throw new Error(`BENCH_READ_EVENTS must be integers of at least 40000, comma-separated, not ${process.env.BENCH_READ_EVENTS}`);
}
if (READ_SIZES !== undefined && READ_SIZES.length > 1 && process.env.BENCH_PHASES !== 'reads') {
  throw new Error('several BENCH_READ_EVENTS sizes need BENCH_PHASES=reads');
}
const READ_EVENTS = READ_SIZES?.[0];
const PLAN = {
  concurrency: Number(process.env.BENCH_CONCURRENCY ?? 32),
  batch: 50,
  /** BENCH_INTAKE_ROUNDS: measured rounds of the intake phase (default 5; odd, so the median is a round). */
  intakeRounds: Number(process.env.BENCH_INTAKE_ROUNDS ?? (QUICK ? 1 : 5)),
  intakeRoundMs: QUICK ? 2000 : 5000,
  /** Per mode, before the measured rounds: one whole unmeasured round (bench/intake.ts). */
  intakeWarmupMs: QUICK ? 500 : 5000,
  projectorEvents: QUICK ? 20_000 : 200_000,
  projectorRounds: QUICK ? 1 : 3,
  /** One unmeasured projector round first (bench/projector.ts). */
  projectorWarmup: !QUICK,
  /** Events of the fan-out drain phase's backlog (a tenant without destinations), per round. */
  fanoutDrainEvents: QUICK ? 20_000 : 200_000,
  fanoutDrainRounds: QUICK ? 1 : 3,
  /** BENCH_DRAIN_SERVICES: the drain phase's SERVICES (default the fan-out alone; every service = a process restarted after downtime). */
  fanoutDrainServices: process.env.BENCH_DRAIN_SERVICES ?? 'fanout',
  /** Events of the derived-events drain phase's backlog, per round. */
  // 300k: a drain of several seconds, so that a stack's start and its first batches weigh little.
  derivedDrainEvents: Number(process.env.BENCH_DERIVED_EVENTS) || (QUICK ? 20_000 : 300_000),
  derivedDrainRounds: Number(process.env.BENCH_DERIVED_ROUNDS) || (QUICK ? 1 : 3),
  /** BENCH_FRESHNESS_RATES (events/s, comma-separated): one freshness phase per rate, each on its own tenant. */
  freshnessRates: (process.env.BENCH_FRESHNESS_RATES ?? '5000,20000').split(',').map(Number).filter((r) => r > 0),
  /**
   * BENCH_FRESHNESS_SPLIT_RATES (events/s, comma-separated; none unless set):
   * the same phase against a split deployment, the intake in one process and
   * the rest in another (freshness.ts). Not in the default run: on 2 cores
   * two processes compete for the same CPU and gain nothing.
   */
  freshnessSplitRates: (process.env.BENCH_FRESHNESS_SPLIT_RATES ?? '').split(',').map(Number).filter((r) => r > 0),
  freshnessWarmupMs: QUICK ? 1000 : 3000,
  freshnessMeasureMs: QUICK ? 5000 : 30_000,
  freshnessDrainMs: 10_000,
  probeEvery: 4,
  /** Stored events of the read-latency phase (4 videos, 10,000 visitors, 30 days). */
  stored: READ_EVENTS ?? (QUICK ? 100_000 : 1_000_000),
  readRequests: QUICK ? 20 : 200,
  /** Hard stop for the whole run, whatever hangs (the reads-concurrency phase alone runs about 15 minutes). */
  maxRunMs: (ONLY_READS_CONCURRENCY ? 40 : 15) * 60_000,
  /** BENCH_RC_CONNS: connection counts of the reads-concurrency phase. */
  rcConns: (process.env.BENCH_RC_CONNS ?? '1,4,16,64').split(',').map(Number),
  /** BENCH_RC_SECONDS: measured seconds of each reads-concurrency cell (after 1 s of warm-up). */
  rcCellMs: Number(process.env.BENCH_RC_SECONDS ?? (QUICK ? 2 : 5)) * 1000,
  rcWarmMs: QUICK ? 300 : 1000,
  /** Visitors the score and timeline requests cycle over. */
  rcWorkingSet: 2000,
  /** BENCH_RC_MIXED_RATE: events/s of the intake in the mixed run. */
  rcMixedRate: Number(process.env.BENCH_RC_MIXED_RATE ?? 10_000),
  /** BENCH_RC_READS_NICE: nice value of the read side in the split mixed run (0: the one-process run only). */
  rcReadsNice: Number(process.env.BENCH_RC_READS_NICE ?? 10),
  /**
   * BENCH_RC_SERVICES: what the reads-concurrency stacks run. By default the
   * read path and what it needs (the intake, the projector whose inserts
   * invalidate the cache, the API); the derived-events and fan-out services
   * would take their own machines' CPU in a deployment, not this process's.
   */
  rcServices: process.env.BENCH_RC_SERVICES ?? 'ingest,projector,api,admin',
  rcMixedMs: QUICK ? 3000 : 10_000,
};

const T0 = performance.now();
const progress = (msg: string) => process.stderr.write(`[bench +${((performance.now() - T0) / 1000).toFixed(0).padStart(3)} s] ${msg}\n`);
const out = (s = '') => process.stdout.write(`${s}\n`);
/** The report's closing lines: the load average and the run's duration. */
const outEnd = () => {
  out(`load avg    ${os.loadavg().map((l) => l.toFixed(2)).join(' ')} (1/5/15 min, at the end)`);
  out(`duration    ${((performance.now() - T0) / 1000).toFixed(0)} s`);
};
/** 1-minute load average as each phase began: the machine is shared. */
const loads: Record<string, number> = {};
const loadNote = (phase: string) => `(1-min load average at the start of this phase: ${loads[phase]?.toFixed(2) ?? 'n/a'} on ${os.cpus().length} CPUs)`;

/** Settings the operator may tune for an experiment; every isolation setting is the bench's own. */
const TUNABLE = ['INGEST_LINGER_MS', 'INGEST_MAX_TX_EVENTS', 'INGEST_PRODUCE_TIMEOUT_MS', 'PROJECTOR_FLUSH_MS', 'PROJECTOR_MAX_ROWS', 'KAFKA_TOPIC_PARTITIONS'];

async function main(): Promise<void> {
  const { tmp, runId, cleanups, cleanup } = startBenchRun({ tmpPrefix: 'va-bench-', maxRunMs: PLAN.maxRunMs, progress });

  try {
    const tuned = Object.fromEntries(TUNABLE.filter((k) => process.env[k]).map((k) => [k, process.env[k]!]));
    const settings = loadConfig(tuned);
    const external = process.env.KAFKA_BROKERS?.trim();
    const cpus = os.cpus();
    const ch = chdbVersion();
    out('# Video analytics service benchmark');
    out();
    out(`command     ${process.env.npm_lifecycle_event ? `npm run ${process.env.npm_lifecycle_event} (${process.env.npm_lifecycle_script})` : `node ${process.argv.slice(1).map((a) => a.replace(process.cwd() + '/', '')).join(' ')}`}${QUICK ? '  [BENCH_QUICK=1: reduced sizes, not for figures]' : ''}`);
    out(`date        ${new Date().toISOString()}`);
    out(`machine     ${cpus.length} × ${cpus[0]?.model ?? 'unknown CPU'}, ${(os.totalmem() / 2 ** 30).toFixed(1)} GiB RAM, ${os.type()} ${os.release()} ${os.arch()}`);
    out(`load avg    ${os.loadavg().map((l) => l.toFixed(2)).join(' ')} (1/5/15 min, at start)`);
    out(`node        ${process.version}`);
    out(`kafka       ${external ? `external at ${external} (version not probed)` : `Apache Kafka ${KAFKA_VERSION}, local single-node KRaft broker (JVM, 1 GiB heap), same machine`}`);
    out(`clickhouse  embedded chdb ${ch.chdb} (libchdb / ClickHouse ${ch.libchdb.replaceAll('"', '')}), in-process`);
    if (ONLY_INTAKE) out('phases      BENCH_PHASES=intake: the intake phase only');
    if (ONLY_READS) out(`phases      BENCH_PHASES=reads: the read-latency phase only, over ${(READ_SIZES ?? [PLAN.stored]).map(fmtInt).join(' and ')} stored events`);
    out(
      `settings    partitions ${settings.KAFKA_TOPIC_PARTITIONS}, INGEST_LINGER_MS ${settings.INGEST_LINGER_MS}, INGEST_MAX_TX_EVENTS ${settings.INGEST_MAX_TX_EVENTS}, PROJECTOR_FLUSH_MS ${settings.PROJECTOR_FLUSH_MS}, PROJECTOR_MAX_ROWS ${settings.PROJECTOR_MAX_ROWS}${Object.keys(tuned).length ? ' (from the environment)' : ' (defaults)'}`,
    );
    out(`load        ${PLAN.concurrency} concurrent keep-alive HTTP clients (node:http), batches of ${PLAN.batch} events; generator in this process, stack in a child process`);
    out();

    const { brokers, brokerPid } = await benchBrokers({ tmp, cleanups }, external, settings.KAFKA_TOPIC_PARTITIONS, progress);
    // NOTE: kafkajs logs every retried CONCURRENT_TRANSACTIONS as an error;
    // they are counted for the report instead of flooding it.
    let concurrentTx = 0;
    let otherErrors = 0;
    const log = createLogger({
      level: 'error',
      service: 'bench',
      destination: {
        write(line: string) {
          if (otherErrors++ < 20) process.stderr.write(line);
        },
      },
    });
    // The in-process producers' retries, counted as the service counts its own.
    const kafka = createKafka({ brokers, clientId: `bench-${runId}`, log, onProduceRetry: (cause) => void (cause === 'concurrent_transactions' && concurrentTx++) });
    const adminToken = `adm_${randomBytes(16).toString('hex')}`;
    const cursorSecret = randomBytes(24).toString('hex');
    const prefixes: string[] = [];
    const startRetries: string[] = [];
    if (external) {
      // A shared cluster keeps no litter of this run.
      cleanups.push(async () => {
        const admin = kafka.admin();
        await admin.connect();
        const mine = (await admin.listTopics()).filter((t) => prefixes.some((p) => t.startsWith(p)));
        if (mine.length > 0) await admin.deleteTopics({ topics: mine });
        await admin.disconnect();
      });
    }

    const workerEnv = (prefix: string, services: string, dataDir: string, extra: Record<string, string>) => {
      const env: Record<string, string> = {};
      for (const [k, v] of Object.entries(process.env)) if (v !== undefined && !(k in ConfigSchema.shape)) env[k] = v;
      return {
        ...env,
        ...tuned,
        KAFKA_BROKERS: brokers.join(','),
        KAFKA_TOPIC_PREFIX: prefix,
        KAFKA_CLIENT_ID: `bench-${runId}`,
        DATA_DIR: dataDir,
        PORT: '0',
        HOST: '127.0.0.1',
        ADMIN_TOKEN: adminToken,
        CURSOR_SECRET: cursorSecret,
        SERVICES: services,
        // The latency phase alone sends 840 requests a minute on one key.
        RATE_LIMIT_PER_MINUTE: '100000000',
        // Every client is on loopback with one player key: the intake's own limits are off.
        PLAYER_KEY_EVENTS_PER_MINUTE: '0',
        CLIENT_ADDRESS_REQUESTS_PER_MINUTE: '0',
        LOG_LEVEL: 'warn',
        ...extra,
      };
    };
    const ctx: BenchContext = {
      brokers,
      brokerPid,
      kafka,
      log,
      tmp,
      runId,
      partitions: settings.KAFKA_TOPIC_PARTITIONS,
      lingerMs: settings.INGEST_LINGER_MS,
      produceTimeoutMs: settings.INGEST_PRODUCE_TIMEOUT_MS,
      progress,
      concurrentTxRetries: () => concurrentTx,
      async startWorker(name, services, extra = {}) {
        const prefix = `bench-${runId}-${name}.`;
        prefixes.push(prefix);
        const dataDir = join(tmp, name);
        progress(`starting stack "${name}" (SERVICES=${services})`);
        let worker: StackWorker;
        try {
          worker = await StackWorker.start({ env: workerEnv(prefix, services, dataDir, extra), logDir: tmp, name });
        } catch (err) {
          // NOTE: one retry, same prefix and data: on a loaded machine a stack
          // start can trip over a topic created a moment before (see the
          // report); the failure is counted and printed, not hidden.
          startRetries.push(`${name}: ${(err instanceof Error ? err.message : String(err)).split('\n')[0]}`);
          progress(`stack "${name}" failed to start, retrying once: ${startRetries.at(-1)}`);
          worker = await StackWorker.start({ env: workerEnv(prefix, services, dataDir, extra), logDir: tmp, name: `${name}-retry` });
        }
        cleanups.push(() => worker.stop());
        progress(`stack "${name}" up in ${((worker.ready.readyAt - worker.ready.startedAt) / 1000).toFixed(1)} s at ${worker.ready.url}`);
        return { worker, prefix };
      },
    };

    /** Freshness at each rate: against `worker` (every service in one process), then against a split deployment. */
    const freshnessPhases = async (worker: StackWorker): Promise<FreshnessResult[]> => {
      const results: FreshnessResult[] = [];
      const phase = async (targets: FreshnessTargets, rate: number, label: string) => {
        const admin = new HttpClient(targets.reads.ready.url, 2);
        const fresh = await setupTenant(admin, adminToken, `bench freshness ${label}`, 9, true);
        admin.close();
        if (targets.deployment === 'split') await playerKeyKnown(targets.ingest.ready.url, fresh.tenant.player_key);
        ctx.progress(`freshness (${targets.deployment}): ${rate} events/s for ${PLAN.freshnessMeasureMs / 1000} s (after ${PLAN.freshnessWarmupMs / 1000} s warm-up)`);
        loads[`freshness ${label}`] = os.loadavg()[0]!;
        results.push(
          await benchFreshness(ctx, targets, {
            playerKey: fresh.tenant.player_key,
            apiKey: fresh.apiKey!,
            loadVideos: fresh.videoIds.slice(1),
            probeVideo: fresh.videoIds[0]!,
            rate,
            batch: PLAN.batch,
            warmupMs: PLAN.freshnessWarmupMs,
            measureMs: PLAN.freshnessMeasureMs,
            drainMs: PLAN.freshnessDrainMs,
            probeEvery: PLAN.probeEvery,
          }),
        );
      };
      for (const rate of PLAN.freshnessRates) await phase({ deployment: 'one process', ingest: worker, reads: worker }, rate, String(rate));
      for (const rate of PLAN.freshnessSplitRates) {
        // Two processes on the same topics; the other stacks are idle meanwhile.
        const { worker: rest, prefix } = await ctx.startWorker(`split-rest-${rate}`, 'projector,fanout,api,admin');
        try {
          const { worker: ingest } = await ctx.startWorker(`split-ingest-${rate}`, 'ingest', { KAFKA_TOPIC_PREFIX: prefix });
          try {
            await phase({ deployment: 'split', ingest, reads: rest }, rate, `split ${rate}`);
          } finally {
            await ingest.stop();
          }
        } finally {
          await rest.stop();
        }
      }
      return results;
    };

    if (ONLY_FRESHNESS) {
      const { worker } = await ctx.startWorker('read', SERVICE_NAMES.join(','));
      const freshness = await freshnessPhases(worker);
      await worker.stop();
      out('## 3. Freshness (202 ack → readable through GET /v1/videos/:id/events?since=)');
      for (const f of freshness) reportFreshness(f);
      out('BENCH_PHASES=freshness: intake, projector and read-latency phases not run');
      outEnd();
      return;
    }

    if (ONLY_READS_CONCURRENCY) {
      loads['reads-concurrency'] = os.loadavg()[0]!;
      const rc = await benchReadsConcurrency(ctx, {
        stored: PLAN.stored,
        conns: PLAN.rcConns,
        cellMs: PLAN.rcCellMs,
        warmMs: PLAN.rcWarmMs,
        workingSet: PLAN.rcWorkingSet,
        mixedRate: PLAN.rcMixedRate,
        services: PLAN.rcServices,
        mixedMs: PLAN.rcMixedMs,
        readsNice: PLAN.rcReadsNice,
        adminToken,
        cursorSecret,
      });
      reportReadsConcurrency(rc);
      outEnd();
      return;
    }
    if (ONLY_READS) {
      // One stack per size, each its own process and chdb (see BENCH_READ_EVENTS).
      const targets: { worker: StackWorker; opts: ReadOptions }[] = [];
      try {
        for (const stored of READ_SIZES ?? [PLAN.stored]) {
          const { worker } = await ctx.startWorker(`read-${stored}`, SERVICE_NAMES.join(','));
          const admin = new HttpClient(worker.ready.url, 2);
          const lt = await setupTenant(admin, adminToken, 'bench read latency', 4, true);
          admin.close();
          targets.push({ worker, opts: { tenantId: lt.tenant.id, apiKey: lt.apiKey!, videoIds: lt.videoIds, stored, requests: PLAN.readRequests, cursorSecret } });
        }
        loads.reads = os.loadavg()[0]!;
        const reads = await benchReadGrowth(ctx, targets);
        for (const r of reads) reportReads(r);
        if (reads.length > 1) reportReadGrowth(reads);
      } finally {
        for (const t of targets) await t.worker.stop();
      }
      outEnd();
      return;
    }
    if (ONLY_PROJECTOR) {
      loads.projector = os.loadavg()[0]!;
      reportProjector(await benchProjector(ctx, { events: PLAN.projectorEvents, rounds: PLAN.projectorRounds, warmup: PLAN.projectorWarmup }));
      outEnd();
      return;
    }
    const fanoutDrain = () => {
      loads.fanout = os.loadavg()[0]!;
      return benchFanoutDrain(ctx, { events: PLAN.fanoutDrainEvents, rounds: PLAN.fanoutDrainRounds, timeoutMs: 180_000, services: PLAN.fanoutDrainServices });
    };
    if (ONLY_FANOUT) {
      reportFanoutDrain(await fanoutDrain());
      outEnd();
      return;
    }
    const derivedDrain = () => {
      loads.derived = os.loadavg()[0]!;
      return benchDerivedDrain(ctx, { events: PLAN.derivedDrainEvents, rounds: PLAN.derivedDrainRounds, timeoutMs: 300_000, profile: process.env.BENCH_DERIVED_PROFILE === '1' });
    };
    if (ONLY_DERIVED) {
      reportDerivedDrain(await derivedDrain());
      outEnd();
      return;
    }
    loads.intake = os.loadavg()[0]!;
    const intake = await benchIntake(ctx, {
      concurrency: PLAN.concurrency,
      batch: PLAN.batch,
      roundMs: PLAN.intakeRoundMs,
      rounds: PLAN.intakeRounds,
      warmupMs: PLAN.intakeWarmupMs,
    });
    if (ONLY_INTAKE) {
      reportIntake(intake);
      out('BENCH_PHASES=intake: projector, freshness and read-latency phases not run');
      outEnd();
      return;
    }
    loads.projector = os.loadavg()[0]!;
    const projector = await benchProjector(ctx, { events: PLAN.projectorEvents, rounds: PLAN.projectorRounds, warmup: PLAN.projectorWarmup });
    const drain = await fanoutDrain();
    const derived = await derivedDrain();

    // The whole stack as deployed by default (every service), since freshness
    // is a property of the deployment, not of the projector alone.
    const { worker } = await ctx.startWorker('read', SERVICE_NAMES.join(','));
    const freshness = await freshnessPhases(worker);
    const admin = new HttpClient(worker.ready.url, 2);
    const lt = await setupTenant(admin, adminToken, 'bench read latency', 4, true);
    admin.close();
    loads.reads = os.loadavg()[0]!;
    const reads = await benchReadLatency(ctx, worker, {
      tenantId: lt.tenant.id,
      apiKey: lt.apiKey!,
      videoIds: lt.videoIds,
      stored: PLAN.stored,
      requests: PLAN.readRequests,
      cursorSecret,
    });
    await worker.stop();

    report(intake, projector, freshness, reads);
    reportFanoutDrain(drain);
    reportDerivedDrain(derived);
    out();
    out(`stack start retries ${startRetries.length ? startRetries.join('; ') : 'none'}`);
    outEnd();
  } finally {
    progress('cleaning up (stacks, broker, temp dirs)');
    await cleanup();
  }
}

function report(intake: IntakeResult, projector: ProjectorResult, f: FreshnessResult[], reads: ReadLatencyResult): void {
  reportIntake(intake);
  reportRest(projector, f, reads);
}

function reportIntake(intake: IntakeResult): void {
  out('## 1. Intake throughput (closed loop)');
  out(loadNote('intake'));
  out(`${intake.concurrency} concurrent clients × batches of ${intake.batch}, ${intake.rounds.intake.length} rounds of ${intake.roundMs / 1000} s per mode after one unmeasured round of ${intake.warmupMs / 1000} s per mode, modes interleaved (in reverse every other round); same broker, same topic (${intake.partitions} partitions), same Avro bytes`);
  out();
  out(
    table([
      ['mode', 'events/s (median)', 'rounds', 'batch p50', 'batch p99', 'vs raw', 'tx/s', 'events/tx', 'tx mean', 'CONC_TX retries/s'],
      ...INTAKE_MODES.map((m) => [
        MODE_LABEL[m],
        fmtInt(intake.median[m]),
        intake.rounds[m].map((r) => fmtInt(r.eventsPerSec)).join(' / '),
        fmtMs(intake.p50[m]),
        fmtMs(intake.p99[m]),
        fmtRatio(intake.median[m] / intake.median.raw),
        m === 'raw' || m === 'passthrough' ? '' : fmtInt(intake.txPerSec[m]),
        m === 'raw' || m === 'passthrough' ? '' : fmtInt(intake.eventsPerTx[m]),
        m === 'raw' || m === 'passthrough' ? '' : fmtMs(intake.txMeanMs[m]),
        m === 'raw' || m === 'passthrough' ? '' : intake.retriesPerSec[m].toFixed(1),
      ]),
    ]),
  );
  out();
  out('CPU cores used per process (median over rounds; 2 cores in all):');
  for (const m of INTAKE_MODES) out(`  ${MODE_LABEL[m].padEnd(50)} ${fmtCores(intake.cores[m])}`);
  out();
  // As the projector's: met only if the ratio of the medians and the median
  // of the rounds' own ratios (each round's pair ran back to back) both are.
  const ofMedians = intake.median.intake / intake.median.passthrough;
  const own = intake.rounds.intake.map((_, r) => intakeRoundRatio(intake, r));
  const met = ofMedians >= 0.8 && median(own) >= 0.8;
  out(`intake / HTTP passthrough    ${fmtRatio(median(own))} median of the rounds' own ratios (${own.map((x) => x.toFixed(2)).join(' / ')}); ${fmtRatio(ofMedians)} ratio of the medians  (issue 9 target ≥ 0.80×: ${met ? 'MET' : 'MISSED'})`);
  out(`passthrough / raw producer   ${fmtRatio(intake.median.passthrough / intake.median.raw)}  (what HTTP + JSON alone cost)`);
  out(`intake / raw producer        ${fmtRatio(intake.median.intake / intake.median.raw)}`);
  out(`intake / raw tx producer     ${fmtRatio(intake.median.intake / intake.median.rawTx)}`);
  out(`intake / group commit direct ${fmtRatio(intake.median.intake / intake.median.groupCommit)}  (the cost of HTTP + JSON + validation + Avro)`);
  if (intake.profile) {
    const p = intake.profile;
    out();
    out(`Where the intake's CPU goes: one more ${fmtInt(p.seconds)}-s round of POST /v1/collect with the V8 profiler on in the service process (started after the warm-up, so start-up is left out; the profiler costs some throughput: ${fmtInt(p.eventsPerSec)} events/s, ${fmtCores({ service: p.cores })})${p.file ? `; profile kept as ${p.file}` : ''}`);
    out(`${(p.summary.sampledUs / 1e6).toFixed(1)} s sampled, ${(p.summary.busyUs / 1e6).toFixed(1)} s busy, ${fmtInt(p.events)} events accepted`);
    for (const line of formatProfileSummary(p.summary, p.events)) out(line);
  }
  if (intake.profile && intake.passthroughProfile) {
    const p = intake.passthroughProfile;
    out();
    out(`The HTTP passthrough profiled the same way right after (${fmtInt(p.eventsPerSec)} events/s, ${fmtCores({ passthrough: p.cores })})${p.file ? `; profile kept as ${p.file}` : ''}. Per event, side by side:`);
    for (const line of formatProfileComparison({ label: 'intake', summary: intake.profile.summary, events: intake.profile.events }, { label: 'passthrough', summary: p.summary, events: p.events })) out(line);
    out('top self-time functions of the passthrough (busy):');
    for (const [k, us] of p.summary.top) out(`  ${((us / p.summary.busyUs) * 100).toFixed(1).padStart(5)}%  ${k}`);
  }
  const errors = INTAKE_MODES.map((m) => `${m} ${intake.rounds[m].reduce((n, r) => n + r.errors, 0)}`).join(', ');
  out(`errors                       ${errors}`);
  out();
}

function reportRest(projector: ProjectorResult, freshness: FreshnessResult[], reads: ReadLatencyResult): void {
  reportProjector(projector);
  out('## 3. Freshness (202 ack → readable through GET /v1/videos/:id/events?since=)');
  for (const f of freshness) reportFreshness(f);

  reportReads(reads);
}

function reportFanoutDrain(drain: FanoutDrainResult): void {
  out('## 5. Fan-out draining a backlog (Kafka backlog of a tenant the stack does not know, so every event is decoded; none selects a destination)');
  out(loadNote('fanout'));
  out(`${fmtInt(drain.rounds[0]?.events ?? 0)} events pre-loaded per round, ${drain.rounds.length} rounds (fresh topics and stack each, SERVICES=${drain.services}); done when the group has committed every partition's end`);
  out();
  out(
    table([
      ['round', 'drain rate', 'start→first commit', 'event loop p50 / p99 / max', 'GC pauses (>50 ms), longest', 'CPU cores used'],
      ...drain.rounds.map((r, i) => [
        String(i + 1),
        `${fmtInt(r.steadyPerSec)}/s`,
        `${r.startupSec.toFixed(1)} s`,
        `${fmtMs(r.eld.p50)} / ${fmtMs(r.eld.p99)} / ${fmtMs(r.eld.max)}`,
        `${r.gc.count} (${r.gc.over50}), ${fmtMs(r.gc.maxMs)}`,
        fmtCores(r.cores),
      ]),
    ]),
  );
  out();
  out(`fan-out drain (median)               ${fmtInt(drain.steadyMedian)} events/s`);
  out(`event loop while draining (median)   p99 ${fmtMs(drain.eldP99Median)}, max ${fmtMs(drain.eldMaxMedian)}  (the intake and the API share this loop in the default deployment)`);
  out();
}

function reportDerivedDrain(d: DerivedDrainResult): void {
  out('## 6. Derived events draining a backlog, beside the projector on the same backlog');
  out(loadNote('derived'));
  out(`${fmtInt(d.rounds[0]?.events ?? 0)} events pre-loaded per round, ${d.rounds.length} rounds (fresh topics each): SERVICES=derived until both its groups have committed to the end (repartition at least once, intent exactly once), SERVICES=projector over the same topic, and the derived-events service as two processes (DERIVED_STAGES=repartition, DERIVED_STAGES=intent) over the same backlog loaded again; which drains first rotates by round; after a warm-up round of all three that is not counted (the broker's JIT)`);
  out();
  out(
    table([
      ['round', 'derived-events', 'projector', 'derived / projector', 'CPU µs/event derived (broker)', 'projector (broker)', 'repartition / intent done', 'a process per stage', '/ projector', 'CPU µs/event (broker)'],
      ...d.rounds.map((r, i) => [
        String(i + 1),
        `${fmtInt(r.derivedPerSec)}/s`,
        `${fmtInt(r.projectorPerSec)}/s`,
        fmtRatio(r.ratio),
        `${fmtInt(r.derivedCpuUs.service)} (${fmtInt(r.derivedCpuUs.broker)})`,
        `${fmtInt(r.projectorCpuUs.service)} (${fmtInt(r.projectorCpuUs.broker)})`,
        `${r.stagesDoneSec.repartition.toFixed(1)} / ${r.stagesDoneSec.intent.toFixed(1)} s`,
        `${fmtInt(r.split.perSec)}/s`,
        fmtRatio(r.split.ratio),
        `${fmtInt(r.split.cpuUs.service)} (${fmtInt(r.split.cpuUs.broker)})`,
      ]),
    ]),
  );
  out();
  out(`derived-events drain (median)        ${fmtInt(d.derivedMedian)} events/s`);
  out(`projector, same backlog (median)     ${fmtInt(d.projectorMedian)} events/s`);
  out(`derived / projector (median of rounds) ${fmtRatio(d.ratioMedian)}  (goal ≥ 0.80×)`);
  out(`a process per stage (median)         ${fmtInt(d.splitMedian)} events/s, / projector ${fmtRatio(d.splitRatioMedian)}, CPU ${fmtInt(d.splitCpuUsMedian)} µs/event (both processes)`);
  out(`CPU per event of the service process (median) derived ${fmtInt(d.derivedCpuUsMedian)} µs, projector ${fmtInt(d.projectorCpuUsMedian)} µs (from the stack being up until drained)`);
  out();
  if (d.profile) {
    out(`Where the derived-events process's CPU went in the last round (BENCH_DERIVED_PROFILE=1, V8 profiler on from start to drained):`);
    for (const line of formatProfileSummary(d.profile.summary, d.profile.events)) out(line);
    out();
  }
}

function reportProjector(projector: ProjectorResult): void {

  out('## 2. Projector throughput (Kafka backlog → ClickHouse)');
  out(loadNote('projector'));
  out(
    `${fmtInt(projector.rounds[0]?.events ?? 0)} events pre-loaded per round, ${projector.rounds.length} rounds (fresh topic, stack and chdb each)` +
      (projector.warmup ? ', after one warm-up round (the broker compiles its fetch path; reported, not in the medians)' : ''),
  );
  out();
  out(
    table([
      ['round', 'projector steady', 'incl. group join', 'start→first rows', 'inserts', 'mean batch', 'mean insert', 'insert total / wall', 'event loop p99 / max', 'raw insert +view', 'raw +view, JSONEachRow', 'raw insert table', 'projector / raw +view', 'CPU cores used'],
      ...[...(projector.warmup ? [projector.warmup] : []), ...projector.rounds].map((r, i) => [
        projector.warmup ? (i === 0 ? 'warm-up' : String(i)) : String(i + 1),
        `${fmtInt(r.steadyPerSec)}/s`,
        `${fmtInt(r.fromStartPerSec)}/s`,
        `${r.startupSec.toFixed(1)} s`,
        fmtInt(r.inserts),
        fmtInt(r.meanBatch),
        fmtMs(r.meanInsertMs),
        `${r.insertTotalSec.toFixed(1)} s / ${r.wallSec.toFixed(1)} s`,
        `${fmtMs(r.eld.p99)} / ${fmtMs(r.eld.max)}`,
        `${fmtInt(r.raw.withMv[0]!)}/s`,
        `${fmtInt(r.raw.withMvObjects[0]!)}/s`,
        `${fmtInt(r.raw.plain[0]!)}/s`,
        fmtRatio(roundRatio(r)),
        fmtCores(r.cores),
      ]),
    ]),
  );
  out();
  out(`projector (median, steady)         ${fmtInt(projector.steadyMedian)} events/s`);
  out(`projector (median, incl. join)     ${fmtInt(projector.fromStartMedian)} events/s`);
  out(`raw chdb insert, same DDL + view   ${fmtInt(projector.rawWithMvMedian)} rows/s (batches of ${fmtInt(projector.meanBatch)}, JSONCompactEachRow as the projector sends them, via @clickhouse/client)`);
  out(`  the same as JSONEachRow objects   ${fmtInt(projector.rawWithMvObjectsMedian)} rows/s (the format of the runs before 2026-11-23; projector / this: ${fmtRatio(projector.steadyMedian / projector.rawWithMvObjectsMedian)})`);
  out(`raw chdb insert, table only        ${fmtInt(projector.rawPlainMedian)} rows/s`);
  // The target is called met only when both statistics meet it.
  const ofMedians = projector.steadyMedian / projector.rawWithMvMedian;
  const met = ofMedians >= 0.85 && projector.pairedRatioMedian >= 0.85;
  out(`projector / raw insert (+view)     ${fmtRatio(projector.pairedRatioMedian)} median of the rounds' own ratios; ${fmtRatio(ofMedians)} ratio of the medians  (issue 9 target ≥ 0.85×: ${met ? 'MET' : 'MISSED'})`);
  out(`pre-load rate (raw producer, 500/send, 8 in flight): ${fmtInt(projector.rounds[0]?.preloadPerSec ?? Number.NaN)} events/s`);
  out();
}

/** Issue 9, item 4: each read's p50 and p99 at every size, and the largest size's against the smallest's. */
function reportReadGrowth(reads: ReadLatencyResult[]): void {
  const small = reads[0]!;
  const large = reads.at(-1)!;
  out(`## 4b. Reads as data grows: ${reads.map((r) => fmtInt(r.stored)).join(' and ')} stored events, one stack each, requests sent to them in turn`);
  out();
  // The visitor reads have no absolute target; they are held to the first page's 15 ms.
  const absolute: Record<ReadKind, number> = { firstPage: 15, deepPage: 20, since: 15, score: 10, visitors: 15, timeline: 15 };
  out(
    table([
      ['request', ...reads.flatMap((r) => [`p50 at ${fmtInt(r.stored)}`, `p99 at ${fmtInt(r.stored)}`]), 'p50 ratio', 'p99 ratio', 'ratio ≤ 1.25', `p99 at ${fmtInt(large.stored)} ≤ target`],
      ...READ_KINDS.map((k) => {
        const ratio = large.p99[k] / small.p99[k];
        return [
          READ_LABEL[k],
          ...reads.flatMap((r) => [fmtMs(r.p50[k]), fmtMs(r.p99[k])]),
          fmtRatio(large.p50[k] / small.p50[k]),
          fmtRatio(ratio),
          ratio <= 1.25 ? 'MET' : 'MISSED',
          `${large.p99[k] <= absolute[k] ? 'MET' : 'MISSED'} (${absolute[k]} ms)`,
        ];
      }),
    ]),
  );
  out('(the `since` page has no absolute target of its own in issue 9; it is held to the first page\'s 15 ms here)');
}

function reportReads(reads: ReadLatencyResult): void {
  out(`## 4. Read latency over ${fmtInt(reads.stored)} stored events (sequential, ${reads.requests} requests each after 10 warm-up)`);
  out(loadNote('reads'));
  out(
    `loaded in ${reads.loadSec.toFixed(1)} s (INSERT … SELECT FROM numbers(), through the visitor view) as ${reads.loadedParts} parts; merges settled in ${reads.settleSec.toFixed(0)} s; then events: ${fmtInt(reads.tableRows)} rows in ${reads.parts} active parts (${reads.partsAfter} at the end of the phase), visitor_events: ${reads.visitorParts} parts`,
  );
  out();
  const now = (k: ReadKind) => reads.sql.find((f) => f.kind === k && f.shape === 'now');
  const deep = now('deepPage');
  out(
    table([
      ['request', 'p50', 'p99', 'max', 'items'],
      ...READ_KINDS.map((k) =>
        reads.failures[k] && reads.p50[k] !== reads.p50[k]
          ? [READ_LABEL[k], 'FAILED', '', '', '']
          : [READ_LABEL[k], fmtMs(reads.p50[k]), fmtMs(reads.p99[k]), fmtMs(reads.max[k]), String(reads.items[k])],
      ),
      ...(deep ? [['deep-page SQL straight to ClickHouse (IPC, no HTTP)', fmtMs(deep.p50), fmtMs(deep.p99), fmtMs(deep.max), String(deep.rows)]] : []),
    ]),
  );
  for (const [k, why] of Object.entries(reads.failures)) out(`${k} failed: ${why}`);
  out(`page 2 through the API's own next_cursor: ${reads.secondPage}`);
  out();
  out('Each read\'s SQL straight to ClickHouse (IPC, no HTTP), the shape before (FINAL) and now, interleaved query by query:');
  out();
  out(
    table([
      ['read', 'shape', 'p50', 'p99', 'max', 'rows read', 'rows read (max)', 'rows returned', 'p99 now / before'],
      ...reads.sql.map((f) => {
        const before = reads.sql.find((b) => b.kind === f.kind && b.shape === 'before');
        return [
          f.kind,
          f.shape === 'before' ? 'before: FROM events FINAL' : f.kind === 'score' ? 'now = before: visitor_events FINAL' : 'now: no FINAL, copies dropped',
          fmtMs(f.p50),
          fmtMs(f.p99),
          fmtMs(f.max),
          fmtInt(f.rowsRead),
          fmtInt(f.rowsReadMax),
          fmtInt(f.rows),
          f.shape === 'now' && before ? fmtRatio(f.p99 / before.p99) : '',
        ];
      }),
    ]),
  );
}

/** Targets of the freshness phases: p99 ≤ 1 s at 5k events/s (the spec), p99 ≤ 200 ms at 20k events/s for 30 s or more. */
function freshnessTarget(f: FreshnessResult): string {
  if (f.targetPerSec >= 20_000) return `target "p99 ≤ 200 ms at 20k events/s for ≥ 30 s" ${f.p99 <= 200 && f.measureSec >= 30 && f.achievedPerSec >= 0.95 * f.targetPerSec ? 'MET' : 'MISSED'}`;
  return `target "p99 ≤ 1 s at ${fmtInt(f.targetPerSec)} events/s" ${f.p99 <= 1000 ? 'MET' : 'MISSED'}`;
}

function reportFreshness(f: FreshnessResult): void {
  const split = f.deployment === 'split';
  out(`### at ${fmtInt(f.targetPerSec)} events/s, ${split ? 'split deployment: SERVICES=ingest in one process, projector,fanout,api,admin in another, same topics' : 'one process (every service)'}`);
  out(loadNote(`freshness ${split ? 'split ' : ''}${f.targetPerSec}`));
  out(
    `target ${fmtInt(f.targetPerSec)} events/s (batches of 50 on a fixed schedule), achieved ${fmtInt(f.achievedPerSec)} events/s over ${f.measureSec} s; ${f.requests} requests, ${f.failed} failed, ${f.skipped} skipped (in-flight cap)`,
  );
  out();
  out(
    table([
      ['measure', 'p50', 'p99', 'max', 'n'],
      ['ack → readable via API', fmtMs(f.p50), fmtMs(f.p99), fmtMs(f.max), `${f.seen}/${f.probes}`],
      ['send → readable via API', fmtMs(f.sendP50), fmtMs(f.sendP99), '', String(f.seen)],
      ['POST /v1/collect ack latency', fmtMs(f.ackP50), fmtMs(f.ackP99), '', String(f.requests)],
      ['poll request (resolution)', fmtMs(f.pollP50), '', '', String(f.polls)],
    ]),
  );
  out();
  out(`readable within 1 s of the ack: ${(f.within1s * 100).toFixed(1)}% of probes  → ${freshnessTarget(f)}`);
  out(`CPU cores used: ${fmtCores(f.cores)}`);
  out(
    `service during the phase: ${f.txPerSec.toFixed(1)} intake tx/s (mean ${fmtMs(f.txMeanMs)}), ${f.retriesPerSec.toFixed(1)} CONCURRENT_TRANSACTIONS retries/s; projector ${f.insertsPerSec.toFixed(1)} inserts/s of ${fmtInt(f.meanBatch)} rows (mean insert ${fmtMs(f.insertMeanMs)})`,
  );
  // Where a probe's time goes before the API: the projector's own view of
  // its oldest event, from its record timestamp (the produce request, a few
  // ms before the ack) to the fetch and to the end of its insert.
  const age = (a: FreshnessResult['recordAge']['fetched']) =>
    `p50 ≤ ${fmtMs(a.p50)}, p99 ≤ ${fmtMs(a.p99)}, ${(a.within200ms * 100).toFixed(1)}% within 200 ms (n ${fmtInt(a.n)})`;
  out(`oldest event's age in the projector (projector_record_age_seconds, bucket bounds): at fetch ${age(f.recordAge.fetched)}; readable ${age(f.recordAge.readable)}`);
  out();
}

/** Issue 26's targets at 64 connections: req/s and p99 (ms) of each read. */
const RC_TARGET: Record<(typeof RC_KINDS)[number], { rps: number; p99?: number }> = {
  firstPage: { rps: 1000, p99: 100 },
  deepPage: { rps: 1000, p99: 100 },
  since: { rps: 1000, p99: 100 },
  score: { rps: 2000, p99: 50 },
  visitors: { rps: 500 },
  timeline: { rps: 500 },
};

function reportReadsConcurrency(rc: RcResult): void {
  const o = rc.opts;
  const top = Math.max(...o.conns);
  out(`## Reads under concurrency over ${fmtInt(rc.stored)} stored events (closed loop, ${o.cellMs / 1000} s per cell after ${o.warmMs / 1000} s warm-up)`);
  out(loadNote('reads-concurrency'));
  out(
    `two stacks (SERVICES=${o.services}) loaded with the same events, cells in turn: "off" = READ_CACHE_MAX_BYTES=0 READ_BATCH_MAX=1 (the reads as before issue 26), "on" = the defaults; ` +
      `score and timeline requests cycle over ${fmtInt(o.workingSet)} visitors; "hit" = share the cache answered in that cell; ` +
      'HTTP = GET /v1/videos (from memory) at the same connections; engine = the read\'s SQL straight to the ClickHouse client in the stack\'s process, as many at once; each row\'s four cells run back to back (HTTP, off, on, engine); CPU = ms of the stack process\'s CPU (service and embedded engine) per answered request',
  );
  out();
  const c = (x: Cell | undefined) => (x ? [fmtInt(x.rps), fmtMs(x.p50), fmtMs(x.p99)] : ['', '', '']);
  const cpu = (x: Cell | undefined) => (x?.cpuMs !== undefined && Number.isFinite(x.cpuMs) ? `${x.cpuMs.toFixed(2)}` : '');
  const rows: string[][] = [
    ['read', 'conns', 'off req/s', 'off p50', 'off p99', 'off CPU', 'on req/s', 'on p50', 'on p99', 'on CPU', 'on/off', 'hit', 'HTTP req/s', 'HTTP p99', 'HTTP CPU', 'engine q/s', 'engine p50'],
  ];
  for (const k of RC_KINDS) {
    for (const n of o.conns) {
      const off = rc.off[k][n];
      const on = rc.on[k][n];
      const eng = rc.engine[k][n];
      rows.push([
        n === o.conns[0] ? RC_LABEL[k] : '',
        String(n),
        ...c(off),
        cpu(off),
        ...c(on),
        cpu(on),
        off && on ? fmtRatio(on.rps / off.rps) : '',
        on?.hit === undefined ? '' : `${(on.hit * 100).toFixed(0)}%`,
        fmtInt(rc.http[k][n]?.rps ?? Number.NaN),
        rc.http[k][n] ? fmtMs(rc.http[k][n]!.p99) : '',
        cpu(rc.http[k][n]),
        eng ? fmtInt(eng.rps) : '',
        eng ? fmtMs(eng.p50) : '',
      ]);
    }
  }
  out(table(rows));
  out();
  const errs = [...RC_KINDS.flatMap((k) => o.conns.flatMap((n) => [rc.off[k][n], rc.on[k][n], rc.engine[k][n]]))].filter((x) => x && x.errors > 0);
  out(`errors: ${errs.length === 0 ? 'none' : errs.map((x) => `${x!.errors} (${x!.firstError})`).join('; ')}`);
  out(
    `score, each visitor once (${fmtInt(10_000 - o.workingSet)} visitors never read before), ${top} connections: off ${fmtInt(rc.coldScore.off.rps)} req/s p99 ${fmtMs(rc.coldScore.off.p99)}; on ${fmtInt(rc.coldScore.on.rps)} req/s p99 ${fmtMs(rc.coldScore.on.p99)} (batched misses, ${fmtRatio(rc.coldScore.on.rps / rc.coldScore.off.rps)})`,
  );
  out(`service RSS after the cells: off ${rc.rssMb.off.toFixed(0)} MiB, on ${rc.rssMb.on.toFixed(0)} MiB`);
  out();
  out(`targets at ${top} connections (issue 26), cache on:`);
  for (const k of RC_KINDS) {
    const on = rc.on[k][top];
    const t = RC_TARGET[k];
    if (!on) continue;
    const met = on.rps >= t.rps && (t.p99 === undefined || on.p99 <= t.p99);
    out(`  ${RC_LABEL[k].padEnd(38)} ${fmtInt(on.rps)} req/s (≥ ${fmtInt(t.rps)}), p99 ${fmtMs(on.p99)}${t.p99 ? ` (≤ ${t.p99} ms)` : ''}  ${met ? 'MET' : 'MISSED'}`);
  }
  out();
  const m = rc.mixed;
  for (const run of m.runs) {
    out(
      `### Mixed (${run.deployment}): POST /v1/collect at ${fmtInt(m.rate)} events/s (batches of 50, open loop, visitors of the reads' working set), ${o.mixedMs / 1000} s alone then ${o.mixedMs / 1000} s with every read at ${top} connections (cache on, the connections shared among the kinds, from a process of their own)`,
    );
    out(
      table([
        ['', 'intake p50', 'intake p99', 'requests', 'failed', 'why'],
        ...([['intake alone', run.alone], ['intake with reads', run.withReads]] as const).map(([label, x]) => [
          label,
          fmtMs(x.p50),
          fmtMs(x.p99),
          fmtInt(x.sent),
          fmtInt(x.failed),
          Object.entries(x.refused)
            .map(([why, n]) => `${fmtInt(n)} ${why}`)
            .join('; '),
        ]),
      ]),
    );
    const ratio = run.withReads.p99 / run.alone.p99;
    // A p99 of the 202s alone says nothing when the intake refuses part of the rate without any reads.
    const verdict =
      run.alone.failed > run.alone.sent / 100
        ? 'NOT MEASURED: the intake alone refused more than 1 % at this rate'
        : run.withReads.failed > run.withReads.sent / 100
          ? 'MISSED: the intake refused more than 1 % with reads'
          : ratio <= 1.5
            ? 'MET'
            : 'MISSED';
    out(`intake p99 with reads / alone: ${fmtRatio(ratio)} (target ≤ 1.50×: ${verdict})`);
    out(
      table([
        ['read (mixed)', 'req/s', 'p50', 'p99'],
        ...RC_KINDS.map((k) => [RC_LABEL[k], ...c(run.reads[k])]),
        [`all, cache hit ${((run.reads.all.hit ?? 0) * 100).toFixed(0)}%, ${run.reads.all.errors} errors${run.reads.all.firstError ? ` (${run.reads.all.firstError})` : ''}`, ...c(run.reads.all)],
      ]),
    );
    out();
  }
}

runBench(main);
