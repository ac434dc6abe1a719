import { type ChildProcess, spawn } from 'node:child_process';
import net from 'node:net';
import { resolve } from 'node:path';
import { vi } from 'vitest';

const ROOT = resolve(import.meta.dirname, '../..');
const NODE = process.execPath;

export async function freePort(): Promise<number> {
  return new Promise((res, rej) => {
    const srv = net.createServer();
    srv.once('error', rej);
    srv.listen(0, '127.0.0.1', () => {
      const { port } = srv.address() as net.AddressInfo;
      srv.close(() => res(port));
    });
  });
}

/** Runs `npm start`'s entry point as a child process, the way an operator would. */
export async function startServiceProcess(env: Record<string, string>): Promise<{ child: ChildProcess; url: string; output: () => string }> {
  const port = await freePort();
  let output = '';
  const child = spawn(NODE, ['services/main.ts'], {
    cwd: ROOT,
    // The intake's own limits are off unless a test sets them: tests send from one address, faster than players.
    env: { ...process.env, LOG_LEVEL: 'warn', PLAYER_KEY_EVENTS_PER_MINUTE: '0', CLIENT_ADDRESS_REQUESTS_PER_MINUTE: '0', ...env, PORT: String(port) },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  child.stdout!.on('data', (d) => (output += d));
  child.stderr!.on('data', (d) => (output += d));
  const url = `http://127.0.0.1:${port}`;
  // Ends as soon as the child exits (false) or answers ready (true).
  const ready = await vi
    .waitFor(
      async () => {
        if (child.exitCode !== null) return false;
        if ((await fetch(`${url}/readyz`)).status !== 200) throw new Error('not ready');
        return true;
      },
      { timeout: 90_000, interval: 200 },
    )
    .catch(() => {
      child.kill('SIGKILL');
      throw new Error(`service not ready within 90 s:\n${output.slice(-4000)}`);
    });
  if (!ready) throw new Error(`service exited with ${child.exitCode}:\n${output.slice(-4000)}`);
  return { child, url, output: () => output };
}


/** Waits for the child to exit; fails with its output if it has not within `ms`. */
export async function waitForExit(child: ChildProcess, output: () => string, ms = 30_000): Promise<number | null> {
  if (child.exitCode !== null) return child.exitCode;
  let timer: NodeJS.Timeout | undefined;
  try {
    return await Promise.race([
      new Promise<number | null>((r) => child.once('exit', (code) => r(code))),
      new Promise<never>((_, reject) => {
        timer = setTimeout(() => reject(new Error(`process did not exit within ${ms} ms; its output:\n${output().slice(-4000)}`)), ms);
      }),
    ]);
  } finally {
    clearTimeout(timer);
  }
}
