/**
 * `node bench/cpu-profile-summary.ts <file.cpuprofile> [events] [fromSec-toSec]`:
 * where a stack process's CPU time went, by stage of the intake (self time
 * of each sampled frame, classed by its script URL and function name). With
 * the number of events the process handled, also µs of CPU per event; with a
 * window (seconds after the profile started, e.g. 0.5-4.5), only the samples
 * taken in it.
 */
import { readFileSync } from 'node:fs';
import { formatProfileSummary, profileWindow, summarizeProfile, type CpuProfile } from './cpu-profile.ts';

const [file, eventsArg, windowArg] = process.argv.slice(2);
if (!file) throw new Error('usage: node bench/cpu-profile-summary.ts <file.cpuprofile> [events] [fromSec-toSec]');
let profile = JSON.parse(readFileSync(file, 'utf8')) as CpuProfile;
if (windowArg !== undefined) {
  const [from, to] = windowArg.split('-').map(Number);
  if (!Number.isFinite(from) || !Number.isFinite(to)) throw new Error(`window must be fromSec-toSec, not ${windowArg}`);
  profile = profileWindow(profile, from!, to!);
}
const s = summarizeProfile(profile);
const events = eventsArg === undefined || eventsArg === '' ? undefined : Number(eventsArg);
process.stdout.write(`profile ${file}${windowArg ? ` (${windowArg} s)` : ''}: ${(s.sampledUs / 1e6).toFixed(1)} s sampled, ${(s.busyUs / 1e6).toFixed(1)} s busy${events ? `, ${events} events` : ''}\n`);
process.stdout.write(`${formatProfileSummary(s, events).join('\n')}\n`);
