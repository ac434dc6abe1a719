import { readdirSync, readFileSync } from 'node:fs';
import os from 'node:os';

const TICKS_PER_SECOND = 100;

/** CPU seconds (user + system) a process has used so far; NaN where /proc is unavailable. */
export function cpuSeconds(pid: number | undefined): number {
  if (pid === undefined) return Number.NaN;
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    // The command name may contain spaces, so fields are counted after its closing paren.
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return (Number(fields[11]) + Number(fields[12])) / TICKS_PER_SECOND;
  } catch {
    return Number.NaN;
  }
}

/** CPU cores each named process used over an interval (1.0 = one core busy the whole time). */
export class CpuMeter {
  readonly #pids: Record<string, number | undefined>;
  #start = new Map<string, number>();
  #startedAt = 0;

  constructor(pids: Record<string, number | undefined>) {
    this.#pids = pids;
  }

  start(): void {
    this.#startedAt = performance.now();
    for (const [name, pid] of Object.entries(this.#pids)) this.#start.set(name, cpuSeconds(pid));
  }

  /** Cores used per process since start(). */
  stop(): Record<string, number> {
    const seconds = (performance.now() - this.#startedAt) / 1000;
    const out: Record<string, number> = {};
    for (const [name, pid] of Object.entries(this.#pids)) out[name] = (cpuSeconds(pid) - this.#start.get(name)!) / seconds;
    return out;
  }
}

export function fmtCores(c: Record<string, number>): string {
  return Object.entries(c)
    .map(([k, v]) => `${k} ${Number.isFinite(v) ? v.toFixed(2) : 'n/a'}`)
    .join(', ');
}

/**
 * Sets the nice value of every thread of a process (Linux keeps one per
 * thread, and `renice -p` changes only the main one); threads started later
 * inherit it from the thread that starts them.
 */
export function reniceProcess(pid: number, nice: number): void {
  for (const tid of readdirSync(`/proc/${pid}/task`)) os.setPriority(Number(tid), nice);
}
