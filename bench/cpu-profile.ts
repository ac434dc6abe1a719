/**
 * Where a stack process's CPU time went, by stage of the intake or of the
 * fan-out: self time of each sampled frame of a V8 CPU profile, classed by
 * its script URL and function name (the Kafka stage holds the consumers too). Used by `bench/cpu-profile-summary.ts` (a profile file) and
 * by the intake phase's profiled round (a profile taken over IPC).
 */

interface ProfileNode {
  id: number;
  callFrame: { functionName: string; url: string };
  children?: number[];
}
export interface CpuProfile {
  nodes: ProfileNode[];
  startTime: number;
  endTime: number;
  samples: number[];
  timeDeltas: number[];
}

/**
 * The samples of `p` taken between `fromSec` and `toSec` after it started:
 * e.g. a projector's drain without the process's start-up and without the
 * raw inserts the bench runs in the same process afterwards.
 */
export function profileWindow(p: CpuProfile, fromSec: number, toSec: number): CpuProfile {
  const samples: number[] = [];
  const timeDeltas: number[] = [];
  let t = 0;
  p.samples.forEach((id, i) => {
    const delta = p.timeDeltas[i] ?? 0;
    t += delta;
    if (t >= fromSec * 1e6 && t <= toSec * 1e6) {
      samples.push(id);
      timeDeltas.push(delta);
    }
  });
  return { ...p, samples, timeDeltas };
}

const PROFILER = 'the profiler itself';
/** Stages that are not the process's own work. */
const NOT_BUSY = new Set(['idle', PROFILER]);

const STAGES: [string, (url: string, fn: string) => boolean][] = [
  ['idle', (_u, f) => f === '(idle)'],
  // The profiler's own work (Profiler.stop serialising the profile) is not the process's: left out of busy, like idle.
  [PROFILER, (u) => u === 'node:inspector'],
  ['garbage collection', (_u, f) => f === '(garbage collector)'],
  ['validate (zod, schema checks)', (u) => /node_modules\/zod|collect\.schema|fastify-type-provider-zod|schemas\/records/.test(u)],
  ['encode (avsc, schema registry)', (u) => /node_modules\/avsc|schemas\/registry/.test(u)],
  ['crypto (HMAC signatures, secret box)', (u) => /node:crypto|node:internal\/crypto|shared\/secrets|shared\/webhooks\/signing/.test(u)],
  ['TLS (node:tls, node:https)', (u) => /node:tls|node:_tls|node:https|node:internal\/tls/.test(u)],
  ['fan-out (plan, lanes, HTTPS delivery)', (u) => /services\/fanout|shared\/webhooks/.test(u)],
  ['derived-events rules and stages', (u) => /services\/derived/.test(u)],
  ['Kafka client (kafkajs, producers, consumers)', (u) => /node_modules\/kafkajs|group-commit-producer|shared\/kafka/.test(u)],
  ['parse (JSON, fastify content parser)', (u, f) => /content-type-parser|secure-json-parse/.test(u) || f === 'parse'],
  ['HTTP (node:http, fastify routing, reply)', (u) => /node:_http|node:http|node_modules\/(fastify|find-my-way|light-my-request|@fastify)|node:net|node:stream|node:internal\/streams|shared\/http/.test(u)],
  ['intake handler', (u) => /services\/ingest/.test(u)],
  ['metrics / logging', (u) => /prom-client|pino|shared\/metrics|shared\/logger/.test(u)],
  ['projector / ClickHouse / api', (u) => /services\/(projector|api)|chdb|clickhouse/.test(u)],
  ['(program) / native', (u, f) => f === '(program)' || u === ''],
];

export interface ProfileSummary {
  sampledUs: number;
  busyUs: number;
  /** Stage → self time (µs), largest first; 'idle' and the profiler's own time included (not in busyUs). */
  stages: [string, number][];
  /** Top self-time functions while busy: "name script" → µs. */
  top: [string, number][];
}

export function summarizeProfile(p: CpuProfile, topN = 15): ProfileSummary {
  const byId = new Map(p.nodes.map((n) => [n.id, n]));
  const self = new Map<number, number>();
  p.samples.forEach((id, i) => self.set(id, (self.get(id) ?? 0) + (p.timeDeltas[i] ?? 0)));
  const stage = new Map<string, number>();
  const topFns = new Map<string, number>();
  let total = 0;
  for (const [id, us] of self) {
    const { url, functionName } = byId.get(id)!.callFrame;
    const s = STAGES.find(([, m]) => m(url, functionName))?.[0] ?? 'other JS';
    stage.set(s, (stage.get(s) ?? 0) + us);
    total += us;
    if (!NOT_BUSY.has(s)) {
      const key = `${functionName || '(anonymous)'} ${url.replace(/^.*node_modules\//, '').replace(/^file:\/\/.*?\/(services|shared|schemas|bench)\//, '$1/')}`;
      topFns.set(key, (topFns.get(key) ?? 0) + us);
    }
  }
  return {
    sampledUs: total,
    busyUs: total - (stage.get('idle') ?? 0) - (stage.get(PROFILER) ?? 0),
    stages: [...stage].sort((a, b) => b[1] - a[1]),
    top: [...topFns].sort((a, b) => b[1] - a[1]).slice(0, topN),
  };
}

/** The summary as text lines; with `events`, also µs of CPU per event. */
export function formatProfileSummary(s: ProfileSummary, events?: number): string[] {
  const lines: string[] = [];
  const perEvent = (us: number) => (events ? `  ${(us / events).toFixed(2).padStart(7)} µs/event` : '');
  for (const [name, us] of s.stages) {
    if (NOT_BUSY.has(name)) lines.push(`  ${name.padEnd(42)} ${(us / 1e6).toFixed(2).padStart(7)} s`);
    else lines.push(`  ${name.padEnd(42)} ${(us / 1e6).toFixed(2).padStart(7)} s  ${((us / s.busyUs) * 100).toFixed(1).padStart(5)}% of busy${perEvent(us)}`);
  }
  lines.push(`  ${'busy, all stages'.padEnd(42)} ${(s.busyUs / 1e6).toFixed(2).padStart(7)} s  100.0% of busy${perEvent(s.busyUs)}`);
  lines.push('top self-time functions (busy):');
  for (const [k, us] of s.top) lines.push(`  ${((us / s.busyUs) * 100).toFixed(1).padStart(5)}%  ${k}`);
  return lines;
}

/**
 * Two profiles side by side, in µs of CPU per event (or delivery) by stage (busy stages of
 * either, largest difference first), with the difference `a − b`.
 */
export function formatProfileComparison(
  a: { label: string; summary: ProfileSummary; events: number },
  b: { label: string; summary: ProfileSummary; events: number },
  unit: 'event' | 'delivery' = 'event',
): string[] {
  const per = (s: ProfileSummary, events: number) => new Map(s.stages.filter(([n]) => !NOT_BUSY.has(n)).map(([n, us]) => [n, us / events]));
  const pa = per(a.summary, a.events);
  const pb = per(b.summary, b.events);
  const names = [...new Set([...pa.keys(), ...pb.keys()])].sort((x, y) => (pa.get(y) ?? 0) - (pb.get(y) ?? 0) - ((pa.get(x) ?? 0) - (pb.get(x) ?? 0)));
  const cell = (v: number) => v.toFixed(2).padStart(9);
  const lines = [`  ${`stage (µs of CPU per ${unit})`.padEnd(42)} ${a.label.padStart(11)} ${b.label.padStart(11)} ${'difference'.padStart(11)}`];
  for (const n of names) {
    const x = pa.get(n) ?? 0;
    const y = pb.get(n) ?? 0;
    lines.push(`  ${n.padEnd(42)} ${cell(x)}   ${cell(y)}   ${cell(x - y)}  `);
  }
  const ta = a.summary.busyUs / a.events;
  const tb = b.summary.busyUs / b.events;
  lines.push(`  ${'busy, all stages'.padEnd(42)} ${cell(ta)}   ${cell(tb)}   ${cell(ta - tb)}   (ratio ${(tb / ta).toFixed(2)}×)`);
  return lines;
}
