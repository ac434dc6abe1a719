/**
 * `npm run bench:overload` (issue 9, item 7): overload without collapse.
 *
 *   1. the intake's sustainable rate: closed loop, the same clients and
 *      batches as `npm run bench`, against a stack with ingest, projector,
 *      api and admin in a child process (its own event loop);
 *   2. overload: an open loop at BENCH_OVERLOAD_FACTOR (2) × that rate for
 *      BENCH_OVERLOAD_SEC (60) seconds, only to 127.0.0.1; every answer is
 *      classed 202 / 503 / 429 / other / timeout with its latency;
 *   3. recovery: the closed loop again right after the overload stops, until
 *      a 1-s window reaches 90 % of the sustainable rate (at most 30 s);
 *   4. every 202-answered event is looked up in ClickHouse: each request's
 *      events carry a session id of their own, so each accepted request must
 *      have exactly its batch of rows (with and without FINAL).
 *
 * Prints peak RSS of every process, the service's event-loop delay
 * (monitorEventLoopDelay inside the stack process, reset as the overload
 * starts) and the load average. Stops by itself (hard cap 12 min).
 */
import { randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import os from 'node:os';
import { join } from 'node:path';
import { ConfigSchema, loadConfig } from '../shared/config.ts';
import { setupTenant, sleep } from './context.ts';
import { CpuMeter, fmtCores } from './cpu.ts';
import { benchBrokers, runBench, startBenchRun } from './harness.ts';
import { HttpClient, type RequestPhases } from './http-client.ts';
import { fmtInt, fmtMs, fmtRatio, median, quantile, table } from './stats.ts';
import { playerEvent } from './workload.ts';
import type { ProcessStats } from './worker-protocol.ts';
import { StackWorker } from './worker-client.ts';
import { metricSum } from '../test/helpers/prometheus-text.ts';

const QUICK = process.env.BENCH_QUICK === '1';
const PLAN = {
  concurrency: 32,
  batch: 50,
  warmupMs: QUICK ? 1000 : 3000,
  sustainRounds: QUICK ? 1 : 3,
  sustainRoundMs: QUICK ? 2000 : 4000,
  factor: Number(process.env.BENCH_OVERLOAD_FACTOR ?? 2),
  overloadSec: Number(process.env.BENCH_OVERLOAD_SEC ?? (QUICK ? 10 : 60)),
  /** Open-loop requests beyond this many unanswered are counted as not sent (the generator's own cap). */
  maxInFlight: 512,
  requestTimeoutMs: 10_000,
  recoveryMaxMs: 30_000,
  recoveredAt: 0.9,
  drainMs: 90_000,
  maxRunMs: 12 * 60_000,
};

const T0 = performance.now();
const progress = (msg: string) => process.stderr.write(`[overload +${((performance.now() - T0) / 1000).toFixed(0).padStart(3)} s] ${msg}\n`);
const out = (s = '') => process.stdout.write(`${s}\n`);
const GiB = 2 ** 30;

/** Intake settings an experiment may set in the environment; passed to the stack. */
const OVERLOAD_KNOBS = ['INGEST_MAX_TX_EVENTS', 'INGEST_MAX_IN_FLIGHT_REQUESTS', 'INGEST_MAX_QUEUE_DELAY_MS', 'INGEST_LINGER_MS'] as const;

/** Upper bounds (s) of the service's http_request_duration_seconds buckets the report reads. */
const SERVER_LES = ['0.1', '0.5', '1', '2.5', '5', '10', '+Inf'];
/** Answered requests slower than this (client's view) get their client-side phases printed. */
const SLOW_MS = 2500;

type Outcome = '202' | '503' | '429' | 'other' | 'timeout' | 'error';
const OUTCOMES: Outcome[] = ['202', '503', '429', 'other', 'timeout', 'error'];

/** Peak RSS (VmHWM) of a process from /proc, bytes; NaN where unavailable. */
function peakRss(pid: number | undefined): number {
  if (pid === undefined) return Number.NaN;
  try {
    const m = /VmHWM:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
    return m ? Number(m[1]) * 1024 : Number.NaN;
  } catch {
    return Number.NaN;
  }
}

async function main(): Promise<void> {
  const { tmp, runId, cleanups, cleanup } = startBenchRun({ tmpPrefix: 'va-bench-overload-', maxRunMs: PLAN.maxRunMs, progress });
  try {
    const settings = loadConfig({});
    const external = process.env.KAFKA_BROKERS?.trim();
    out('# Overload without collapse (issue 9, item 7)');
    out();
    out(`command     ${process.env.npm_lifecycle_event ? `npm run ${process.env.npm_lifecycle_event}` : `node ${process.argv.slice(1).join(' ')}`}${QUICK ? '  [BENCH_QUICK=1: reduced sizes, not for figures]' : ''}`);
    out(`date        ${new Date().toISOString()}`);
    out(`machine     ${os.cpus().length} × ${os.cpus()[0]?.model ?? 'unknown CPU'}, ${(os.totalmem() / GiB).toFixed(1)} GiB RAM`);
    out(`load avg    ${os.loadavg().map((l) => l.toFixed(2)).join(' ')} (1/5/15 min, at start)`);
    out(`node        ${process.version}`);
    out(
      `plan        sustainable rate: ${PLAN.concurrency} closed-loop clients × batches of ${PLAN.batch}, ${PLAN.sustainRounds} rounds of ${PLAN.sustainRoundMs / 1000} s (median); ` +
        `overload ${PLAN.factor}× that, open loop, ${PLAN.overloadSec} s (BENCH_OVERLOAD_SEC), at most ${PLAN.maxInFlight} requests unanswered, client timeout ${PLAN.requestTimeoutMs / 1000} s`,
    );
    out(`stack       SERVICES=ingest,projector,api,admin in a child process; INGEST_PRODUCE_TIMEOUT_MS ${settings.INGEST_PRODUCE_TIMEOUT_MS} (default); RATE_LIMIT_PER_MINUTE 100000000 (set by the bench, as in npm run bench)`);
    out(`intake      ${OVERLOAD_KNOBS.map((k) => `${k} ${process.env[k] ?? `${settings[k]} (default)`}`).join(', ')}`);
    out();

    const { brokers, brokerPid } = await benchBrokers({ tmp, cleanups }, external, settings.KAFKA_TOPIC_PARTITIONS, progress);
    const adminToken = `adm_${randomBytes(16).toString('hex')}`;
    const env: Record<string, string> = {};
    for (const [k, v] of Object.entries(process.env)) if (v !== undefined && !(k in ConfigSchema.shape)) env[k] = v;
    Object.assign(env, {
      KAFKA_BROKERS: brokers.join(','),
      KAFKA_TOPIC_PREFIX: `bench-ov-${runId}.`,
      KAFKA_CLIENT_ID: `bench-ov-${runId}`,
      DATA_DIR: join(tmp, 'stack'),
      PORT: '0',
      HOST: '127.0.0.1',
      ADMIN_TOKEN: adminToken,
      CURSOR_SECRET: randomBytes(24).toString('hex'),
      SERVICES: 'ingest,projector,api,admin',
      RATE_LIMIT_PER_MINUTE: '100000000',
      // Every client is on loopback with one player key: the intake's own limits are off.
      PLAYER_KEY_EVENTS_PER_MINUTE: '0',
      CLIENT_ADDRESS_REQUESTS_PER_MINUTE: '0',
      LOG_LEVEL: 'warn',
    });
    // Intake settings passed through for experiments (printed in the header).
    for (const k of OVERLOAD_KNOBS) if (process.env[k]) env[k] = process.env[k]!;
    progress('starting the stack');
    const worker = await StackWorker.start({ env, logDir: tmp, name: 'overload-stack' });
    cleanups.push(() => worker.stop());
    const url = new URL(worker.ready.url);
    if (url.hostname !== '127.0.0.1') throw new Error(`refusing to load anything but 127.0.0.1 (${url.hostname})`);
    const admin = new HttpClient(worker.ready.url, 2);
    const { tenant, videoIds } = await setupTenant(admin, adminToken, 'bench overload', 8, false);
    admin.close();
    const client = new HttpClient(worker.ready.url, PLAN.maxInFlight + 8);
    cleanups.push(async () => client.close());
    const headers = { 'x-player-key': tenant.player_key };
    const stats = (reset = false) => worker.rpc<ProcessStats>({ op: 'stats', reset });

    // Bodies: 16 templates whose events all carry one session id, replaced per request.
    const MARK = 'ses_MARK';
    const templates = Array.from({ length: 16 }, (_, t) =>
      JSON.stringify({ events: Array.from({ length: PLAN.batch }, (_, k) => ({ ...playerEvent(t * PLAN.batch + k, videoIds), session_id: MARK })) }),
    );
    let reqNo = 0;
    const accepted: string[] = [];
    const notAccepted: { sid: string; outcome: Outcome }[] = [];
    /** 202-answered events per second of answer time, since T0. */
    const okTimeline = new Map<number, number>();
    /** Client-side phases of the answered requests slower than SLOW_MS (overload and recovery). */
    const slowPhases: RequestPhases[] = [];
    const send = async (tag: string): Promise<{ outcome: Outcome; ms: number }> => {
      const n = reqNo++;
      const sid = `ses_${tag}${runId}_${n}`;
      const body = templates[n % templates.length]!.replaceAll(MARK, sid);
      const t = performance.now();
      let outcome: Outcome;
      try {
        const res = await client.request('POST', '/v1/collect', { body, headers, timeoutMs: PLAN.requestTimeoutMs });
        outcome = res.status === 202 ? '202' : res.status === 503 ? '503' : res.status === 429 ? '429' : 'other';
        if ((tag === 'o' || tag === 'r') && performance.now() - t > SLOW_MS) slowPhases.push(res.phases);
      } catch (err) {
        outcome = /no response within/.test(String(err)) ? 'timeout' : 'error';
      }
      const done = performance.now();
      if (outcome === '202') {
        accepted.push(sid);
        const s = Math.floor((done - T0) / 1000);
        okTimeline.set(s, (okTimeline.get(s) ?? 0) + PLAN.batch);
      } else notAccepted.push({ sid, outcome });
      return { outcome, ms: done - t };
    };

    const closedLoop = async (ms: number, tag: string, stopWhen?: () => boolean) => {
      let ok = 0;
      let failed = 0;
      const started = performance.now();
      const end = started + ms;
      await Promise.all(
        Array.from({ length: PLAN.concurrency }, async () => {
          while (performance.now() < end && !stopWhen?.()) {
            const r = await send(tag);
            if (r.outcome === '202') ok++;
            else failed++;
          }
        }),
      );
      return { eventsPerSec: (ok * PLAN.batch) / ((performance.now() - started) / 1000), failed };
    };

    // --- 1. sustainable rate ---------------------------------------------------
    progress('sustainable rate: warm-up');
    await closedLoop(PLAN.warmupMs, 'w');
    const sustainRounds: number[] = [];
    const meter = new CpuMeter({ bench: process.pid, service: worker.pid, broker: brokerPid });
    meter.start();
    for (let r = 0; r < PLAN.sustainRounds; r++) {
      const res = await closedLoop(PLAN.sustainRoundMs, 's');
      sustainRounds.push(res.eventsPerSec);
      progress(`sustainable round ${r + 1}: ${fmtInt(res.eventsPerSec)} events/s (${res.failed} not 202)`);
    }
    const sustainCores = meter.stop();
    const sustainable = median(sustainRounds);
    const sustainStats = await stats(true);
    // The service's own view of the same requests: Fastify's time from the
    // request's start (before its first hook) to the answer, or to the
    // client's leaving for a request it gave up on, POST /v1/collect.
    const metricsClient = new HttpClient(worker.ready.url, 2);
    cleanups.push(async () => metricsClient.close());
    const serverBuckets = async () => {
      const text = (await metricsClient.request('GET', '/metrics', { timeoutMs: 60_000 })).body;
      return Object.fromEntries(SERVER_LES.map((le) => [le, metricSum(text, 'http_request_duration_seconds_bucket', { method: 'POST', route: '/v1/collect', le })])) as Record<string, number>;
    };
    const serverBefore = await serverBuckets();

    // --- 2. overload -------------------------------------------------------------
    const target = PLAN.factor * sustainable;
    const reqPerSec = target / PLAN.batch;
    progress(`overload: ${fmtInt(target)} events/s (${reqPerSec.toFixed(0)} requests/s) for ${PLAN.overloadSec} s`);
    const load1AtOverload = os.loadavg()[0]!;
    const byOutcome = new Map<Outcome, number[]>(OUTCOMES.map((o) => [o, []]));
    let inFlight = 0;
    let notSent = 0;
    let sent = 0;
    const pending = new Set<Promise<void>>();
    meter.start();
    const ovStart = performance.now();
    const ovEnd = ovStart + PLAN.overloadSec * 1000;
    while (performance.now() < ovEnd) {
      const due = Math.floor(((performance.now() - ovStart) / 1000) * reqPerSec);
      while (sent + notSent < due) {
        if (inFlight >= PLAN.maxInFlight) {
          notSent++;
          continue;
        }
        sent++;
        inFlight++;
        const p = send('o').then((r) => {
          inFlight--;
          byOutcome.get(r.outcome)!.push(r.ms);
          pending.delete(p);
        });
        pending.add(p);
      }
      await sleep(5);
    }
    const ovStopped = performance.now();
    const ovCores = meter.stop();
    // Not awaited here: the recovery load starts at once (a busy service answers this late).
    const ovStatsP = stats(true);
    progress(`overload stopped: ${sent} requests sent, ${notSent} not sent (generator cap), ${inFlight} still unanswered`);

    // --- 3. recovery -------------------------------------------------------------
    let recoveredSec = Number.NaN;
    const recStarted = performance.now();
    const recoveryWindows: number[] = [];
    let recovered = false;
    const watcher = (async () => {
      let windowStart = performance.now();
      let okAtStart = accepted.length;
      while (!recovered && performance.now() - recStarted < PLAN.recoveryMaxMs) {
        await sleep(1000 - (performance.now() - windowStart));
        const now = performance.now();
        const rate = ((accepted.length - okAtStart) * PLAN.batch) / ((now - windowStart) / 1000);
        recoveryWindows.push(rate);
        if (rate >= PLAN.recoveredAt * sustainable) {
          recovered = true;
          recoveredSec = (now - ovStopped) / 1000;
        }
        windowStart = now;
        okAtStart = accepted.length;
      }
    })();
    await closedLoop(PLAN.recoveryMaxMs, 'r', () => recovered);
    await watcher;
    await Promise.all([...pending]);
    const serverAfter = await serverBuckets();
    const ovStats = await ovStatsP;
    const recStats = await stats(false);

    // --- 4. nothing accepted is lost or doubled ------------------------------------
    progress(`waiting for the projector: ${fmtInt(accepted.length * PLAN.batch)} accepted events`);
    const countRows = async (final: boolean) => {
      const rows = await worker.query<{ c: string | number }>(
        `SELECT count() AS c FROM events${final ? ' FINAL' : ''} WHERE tenant_id = '${tenant.id}' AND startsWith(session_id, 'ses_') AND position(session_id, '${runId}_') > 0`,
      );
      return Number(rows[0]?.c ?? 0);
    };
    const drainStart = performance.now();
    let stored = 0;
    let stableSince = performance.now();
    while (performance.now() - drainStart < PLAN.drainMs) {
      const c = await countRows(false);
      if (c !== stored) {
        stored = c;
        stableSince = performance.now();
      }
      if (stored >= accepted.length * PLAN.batch && performance.now() - stableSince > 3000) break;
      if (performance.now() - stableSince > 15_000) break;
      await sleep(500);
    }
    const perSession = async (final: boolean) =>
      new Map(
        (
          await worker.query<{ s: string; c: string | number }>(
            `SELECT session_id AS s, count() AS c FROM events${final ? ' FINAL' : ''} WHERE tenant_id = '${tenant.id}' AND position(session_id, '${runId}_') > 0 GROUP BY session_id`,
            180_000,
          )
        ).map((r) => [r.s, Number(r.c)]),
      );
    const check = (m: Map<string, number>) => {
      let exact = 0;
      let missing = 0;
      let partial = 0;
      let doubled = 0;
      for (const sid of accepted) {
        const c = m.get(sid) ?? 0;
        if (c === PLAN.batch) exact++;
        else if (c === 0) missing++;
        else if (c < PLAN.batch) partial++;
        else doubled++;
      }
      const storedNotAccepted: Record<string, number> = {};
      for (const { sid, outcome } of notAccepted) if ((m.get(sid) ?? 0) > 0) storedNotAccepted[outcome] = (storedNotAccepted[outcome] ?? 0) + 1;
      return { exact, missing, partial, doubled, storedNotAccepted };
    };
    const raw = check(await perSession(false));
    const fin = check(await perSession(true));

    // --- report ------------------------------------------------------------------
    const total = sent;
    const share = (o: Outcome) => `${((byOutcome.get(o)!.length / Math.max(1, total)) * 100).toFixed(1)}%`;
    const ovAccepted = byOutcome.get('202')!.length * PLAN.batch;
    const ovSec = (ovStopped - ovStart) / 1000;
    out(`## Sustainable rate (closed loop, ${PLAN.concurrency} clients)`);
    out(`rounds ${sustainRounds.map(fmtInt).join(' / ')} events/s → median ${fmtInt(sustainable)} events/s; CPU cores ${fmtCores(sustainCores)}`);
    out(`service event-loop delay during it: p50 ${fmtMs(sustainStats.eldP50)}, p99 ${fmtMs(sustainStats.eldP99)}, max ${fmtMs(sustainStats.eldMax)}`);
    out();
    out(`## Overload: ${PLAN.factor}× the sustainable rate = ${fmtInt(target)} events/s offered (${reqPerSec.toFixed(0)} requests/s of ${PLAN.batch}) for ${ovSec.toFixed(1)} s`);
    out(`1-min load average as the overload began: ${load1AtOverload.toFixed(2)}`);
    out(`requests sent ${fmtInt(total)}, not sent because ${PLAN.maxInFlight} were unanswered: ${fmtInt(notSent)} (${((notSent / Math.max(1, total + notSent)) * 100).toFixed(1)}% of the offered)`);
    out(`accepted (202) ${fmtInt(ovAccepted / ovSec)} events/s during the overload = ${fmtRatio(ovAccepted / ovSec / sustainable)} the sustainable rate`);
    out();
    out(
      table([
        ['answer', 'share of sent', 'requests', 'latency p50', 'latency p99', 'max'],
        ...OUTCOMES.map((o) => {
          const xs = byOutcome.get(o)!;
          return [o === 'timeout' ? `timeout (> ${PLAN.requestTimeoutMs / 1000} s)` : o, share(o), fmtInt(xs.length), fmtMs(quantile(xs, 0.5)), fmtMs(quantile(xs, 0.99)), fmtMs(xs.length ? Math.max(...xs) : Number.NaN)];
        }),
      ]),
    );
    out();
    {
      // Client and service views of the same requests (the service's includes the recovery phase's few).
      const n = serverAfter['+Inf']! - serverBefore['+Inf']!;
      const clientAll = OUTCOMES.flatMap((o) => byOutcome.get(o)!);
      const shareOver = (xs: number[], s: number) => `${((xs.filter((ms) => ms > s * 1000).length / Math.max(1, xs.length)) * 100).toFixed(1)}%`;
      out(`where the time goes: share of requests slower than each bound, as the client saw them (send → answer) and as the service did (Fastify: request start → answer, or → the client leaving, POST /v1/collect, ${fmtInt(n)} requests in overload and recovery)`);
      out(
        table([
          ['slower than', 'client', 'service'],
          ...SERVER_LES.slice(0, -1).map((le) => [`${le} s`, shareOver(clientAll, Number(le)), `${(((n - (serverAfter[le]! - serverBefore[le]!)) / Math.max(1, n)) * 100).toFixed(1)}%`]),
        ]),
      );
      out();
    }
    out('5-s windows of 202-answered events/s (by answer time), from the overload start:');
    const s0 = Math.floor((ovStart - T0) / 1000);
    const sEnd = Math.floor((performance.now() - T0) / 1000);
    const windows: string[] = [];
    for (let s = s0; s < Math.min(sEnd, s0 + PLAN.overloadSec + 30); s += 5) {
      let n = 0;
      for (let k = s; k < s + 5; k++) n += okTimeline.get(k) ?? 0;
      windows.push(fmtInt(n / 5));
    }
    out(`  ${windows.join(' | ')}`);
    out();
    {
      // Where the slowest answered requests spent their time on the client's side.
      const fresh = slowPhases.filter((p) => p.connected !== undefined);
      const med = (f: (p: RequestPhases) => number, xs = slowPhases) => fmtMs(median(xs.map(f)));
      out(
        slowPhases.length === 0
          ? `answered requests slower than ${SLOW_MS / 1000} s (client's view, overload and recovery): none`
          : `answered requests slower than ${SLOW_MS / 1000} s (client's view, overload and recovery): ${fmtInt(slowPhases.length)}; medians after the call: socket ${med((p) => p.socket)}, request written ${med((p) => p.sent)}, answer's headers ${med((p) => p.answered)}; ${fmtInt(fresh.length)} on a new connection (connected after ${fresh.length ? med((p) => p.connected!, fresh) : 'n/a'})`,
      );
    }
    out();
    out('## Processes');
    out(
      table([
        ['process', 'peak RSS', 'target', 'CPU cores during overload'],
        ['service (stack child)', `${(recStats.maxRss / GiB).toFixed(2)} GiB`, '≤ 1.5 GiB', (ovCores.service ?? Number.NaN).toFixed(2)],
        ['Kafka broker (JVM)', `${(peakRss(brokerPid) / GiB).toFixed(2)} GiB`, '≤ 1.5 GiB', (ovCores.broker ?? Number.NaN).toFixed(2)],
        ['bench (load generator)', `${(process.resourceUsage().maxRSS / 1024 ** 2).toFixed(2)} GiB`, '', (ovCores.bench ?? Number.NaN).toFixed(2)],
      ]),
    );
    out(`service event-loop delay during the overload (monitorEventLoopDelay in the stack process): p50 ${fmtMs(ovStats.eldP50)}, p99 ${fmtMs(ovStats.eldP99)} (target ≤ 100 ms: ${ovStats.eldP99 <= 100 ? 'MET' : 'MISSED'}), max ${fmtMs(ovStats.eldMax)}`);
    out(`service event-loop delay during the recovery: p99 ${fmtMs(recStats.eldP99)}, max ${fmtMs(recStats.eldMax)}`);
    out(`service GC pauses during the overload: ${fmtInt(ovStats.gc.count)} (${fmtMs(ovStats.gc.totalMs)} in all, ${((ovStats.gc.totalMs / (PLAN.overloadSec * 1000)) * 100).toFixed(1)} % of the time), longest ${fmtMs(ovStats.gc.maxMs)}, ${ovStats.gc.over50} over 50 ms`);
    out();
    out('## Recovery');
    out(`closed loop (${PLAN.concurrency} clients) from the moment the overload stopped; 1-s windows of 202 events/s: ${recoveryWindows.map(fmtInt).join(', ')}`);
    out(
      Number.isFinite(recoveredSec)
        ? `back to ≥ ${PLAN.recoveredAt * 100}% of the sustainable rate (${fmtInt(PLAN.recoveredAt * sustainable)} events/s) ${recoveredSec.toFixed(1)} s after the overload stopped (target ≤ 5 s: ${recoveredSec <= 5 ? 'MET' : 'MISSED'})`
        : `NOT back to ${PLAN.recoveredAt * 100}% of the sustainable rate within ${PLAN.recoveryMaxMs / 1000} s (target ≤ 5 s: MISSED)`,
    );
    out();
    out('## Every 202-answered event stored exactly once (all phases)');
    out(`accepted requests ${fmtInt(accepted.length)} (${fmtInt(accepted.length * PLAN.batch)} events); rows found ${fmtInt(stored)} after ${((performance.now() - drainStart) / 1000).toFixed(0)} s of drain`);
    for (const [label, c] of [['events (no FINAL, every stored row)', raw], ['events FINAL (what the API reads)', fin]] as const) {
      out(
        `  ${label}: ${fmtInt(c.exact)} requests with exactly ${PLAN.batch} rows, ${fmtInt(c.missing)} with none, ${fmtInt(c.partial)} with fewer, ${fmtInt(c.doubled)} with more; ` +
          `not-202 requests with rows stored: ${JSON.stringify(c.storedNotAccepted)}`,
      );
    }
    const notOk: Record<string, number> = {};
    for (const { outcome } of notAccepted) notOk[outcome] = (notOk[outcome] ?? 0) + 1;
    out(`requests not answered 202 in all phases (warm-up, sustainable, overload, recovery): ${JSON.stringify(notOk)}; a timed-out request may still be stored (the client gave up, not the service)`);
    const allOnce = raw.exact === accepted.length && fin.exact === accepted.length;
    out(`every 202-answered event stored exactly once: ${allOnce ? 'YES' : 'NO'}`);
    out();
    out(`load avg    ${os.loadavg().map((l) => l.toFixed(2)).join(' ')} (1/5/15 min, at the end)`);
    out(`duration    ${((performance.now() - T0) / 1000).toFixed(0)} s`);
  } finally {
    progress('cleaning up');
    await cleanup();
  }
}

runBench(main);
