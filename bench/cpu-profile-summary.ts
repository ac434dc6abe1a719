/**
 * `node bench/cpu-profile-summary.ts <file.cpuprofile> [events]`: where a
 * stack process's CPU time went, by stage of the intake (self time of each
 * sampled frame, classed by its script URL and function name). With the
 * number of events the process accepted, also µs of CPU per event.
 */
import { readFileSync } from 'node:fs';
import { formatProfileSummary, summarizeProfile, type CpuProfile } from './cpu-profile.ts';

const [file, eventsArg] = process.argv.slice(2);
if (!file) throw new Error('usage: node bench/cpu-profile-summary.ts <file.cpuprofile> [events]');
const s = summarizeProfile(JSON.parse(readFileSync(file, 'utf8')) as CpuProfile);
const events = eventsArg === undefined ? undefined : Number(eventsArg);
process.stdout.write(`profile ${file}: ${(s.sampledUs / 1e6).toFixed(1)} s sampled, ${(s.busyUs / 1e6).toFixed(1)} s busy${events ? `, ${events} events` : ''}\n`);
process.stdout.write(`${formatProfileSummary(s, events).join('\n')}\n`);
