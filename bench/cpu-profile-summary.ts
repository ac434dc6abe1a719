/**
 * `node bench/cpu-profile-summary.ts <file.cpuprofile> [events]`: where a
 * stack process's CPU time went, by stage of the intake (self time of each
 * sampled frame, classed by its script URL and function name). With the
 * number of events the process accepted, also µs of CPU per event.
 */
import { readFileSync } from 'node:fs';

interface Node {
  id: number;
  callFrame: { functionName: string; url: string };
  children?: number[];
}
interface Profile {
  nodes: Node[];
  startTime: number;
  endTime: number;
  samples: number[];
  timeDeltas: number[];
}

const STAGES: [string, (url: string, fn: string) => boolean][] = [
  ['idle', (_u, f) => f === '(idle)'],
  ['garbage collection', (_u, f) => f === '(garbage collector)'],
  ['validate (zod, schema checks)', (u) => /node_modules\/zod|collect\.schema|fastify-type-provider-zod|schemas\/records/.test(u)],
  ['encode (avsc, schema registry)', (u) => /node_modules\/avsc|schemas\/registry/.test(u)],
  ['produce (kafkajs, group commit)', (u) => /node_modules\/kafkajs|group-commit-producer|shared\/kafka/.test(u)],
  ['parse (JSON, fastify content parser)', (u, f) => /content-type-parser|secure-json-parse/.test(u) || f === 'parse'],
  ['HTTP (node:http, fastify routing, reply)', (u) => /node:_http|node:http|node_modules\/(fastify|find-my-way|light-my-request|@fastify)|node:net|node:stream|node:internal\/streams|shared\/http/.test(u)],
  ['intake handler', (u) => /services\/ingest/.test(u)],
  ['metrics / logging', (u) => /prom-client|pino|shared\/metrics|shared\/logger/.test(u)],
  ['projector / ClickHouse / api', (u) => /services\/(projector|api)|chdb|clickhouse/.test(u)],
  ['(program) / native', (u, f) => f === '(program)' || u === ''],
];

const [file, eventsArg] = process.argv.slice(2);
if (!file) throw new Error('usage: node bench/cpu-profile-summary.ts <file.cpuprofile> [events]');
const p = JSON.parse(readFileSync(file, 'utf8')) as Profile;
const byId = new Map(p.nodes.map((n) => [n.id, n]));
const self = new Map<number, number>();
p.samples.forEach((id, i) => self.set(id, (self.get(id) ?? 0) + (p.timeDeltas[i] ?? 0)));
const stage = new Map<string, number>();
const topFns = new Map<string, number>();
let total = 0;
for (const [id, us] of self) {
  const n = byId.get(id)!;
  const { url, functionName } = n.callFrame;
  const s = STAGES.find(([, m]) => m(url, functionName))?.[0] ?? 'other JS';
  stage.set(s, (stage.get(s) ?? 0) + us);
  total += us;
  if (s !== 'idle') {
    const key = `${functionName || '(anonymous)'} ${url.replace(/^.*node_modules\//, '').replace(/^file:\/\/.*?\/(services|shared|schemas|bench)\//, '$1/')}`;
    topFns.set(key, (topFns.get(key) ?? 0) + us);
  }
}
const busy = total - (stage.get('idle') ?? 0);
const events = Number(eventsArg ?? Number.NaN);
process.stdout.write(`profile ${file}: ${(total / 1e6).toFixed(1)} s sampled, ${(busy / 1e6).toFixed(1)} s busy${Number.isFinite(events) ? `, ${events} events` : ''}\n`);
for (const [s, us] of [...stage].sort((a, b) => b[1] - a[1])) {
  const perEvent = Number.isFinite(events) && s !== 'idle' ? `  ${(us / events).toFixed(2)} µs/event` : '';
  process.stdout.write(`  ${s.padEnd(42)} ${(us / 1e6).toFixed(2).padStart(7)} s  ${s === 'idle' ? '' : `${((us / busy) * 100).toFixed(1).padStart(5)}% of busy`}${perEvent}\n`);
}
process.stdout.write('top self-time functions (busy):\n');
for (const [k, us] of [...topFns].sort((a, b) => b[1] - a[1]).slice(0, 15)) process.stdout.write(`  ${((us / busy) * 100).toFixed(1).padStart(5)}%  ${k}\n`);
