import { type ChildProcess, fork } from 'node:child_process';
import { closeSync, existsSync, openSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import type { QueryStats, WorkerReady, WorkerRequest, WorkerResponse } from './worker-protocol.ts';

type DistributiveOmit<T, K extends PropertyKey> = T extends unknown ? Omit<T, K> : never;
type RequestBody = DistributiveOmit<WorkerRequest, 'id'>;

const live = new Set<ChildProcess>();
// A bench that dies must not leave a stack (and its chdb) running.
process.on('exit', () => {
  for (const c of live) c.kill('SIGKILL');
});

/** The parent's handle on one bench/stack-worker.ts process. */
export class StackWorker {
  readonly ready: WorkerReady;
  readonly #child: ChildProcess;
  readonly #logFile: string;
  readonly #pending = new Map<number, { resolve: (v: unknown) => void; reject: (e: Error) => void }>();
  #nextId = 1;
  #exited = false;

  private constructor(child: ChildProcess, ready: WorkerReady, logFile: string) {
    this.#child = child;
    this.ready = ready;
    this.#logFile = logFile;
    child.on('message', (raw: unknown) => {
      const msg = raw as WorkerResponse;
      if (msg.type !== 'response') return;
      const p = this.#pending.get(msg.id);
      if (!p) return;
      this.#pending.delete(msg.id);
      if (msg.ok) p.resolve(msg.result);
      else p.reject(new Error(`stack worker: ${msg.error}`));
    });
    child.once('exit', (code, signal) => {
      this.#exited = true;
      live.delete(child);
      for (const p of this.#pending.values()) p.reject(new Error(`stack worker exited (${signal ?? code})\n${this.logTail()}`));
      this.#pending.clear();
    });
  }

  /** Forks a worker with `env` as its whole service configuration and waits until its stack is up. */
  static async start(opts: { env: Record<string, string>; logDir: string; name: string; timeoutMs?: number }): Promise<StackWorker> {
    const logFile = join(opts.logDir, `${opts.name}.log`);
    const fd = openSync(logFile, 'a');
    let child: ChildProcess;
    try {
      // BENCH_CPU_PROF_DIR=<dir>: each stack writes <dir>/<name>.cpuprofile as it stops (V8 --cpu-prof).
      const profDir = process.env.BENCH_CPU_PROF_DIR;
      child = fork(join(import.meta.dirname, 'stack-worker.ts'), [], {
        execPath: process.execPath,
        execArgv: profDir ? [...process.execArgv, '--cpu-prof', `--cpu-prof-dir=${profDir}`, `--cpu-prof-name=${opts.name}.cpuprofile`] : process.execArgv,
        env: opts.env,
        stdio: ['ignore', fd, fd, 'ipc'],
      });
    } finally {
      closeSync(fd);
    }
    live.add(child);
    const timeoutMs = opts.timeoutMs ?? 120_000;
    const ready = await new Promise<WorkerReady>((resolve, reject) => {
      const timer = setTimeout(() => {
        child.kill('SIGKILL');
        reject(new Error(`${opts.name}: stack not ready within ${timeoutMs / 1000} s\n${tail(logFile)}`));
      }, timeoutMs);
      child.on('message', (raw: unknown) => {
        const msg = raw as WorkerReady | { type: 'failed'; error: string };
        if (msg.type === 'ready') {
          clearTimeout(timer);
          resolve(msg);
        } else if (msg.type === 'failed') {
          clearTimeout(timer);
          reject(new Error(`${opts.name}: ${msg.error}\n${tail(logFile)}`));
        }
      });
      child.once('exit', (code, signal) => {
        clearTimeout(timer);
        reject(new Error(`${opts.name}: exited during start-up (${signal ?? code})\n${tail(logFile)}`));
      });
    });
    return new StackWorker(child, ready, logFile);
  }

  rpc<T>(body: RequestBody, timeoutMs = 120_000): Promise<T> {
    if (this.#exited) return Promise.reject(new Error('stack worker has exited'));
    const id = this.#nextId++;
    return new Promise<T>((resolve, reject) => {
      const timer = setTimeout(() => {
        this.#pending.delete(id);
        reject(new Error(`stack worker: ${body.op} timed out after ${timeoutMs / 1000} s`));
      }, timeoutMs);
      this.#pending.set(id, {
        resolve: (v) => {
          clearTimeout(timer);
          resolve(v as T);
        },
        reject: (e) => {
          clearTimeout(timer);
          reject(e);
        },
      });
      this.#child.send({ ...body, id });
    });
  }

  query<T>(sql: string, timeoutMs?: number): Promise<T[]> {
    return this.rpc<T[]>({ op: 'query', sql }, timeoutMs);
  }

  /** Runs a query and returns ClickHouse's own statistics of it (rows read) instead of its rows. */
  queryStats(sql: string, params?: Record<string, unknown>, timeoutMs?: number): Promise<QueryStats> {
    return this.rpc<QueryStats>({ op: 'queryStats', sql, params }, timeoutMs);
  }

  /** Stops the stack in order; SIGKILL when it does not finish within `timeoutMs`. */
  async stop(timeoutMs = 30_000): Promise<void> {
    if (this.#exited) return;
    const exited = new Promise<void>((r) => this.#child.once('exit', () => r()));
    const killer = setTimeout(() => this.#child.kill('SIGKILL'), timeoutMs);
    await this.rpc({ op: 'stop' }, timeoutMs).catch(() => this.#child.kill('SIGKILL'));
    await exited;
    clearTimeout(killer);
  }

  get pid(): number | undefined {
    return this.#child.pid;
  }

  /** Lines of the worker's log that contain `needle`. */
  countInLog(needle: string): number {
    if (!existsSync(this.#logFile)) return 0;
    return readFileSync(this.#logFile, 'utf8').split(needle).length - 1;
  }

  logTail(lines = 30): string {
    return tail(this.#logFile, lines);
  }
}

function tail(file: string, lines = 30): string {
  if (!existsSync(file)) return '';
  const text = readFileSync(file, 'utf8').trimEnd().split('\n');
  return `--- last lines of ${file} ---\n${text.slice(-lines).join('\n')}`;
}
