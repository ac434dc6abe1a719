import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Kafka, logLevel } from 'kafkajs';
import { afterAll, describe, expect, inject, it } from 'vitest';
import { topicNames } from '../shared/kafka/topics.ts';
import { startHttpsReceiver } from './helpers/https-receiver.ts';
import { startServiceProcess, waitForExit } from './helpers/process.ts';
import { eventually, stackEnv } from './helpers/stack.ts';

describe('graceful shutdown', () => {
  const dataDir = mkdtempSync(join(tmpdir(), 'va-term-'));
  afterAll(() => rmSync(dataDir, { recursive: true, force: true }));

  it('on SIGTERM stops intake, drains, commits and exits 0; what was acknowledged is there after restart', async () => {
    const env = {
      ...stackEnv(dataDir),
      LOG_LEVEL: 'info',
    };
    let proc = await startServiceProcess(env);
    const post = (url: string, path: string, body: unknown, headers: Record<string, string>) =>
      fetch(`${url}${path}`, { method: 'POST', headers: { 'content-type': 'application/json', ...headers }, body: JSON.stringify(body) });
    const admin = { authorization: `Bearer ${env.ADMIN_TOKEN}` };
    const tenant = (await (await post(proc.url, '/admin/v1/tenants', { name: 'term' }, admin)).json()) as any;
    const key = (await (await post(proc.url, `/admin/v1/tenants/${tenant.id}/api-keys`, { name: 'k' }, admin)).json()) as any;
    const video = (await (await post(proc.url, `/admin/v1/tenants/${tenant.id}/videos`, { title: 'v', duration_sec: 60 }, admin)).json()) as any;
    const events = Array.from({ length: 50 }, (_, i) => ({
      event_name: 'video_view',
      video_id: video.id,
      session_id: 'ses_term',
      visitor_id: `vis_term_${i}`,
      current_time: 0,
      duration: 60,
      watched_percentage: 0,
    }));
    const res = await post(proc.url, '/v1/collect', { events }, { 'x-player-key': tenant.player_key });
    expect(res.status).toBe(202);

    proc.child.kill('SIGTERM');
    const code = await waitForExit(proc.child, proc.output, 25_000);
    expect(code).toBe(0);
    const lines = proc.output();
    expect(lines).toContain('"msg":"shutdown_started"');
    expect(lines).toContain('"msg":"shutdown_complete"');
    // The log never carries a credential.
    for (const secret of [env.ADMIN_TOKEN, key.key, tenant.player_key]) {
      expect(lines.replace(/Admin token\s+\S+/, '')).not.toContain(secret);
    }

    proc = await startServiceProcess(env);
    try {
      const served = await eventually(async () => {
        const r = await fetch(`${proc.url}/v1/videos/${video.id}/events?limit=1000`, { headers: { authorization: `Bearer ${key.key}` } });
        const page = (await r.json()) as any;
        return page.data.length >= 50 ? page.data : undefined;
      }, 20_000, 200);
      expect(served.map((e: { visitor_id: string }) => e.visitor_id).sort()).toEqual(events.map((e) => e.visitor_id).sort());
    } finally {
      proc.child.kill('SIGTERM');
      await new Promise((r) => proc.child.once('exit', r));
    }
  });

  it('within SHUTDOWN_TIMEOUT_MS with an attempt hanging on a destination, deliveries waiting in a retry tier and poison on the topics; nothing lost after restart', async () => {
    const SHUTDOWN_TIMEOUT_MS = 8000;
    const rx = await startHttpsReceiver();
    let healthy = false;
    const seen = new Map<string, number>();
    rx.setBehaviour((req) => {
      if (healthy) return { status: 200 };
      if (req.path === '/hang') return { status: 200, delayMs: 120_000 };
      const id = String(req.headers['x-player-delivery-id']);
      seen.set(id, (seen.get(id) ?? 0) + 1);
      return { status: seen.get(id) === 1 ? 500 : 200 };
    });
    const dir = mkdtempSync(join(tmpdir(), 'va-term-states-'));
    const env = {
      ...stackEnv(dir),
      LOG_LEVEL: 'info',
      SHUTDOWN_TIMEOUT_MS: String(SHUTDOWN_TIMEOUT_MS),
      WEBHOOK_TIMEOUT_MS: '60000',
      WEBHOOK_RETRY_DELAYS_S: '4,4,4',
      ...rx.env,
    };
    const kafka = new Kafka({ clientId: 'poison-writer', brokers: inject('kafkaBrokers'), logLevel: logLevel.NOTHING });
    const producer = kafka.producer();
    await producer.connect();
    let proc = await startServiceProcess(env);
    try {
      const call = async (method: string, path: string, body?: unknown) => {
        const r = await fetch(`${proc.url}/admin/v1${path}`, {
          method,
          headers: { authorization: `Bearer ${env.ADMIN_TOKEN}`, ...(body ? { 'content-type': 'application/json' } : {}) },
          body: body ? JSON.stringify(body) : undefined,
        });
        return (await r.json()) as any;
      };
      const tenant = await call('POST', '/tenants', { name: 'states' });
      const video = await call('POST', `/tenants/${tenant.id}/videos`, { title: 'v', duration_sec: 60 });
      const hang = await call('POST', `/tenants/${tenant.id}/destinations`, { name: 'hang', url: rx.url('/hang'), events: ['video_play'] });
      const retry = await call('POST', `/tenants/${tenant.id}/destinations`, { name: 'retry', url: rx.url('/retry'), events: ['video_play'] });
      // Poison on the player-event topic and on the first retry tier.
      const topics = topicNames(env.KAFKA_TOPIC_PREFIX);
      for (const topic of [topics.playerEvents, topics.retry1]) {
        await producer.send({ topic, messages: [{ key: 'poison', value: Buffer.from('garbage') }, { key: 'poison', value: Buffer.alloc(0) }] });
      }
      const res = await fetch(`${proc.url}/v1/collect`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', 'x-player-key': tenant.player_key },
        body: JSON.stringify({ events: [{ event_name: 'video_play', video_id: video.id, session_id: 'ses_states', visitor_id: 'vis_states', current_time: 0, duration: 60, watched_percentage: 0 }] }),
      });
      expect(res.status).toBe(202);
      // One attempt is hanging on '/hang'; the other failed and waits in the first retry tier.
      await expect.poll(() => rx.to('/hang').length >= 1 && rx.to('/retry').length >= 1, { timeout: 30_000, interval: 100 }).toBe(true);
      const list = await eventually(async () => {
        const l = await call('GET', `/tenants/${tenant.id}/deliveries?destination_id=${retry.id}`);
        return l.data?.[0]?.status === 'retrying' ? l : undefined;
      }, 20_000, 100);
      expect(list.data[0].attempt_count).toBe(1);

      const started = Date.now();
      proc.child.kill('SIGTERM');
      const code = await waitForExit(proc.child, proc.output, SHUTDOWN_TIMEOUT_MS + 5000);
      const tookMs = Date.now() - started;
      console.log(`shutdown with an attempt hanging, a delivery in a retry tier and poison on two topics: ${tookMs} ms (limit ${SHUTDOWN_TIMEOUT_MS} ms)`);
      expect(code).toBe(0);
      expect(proc.output()).toContain('"msg":"shutdown_complete"');
      expect(proc.output()).not.toContain('shutdown_timed_out');
      expect(tookMs).toBeLessThan(SHUTDOWN_TIMEOUT_MS + 1000);

      // Restart: the hanging attempt was never committed, so it is made again; the retry comes due.
      healthy = true;
      proc = await startServiceProcess(env);
      for (const dest of [hang, retry]) {
        await eventually(async () => {
          const l = await call('GET', `/tenants/${tenant.id}/deliveries?destination_id=${dest.id}`);
          return l.data?.[0]?.status === 'succeeded' ? true : undefined;
        }, 60_000, 250);
      }
    } finally {
      proc.child.kill('SIGTERM');
      await waitForExit(proc.child, proc.output, SHUTDOWN_TIMEOUT_MS + 5000).catch(() => proc.child.kill('SIGKILL'));
      await producer.disconnect();
      await rx.close();
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
