import { type ChildProcess, spawn } from 'node:child_process';
import { resolve } from 'node:path';
import { vi } from 'vitest';
import { freePort } from './process.ts';

const ROOT = resolve(import.meta.dirname, '../..');
const OUTPUT_LIMIT = 4 * 1024 * 1024;

/** An exit the test did not ask for: a crash, or a shutdown that was not clean. */
export interface UnexpectedExit {
  name: string;
  at: number;
  code: number | null;
  signal: NodeJS.Signals | null;
  output: string;
}

/**
 * One `services/main.ts` process (the services named in SERVICES), as an
 * operator runs it: on its own port on 127.0.0.1, killable with SIGKILL and
 * restartable on the same port and data directory. An exit the test did not
 * cause is recorded in {@link unexpectedExits}; a SIGTERM that does not end
 * in exit code 0 within the bound is an error.
 */
export class ServiceProcess {
  readonly name: string;
  readonly port: number;
  readonly url: string;
  readonly env: Record<string, string>;
  readonly unexpectedExits: UnexpectedExit[] = [];
  #child: ChildProcess | undefined;
  #exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }> | undefined;
  #expectExit = false;
  #output = '';

  private constructor(name: string, port: number, env: Record<string, string>) {
    this.name = name;
    this.port = port;
    this.url = `http://127.0.0.1:${port}`;
    this.env = env;
  }

  /** Starts the process and resolves once `/readyz` answers 200. */
  static async start(name: string, env: Record<string, string>, readyTimeoutMs = 120_000): Promise<ServiceProcess> {
    const p = new ServiceProcess(name, await freePort(), env);
    await p.#spawn(readyTimeoutMs);
    return p;
  }

  get pid(): number | undefined {
    return this.#child?.exitCode === null && this.#child.signalCode === null ? this.#child.pid : undefined;
  }

  /** The last 4 MiB of its stdout and stderr (all incarnations). */
  output(): string {
    return this.#output;
  }

  /** SIGKILL (`kill -9`); resolves once the process is gone. */
  async kill(): Promise<void> {
    const child = this.#child;
    if (!child || !this.#exited || this.pid === undefined) return;
    this.#expectExit = true;
    child.kill('SIGKILL');
    await bounded(this.#exited, 10_000, `${this.name} did not die within 10 s of SIGKILL`);
  }

  /** Starts it again on the same port and environment; resolves with the time until `/readyz` answered 200. */
  async restart(readyTimeoutMs = 120_000): Promise<number> {
    if (this.pid !== undefined) throw new Error(`${this.name} is still running (pid ${this.pid})`);
    const startedAt = performance.now();
    await this.#spawn(readyTimeoutMs);
    return performance.now() - startedAt;
  }

  /**
   * SIGTERM, and the graceful shutdown must end in exit code 0 within
   * `timeoutMs`; a hang is killed and reported as an error, like a wrong exit.
   */
  async stop(timeoutMs = 30_000): Promise<{ code: number | null; ms: number }> {
    const child = this.#child;
    if (!child || !this.#exited || this.pid === undefined) return { code: child?.exitCode ?? null, ms: 0 };
    this.#expectExit = true;
    const startedAt = performance.now();
    child.kill('SIGTERM');
    try {
      const { code, signal } = await bounded(this.#exited, timeoutMs, `${this.name} did not exit within ${timeoutMs} ms of SIGTERM`);
      if (code !== 0) throw new Error(`${this.name} exited with ${signal ?? `code ${code}`} after SIGTERM:\n${this.#output.slice(-4000)}`);
      return { code, ms: performance.now() - startedAt };
    } catch (err) {
      child.kill('SIGKILL');
      throw err;
    }
  }

  /** The Prometheus text of `/metrics`, or undefined when it does not answer. */
  async metrics(): Promise<string | undefined> {
    try {
      const res = await fetch(`${this.url}/metrics`, { signal: AbortSignal.timeout(5_000) });
      return res.status === 200 ? await res.text() : undefined;
    } catch {
      return undefined;
    }
  }

  async #spawn(readyTimeoutMs: number): Promise<void> {
    this.#expectExit = false;
    const child = spawn(process.execPath, ['--disable-warning=TimeoutNegativeWarning', 'services/main.ts'], {
      cwd: ROOT,
      // Every test client speaks from loopback with one player key: the
      // player intake's limits are off unless a test sets them.
      env: { ...process.env, LOG_LEVEL: 'warn', PLAYER_KEY_EVENTS_PER_MINUTE: '0', CLIENT_ADDRESS_REQUESTS_PER_MINUTE: '0', ...this.env, HOST: '127.0.0.1', PORT: String(this.port) },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    const append = (d: Buffer) => {
      this.#output += d.toString();
      if (this.#output.length > OUTPUT_LIMIT) this.#output = this.#output.slice(-OUTPUT_LIMIT / 2);
    };
    child.stdout!.on('data', append);
    child.stderr!.on('data', append);
    this.#child = child;
    this.#exited = new Promise((resolveExit) => {
      child.once('exit', (code, signal) => {
        if (!this.#expectExit) {
          this.unexpectedExits.push({ name: this.name, at: Date.now(), code, signal, output: this.#output.slice(-4000) });
          console.error(`[${this.name}] exited on its own (${signal ?? `code ${code}`}); last output:\n${this.#output.slice(-4000)}`);
        }
        resolveExit({ code, signal });
      });
    });
    // Ends as soon as the child exits (false) or answers ready (true).
    const ready = await vi
      .waitFor(
        async () => {
          if (child.exitCode !== null || child.signalCode !== null) return false;
          if ((await fetch(`${this.url}/readyz`, { signal: AbortSignal.timeout(3_000) })).status !== 200) throw new Error('not ready');
          return true;
        },
        { timeout: readyTimeoutMs, interval: 200 },
      )
      .catch(() => {
        this.#expectExit = true;
        child.kill('SIGKILL');
        throw new Error(`${this.name} not ready within ${readyTimeoutMs} ms:\n${this.#output.slice(-4000)}`);
      });
    if (!ready) throw new Error(`${this.name} exited during start-up (${child.signalCode ?? `code ${child.exitCode}`}):\n${this.#output.slice(-4000)}`);
  }
}

function bounded<T>(promise: Promise<T>, ms: number, message: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  return Promise.race([
    promise,
    new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(new Error(message)), ms);
    }),
  ]).finally(() => clearTimeout(timer));
}
