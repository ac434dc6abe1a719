import { fork, type ChildProcess } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { type Message, type Producer } from 'kafkajs';
import { SchemaRegistry } from '../schemas/registry.ts';
import { parseVideoId } from '../shared/ids.ts';
import { GroupCommitProducer } from '../shared/kafka/group-commit-producer.ts';
import { JavaCompatiblePartitioner } from '../shared/kafka/partitioner.ts';
import { topicNames } from '../shared/kafka/topics.ts';
import { type BenchContext, setupTenant } from './context.ts';
import { CpuMeter } from './cpu.ts';
import { summarizeProfile, type CpuProfile, type ProfileSummary } from './cpu-profile.ts';
import { HttpClient } from './http-client.ts';
import { childProfile } from './inspector-profiler.ts';
import { median, quantile } from './stats.ts';
import { metricSample } from '../test/helpers/prometheus-text.ts';
import { collectBodies, kafkaMessages, recordOf, type PlayerEvent } from './workload.ts';

export const INTAKE_MODES = ['intake', 'passthrough', 'raw', 'rawTx', 'groupCommit'] as const;
export type IntakeMode = (typeof INTAKE_MODES)[number];

export const MODE_LABEL: Record<IntakeMode, string> = {
  intake: 'POST /v1/collect (HTTP → group-commit tx → Kafka)',
  passthrough: 'HTTP passthrough: Fastify JSON → produce, acks=-1',
  raw: 'raw kafkajs producer, acks=-1, no tx',
  rawTx: 'raw kafkajs tx producer, 1 tx per batch',
  groupCommit: 'GroupCommitProducer direct (no HTTP)',
};

export interface RoundResult {
  eventsPerSec: number;
  requests: number;
  errors: number;
  latencies: number[];
  cores: Record<string, number>;
  /** Kafka transactions committed (NaN for the non-transactional mode). */
  transactions: number;
  /** Mean time of one transaction, ms. */
  txMeanMs: number;
  /** kafkajs retries after CONCURRENT_TRANSACTIONS. */
  concurrentTxRetries: number;
  seconds: number;
}

export interface IntakeResult {
  partitions: number;
  concurrency: number;
  batch: number;
  roundMs: number;
  warmupMs: number;
  rounds: Record<IntakeMode, RoundResult[]>;
  median: Record<IntakeMode, number>;
  p50: Record<IntakeMode, number>;
  p99: Record<IntakeMode, number>;
  cores: Record<IntakeMode, Record<string, number>>;
  /** Medians over rounds of transactions/s, events per transaction, mean transaction ms, retries/s. */
  txPerSec: Record<IntakeMode, number>;
  eventsPerTx: Record<IntakeMode, number>;
  txMeanMs: Record<IntakeMode, number>;
  retriesPerSec: Record<IntakeMode, number>;
  /**
   * One more intake round, after the measured ones, with the V8 profiler on
   * in the stack process (started over IPC after the warm-up, so start-up is
   * not in it). Undefined with BENCH_INTAKE_PROFILE=0.
   */
  profile?: ProfiledRound;
  /** The same for the HTTP passthrough, profiled in its process right after. */
  passthroughProfile?: ProfiledRound;
}

export interface ProfiledRound {
  events: number;
  seconds: number;
  eventsPerSec: number;
  cores: number;
  summary: ProfileSummary;
  file?: string;
}

/** The modes in the order of round `r` (0-based): as listed, reversed in odd rounds. */
export const roundOrder = (r: number): readonly IntakeMode[] => (r % 2 === 0 ? INTAKE_MODES : [...INTAKE_MODES].reverse());

/** Round `r`'s own intake / passthrough ratio: the two ran back to back. */
export const intakeRoundRatio = (result: Pick<IntakeResult, 'rounds'>, r: number): number => result.rounds.intake[r]!.eventsPerSec / result.rounds.passthrough[r]!.eventsPerSec;

/**
 * Closed loop: `concurrency` clients each send one batch and wait for its
 * acknowledgement before the next, for `durationMs`.
 */
async function closedLoop(durationMs: number, concurrency: number, op: (client: number, i: number) => Promise<void>) {
  const latencies: number[] = [];
  let requests = 0;
  let errors = 0;
  let lastError = '';
  const started = performance.now();
  const end = started + durationMs;
  let next = 0;
  await Promise.all(
    Array.from({ length: concurrency }, async (_, c) => {
      while (performance.now() < end) {
        const t = performance.now();
        try {
          await op(c, next++);
          latencies.push(performance.now() - t);
          requests++;
        } catch (err) {
          errors++;
          lastError = err instanceof Error ? err.message : String(err);
          // Fails fast rather than spinning on a broken setup.
          if (errors > 50 && errors > requests) throw new Error(`too many errors, last: ${lastError}`);
        }
      }
    }),
  );
  const seconds = (performance.now() - started) / 1000;
  return { requests, errors, latencies, seconds, lastError };
}

/**
 * Intake throughput against the same broker and topic with three baselines:
 * a plain kafkajs producer (the ceiling), a kafkajs transactional producer
 * with one transaction per batch, and the service's own GroupCommitProducer
 * without HTTP (what HTTP, JSON and validation cost on top). Modes are
 * interleaved round by round so that a noisy neighbour hits all of them.
 */
export async function benchIntake(
  ctx: BenchContext,
  opts: { concurrency: number; batch: number; roundMs: number; rounds: number; warmupMs: number },
): Promise<IntakeResult> {
  const { worker, prefix } = await ctx.startWorker('intake', 'ingest,admin');
  const client = new HttpClient(worker.ready.url, opts.concurrency + 4);
  const producers: Producer[] = [];
  let groupCommit: GroupCommitProducer | undefined;
  let pt: ChildProcess | undefined;
  let ptClient: HttpClient | undefined;
  try {
    const { tenant, videoIds } = await setupTenant(client, worker.ready.adminToken, 'bench intake', 8, false);
    const topic = topicNames(prefix).playerEvents;
    const bodies = collectBodies(videoIds, 256, opts.batch);
    const registry = SchemaRegistry.fromManifest();
    const now = Date.now();
    // The same events the HTTP clients send, as the intake would encode them.
    const messages: Message[][] = bodies.map((b) => {
      const events = (JSON.parse(b.toString('utf8')) as { events: PlayerEvent[] }).events;
      return kafkaMessages(
        registry,
        events.map((e) => recordOf(e, tenant.id, (v) => parseVideoId(v)!, now)),
      );
    });

    // The HTTP passthrough baseline: a process of its own, as the stack is.
    pt = fork(join(import.meta.dirname, 'passthrough-worker.ts'), [], {
      execPath: process.execPath,
      env: { ...process.env, PT_BROKERS: ctx.brokers.join(','), PT_TOPIC: topic, PT_TENANT: tenant.id },
      stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
    });
    const ptChild = pt;
    process.on('exit', () => ptChild.kill('SIGKILL'));
    const ptUrl = await new Promise<string>((resolve, reject) => {
      ptChild.once('message', (m) => resolve((m as { url: string }).url));
      ptChild.once('exit', (code) => reject(new Error(`passthrough worker exited during start-up (${code})`)));
    });
    ptClient = new HttpClient(ptUrl, opts.concurrency + 4);
    const ptHttp = ptClient;

    const raw = ctx.kafka.producer({ createPartitioner: JavaCompatiblePartitioner });
    producers.push(raw);
    await raw.connect();
    const txs: Producer[] = [];
    for (let i = 0; i < opts.concurrency; i++) {
      const p = ctx.kafka.producer({
        createPartitioner: JavaCompatiblePartitioner,
        transactionalId: `bench-${ctx.runId}-tx-${i}`,
        idempotent: true,
        maxInFlightRequests: 1,
      });
      producers.push(p);
      txs.push(p);
    }
    await Promise.all(txs.map((p) => p.connect()));
    const gcStats = { commits: 0, ms: 0 };
    groupCommit = new GroupCommitProducer({
      kafka: ctx.kafka,
      log: ctx.log,
      lingerMs: ctx.lingerMs,
      timeoutMs: ctx.produceTimeoutMs,
      onCommit: (_n, ms) => {
        gcStats.commits++;
        gcStats.ms += ms;
      },
    });
    await groupCommit.connect();
    const gc = groupCommit;

    const headers = { 'x-player-key': tenant.player_key };
    /** Events the intake answered 202 for, warm-up included (to put a CPU profile per event). */
    let intakeAccepted = 0;
    const ops: Record<IntakeMode, (c: number, i: number) => Promise<void>> = {
      intake: async (_c, i) => {
        const res = await client.request('POST', '/v1/collect', { body: bodies[i % bodies.length]!, headers });
        if (res.status !== 202) throw new Error(`collect: HTTP ${res.status} ${res.body.slice(0, 200)}`);
        intakeAccepted += opts.batch;
      },
      passthrough: async (_c, i) => {
        const res = await ptHttp.request('POST', '/v1/collect', { body: bodies[i % bodies.length]!, headers });
        if (res.status !== 202) throw new Error(`passthrough: HTTP ${res.status} ${res.body.slice(0, 200)}`);
      },
      raw: async (_c, i) => {
        await raw.send({ topic, acks: -1, messages: messages[i % messages.length]! });
      },
      rawTx: async (c, i) => {
        const tx = await txs[c]!.transaction();
        try {
          await tx.send({ topic, acks: -1, messages: messages[i % messages.length]! });
          await tx.commit();
        } catch (err) {
          await tx.abort().catch(() => undefined);
          throw err;
        }
      },
      groupCommit: (_c, i) => gc.send(topic, messages[i % messages.length]!),
    };

    const meter = new CpuMeter({ bench: process.pid, service: worker.pid, passthrough: pt.pid, broker: ctx.brokerPid });
    // The warm-up is a whole round (each mode for `warmupMs`): a shorter one
    // leaves the first measured round of every mode running cold.
    for (const mode of INTAKE_MODES) {
      ctx.progress(`intake: warm-up ${mode}`);
      await closedLoop(opts.warmupMs, opts.concurrency, ops[mode]);
    }
    // Transactions of the intake are read from its /metrics, those of the
    // in-process producers from their callbacks; retries from kafka_produce_retries_total.
    const serviceTx = async () => {
      const text = (await client.request('GET', '/metrics')).body;
      const hist = 'kafka_produce_commit_duration_seconds';
      return { commits: metricSample(text, `${hist}_count`), ms: metricSample(text, `${hist}_sum`) * 1000, retries: metricSample(text, 'kafka_produce_retries_total', { cause: 'concurrent_transactions' }) || 0 };
    };
    const txState = async (mode: IntakeMode) =>
      mode === 'intake' ? serviceTx() : mode === 'passthrough' ? { commits: Number.NaN, ms: Number.NaN, retries: Number.NaN } : { commits: gcStats.commits, ms: gcStats.ms, retries: ctx.concurrentTxRetries() };

    const rounds = Object.fromEntries(INTAKE_MODES.map((m) => [m, [] as RoundResult[]])) as Record<IntakeMode, RoundResult[]>;
    for (let r = 0; r < opts.rounds; r++) {
      // Every other round runs the modes in reverse, so that neither the
      // intake nor the passthrough is always the earlier of the two while
      // the machine drifts; the pair runs back to back either way.
      for (const mode of roundOrder(r)) {
        const before = await txState(mode);
        meter.start();
        const res = await closedLoop(opts.roundMs, opts.concurrency, ops[mode]);
        const cores = meter.stop();
        const after = await txState(mode);
        const eventsPerSec = (res.requests * opts.batch) / res.seconds;
        const mean = (xs: number[]) => xs.reduce((a, b) => a + b, 0) / xs.length;
        const noTx = mode === 'raw' || mode === 'passthrough';
        const commits = mode === 'rawTx' ? res.requests : after.commits - before.commits;
        rounds[mode].push({
          eventsPerSec,
          requests: res.requests,
          errors: res.errors,
          latencies: res.latencies,
          cores,
          seconds: res.seconds,
          transactions: noTx ? Number.NaN : commits,
          txMeanMs: noTx ? Number.NaN : mode === 'rawTx' ? mean(res.latencies) : (after.ms - before.ms) / commits,
          concurrentTxRetries: noTx ? Number.NaN : after.retries - before.retries,
        });
        ctx.progress(
          `intake round ${r + 1}/${opts.rounds} ${mode}: ${Math.round(eventsPerSec)} events/s, ${res.errors} errors${res.lastError ? ` (${res.lastError})` : ''}`,
        );
      }
    }
    let profile: IntakeResult['profile'];
    let passthroughProfile: IntakeResult['passthroughProfile'];
    if (process.env.BENCH_INTAKE_PROFILE !== '0') {
      // BENCH_INTAKE_PROFILE_DIR=<dir> also keeps the profiles as <dir>/intake-steady.cpuprofile and passthrough-steady.cpuprofile.
      const dir = process.env.BENCH_INTAKE_PROFILE_DIR;
      /** One more closed-loop round of `mode` with the profiler of the process that serves it on. */
      const profiledRound = async (mode: 'intake' | 'passthrough', profiler: { start(): Promise<unknown>; stop(): Promise<CpuProfile> }, proc: string): Promise<ProfiledRound> => {
        const file = dir ? join(dir, `${mode}-steady.cpuprofile`) : undefined;
        await profiler.start();
        meter.start();
        const res = await closedLoop(opts.roundMs, opts.concurrency, ops[mode]);
        const cores = meter.stop();
        const cpu = await profiler.stop();
        if (file) writeFileSync(file, JSON.stringify(cpu));
        const events = res.requests * opts.batch;
        const round = { events, seconds: res.seconds, eventsPerSec: events / res.seconds, cores: cores[proc] ?? Number.NaN, summary: summarizeProfile(cpu), file };
        ctx.progress(`intake: profiled ${mode} round, ${Math.round(round.eventsPerSec)} events/s, ${(round.summary.busyUs / 1e6).toFixed(1)} s busy`);
        return round;
      };
      profile = await profiledRound(
        'intake',
        { start: () => worker.rpc({ op: 'profileStart' }), stop: () => worker.rpc<CpuProfile>({ op: 'profileStop' }, 300_000) },
        'service',
      );
      // The passthrough the same way, so the two can be compared stage by stage.
      passthroughProfile = await profiledRound(
        'passthrough',
        { start: () => childProfile(ptChild, 'profileStart'), stop: async () => (await childProfile(ptChild, 'profileStop')).profile! },
        'passthrough',
      );
    }
    ctx.progress(`intake: ${intakeAccepted} events accepted by POST /v1/collect in all (warm-up included)`);
    const per = <T>(f: (rs: RoundResult[]) => T) => Object.fromEntries(INTAKE_MODES.map((m) => [m, f(rounds[m])])) as Record<IntakeMode, T>;
    return {
      partitions: ctx.partitions,
      concurrency: opts.concurrency,
      batch: opts.batch,
      roundMs: opts.roundMs,
      warmupMs: opts.warmupMs,
      rounds,
      median: per((rs) => median(rs.map((r) => r.eventsPerSec))),
      p50: per((rs) => quantile(rs.flatMap((r) => r.latencies), 0.5)),
      p99: per((rs) => quantile(rs.flatMap((r) => r.latencies), 0.99)),
      cores: per((rs) => {
        const keys = Object.keys(rs[0]?.cores ?? {});
        return Object.fromEntries(keys.map((k) => [k, median(rs.map((r) => r.cores[k]!))]));
      }),
      txPerSec: per((rs) => median(rs.map((r) => r.transactions / r.seconds))),
      eventsPerTx: per((rs) => median(rs.map((r) => (r.requests * opts.batch) / r.transactions))),
      txMeanMs: per((rs) => median(rs.map((r) => r.txMeanMs))),
      retriesPerSec: per((rs) => median(rs.map((r) => r.concurrentTxRetries / r.seconds))),
      profile,
      passthroughProfile,
    };
  } finally {
    await groupCommit?.close().catch(() => undefined);
    await Promise.all(producers.map((p) => p.disconnect().catch(() => undefined)));
    client.close();
    ptClient?.close();
    if (pt && pt.exitCode === null) {
      const exited = new Promise((r) => pt!.once('exit', r));
      pt.disconnect();
      await Promise.race([exited, new Promise((r) => setTimeout(r, 5000))]);
      pt.kill('SIGKILL');
    }
    await worker.stop();
  }
}
