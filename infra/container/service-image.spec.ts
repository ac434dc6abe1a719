/**
 * The service's container image, built and run for real with podman
 * (`npm run test:image`; needs podman and the Docker-API socket of
 * ../shared/tools/container-runtime.sh, or Docker, for the Kafka container):
 *
 * - builds `Containerfile` (BASE_IMAGE: `SERVICE_IMAGE_BASE`, by default the
 *   runtime's local Debian + Java base when it exists, else the official
 *   Node 24 image);
 * - starts a Kafka container (testcontainers, KRaft) on a network of its own
 *   as `kafka`, advertising `kafka:9092` to containers on that network, and
 *   runs the image on the same network with `KAFKA_BROKERS=kafka:9092` and
 *   embedded ClickHouse in its `/data` volume;
 * - checks what the image promises: tini as PID 1 with node as its child, a
 *   non-root user, `/data` as a volume, a HEALTHCHECK that passes once
 *   `/readyz` answers 200, one event in through `/v1/collect` and out of
 *   `/v1/videos/:id/events`, and SIGTERM ending it cleanly (exit 0,
 *   `shutdown_complete`) within SHUTDOWN_TIMEOUT_MS;
 * - prints the timings (build, start to ready, stop) and writes them to
 *   test-output/container-image-timings.json.
 *
 * Not part of `npm test` (vitest.config.ts includes `*.test.ts` only); run by
 * `.ci/run` when the container runtime is there.
 */
import { execFile, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { existsSync, mkdirSync, writeFileSync } from 'node:fs';
import { resolve } from 'node:path';
import { promisify } from 'node:util';
import type { StartedNetwork } from 'testcontainers';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startKafkaContainer, type KafkaContainerHandle } from '../test/test-infrastructure.ts';

const ROOT = resolve(import.meta.dirname, '../..');
const OUTPUT = resolve(ROOT, 'test-output');
const IMAGE = process.env.SERVICE_IMAGE ?? 'localhost/video-analytics:test';
const LOCAL_BASE = 'localhost/debian-jre17:bookworm';
const OFFICIAL_BASE = 'node:24-bookworm-slim';
const HOST_CA_BUNDLE = '/etc/ssl/certs/ca-certificates.crt';
const SHUTDOWN_TIMEOUT_MS = 10_000;
const READY_TIMEOUT_MS = 180_000;
const run = promisify(execFile);

/** podman with its output; fails with podman's stderr. */
async function podman(args: string[], timeoutMs = 120_000): Promise<string> {
  try {
    const { stdout } = await run('podman', args, { timeout: timeoutMs, maxBuffer: 64 * 1024 * 1024 });
    return stdout.trim();
  } catch (err) {
    const e = err as { stderr?: string; message: string };
    throw new Error(`podman ${args.join(' ')} failed: ${e.stderr?.trim() || e.message}`, { cause: err });
  }
}

/** podman's exit code, for commands whose failure is an answer (image exists, healthcheck run). */
async function podmanStatus(args: string[]): Promise<{ code: number; output: string }> {
  try {
    const { stdout, stderr } = await run('podman', args, { timeout: 60_000 });
    return { code: 0, output: `${stdout}${stderr}`.trim() };
  } catch (err) {
    const e = err as { code?: number; stdout?: string; stderr?: string };
    return { code: typeof e.code === 'number' ? e.code : -1, output: `${e.stdout ?? ''}${e.stderr ?? ''}`.trim() };
  }
}

/** `podman build` of Containerfile, its output in test-output/container-image-build.log. */
async function buildImage(base: string): Promise<void> {
  const args = ['build', '--format', 'docker', '--build-arg', `BASE_IMAGE=${base}`, '-f', 'Containerfile', '-t', IMAGE];
  // A registry behind a TLS-intercepting proxy needs its CA inside the build
  // (a build secret: never in a layer). The host's bundle covers that case and
  // costs nothing otherwise.
  const ca = [process.env.NPM_CA_FILE, process.env.NODE_EXTRA_CA_CERTS, HOST_CA_BUNDLE].find((f) => f && existsSync(f));
  if (ca) args.push('--secret', `id=npm_ca,src=${ca}`);
  args.push('.');
  const logPath = resolve(OUTPUT, 'container-image-build.log');
  let output = '';
  const code = await new Promise<number | null>((res, rej) => {
    const child = spawn('podman', args, { cwd: ROOT, stdio: ['ignore', 'pipe', 'pipe'] });
    child.stdout.on('data', (d) => (output += d));
    child.stderr.on('data', (d) => (output += d));
    child.once('error', rej);
    child.once('exit', res);
  });
  writeFileSync(logPath, output);
  if (code !== 0) throw new Error(`podman build exited with ${code} (log: ${logPath}):\n${output.slice(-3000)}`);
}

const seconds = (ms: number) => Math.round(ms / 100) / 10;

describe('the service container image', () => {
  const name = `va-image-test-${randomBytes(4).toString('hex')}`;
  const volume = `${name}-data`;
  const adminToken = `adm_${randomBytes(16).toString('hex')}`;
  const timings: Record<string, number> = {};
  let network: StartedNetwork | undefined;
  let kafka: KafkaContainerHandle | undefined;
  let url = '';
  let startedAt = 0;

  beforeAll(async () => {
    mkdirSync(OUTPUT, { recursive: true });
    const base = process.env.SERVICE_IMAGE_BASE ?? ((await podmanStatus(['image', 'exists', LOCAL_BASE])).code === 0 ? LOCAL_BASE : OFFICIAL_BASE);
    // The build and the Kafka container start side by side; the broker is up long before the image.
    const kafkaStart = (async () => {
      const { Network } = await import('testcontainers');
      network = await new Network().start();
      kafka = await startKafkaContainer({ network, alias: 'kafka' });
    })();
    const t = performance.now();
    const built = buildImage(base).then(() => (timings.build_s = seconds(performance.now() - t)));
    await Promise.all([built, kafkaStart]);
    console.log(`image ${IMAGE} built FROM ${base} in ${timings.build_s} s; ${kafka!.image} up on network ${network!.getName()} as kafka:9092`);

    await podman(['volume', 'create', volume]);
    startedAt = performance.now();
    await podman([
      'run', '--detach', '--name', name,
      // So that `container-runtime.sh stop` removes it too if this run dies.
      '--label', 'org.testcontainers=true',
      '--network', network!.getName(),
      '--publish', '127.0.0.1::3000',
      '--volume', `${volume}:/data`,
      '--env', `KAFKA_BROKERS=${kafka!.networkBrokers!.join(',')}`,
      '--env', `ADMIN_TOKEN=${adminToken}`,
      '--env', `SHUTDOWN_TIMEOUT_MS=${SHUTDOWN_TIMEOUT_MS}`,
      '--env', 'KAFKA_TOPIC_PARTITIONS=3',
      '--env', 'LOG_LEVEL=info',
      IMAGE,
    ]);
    const port = (await podman(['port', name, '3000'])).split(':').pop();
    url = `http://127.0.0.1:${port}`;
    const deadline = Date.now() + READY_TIMEOUT_MS;
    for (;;) {
      const status = await fetch(`${url}/readyz`, { signal: AbortSignal.timeout(3000) }).then((r) => r.status, () => 0);
      if (status === 200) break;
      const state = await podman(['inspect', name, '--format', '{{.State.Status}}']);
      if (state !== 'running' || Date.now() > deadline) {
        throw new Error(`service container ${state}, /readyz ${status}; its log:\n${(await podmanStatus(['logs', name])).output.slice(-4000)}`);
      }
      await new Promise((r) => setTimeout(r, 250));
    }
    timings.start_to_ready_s = seconds(performance.now() - startedAt);
  });

  afterAll(async () => {
    const log = await podmanStatus(['logs', name]);
    if (log.code === 0) writeFileSync(resolve(OUTPUT, 'container-image-run.log'), log.output);
    await podmanStatus(['rm', '--force', '--volumes', name]);
    await podmanStatus(['volume', 'rm', '--force', volume]);
    await kafka?.stop().catch(() => {});
    await network?.stop().catch(() => {});
    if (Object.keys(timings).length > 0) {
      writeFileSync(resolve(OUTPUT, 'container-image-timings.json'), `${JSON.stringify(timings, null, 2)}\n`);
      console.log(
        `container image timings: build ${timings.build_s ?? '-'} s, start to ready ${timings.start_to_ready_s ?? '-'} s, ` +
          `SIGTERM to exit ${timings.stop_s ?? '-'} s`,
      );
    }
  });

  it('is configured as promised: non-root, /data a volume, a HEALTHCHECK, tini in front, no EXPOSE', async () => {
    const [image] = JSON.parse(await podman(['image', 'inspect', IMAGE]));
    const config = image.Config;
    expect(config.User).toBe('app');
    expect(Object.keys(config.Volumes ?? {})).toEqual(['/data']);
    expect(config.Env).toEqual(expect.arrayContaining(['DATA_DIR=/data', 'HOST=0.0.0.0', 'PORT=3000']));
    // podman keeps the (docker-format) HEALTHCHECK beside Config, docker inside it.
    expect((image.Healthcheck ?? config.Healthcheck)?.Test).toEqual(['CMD', 'node', 'infra/container/healthcheck.ts']);
    expect(config.Entrypoint).toEqual(['/usr/bin/tini', '--']);
    expect(config.Cmd?.[0]).toBe('node');
    expect(config.ExposedPorts ?? {}).toEqual({});
  });

  it('runs node as the child of an init (PID 1), as a non-root user, on Node 24', async () => {
    const top = await podman(['top', name, 'pid', 'ppid', 'user', 'args']);
    const rows = top.split('\n').slice(1).map((line) => line.trim().split(/\s+/));
    const init = rows.find((r) => r[0] === '1');
    expect(init?.[3]).toBe('/usr/bin/tini');
    const node = rows.find((r) => r[3] === 'node' && r.includes('services/main.ts'));
    expect(node, top).toBeDefined();
    expect(node![1]).toBe('1');
    expect(node![2]).toBe('app');
    expect(await podman(['exec', name, 'node', '--version'])).toMatch(/^v24\./);
    expect(await podman(['exec', name, 'id', '-u'])).not.toBe('0');
  });

  it('is healthy by its own HEALTHCHECK and ready by /readyz, with Kafka and embedded ClickHouse', async () => {
    const health = await podmanStatus(['healthcheck', 'run', name]);
    expect(health.code, health.output).toBe(0);
    const ready = await fetch(`${url}/readyz`);
    expect(ready.status).toBe(200);
    expect(await ready.json()).toMatchObject({ status: 'ready', checks: { kafka: 'ok', clickhouse: 'ok' } });
  });

  it('takes one event in through /v1/collect and serves it from /v1/videos/:id/events', async () => {
    const admin = async (path: string, body: unknown) => {
      const res = await fetch(`${url}/admin/v1${path}`, {
        method: 'POST',
        headers: { authorization: `Bearer ${adminToken}`, 'content-type': 'application/json' },
        body: JSON.stringify(body),
      });
      expect(res.status, `POST ${path}`).toBe(201);
      return (await res.json()) as any;
    };
    const tenant = await admin('/tenants', { name: 'image' });
    const key = await admin(`/tenants/${tenant.id}/api-keys`, { name: 'image key' });
    const video = await admin(`/tenants/${tenant.id}/videos`, { title: 'image video', duration_sec: 60 });

    const collect = await fetch(`${url}/v1/collect`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'x-player-key': tenant.player_key },
      body: JSON.stringify({
        events: [
          { event_name: 'video_play', video_id: video.id, session_id: 'ses_image', visitor_id: 'vis_image', current_time: 0, duration: 60, watched_percentage: 0 },
        ],
      }),
    });
    expect(collect.status).toBe(202);
    expect(await collect.json()).toEqual({ accepted: 1 });

    const deadline = Date.now() + 30_000;
    let data: unknown[] = [];
    while (data.length === 0 && Date.now() < deadline) {
      const res = await fetch(`${url}/v1/videos/${video.id}/events`, { headers: { authorization: `Bearer ${key.key}` } });
      expect(res.status).toBe(200);
      data = ((await res.json()) as { data: unknown[] }).data;
      if (data.length === 0) await new Promise((r) => setTimeout(r, 200));
    }
    expect(data).toEqual([{ event: 'play', visitor_id: 'vis_image', timestamp: expect.any(String) }]);
  });

  it('stops cleanly on SIGTERM within SHUTDOWN_TIMEOUT_MS, its data left in the /data volume', async () => {
    const t = performance.now();
    await podman(['kill', '--signal', 'TERM', name]);
    const exitCode = await podman(['wait', name], SHUTDOWN_TIMEOUT_MS + 30_000);
    timings.stop_s = seconds(performance.now() - t);
    const log = (await podmanStatus(['logs', name])).output;
    expect(exitCode, log.slice(-3000)).toBe('0');
    expect(log).toContain('"msg":"shutdown_started"');
    expect(log).toContain('"signal":"SIGTERM"');
    expect(log).toContain('"msg":"shutdown_complete"');
    expect(timings.stop_s * 1000).toBeLessThan(SHUTDOWN_TIMEOUT_MS);
    // What the service wrote as the non-root user is in the named volume, not the container.
    const files = await podman(['run', '--rm', '--label', 'org.testcontainers=true', '--volume', `${volume}:/data`, '--entrypoint', 'ls', IMAGE, '/data']);
    expect(files.split('\n')).toEqual(expect.arrayContaining(['clickhouse', 'cursor-secret', 'secrets-key']));
  });
});
