/**
 * `npm run bench:intent`: how soon a customer hears of a hot lead. A stack
 * with every service (one child process; with BENCH_INTENT_SPLIT=1 the
 * derived-events service in a second one) takes BENCH_INTENT_RATE (5,000)
 * events/s of ordinary viewing; meanwhile, every 100 ms (open loop) a visitor
 * that had watched the whole video with full focus clicks the CTA, which takes its
 * score from 60 to 73, past the threshold of 70. Measured: from the 202 of
 * that click's request to the `high_intent_lead` delivery at an HTTPS
 * receiver in this process. Rounds of BENCH_INTENT_ROUND_MS (20 s), after a
 * warm-up round; medians of the rounds' p50 and p99. Where the time goes: a
 * read_committed consumer in this process notes when each click becomes
 * readable on player.events, its copy on derived.by-visitor, and the lead on
 * player.events; the p50 of each hop is printed beside the total.
 */
import { randomBytes } from 'node:crypto';
import { writeFileSync } from 'node:fs';
import os from 'node:os';
import { join } from 'node:path';
import { Kafka, logLevel } from 'kafkajs';
import type { PlayerEventRecord } from '../schemas/records.ts';
import { SchemaRegistry } from '../schemas/registry.ts';
import { ConfigSchema } from '../shared/config.ts';
import { topicNames } from '../shared/kafka/topics.ts';
import { startHttpsReceiver } from '../test/helpers/https-receiver.ts';
import { groupLags } from '../test/helpers/kafka-inspect.ts';
import { metricSum } from '../test/helpers/prometheus-text.ts';
import { setupTenant, sleep } from './context.ts';
import { CpuMeter, fmtCores, reniceProcess } from './cpu.ts';
import { formatProfileSummary, summarizeProfile, type CpuProfile } from './cpu-profile.ts';
import { benchBrokers, runBench, startBenchRun } from './harness.ts';
import { HttpClient } from './http-client.ts';
import { fmtInt, fmtMs, median, quantile, table } from './stats.ts';
import { StackWorker } from './worker-client.ts';

const RATE = Number(process.env.BENCH_INTENT_RATE ?? 5000);
const ROUND_MS = Number(process.env.BENCH_INTENT_ROUND_MS ?? 20_000);
const ROUNDS = Number(process.env.BENCH_INTENT_ROUNDS ?? 3);
const BATCH = 50;
const CROSS_EVERY_MS = 100;
/**
 * BENCH_INTENT_SPLIT=1: the derived-events service in a process of its own (the others in one), as a deployment may run it;
 * BENCH_INTENT_SPLIT=stages: in two, one per stage (DERIVED_STAGES), the intent stage's being the one measured and profiled.
 */
const STAGES = process.env.BENCH_INTENT_SPLIT === 'stages';
/**
 * BENCH_INTENT_SPLIT=reads: as with 1, and the read side (projector and API)
 * in a third process at nice BENCH_INTENT_READS_NICE (10), so the lead's
 * road (intake, derived-events, fan-out, broker) has the cores first; its
 * lag on player.events at the end of each round says what the read side gave up.
 */
const READS = process.env.BENCH_INTENT_SPLIT === 'reads';
const READS_NICE = Number(process.env.BENCH_INTENT_READS_NICE ?? 10);
const SPLIT = process.env.BENCH_INTENT_SPLIT === '1' || STAGES || READS;
/** BENCH_INTENT_PROFILE=1 (with the split): the derived-events process under the V8 profiler over the rounds, where its CPU goes. */
const PROFILE = SPLIT && process.env.BENCH_INTENT_PROFILE === '1';
/** The key of a crossing visitor's record: `<tenant>:ses_<round>_<i>` or `<tenant>:vis_<round>_<i>` (ordinary viewing is `ses_v…`). */
const CROSSING_KEY = /:(ses|vis)_(round|warmup)/;
const CROSSING_VISITOR = [Buffer.from('vis_round'), Buffer.from('vis_warmup')];

const T0 = performance.now();
const progress = (msg: string) => process.stderr.write(`[bench:intent +${((performance.now() - T0) / 1000).toFixed(0).padStart(3)} s] ${msg}\n`);
const out = (s = '') => process.stdout.write(`${s}\n`);

interface Round {
  /** p50 of each hop: 202 → click readable, → copy readable, → lead readable, → delivered. */
  hops: [number, number, number, number];
  /** 503 answers of the overloaded intake during the round (each request was sent again). */
  refused: number;
  crossings: number;
  delivered: number;
  eventsPerSec: number;
  p50: number;
  p99: number;
  max: number;
  /** Player events not yet committed by the projector when the load stopped. */
  projectorLag: number;
}

async function main(): Promise<void> {
  const run = startBenchRun({ tmpPrefix: 'va-bench-intent-', maxRunMs: 10 * 60_000, progress });
  try {
    out('# Intent latency: 202 of the crossing event → high_intent_lead delivery');
    out();
    out(`command     npm run bench:intent`);
    out(`date        ${new Date().toISOString()}`);
    out(`machine     ${os.cpus().length} × ${os.cpus()[0]?.model ?? 'unknown CPU'}, load avg ${os.loadavg().map((l) => l.toFixed(2)).join(' ')} at start`);
    out(`stack       ${READS ? `SERVICES=derived in one process, projector and api in another at nice ${READS_NICE}, every other service in a third` : STAGES ? 'SERVICES=derived in two processes (DERIVED_STAGES=intent, DERIVED_STAGES=repartition), every other service in another' : SPLIT ? 'SERVICES=derived in one process, every other service in another' : 'every service in one process'}`);
    out(`load        ${fmtInt(RATE)} events/s in requests of ${BATCH} (ordinary viewing), one crossing click every ${CROSS_EVERY_MS} ms; ${ROUNDS} rounds of ${ROUND_MS / 1000} s after a warm-up round`);
    const { brokers, brokerPid } = await benchBrokers(run, process.env.KAFKA_BROKERS?.trim(), 12, progress);
    const rx = await startHttpsReceiver();
    run.cleanups.push(() => rx.close());
    const adminToken = `adm_${randomBytes(16).toString('hex')}`;
    const prefix = `bench-${run.runId}-intent.`;
    const env: Record<string, string> = {};
    for (const [k, v] of Object.entries(process.env)) if (v !== undefined && !(k in ConfigSchema.shape)) env[k] = v;
    // Settings of the stacks come only from BENCH_INTENT_SETTINGS (`KEY=value,…`), so a figure names what it ran with.
    const settings = Object.fromEntries(
      (process.env.BENCH_INTENT_SETTINGS ?? '')
        .split(',')
        .filter((kv) => kv.includes('='))
        .map((kv) => [kv.slice(0, kv.indexOf('=')).trim(), kv.slice(kv.indexOf('=') + 1).trim()]),
    );
    for (const k of Object.keys(settings)) if (!(k in ConfigSchema.shape)) throw new Error(`BENCH_INTENT_SETTINGS: ${k} is not a setting of the service`);
    if (Object.keys(settings).length > 0) out(`settings    ${Object.entries(settings).map(([k, v]) => `${k}=${v}`).join(', ')}`);
    const stackEnv = (name: string, services: string | undefined): Record<string, string> => ({
      ...env,
      ...rx.env,
      ...(services ? { SERVICES: services } : {}),
      KAFKA_BROKERS: brokers.join(','),
      KAFKA_TOPIC_PREFIX: prefix,
      DATA_DIR: join(run.tmp, name),
      PORT: '0',
      HOST: '127.0.0.1',
      ADMIN_TOKEN: adminToken,
      RATE_LIMIT_PER_MINUTE: '100000000',
      PLAYER_KEY_EVENTS_PER_MINUTE: '0',
      CLIENT_ADDRESS_REQUESTS_PER_MINUTE: '0',
      LOG_LEVEL: 'warn',
      ...settings,
    });
    const worker = await StackWorker.start({ name: 'intent', logDir: run.tmp, env: stackEnv('intent', READS ? 'ingest,admin,fanout' : SPLIT ? 'ingest,projector,api,admin,fanout' : undefined) });
    run.cleanups.push(() => worker.stop());
    let readSide: StackWorker | undefined;
    if (READS) {
      const reads = (readSide = await StackWorker.start({ name: 'intent-reads', logDir: run.tmp, env: stackEnv('intent-reads', 'projector,api') }));
      run.cleanups.push(() => reads.stop());
      reniceProcess(reads.pid!, READS_NICE);
    }
    let derivedUrl = worker.ready.url;
    let derivedPid: number | undefined;
    let derivedWorker: StackWorker | undefined;
    if (SPLIT) {
      const derived = (derivedWorker = await StackWorker.start({ name: 'intent-derived', logDir: run.tmp, env: { ...stackEnv('intent-derived', 'derived'), ...(STAGES ? { DERIVED_STAGES: 'intent' } : {}) } }));
      run.cleanups.push(() => derived.stop());
      derivedUrl = derived.ready.url;
      derivedPid = derived.pid;
    }
    let repartitionPid: number | undefined;
    if (STAGES) {
      const repartition = await StackWorker.start({ name: 'intent-repartition', logDir: run.tmp, env: { ...stackEnv('intent-repartition', 'derived'), DERIVED_STAGES: 'repartition' } });
      run.cleanups.push(() => repartition.stop());
      repartitionPid = repartition.pid;
    }
    const client = new HttpClient(worker.ready.url, 64);
    run.cleanups.push(async () => client.close());
    const { tenant, videoIds } = await setupTenant(client, adminToken, 'bench intent', 4, false);
    await client.json('POST', `/admin/v1/tenants/${tenant.id}/destinations`, { token: adminToken, body: { name: 'leads', url: rx.url('/leads'), events: ['high_intent_lead'] } });

    // When each crossing visitor's click, its by-visitor copy and its lead became readable here.
    const topics = topicNames(prefix);
    const registry = SchemaRegistry.fromManifest();
    const seen = { click: new Map<string, number>(), copy: new Map<string, number>(), lead: new Map<string, number>() };
    const kafka = new Kafka({ clientId: 'bench-intent-hops', brokers, logLevel: logLevel.NOTHING });
    const watcher = kafka.consumer({ groupId: `bench-intent-hops-${run.runId}`, maxWaitTimeInMs: 10 });
    await watcher.connect();
    run.cleanups.push(() => watcher.disconnect());
    const admin = kafka.admin();
    await admin.connect();
    run.cleanups.push(() => admin.disconnect());
    /** Player events the projector has not committed yet: how far the read side is behind. */
    const projectorLag = async () => (await groupLags(admin, { [`${prefix}projector`]: [topics.playerEvents] })).reduce((n, p) => n + p.lag, 0);
    await watcher.subscribe({ topics: [topics.playerEvents, topics.derivedByVisitor], fromBeginning: false });
    await watcher.run({
      partitionsConsumedConcurrently: 4,
      eachBatch: async ({ batch }) => {
        const now = performance.now();
        for (const m of batch.messages) {
          // Only the crossing visitors' records are decoded (keyed by their
          // session on the event log; on the by-visitor log, packed copies
          // that hold one): the watcher's own CPU must not weigh on the
          // stack it measures.
          if (!m.value) continue;
          const copies = batch.topic === topics.derivedByVisitor;
          if (copies ? !CROSSING_VISITOR.some((v) => m.value!.includes(v)) : !CROSSING_KEY.test(m.key?.toString('latin1') ?? '')) continue;
          const events = copies
            ? registry.decode<{ copies: { event: Buffer }[] }>('visitor-copies', m.value).copies.map((c) => registry.decode<PlayerEventRecord>('player-event', c.event))
            : [registry.decode<PlayerEventRecord>('player-event', m.value)];
          for (const e of events) {
            if (!e.visitor_id.startsWith('vis_round') && !e.visitor_id.startsWith('vis_warmup')) continue;
            const hop = copies ? (e.event_name === 'cta_clicked' ? seen.copy : undefined) : e.event_name === 'cta_clicked' ? seen.click : e.event_name === 'high_intent_lead' ? seen.lead : undefined;
            if (hop && !hop.has(e.visitor_id)) hop.set(e.visitor_id, now);
          }
        }
      },
    });
    const deliveredAt = new Map<string, number>();
    rx.setBehaviour((req) => {
      const visitor = String((JSON.parse(req.rawBody.toString()) as { visitor_id?: unknown }).visitor_id);
      if (!deliveredAt.has(visitor)) deliveredAt.set(visitor, performance.now());
      return { status: 200 };
    });
    let refused = 0;
    /** POSTs until a 202 (a 503 of the overloaded intake is sent again after 100 ms, as a player would); answers the time of the 202. */
    const post = async (events: unknown[]): Promise<number> => {
      const body = JSON.stringify({ events });
      for (;;) {
        const res = await client.request('POST', '/v1/collect', { body, headers: { 'x-player-key': tenant.player_key } });
        if (res.status === 202) return performance.now();
        if (res.status !== 503) throw new Error(`collect: HTTP ${res.status} ${res.body.slice(0, 200)}`);
        refused++;
        await sleep(100);
      }
    };
    let seq = 0;
    const viewing = (n: number) =>
      Array.from({ length: n }, () => {
        const i = seq++;
        // Partly watched, unfocused: ordinary traffic never crosses the threshold.
        return { event_name: 'heartbeat', video_id: videoIds[i % 4], session_id: `ses_v${i % 20_000}`, visitor_id: `vis_v${i % 20_000}`, play_ms: 5000, focus_ms: 1000, watched_percentage: 20, current_time: 24, duration: 120 };
      });

    const measure = async (name: string): Promise<Round> => {
      const acked = new Map<string, number>();
      const refusedBefore = refused;
      const end = performance.now() + ROUND_MS;
      let sent = 0;
      const pace = 1000 / (RATE / BATCH);
      const load = (async () => {
        const inFlight = new Set<Promise<unknown>>();
        for (let next = performance.now(); performance.now() < end; next += pace) {
          const wait = next - performance.now();
          if (wait > 0) await sleep(wait);
          const p = post(viewing(BATCH)).then(() => (sent += BATCH));
          inFlight.add(p);
          void p.finally(() => inFlight.delete(p));
          if (inFlight.size >= 64) await Promise.race(inFlight);
        }
        await Promise.all(inFlight);
      })();
      // Open loop: a crossing starts every CROSS_EVERY_MS whatever the
      // intake's latency (one after another, a slow 202 made them fewer, and
      // a round's p99 the maximum of a few dozen).
      const crossings = (async () => {
        const started: Promise<void>[] = [];
        for (let i = 0, next = performance.now(); next < end; i++, next += CROSS_EVERY_MS) {
          const wait = next - performance.now();
          if (wait > 0) await sleep(wait);
          const visitor = `vis_${name}_${i}`;
          const base = { video_id: videoIds[0], session_id: `ses_${name}_${i}`, visitor_id: visitor, duration: 120 };
          started.push(
            (async () => {
              // 40 (watched all) + 20 (all of it focused) = 60: not yet.
              await post([{ ...base, event_name: 'watched_90_percent', watched_percentage: 100, current_time: 110 }, { ...base, event_name: 'heartbeat', play_ms: 5000, focus_ms: 5000, current_time: 110, watched_percentage: 100 }]);
              await sleep(CROSS_EVERY_MS / 2);
              acked.set(visitor, await post([{ ...base, event_name: 'cta_clicked', current_time: 111, watched_percentage: 100 }])); // 73: crossed
            })(),
          );
        }
        await Promise.all(started);
      })();
      const t0 = performance.now();
      await Promise.all([load, crossings]);
      const eventsPerSec = sent / ((performance.now() - t0) / 1000);
      const lagAtEnd = await projectorLag();
      const deadline = performance.now() + 30_000;
      while ([...acked.keys()].some((v) => !deliveredAt.has(v)) && performance.now() < deadline) await sleep(50);
      const lat = [...acked].filter(([v]) => deliveredAt.has(v)).map(([v, at]) => deliveredAt.get(v)! - at);
      const hop = (from: (v: string, at: number) => number | undefined, to: (v: string) => number | undefined) =>
        quantile(
          [...acked].flatMap(([v, at]) => {
            const a = from(v, at);
            const b = to(v);
            return a === undefined || b === undefined ? [] : [b - a];
          }),
          0.5,
        );
      const hops: Round['hops'] = [
        hop((_v, at) => at, (v) => seen.click.get(v)),
        hop((v) => seen.click.get(v), (v) => seen.copy.get(v)),
        hop((v) => seen.copy.get(v), (v) => seen.lead.get(v)),
        hop((v) => seen.lead.get(v), (v) => deliveredAt.get(v)),
      ];
      const round = { hops, refused: refused - refusedBefore, crossings: acked.size, delivered: lat.length, eventsPerSec, p50: quantile(lat, 0.5), p99: quantile(lat, 0.99), max: Math.max(...lat), projectorLag: lagAtEnd };
      progress(`${name}: ${fmtInt(eventsPerSec)} events/s (${round.refused} requests refused with 503 and sent again), ${round.delivered}/${round.crossings} leads delivered, p50 ${fmtMs(round.p50)}, p99 ${fmtMs(round.p99)}; hops p50 ${hops.map(fmtMs).join(' / ')}; projector lag ${fmtInt(lagAtEnd)} events`);
      return round;
    };

    await measure('warmup');
    // The derived stages' transactions over the rounds: mean seconds of each step (derived_transaction_step_seconds).
    const derivedMetrics = new HttpClient(derivedUrl, 1);
    run.cleanups.push(async () => derivedMetrics.close());
    const txSteps = async () => (await derivedMetrics.request('GET', '/metrics')).body;
    const txBefore = await txSteps();
    // Where the machine's cores go while the rounds run (a p99 in seconds is a queue for the CPU).
    const meter = new CpuMeter(
      STAGES
        ? { bench: process.pid, 'stack without derived': worker.pid, 'derived intent': derivedPid, 'derived repartition': repartitionPid, broker: brokerPid }
        : READS
          ? { bench: process.pid, 'intake, admin, fan-out': worker.pid, 'projector, api': readSide!.pid, derived: derivedPid, broker: brokerPid }
          : SPLIT
            ? { bench: process.pid, 'stack without derived': worker.pid, derived: derivedPid, broker: brokerPid }
            : { bench: process.pid, stack: worker.pid, broker: brokerPid },
    );
    meter.start();
    if (PROFILE) await derivedWorker!.rpc({ op: 'profileStart' });
    const rounds: Round[] = [];
    for (let r = 1; r <= ROUNDS; r++) rounds.push(await measure(`round${r}`));
    const cores = meter.stop();
    const raw = PROFILE ? await derivedWorker!.rpc<CpuProfile>({ op: 'profileStop' }, 300_000) : undefined;
    // BENCH_INTENT_PROFILE_OUT=<file>: the profile itself too, for Chrome DevTools.
    if (raw && process.env.BENCH_INTENT_PROFILE_OUT) writeFileSync(process.env.BENCH_INTENT_PROFILE_OUT, JSON.stringify(raw));
    const profile = raw ? summarizeProfile(raw, 25) : undefined;
    const txAfter = await txSteps();
    out();
    out(
      table([
        ['round', 'events/s', '503, sent again', 'crossings', 'delivered', 'p50', 'p99', 'max', 'p50 202→click', 'click→copy', 'copy→lead', 'lead→delivered', 'projector lag at end'],
        ...rounds.map((r, i) => [String(i + 1), fmtInt(r.eventsPerSec), String(r.refused), String(r.crossings), String(r.delivered), fmtMs(r.p50), fmtMs(r.p99), fmtMs(r.max), ...r.hops.map(fmtMs), fmtInt(r.projectorLag)]),
      ]),
    );
    out();
    const txMean = (stage: string, step: string) => {
      const of = (text: string, part: 'sum' | 'count') => metricSum(text, `derived_transaction_step_seconds_${part}`, { stage, step });
      const n = of(txAfter, 'count') - of(txBefore, 'count');
      return { n, ms: (1000 * (of(txAfter, 'sum') - of(txBefore, 'sum'))) / Math.max(1, n) };
    };
    for (const stage of ['intent']) {
      const steps = (['send', 'offsets', 'commit'] as const).map((step) => [step, txMean(stage, step)] as const);
      const batches = (text: string, part: 'sum' | 'count') => metricSum(text, `derived_transaction_batches_${part}`, { stage });
      const perTx = (batches(txAfter, 'sum') - batches(txBefore, 'sum')) / Math.max(1, batches(txAfter, 'count') - batches(txBefore, 'count'));
      out(`${stage} transactions over the rounds: ${fmtInt(steps[0]![1].n)} (${perTx.toFixed(1)} partitions' batches each), mean ${steps.map(([step, x]) => `${step} ${fmtMs(x.ms)}`).join(', ')}`);
    }
    out(`cores used over the rounds: ${fmtCores(cores)}; all ${Object.values(cores).reduce((a, b) => a + b, 0).toFixed(2)} of ${os.cpus().length}`);
    if (profile) {
      const events = rounds.reduce((n, r) => n + r.eventsPerSec * (ROUND_MS / 1000), 0);
      out(`where the derived-events process's CPU went over the rounds (V8 profiler on, which costs some of it), per event sent:`);
      for (const line of formatProfileSummary(profile, events)) out(line);
    }
    out(`202 → high_intent_lead delivered (median of rounds)   p50 ${fmtMs(median(rounds.map((r) => r.p50)))}, p99 ${fmtMs(median(rounds.map((r) => r.p99)))}  (goal p99 ≤ 500 ms)`);
    out(`load avg    ${os.loadavg().map((l) => l.toFixed(2)).join(' ')} (at the end); duration ${((performance.now() - T0) / 1000).toFixed(0)} s`);
  } finally {
    await run.cleanup();
  }
}

runBench(main);
