import type { Admin } from 'kafkajs';
import { SchemaRegistry } from '../schemas/registry.ts';
import type { Topics } from '../shared/kafka/topics.ts';
import { sleep, type BenchContext } from './context.ts';
import { cpuSeconds } from './cpu.ts';
import { freshTopics, preloadEvents } from './preload.ts';
import { median } from './stats.ts';
import { summarizeProfile, type CpuProfile, type ProfileSummary } from './cpu-profile.ts';
import { groupLags } from '../test/helpers/kafka-inspect.ts';
import type { StackWorker } from './worker-client.ts';

export interface DerivedDrainRound {
  events: number;
  /** Events/s of the derived-events service through both stages, from its first commit to its last. */
  derivedPerSec: number;
  /** Events/s of the projector over the same backlog, likewise. */
  projectorPerSec: number;
  ratio: number;
  /**
   * CPU (user + system) per event of the service's process and of the broker,
   * in µs, from the stack being up until drained: what the machine's load
   * does not move as much as it moves the rates.
   */
  derivedCpuUs: { service: number; broker: number };
  projectorCpuUs: { service: number; broker: number };
  /** Seconds from the derived-events service's first commit until each of its stages had no lag: which stage held the drain. */
  stagesDoneSec: { repartition: number; intent: number };
  /** The same backlog through the service as two processes, one per stage (DERIVED_STAGES); CPU of both processes. */
  split: { perSec: number; ratio: number; cpuUs: { service: number; broker: number } };
}

export interface DerivedDrainResult {
  rounds: DerivedDrainRound[];
  derivedMedian: number;
  projectorMedian: number;
  /** Median over the rounds of each round's derived / projector ratio. */
  ratioMedian: number;
  /** Medians over the rounds of the service process's CPU per event (µs). */
  derivedCpuUsMedian: number;
  projectorCpuUsMedian: number;
  splitMedian: number;
  splitRatioMedian: number;
  splitCpuUsMedian: number;
  /** BENCH_DERIVED_PROFILE=1: where the derived-events process's CPU went in the last round (V8 profiler on while draining). */
  profile?: { summary: ProfileSummary; events: number };
}

/** CPU seconds of the workers and the broker so far; answers a function that gives µs per event since. */
function cpuPerEvent(pids: { service: (number | undefined)[]; broker: number | undefined }, events: number): () => { service: number; broker: number } {
  const workers = () => pids.service.reduce<number>((sum, pid) => sum + cpuSeconds(pid), 0);
  const service = workers();
  const broker = cpuSeconds(pids.broker);
  return () => ({ service: ((workers() - service) * 1e6) / events, broker: ((cpuSeconds(pids.broker) - broker) * 1e6) / events });
}

/** The derived-events service's groups under `prefix`, each with the topic it reads: the repartition's, then the intent stage's. */
function derivedGroups(prefix: string, topics: Topics): [string, string][] {
  return [
    [`${prefix}derived-repartition`, topics.playerEvents],
    [`${prefix}derived-intent`, topics.derivedByVisitor],
  ];
}

/** Records of `topic` the group has not committed, or undefined while its coordinator cannot say. */
async function lagOf(admin: Admin, groupId: string, topic: string): Promise<number | undefined> {
  try {
    return (await groupLags(admin, { [groupId]: [topic] })).reduce((n, p) => n + p.lag, 0);
  } catch {
    return undefined; // NOT_COORDINATOR and the like while the group is being set up
  }
}

/**
 * Polls until every (group, topic) has no lag; answers the events/s from the
 * first commit seen to the last, over `events`, and the seconds from that
 * first commit until each (group, topic) first had no lag.
 */
async function timeDrain(admin: Admin, watch: [string, string][], events: number, timeoutMs: number): Promise<{ perSec: number; doneSec: number[] }> {
  const deadline = Date.now() + timeoutMs;
  let firstAt: number | undefined;
  let firstLeft = events;
  const doneAt: (number | undefined)[] = watch.map(() => undefined);
  for (;;) {
    if (Date.now() > deadline) throw new Error(`derived drain: not drained after ${timeoutMs / 1000} s`);
    await sleep(50);
    const lags = await Promise.all(watch.map(([g, t]) => lagOf(admin, g, t)));
    if (lags.some((l) => l === undefined)) continue;
    const first = lags[0]!;
    if (firstAt === undefined && first < events) {
      firstAt = Date.now();
      firstLeft = first;
    }
    lags.forEach((l, i) => {
      if (l === 0 && doneAt[i] === undefined) doneAt[i] = Date.now();
    });
    if (lags.every((l) => l === 0)) {
      if (firstAt === undefined) return { perSec: Number.NaN, doneSec: watch.map(() => Number.NaN) };
      const from = firstAt;
      return { perSec: firstLeft / ((Date.now() - from) / 1000), doneSec: doneAt.map((t) => (t! - from) / 1000) };
    }
  }
}

/**
 * The derived-events service draining a backlog of `events` player events
 * (through both of its stages), and the projector draining the same
 * backlog, one after the other in each round (derived-events first in odd
 * rounds, the projector first in even ones).
 */
export async function benchDerivedDrain(ctx: BenchContext, opts: { events: number; rounds: number; timeoutMs: number; profile?: boolean }): Promise<DerivedDrainResult> {
  const registry = SchemaRegistry.fromManifest();
  const rounds: DerivedDrainRound[] = [];
  let profile: DerivedDrainResult['profile'];
  const admin = ctx.kafka.admin();
  await admin.connect();
  try {
    // Round 0 warms the broker up and is not counted: a freshly started
    // broker spends its first drains compiling (the JVM's JIT), which in a
    // phase run alone weighed on the first round's derived-events drain
    // (the broker's CPU per event 40 µs there, 16–27 after).
    for (let r = 0; r <= opts.rounds; r++) {
      const warmUp = r === 0;
      const name = warmUp ? 'derived-drain-warm-up' : `derived-drain${r}`;
      const prefix = `bench-${ctx.runId}-${name}.`;
      const topics: Topics = await freshTopics(ctx, prefix);
      ctx.progress(`${name}: pre-loading ${opts.events} events`);
      await preloadEvents(ctx, registry, topics.playerEvents, opts.events);

      // The order rotates by round, so that none always drains first.
      let derivedPerSec = Number.NaN;
      let derivedCpuUs = { service: Number.NaN, broker: Number.NaN };
      let stagesDoneSec = { repartition: Number.NaN, intent: Number.NaN };
      let projectorPerSec = Number.NaN;
      let projectorCpuUs = { service: Number.NaN, broker: Number.NaN };
      let split = { perSec: Number.NaN, cpuUs: { service: Number.NaN, broker: Number.NaN } };
      const drainDerived = async () => {
        ctx.progress(`${name}: the derived-events service`);
        const { worker: derived } = await ctx.startWorker(name, 'derived');
        // The profiler costs throughput: only the last round is profiled, and its rate is reported like the others'.
        const profiled = opts.profile === true && r === opts.rounds;
        try {
          if (profiled) await derived.rpc({ op: 'profileStart' });
          const cpu = cpuPerEvent({ service: [derived.pid], broker: ctx.brokerPid }, opts.events);
          const drained = await timeDrain(admin, derivedGroups(prefix, topics), opts.events, opts.timeoutMs);
          derivedPerSec = drained.perSec;
          stagesDoneSec = { repartition: drained.doneSec[0]!, intent: drained.doneSec[1]! };
          derivedCpuUs = cpu();
          if (profiled) profile = { summary: summarizeProfile(await derived.rpc<CpuProfile>({ op: 'profileStop' }, 300_000), 25), events: opts.events };
        } finally {
          await derived.stop();
        }
      };
      const drainProjector = async () => {
        ctx.progress(`${name}: the projector on the same backlog`);
        const { worker: projector } = await ctx.startWorker(`${name}-projector`, 'projector', { KAFKA_TOPIC_PREFIX: prefix });
        try {
          const cpu = cpuPerEvent({ service: [projector.pid], broker: ctx.brokerPid }, opts.events);
          projectorPerSec = (await timeDrain(admin, [[`${prefix}projector`, topics.playerEvents]], opts.events, opts.timeoutMs)).perSec;
          projectorCpuUs = cpu();
        } finally {
          await projector.stop();
        }
      };
      const drainSplit = async () => {
        // The same backlog, loaded again under a prefix of its own: the
        // service's groups and topics are named by the prefix.
        const splitPrefix = `bench-${ctx.runId}-${name}-split.`;
        const splitTopics = await freshTopics(ctx, splitPrefix);
        await preloadEvents(ctx, registry, splitTopics.playerEvents, opts.events);
        ctx.progress(`${name}: the derived-events service, a process per stage`);
        const workers: StackWorker[] = [];
        try {
          for (const stage of ['intent', 'repartition']) {
            workers.push((await ctx.startWorker(`${name}-split-${stage}`, 'derived', { KAFKA_TOPIC_PREFIX: splitPrefix, DERIVED_STAGES: stage })).worker);
          }
          const cpu = cpuPerEvent({ service: workers.map((w) => w.pid), broker: ctx.brokerPid }, opts.events);
          split = { perSec: (await timeDrain(admin, derivedGroups(splitPrefix, splitTopics), opts.events, opts.timeoutMs)).perSec, cpuUs: cpu() };
        } finally {
          for (const w of workers.reverse()) await w.stop();
        }
      };
      const drains = [drainDerived, drainProjector, drainSplit];
      for (let i = 0; i < drains.length; i++) await drains[(r + i) % drains.length]!();
      const round = {
        events: opts.events,
        derivedPerSec,
        projectorPerSec,
        ratio: derivedPerSec / projectorPerSec,
        derivedCpuUs,
        projectorCpuUs,
        stagesDoneSec,
        split: { ...split, ratio: split.perSec / projectorPerSec },
      };
      if (!warmUp) rounds.push(round);
      ctx.progress(
        `${name}: derived ${Math.round(derivedPerSec)} events/s, projector ${Math.round(projectorPerSec)} events/s, ratio ${round.ratio.toFixed(2)}; ` +
          `CPU µs/event derived ${derivedCpuUs.service.toFixed(0)} (broker ${derivedCpuUs.broker.toFixed(0)}), projector ${projectorCpuUs.service.toFixed(0)} (broker ${projectorCpuUs.broker.toFixed(0)}); ` +
          `a process per stage ${Math.round(split.perSec)} events/s, ratio ${round.split.ratio.toFixed(2)}`,
      );
    }
  } finally {
    await admin.disconnect();
  }
  return {
    rounds,
    derivedMedian: median(rounds.map((r) => r.derivedPerSec)),
    projectorMedian: median(rounds.map((r) => r.projectorPerSec)),
    ratioMedian: median(rounds.map((r) => r.ratio)),
    derivedCpuUsMedian: median(rounds.map((r) => r.derivedCpuUs.service)),
    projectorCpuUsMedian: median(rounds.map((r) => r.projectorCpuUs.service)),
    splitMedian: median(rounds.map((r) => r.split.perSec)),
    splitRatioMedian: median(rounds.map((r) => r.split.ratio)),
    splitCpuUsMedian: median(rounds.map((r) => r.split.cpuUs.service)),
    profile,
  };
}
