import { RECORD_AGE_BUCKETS } from '../shared/metrics.ts';
import { type BenchContext, sleep } from './context.ts';
import { CpuMeter } from './cpu.ts';
import { HttpClient } from './http-client.ts';
import { bucketDelta, promBuckets, quantile } from './stats.ts';
import { metricSample } from '../test/helpers/prometheus-text.ts';
import { playerEvent } from './workload.ts';
import type { StackWorker } from './worker-client.ts';

/**
 * Where the phase's requests go: the intake's process and the one that
 * projects and serves reads. The same stack for every service in one process;
 * two for a split deployment on the same topics (SERVICES=ingest in one, the
 * projector, API, fan-out and admin in the other), each with an event loop
 * of its own.
 */
export interface FreshnessTargets {
  deployment: 'one process' | 'split';
  ingest: StackWorker;
  reads: StackWorker;
}

export interface FreshnessResult {
  deployment: FreshnessTargets['deployment'];
  targetPerSec: number;
  achievedPerSec: number;
  measureSec: number;
  requests: number;
  failed: number;
  skipped: number;
  ackP50: number;
  ackP99: number;
  probes: number;
  seen: number;
  /** 202 ack → first API response that lists the event. */
  p50: number;
  p99: number;
  max: number;
  /** Share of probes readable within 1 s of their ack. */
  within1s: number;
  /** Send → readable (includes the ack latency). */
  sendP50: number;
  sendP99: number;
  pollP50: number;
  polls: number;
  cores: Record<string, number>;
  /** From the service's /metrics and log over the whole phase (warm-up included). */
  txPerSec: number;
  txMeanMs: number;
  retriesPerSec: number;
  insertsPerSec: number;
  meanBatch: number;
  insertMeanMs: number;
  /**
   * projector_record_age_seconds over the phase: the oldest event's age when
   * its batch was fetched and when its insert made it readable, one per
   * fetched batch and per insert (bucket bounds, not exact quantiles).
   */
  recordAge: Record<'fetched' | 'readable', { n: number; p50: number; p99: number; within200ms: number }>;
}

interface ServiceCounters {
  commits: number;
  commitSec: number;
  inserts: number;
  insertSec: number;
  rows: number;
  retries: number;
  fetchedAge: Map<number, number>;
  readableAge: Map<number, number>;
}

async function counters(intake: HttpClient, reads: HttpClient): Promise<ServiceCounters> {
  const text = (await intake.request('GET', '/metrics')).body;
  const read = intake === reads ? text : (await reads.request('GET', '/metrics')).body;
  return {
    commits: metricSample(text, 'kafka_produce_commit_duration_seconds_count'),
    commitSec: metricSample(text, 'kafka_produce_commit_duration_seconds_sum'),
    inserts: metricSample(read, 'clickhouse_insert_duration_seconds_count', { table: 'events' }) || 0,
    insertSec: metricSample(read, 'clickhouse_insert_duration_seconds_sum', { table: 'events' }) || 0,
    rows: metricSample(read, 'projector_batch_size_sum') || 0,
    retries: metricSample(text, 'kafka_produce_retries_total', { cause: 'concurrent_transactions' }) || 0,
    fetchedAge: promBuckets(read, 'projector_record_age_seconds', { stage: 'fetched' }, RECORD_AGE_BUCKETS),
    readableAge: promBuckets(read, 'projector_record_age_seconds', { stage: 'readable' }, RECORD_AGE_BUCKETS),
  };
}

/** Bucket bounds (ms) of the p50 and p99 of a histogram's observations between two readings, and the share within 200 ms. */
function ageOf(before: Map<number, number>, after: Map<number, number>) {
  const p50 = bucketDelta(before, after, 0.5, 0.2);
  return { n: p50.n, p50: p50.upper * 1000, p99: bucketDelta(before, after, 0.99, 0.2).upper * 1000, within200ms: p50.share };
}

interface Probe {
  visitor: string;
  occurredAt: number;
  sentAt: number;
  ackAt?: number;
  visibleAt?: number;
}

/**
 * Open loop at a fixed rate: a batch of `batch` events every
 * batch/rate seconds through /v1/collect, whatever the service's latency.
 * Every `probeEvery`-th batch carries a probe event (a unique visitor on a
 * video of its own); one poller asks GET /v1/videos/:probe/events?since=
 * (the oldest unseen probe) back to back, so a probe counts as readable at
 * the first API response that lists it.
 */
export async function benchFreshness(
  ctx: BenchContext,
  targets: FreshnessTargets,
  opts: {
    playerKey: string;
    apiKey: string;
    loadVideos: string[];
    probeVideo: string;
    rate: number;
    batch: number;
    warmupMs: number;
    measureMs: number;
    drainMs: number;
    probeEvery: number;
  },
): Promise<FreshnessResult> {
  const { ingest, reads: worker } = targets;
  const split = ingest !== worker;
  const sender = new HttpClient(ingest.ready.url, 128);
  const poller = new HttpClient(worker.ready.url, 1);
  const intakeMetrics = split ? new HttpClient(ingest.ready.url, 1) : poller;
  const headers = { 'x-player-key': opts.playerKey };
  const auth = { authorization: `Bearer ${opts.apiKey}` };
  // Bodies are pre-serialised but for the last event, which is a probe or a filler.
  const heads = Array.from({ length: 32 }, (_, k) =>
    Array.from({ length: opts.batch - 1 }, (_, j) => JSON.stringify(playerEvent(k * opts.batch + j, opts.loadVideos))).join(','),
  );
  const filler = JSON.stringify(playerEvent(3, opts.loadVideos));
  const intervalMs = (1000 * opts.batch) / opts.rate;

  const pending = new Map<string, Probe>();
  const probes: Probe[] = [];
  const ackLatencies: number[] = [];
  let inflight = 0;
  let requests = 0;
  let failed = 0;
  let skipped = 0;
  let measuredBatches = 0;

  const start = performance.now();
  const measureStart = start + opts.warmupMs;
  const sendEnd = measureStart + opts.measureMs;

  const fire = (i: number) => {
    if (inflight >= 2000) {
      skipped++;
      return;
    }
    const sentAt = performance.now();
    const measuring = sentAt >= measureStart;
    if (measuring) measuredBatches++;
    let last = filler;
    let probe: Probe | undefined;
    if (measuring && i % opts.probeEvery === 0) {
      const occurredAt = Date.now();
      probe = { visitor: `vis_probe_${i}`, occurredAt, sentAt };
      last = JSON.stringify({
        event_name: 'video_play',
        video_id: opts.probeVideo,
        session_id: `ses_probe_${i}`,
        visitor_id: probe.visitor,
        current_time: 1,
        duration: 600,
        watched_percentage: 0,
        occurred_at: new Date(occurredAt).toISOString(),
      });
      pending.set(probe.visitor, probe);
      probes.push(probe);
    }
    inflight++;
    requests++;
    sender.request('POST', '/v1/collect', { body: `{"events":[${heads[i % heads.length]},${last}]}`, headers }).then(
      (res) => {
        inflight--;
        const ackAt = performance.now();
        if (res.status !== 202) {
          failed++;
          if (probe) pending.delete(probe.visitor);
          return;
        }
        if (measuring) ackLatencies.push(ackAt - sentAt);
        if (probe) probe.ackAt = ackAt;
      },
      () => {
        inflight--;
        failed++;
        if (probe) pending.delete(probe.visitor);
      },
    );
  };

  const send = async () => {
    let i = 0;
    for (;;) {
      const now = performance.now();
      if (now >= sendEnd) break;
      const due = Math.floor((now - start) / intervalMs);
      while (i <= due) fire(i++);
      await sleep(1);
    }
  };

  const pollLatencies: number[] = [];
  const poll = async () => {
    const deadline = sendEnd + opts.drainMs;
    while (performance.now() < deadline) {
      const oldest = pending.values().next().value;
      if (!oldest) {
        if (performance.now() >= sendEnd && inflight === 0) return;
        await sleep(2);
        continue;
      }
      const t = performance.now();
      const since = encodeURIComponent(new Date(oldest.occurredAt).toISOString());
      const res = await poller.request('GET', `/v1/videos/${opts.probeVideo}/events?limit=1000&since=${since}`, { headers: auth });
      const at = performance.now();
      pollLatencies.push(at - t);
      if (res.status !== 200) throw new Error(`events poll: HTTP ${res.status} ${res.body.slice(0, 200)}\n${worker.logTail(10)}`);
      for (const item of (JSON.parse(res.body) as { data: { visitor_id: string }[] }).data) {
        const p = pending.get(item.visitor_id);
        if (p) {
          p.visibleAt = at;
          pending.delete(item.visitor_id);
        }
      }
    }
  };

  const meter = new CpuMeter(
    split
      ? { bench: process.pid, 'service: ingest': ingest.pid, 'service: projector, api, fanout, admin': worker.pid, broker: ctx.brokerPid }
      : { bench: process.pid, service: worker.pid, broker: ctx.brokerPid },
  );
  const before = await counters(intakeMetrics, poller);
  meter.start();
  await Promise.all([send(), poll()]);
  const cores = meter.stop();
  const after = await counters(intakeMetrics, poller);
  const phaseSec = (performance.now() - start) / 1000;
  // Acks still on the wire when polling stopped are waited for, briefly.
  for (let i = 0; inflight > 0 && i < 500; i++) await sleep(10);
  sender.close();
  poller.close();
  if (split) intakeMetrics.close();

  const seen = probes.filter((p) => p.visibleAt !== undefined && p.ackAt !== undefined);
  const fresh = seen.map((p) => Math.max(0, p.visibleAt! - p.ackAt!));
  const unseen = probes.filter((p) => p.ackAt !== undefined && p.visibleAt === undefined).length;
  // An acknowledged probe never seen counts as later than anything seen.
  const withUnseen = [...fresh, ...Array.from({ length: unseen }, () => Number.POSITIVE_INFINITY)];
  return {
    deployment: targets.deployment,
    targetPerSec: opts.rate,
    achievedPerSec: (measuredBatches * opts.batch) / (opts.measureMs / 1000),
    measureSec: opts.measureMs / 1000,
    requests,
    failed,
    skipped,
    ackP50: quantile(ackLatencies, 0.5),
    ackP99: quantile(ackLatencies, 0.99),
    probes: probes.filter((p) => p.ackAt !== undefined).length,
    seen: seen.length,
    p50: quantile(withUnseen, 0.5),
    p99: quantile(withUnseen, 0.99),
    max: Math.max(...withUnseen),
    within1s: withUnseen.filter((f) => f <= 1000).length / Math.max(1, withUnseen.length),
    sendP50: quantile(
      seen.map((p) => p.visibleAt! - p.sentAt),
      0.5,
    ),
    sendP99: quantile(
      seen.map((p) => p.visibleAt! - p.sentAt),
      0.99,
    ),
    pollP50: quantile(pollLatencies, 0.5),
    polls: pollLatencies.length,
    cores,
    txPerSec: (after.commits - before.commits) / phaseSec,
    txMeanMs: ((after.commitSec - before.commitSec) / (after.commits - before.commits)) * 1000,
    retriesPerSec: (after.retries - before.retries) / phaseSec,
    insertsPerSec: (after.inserts - before.inserts) / phaseSec,
    meanBatch: (after.rows - before.rows) / (after.inserts - before.inserts),
    insertMeanMs: ((after.insertSec - before.insertSec) / (after.inserts - before.inserts)) * 1000,
    recordAge: {
      fetched: ageOf(before.fetchedAge, after.fetchedAge),
      readable: ageOf(before.readableAge, after.readableAge),
    },
  };
}

/**
 * Waits until the intake at `url` knows `playerKey` (a split deployment's
 * intake learns tenants from the config topics): a request with no events is
 * refused 401 while the key is unknown and 4xx for its body once it is known.
 */
export async function playerKeyKnown(url: string, playerKey: string, timeoutMs = 30_000): Promise<void> {
  const client = new HttpClient(url, 1);
  try {
    const deadline = performance.now() + timeoutMs;
    for (;;) {
      const res = await client.request('POST', '/v1/collect', { body: '{"events":[]}', headers: { 'x-player-key': playerKey } });
      if (res.status !== 401) {
        if (res.status >= 500) throw new Error(`intake at ${url}: HTTP ${res.status} ${res.body.slice(0, 200)}`);
        return;
      }
      if (performance.now() > deadline) throw new Error(`intake at ${url} did not learn the player key within ${timeoutMs} ms`);
      await sleep(100);
    }
  } finally {
    client.close();
  }
}
