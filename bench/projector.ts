import { SchemaRegistry } from '../schemas/registry.ts';
import type { BenchContext } from './context.ts';
import { CpuMeter } from './cpu.ts';
import { HttpClient } from './http-client.ts';
import { median } from './stats.ts';
import { metricSample } from '../test/helpers/prometheus-text.ts';
import type { ProcessStats, RawInsertResult, WatchResult } from './worker-protocol.ts';
import { freshTopics, preloadEvents } from './preload.ts';

export interface ProjectorRound {
  events: number;
  preloadPerSec: number;
  /** Events/s from the first rows in ClickHouse to the last. */
  steadyPerSec: number;
  /** Events/s from the stack being up (projector started) to the last row. */
  fromStartPerSec: number;
  /** Seconds from startStack to the projector's group delivering the first rows. */
  startupSec: number;
  meanBatch: number;
  meanInsertMs: number;
  inserts: number;
  /** Seconds spent inside ClickHouse insert calls, all inserts together. */
  insertTotalSec: number;
  /** Seconds from the stack being up to the last row (the projector starts inside startStack, a little earlier). */
  wallSec: number;
  cores: Record<string, number>;
  /** The service's event-loop delay while it drained the backlog, ms. */
  eld: { p99: number; max: number };
  raw: RawInsertResult;
}

export interface ProjectorResult {
  /** The unmeasured first round (see benchProjector), when there was one. */
  warmup?: ProjectorRound;
  rounds: ProjectorRound[];
  /**
   * Median over the rounds of each round's own projector / raw insert ratio:
   * the raw insert runs in the same process right after that round's drain,
   * so the pair shares the machine's phase (the ratio of the medians below
   * takes its two figures from different rounds).
   */
  pairedRatioMedian: number;
  steadyMedian: number;
  fromStartMedian: number;
  rawWithMvMedian: number;
  rawWithMvObjectsMedian: number;
  rawPlainMedian: number;
  meanBatch: number;
}

/** A round's projector rate over its own raw insert (with the view), run in the same process right after its drain. */
export const roundRatio = (r: ProjectorRound): number => r.steadyPerSec / r.raw.withMv[0]!;

/**
 * Projector throughput: `events` records pre-loaded on a fresh player-events
 * topic, then a stack running only the projector is started and timed until
 * `SELECT count() FROM events` reaches them; then, in the same process, the
 * same rows are inserted raw into scratch tables with the projector's mean
 * batch size.
 *
 * With `warmup`, one more round runs first and is reported apart, not in the
 * medians. The broker's JVM compiles its fetch path on first use: in runs of
 * 2026-11-23 the first round of a phase drained at 55-79k events/s and the
 * later ones at 76-95k, the broker using more CPU in the first (0.33 against
 * 0.21-0.32 cores), while the raw inserts (no broker) stayed level.
 */
export async function benchProjector(ctx: BenchContext, opts: { events: number; rounds: number; warmup?: boolean }): Promise<ProjectorResult> {
  const registry = SchemaRegistry.fromManifest();
  const rounds: ProjectorRound[] = [];
  const total = opts.rounds + (opts.warmup ? 1 : 0);
  for (let r = 0; r < total; r++) {
    const name = opts.warmup ? (r === 0 ? 'projector-warmup' : `projector${r}`) : `projector${r + 1}`;
    const topics = await freshTopics(ctx, `bench-${ctx.runId}-${name}.`);
    ctx.progress(`${name}: pre-loading ${opts.events} events`);
    const { perSec: preloadPerSec } = await preloadEvents(ctx, registry, topics.playerEvents, opts.events);

    ctx.progress(`${name}: starting the projector`);
    const { worker } = await ctx.startWorker(name, 'projector', {
      BENCH_WATCH_TARGET: String(opts.events),
      BENCH_WATCH_TIMEOUT_MS: '180000',
    });
    try {
      const meter = new CpuMeter({ service: worker.pid, broker: ctx.brokerPid });
      meter.start();
      await worker.rpc<ProcessStats>({ op: 'stats', reset: true });
      const watch = await worker.rpc<WatchResult>({ op: 'awaitWatch' }, 200_000);
      const cores = meter.stop();
      const stats = await worker.rpc<ProcessStats>({ op: 'stats' });
      if (!watch.reached) throw new Error(`projector: only ${watch.count} of ${opts.events} rows after ${(watch.doneAt - watch.watchStartedAt) / 1000} s`);
      const { startedAt, readyAt } = worker.ready;
      const first = watch.timeline.find(([, c]) => c > 0)!;
      const http = new HttpClient(worker.ready.url, 1);
      // NOTE: the batch-size sample is recorded just after the insert that
      // made the rows visible; wait until the last insert's sample is in.
      let text = '';
      for (let i = 0; i < 50; i++) {
        text = (await http.request('GET', '/metrics')).body;
        const sampled = metricSample(text, 'projector_batch_size_count');
        if (sampled > 0 && metricSample(text, 'projector_batch_size_sum') >= opts.events) break;
        await new Promise((r) => setTimeout(r, 100));
      }
      http.close();
      const batches = metricSample(text, 'projector_batch_size_count');
      const meanBatch = metricSample(text, 'projector_batch_size_sum') / batches;
      const insertSec = metricSample(text, 'clickhouse_insert_duration_seconds_sum', { table: 'events' });
      const insertCount = metricSample(text, 'clickhouse_insert_duration_seconds_count', { table: 'events' });
      const projectionSec = (watch.doneAt - readyAt) / 1000;
      ctx.progress(`${name}: raw chdb inserts in batches of ${Math.round(meanBatch)}`);
      const raw = await worker.rpc<RawInsertResult>({ op: 'rawInsert', batchSize: Math.max(1, Math.round(meanBatch)), rounds: 1 }, 300_000);
      const round: ProjectorRound = {
        events: opts.events,
        preloadPerSec,
        // Rows after the first visible insert over the time they took; with a
        // single insert there is no such span, so the rate is taken from the
        // last empty poll instead.
        steadyPerSec:
          first[1] < opts.events
            ? (opts.events - first[1]) / ((watch.doneAt - first[0]) / 1000)
            : opts.events / ((watch.doneAt - (watch.timeline.findLast(([, c]) => c === 0)?.[0] ?? readyAt)) / 1000),
        fromStartPerSec: opts.events / projectionSec,
        startupSec: (first[0] - startedAt) / 1000,
        meanBatch,
        meanInsertMs: (insertSec / insertCount) * 1000,
        inserts: insertCount,
        insertTotalSec: insertSec,
        wallSec: projectionSec,
        cores,
        eld: { p99: stats.eldP99, max: stats.eldMax },
        raw,
      };
      rounds.push(round);
      ctx.progress(
        `${name}: ${Math.round(round.steadyPerSec)} events/s steady, ${Math.round(round.fromStartPerSec)} from start; raw insert ${Math.round(raw.withMv[0]!)} rows/s (with view), ${Math.round(raw.withMvObjects[0]!)} (with view, JSONEachRow), ${Math.round(raw.plain[0]!)} (table only)`,
      );
    } finally {
      await worker.stop();
    }
  }
  const warmup = opts.warmup ? rounds.shift() : undefined;
  return {
    ...(warmup ? { warmup } : {}),
    rounds,
    pairedRatioMedian: median(rounds.map(roundRatio)),
    steadyMedian: median(rounds.map((r) => r.steadyPerSec)),
    fromStartMedian: median(rounds.map((r) => r.fromStartPerSec)),
    rawWithMvMedian: median(rounds.flatMap((r) => r.raw.withMv)),
    rawWithMvObjectsMedian: median(rounds.flatMap((r) => r.raw.withMvObjects)),
    rawPlainMedian: median(rounds.flatMap((r) => r.raw.plain)),
    meanBatch: median(rounds.map((r) => r.meanBatch)),
  };
}
