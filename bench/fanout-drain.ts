import { SchemaRegistry } from '../schemas/registry.ts';
import { type BenchContext, sleep } from './context.ts';
import { CpuMeter } from './cpu.ts';
import { freshTopics, preloadEvents } from './preload.ts';
import { median } from './stats.ts';
import type { ProcessStats } from './worker-protocol.ts';

export interface FanoutDrainRound {
  events: number;
  preloadPerSec: number;
  /** Events/s from the first committed offset to the last. */
  steadyPerSec: number;
  /** Seconds from the stack being up to the group's first commit. */
  startupSec: number;
  cores: Record<string, number>;
  /** The service's event-loop delay while it drained the backlog, ms. */
  eld: { p50: number; p99: number; max: number };
  gc: ProcessStats['gc'];
}

export interface FanoutDrainResult {
  services: string;
  rounds: FanoutDrainRound[];
  steadyMedian: number;
  eldP99Median: number;
  eldMaxMedian: number;
}

/**
 * The fan-out draining a backlog: `events` records of a tenant without
 * destinations pre-loaded on a fresh player-events topic (the fan-out was
 * down), then a stack running only the fan-out is started and timed until
 * its consumer group has committed the end of every partition. The figures
 * are the drain rate and the event-loop delay meanwhile: the fan-out shares
 * its process (and so its event loop) with the intake and the API in the
 * default deployment. `services` is the stack's SERVICES: 'fanout', or every
 * service for a process restarted after downtime (the projector drains the
 * same backlog meanwhile). NOTE: the stack's config topics are fresh, so
 * the tenant of the backlog is unknown to it and the fan-out decodes every
 * event; a tenant it knows to have no destinations it would skip undecoded
 * (services/fanout/fanout.service.ts), which this phase does not measure.
 */
export async function benchFanoutDrain(ctx: BenchContext, opts: { events: number; rounds: number; timeoutMs: number; services: string }): Promise<FanoutDrainResult> {
  const registry = SchemaRegistry.fromManifest();
  const rounds: FanoutDrainRound[] = [];
  for (let r = 0; r < opts.rounds; r++) {
    const name = `fanout-drain${r + 1}`;
    const prefix = `bench-${ctx.runId}-${name}.`;
    const topics = await freshTopics(ctx, prefix);
    ctx.progress(`fan-out drain round ${r + 1}/${opts.rounds}: pre-loading ${opts.events} events`);
    const { perSec: preloadPerSec } = await preloadEvents(ctx, registry, topics.playerEvents, opts.events);

    const admin = ctx.kafka.admin();
    await admin.connect();
    try {
      const ends = new Map((await admin.fetchTopicOffsets(topics.playerEvents)).map((p) => [p.partition, BigInt(p.high)]));
      const total = Number([...ends.values()].reduce((a, b) => a + b, 0n));
      /** Events not yet committed by the fan-out's group; undefined while its coordinator is not ready to say. */
      const behind = async (): Promise<number | undefined> => {
        try {
          const [group] = await admin.fetchOffsets({ groupId: `${prefix}fanout`, topics: [topics.playerEvents] });
          let lag = 0n;
          for (const [partition, end] of ends) {
            const committed = BigInt(group?.partitions.find((p) => p.partition === partition)?.offset ?? '-1');
            lag += committed < 0n ? end : end > committed ? end - committed : 0n;
          }
          return Number(lag);
        } catch {
          // NOT_COORDINATOR and the like while the group is being set up.
          return undefined;
        }
      };

      ctx.progress(`fan-out drain round ${r + 1}/${opts.rounds}: starting the fan-out`);
      const { worker } = await ctx.startWorker(name, opts.services);
      try {
        const meter = new CpuMeter({ service: worker.pid, broker: ctx.brokerPid });
        meter.start();
        await worker.rpc<ProcessStats>({ op: 'stats', reset: true });
        const deadline = Date.now() + opts.timeoutMs;
        let firstAt: number | undefined;
        let firstLag = total;
        let lag = total;
        while (lag > 0) {
          if (Date.now() > deadline) throw new Error(`fan-out drain: ${lag} of ${total} events not committed after ${opts.timeoutMs / 1000} s`);
          await sleep(50);
          lag = (await behind()) ?? lag;
          if (firstAt === undefined && lag < total) {
            firstAt = Date.now();
            firstLag = lag;
          }
        }
        const doneAt = Date.now();
        const cores = meter.stop();
        const stats = await worker.rpc<ProcessStats>({ op: 'stats' });
        const round: FanoutDrainRound = {
          events: total,
          preloadPerSec,
          // NOTE: the first commit already covers what was handled before it;
          // the rate is taken over the commits after it.
          steadyPerSec: firstAt !== undefined && doneAt > firstAt ? firstLag / ((doneAt - firstAt) / 1000) : Number.NaN,
          startupSec: ((firstAt ?? doneAt) - worker.ready.readyAt) / 1000,
          cores,
          eld: { p50: stats.eldP50, p99: stats.eldP99, max: stats.eldMax },
          gc: stats.gc,
        };
        rounds.push(round);
        ctx.progress(`fan-out drain round ${r + 1}/${opts.rounds}: ${Math.round(round.steadyPerSec)} events/s, event loop p99 ${round.eld.p99.toFixed(1)} ms, max ${round.eld.max.toFixed(1)} ms`);
      } finally {
        await worker.stop();
      }
    } finally {
      await admin.disconnect();
    }
  }
  return {
    services: opts.services,
    rounds,
    steadyMedian: median(rounds.map((r) => r.steadyPerSec)),
    eldP99Median: median(rounds.map((r) => r.eld.p99)),
    eldMaxMedian: median(rounds.map((r) => r.eld.max)),
  };
}
