import { type ChildProcess, spawn } from 'node:child_process';
import net from 'node:net';
import { resolve } from 'node:path';
import { eventually } from './stack.ts';

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
    env: { ...process.env, LOG_LEVEL: 'warn', ...env, PORT: String(port) },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  child.stdout!.on('data', (d) => (output += d));
  child.stderr!.on('data', (d) => (output += d));
  const url = `http://127.0.0.1:${port}`;
  await eventually(async () => {
    if (child.exitCode !== null) throw new Error(`service exited: ${output}`);
    const res = await fetch(`${url}/readyz`);
    return res.status === 200 ? true : undefined;
  }, 60_000, 200);
  return { child, url, output: () => output };
}

