/**
 * `npm run bench:idle-sockets`: what half-sent requests held open cost a
 * normal client of the intake.
 *
 * A stack (ingest and admin) runs in a child process. A probe of
 * BENCH_IDLE_PROBE_CLIENTS (4) closed-loop clients sends 1-event
 * /v1/collect requests for BENCH_IDLE_PROBE_SEC (5) seconds: first quiet,
 * then while N requests of another tenant are held open (N from
 * BENCH_IDLE_N, default 256,1000,4000,10000), then quiet again. A held
 * request sends its headers (a valid player key, the Content-Length of a
 * real body, Expect: 100-continue) and one byte of body, and counts once the
 * server has answered 100 Continue (it has read the headers and started the
 * request). The stack's body-idle and request timeouts are raised for the
 * run so that the held requests stay for the whole probe: it measures what
 * holding them costs, as a client that trickles a byte just under the
 * idle timeout would hold them. Prints p50 and p99 per N, the p99 ratio
 * against the quiet probe, the stack's event-loop delay and RSS, and the
 * largest N whose p99 stays within 2× quiet, and how long the stack takes
 * to answer promptly again once the held requests are reset.
 *
 * Open sockets count against each process's open-file limit (printed; Node
 * cannot raise it): an N above what the limit leaves is skipped.
 */
import { randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import { join } from 'node:path';
import { ConfigSchema, loadConfig } from '../shared/config.ts';
import { setupTenant, sleep } from './context.ts';
import { benchBrokers, runBench, startBenchRun } from './harness.ts';
import { HttpClient } from './http-client.ts';
import { fmtInt, fmtMs, fmtRatio, quantile, table } from './stats.ts';
import type { ProcessStats } from './worker-protocol.ts';
import { playerEvent } from './workload.ts';
import { StackWorker } from './worker-client.ts';

const PLAN = {
  levels: (process.env.BENCH_IDLE_N ?? '256,1000,4000,10000').split(',').map((n) => Number(n.trim())).filter((n) => n > 0),
  probeClients: Number(process.env.BENCH_IDLE_PROBE_CLIENTS ?? 4),
  probeSec: Number(process.env.BENCH_IDLE_PROBE_SEC ?? 5),
  /** Held requests opened at once while building up a level. */
  openBatch: 200,
  /** Sockets each process keeps for everything but the held requests (Kafka, chdb, the probe, stdio). */
  fdReserve: 500,
  maxRunMs: 15 * 60_000,
};

const T0 = performance.now();
const progress = (msg: string) => process.stderr.write(`[idle-sockets +${((performance.now() - T0) / 1000).toFixed(0).padStart(3)} s] ${msg}\n`);
const out = (s = '') => process.stdout.write(`${s}\n`);
const GiB = 2 ** 30;
const MiB = 2 ** 20;

/** The soft and hard limits on open files of this process (/proc/self/limits). */
function openFileLimits(): { soft: number; hard: number } {
  const m = /Max open files\s+(\d+|unlimited)\s+(\d+|unlimited)/.exec(readFileSync('/proc/self/limits', 'utf8'));
  const n = (v: string | undefined) => (v === undefined || v === 'unlimited' ? Number.POSITIVE_INFINITY : Number(v));
  return { soft: n(m?.[1]), hard: n(m?.[2]) };
}

/** A half-sent POST /v1/collect, resolved once the server answered 100 Continue; rejected if it closed first. */
function holdRequest(host: string, port: number, playerKey: string, body: string, sockets: Set<net.Socket>): Promise<void> {
  return new Promise((resolve, reject) => {
    const socket = net.connect({ host, port });
    sockets.add(socket);
    let text = '';
    socket.setEncoding('latin1');
    socket.on('data', (chunk: string) => {
      text += chunk;
      if (text.startsWith('HTTP/1.1 100 ')) resolve();
    });
    socket.on('error', () => undefined);
    socket.once('close', () => {
      sockets.delete(socket);
      reject(new Error(`closed before 100 Continue: ${text.slice(0, 40)}`));
    });
    socket.write(
      `POST /v1/collect HTTP/1.1\r\nHost: ${host}:${port}\r\nContent-Type: application/json\r\nX-Player-Key: ${playerKey}\r\n` +
        `Content-Length: ${Buffer.byteLength(body)}\r\nExpect: 100-continue\r\n\r\n${body.slice(0, 1)}`,
    );
  });
}

async function main(): Promise<void> {
  const { tmp, runId, cleanups, cleanup } = startBenchRun({ tmpPrefix: 'va-bench-idle-', maxRunMs: PLAN.maxRunMs, progress });
  try {
    const settings = loadConfig({});
    const limits = openFileLimits();
    const maxHeld = limits.soft - PLAN.fdReserve;
    out('# Idle sockets: half-sent requests held open beside a normal client');
    out();
    out(`command     ${process.env.npm_lifecycle_event ? `npm run ${process.env.npm_lifecycle_event}` : `node ${process.argv.slice(1).join(' ')}`}`);
    out(`date        ${new Date().toISOString()}`);
    out(`machine     ${os.cpus().length} × ${os.cpus()[0]?.model ?? 'unknown CPU'}, ${(os.totalmem() / GiB).toFixed(1)} GiB RAM`);
    out(`load avg    ${os.loadavg().map((l) => l.toFixed(2)).join(' ')} (1/5/15 min, at start)`);
    out(`node        ${process.version}`);
    out(`open files  soft ${limits.soft}, hard ${limits.hard} per process (the stack's child inherits them); held requests per level at most ${fmtInt(maxHeld)}`);
    out(
      `plan        probe: ${PLAN.probeClients} closed-loop clients × 1-event /v1/collect for ${PLAN.probeSec} s per level; held requests N = ${PLAN.levels.join(', ')} (BENCH_IDLE_N), ` +
        `each headers + 1 byte of body of another tenant, counted once answered 100 Continue`,
    );
    out(
      `stack       SERVICES=ingest,admin in a child process; HTTP_BODY_IDLE_TIMEOUT_MS and HTTP_REQUEST_TIMEOUT_MS 600000 for the run (defaults ${settings.HTTP_BODY_IDLE_TIMEOUT_MS} and ${settings.HTTP_REQUEST_TIMEOUT_MS}), ` +
        `INGEST_MAX_IN_FLIGHT_REQUESTS ${settings.INGEST_MAX_IN_FLIGHT_REQUESTS} (default)`,
    );
    out();

    const { brokers } = await benchBrokers({ tmp, cleanups }, process.env.KAFKA_BROKERS?.trim(), settings.KAFKA_TOPIC_PARTITIONS, progress);
    const adminToken = `adm_${randomBytes(16).toString('hex')}`;
    const env: Record<string, string> = {};
    for (const [k, v] of Object.entries(process.env)) if (v !== undefined && !(k in ConfigSchema.shape)) env[k] = v;
    Object.assign(env, {
      KAFKA_BROKERS: brokers.join(','),
      KAFKA_TOPIC_PREFIX: `bench-idle-${runId}.`,
      KAFKA_CLIENT_ID: `bench-idle-${runId}`,
      DATA_DIR: join(tmp, 'stack'),
      PORT: '0',
      HOST: '127.0.0.1',
      ADMIN_TOKEN: adminToken,
      CURSOR_SECRET: randomBytes(24).toString('hex'),
      SERVICES: 'ingest,admin',
      RATE_LIMIT_PER_MINUTE: '100000000',
      HTTP_BODY_IDLE_TIMEOUT_MS: '600000',
      HTTP_REQUEST_TIMEOUT_MS: '600000',
      LOG_LEVEL: 'warn',
    });
    progress('starting the stack');
    const worker = await StackWorker.start({ env, logDir: tmp, name: 'idle-stack' });
    cleanups.push(() => worker.stop());
    const url = new URL(worker.ready.url);
    if (url.hostname !== '127.0.0.1') throw new Error(`refusing to load anything but 127.0.0.1 (${url.hostname})`);
    const admin = new HttpClient(worker.ready.url, 2);
    const victim = await setupTenant(admin, adminToken, 'bench idle victim', 1, false);
    const holder = await setupTenant(admin, adminToken, 'bench idle holder', 1, false);
    admin.close();
    const stats = (reset = false) => worker.rpc<ProcessStats>({ op: 'stats', reset });

    const client = new HttpClient(worker.ready.url, PLAN.probeClients);
    cleanups.push(async () => client.close());
    const probeBody = JSON.stringify({ events: [playerEvent(4, victim.videoIds)] });
    const heldBody = JSON.stringify({ events: [playerEvent(4, holder.videoIds)] });

    /** Latencies of the probe's 202 answers, and how many were not 202. */
    const probe = async (ms: number) => {
      const latencies: number[] = [];
      let other = 0;
      let firstOther = '';
      const end = performance.now() + ms;
      await Promise.all(
        Array.from({ length: PLAN.probeClients }, async () => {
          while (performance.now() < end) {
            const t = performance.now();
            try {
              const res = await client.request('POST', '/v1/collect', { body: probeBody, headers: { 'x-player-key': victim.tenant.player_key }, timeoutMs: 10_000 });
              if (res.status === 202) latencies.push(performance.now() - t);
              else if (other++ === 0) firstOther = `${res.status} ${res.body.slice(0, 200)}`;
            } catch (err) {
              if (other++ === 0) firstOther = String(err);
            }
          }
        }),
      );
      return { latencies, other, firstOther };
    };

    type Row = { label: string; n: number; held: number; openMs: number; p50: number; p99: number; other: number; count: number; st: ProcessStats };
    const rows: Row[] = [];
    const measure = async (label: string, n: number, held: () => number, openMs: number) => {
      await stats(true);
      const r = await probe(PLAN.probeSec * 1000);
      const st = await stats();
      const row = { label, n, held: held(), openMs, p50: quantile(r.latencies, 0.5), p99: quantile(r.latencies, 0.99), other: r.other, count: r.latencies.length, st };
      rows.push(row);
      progress(`${label}: p50 ${fmtMs(row.p50)}, p99 ${fmtMs(row.p99)} over ${row.count} answers (${row.other} not 202${r.firstOther ? `, first: ${r.firstOther}` : ''})`);
      return row;
    };

    /**
     * Once the held sockets are reset the server ends each of their requests;
     * the next level starts when it answers /healthz within 50 ms again
     * (three in a row), and the time until then is reported.
     */
    const releaseMs = new Map<number, number>();
    const settled = async () => {
      const t = performance.now();
      let fast = 0;
      while (fast < 3 && performance.now() - t < 60_000) {
        const s = performance.now();
        await client.request('GET', '/healthz', { timeoutMs: 60_000 }).catch(() => undefined);
        fast = performance.now() - s < 50 ? fast + 1 : 0;
        await sleep(100);
      }
      return performance.now() - t;
    };

    progress('warm-up');
    await probe(2000);
    const quiet = await measure('quiet', 0, () => 0, 0);

    for (const n of PLAN.levels) {
      if (n > maxHeld) {
        progress(`N = ${n}: skipped, above what the open-file limit leaves (${maxHeld})`);
        continue;
      }
      const sockets = new Set<net.Socket>();
      progress(`N = ${n}: opening`);
      const t = performance.now();
      let failed = 0;
      for (let i = 0; i < n; i += PLAN.openBatch) {
        const batch = Array.from({ length: Math.min(PLAN.openBatch, n - i) }, () => holdRequest(url.hostname, Number(url.port), holder.tenant.player_key, heldBody, sockets));
        failed += (await Promise.allSettled(batch)).filter((s) => s.status === 'rejected').length;
      }
      const openMs = performance.now() - t;
      progress(`N = ${n}: ${n - failed} held (${failed} closed) after ${fmtMs(openMs)}`);
      await sleep(1000);
      await measure(`N = ${fmtInt(n)}`, n, () => sockets.size, openMs);
      for (const s of sockets) s.destroy();
      const released = await settled();
      releaseMs.set(n, released);
      progress(`N = ${n}: released; the stack answered /healthz within 50 ms again after ${fmtMs(released)}`);
    }
    await measure('quiet again', 0, () => 0, 0);

    out(
      table([
        ['held requests', 'held at probe end', 'time to open', 'time to release', 'probe answers', 'not 202', 'p50', 'p99', 'p99 / quiet', 'stack loop delay p99', 'stack RSS'],
        ...rows.map((r) => [
          r.label,
          r.n ? fmtInt(r.held) : '',
          r.n ? fmtMs(r.openMs) : '',
          r.n ? fmtMs(releaseMs.get(r.n) ?? Number.NaN) : '',
          fmtInt(r.count),
          fmtInt(r.other),
          fmtMs(r.p50),
          fmtMs(r.p99),
          fmtRatio(r.p99 / quiet.p99),
          fmtMs(r.st.eldP99),
          `${fmtInt(r.st.rss / MiB)} MiB`,
        ]),
      ]),
    );
    out();
    // The largest N up to which every level kept within 2× quiet: a noisy level that passes above one that failed does not count.
    let largest: number | undefined;
    for (const r of rows.filter((x) => x.n > 0)) {
      if (r.p99 > 2 * quiet.p99 || r.other > 0) break;
      largest = r.n;
    }
    out(`largest N up to which every level's p99 stays within 2× quiet and every probe request is 202: ${largest === undefined ? 'none of the levels' : fmtInt(largest)}`);
  } finally {
    await cleanup();
  }
}

runBench(main);
