import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, inject, it } from 'vitest';
import { startServiceProcess, waitForExit } from './helpers/process.ts';
import { eventually } from './helpers/stack.ts';

describe('graceful shutdown', () => {
  const dataDir = mkdtempSync(join(tmpdir(), 'va-term-'));
  afterAll(() => rmSync(dataDir, { recursive: true, force: true }));

  it('on SIGTERM stops intake, drains, commits and exits 0; what was acknowledged is there after restart', async () => {
    const env = {
      KAFKA_BROKERS: inject('kafkaBrokers').join(','),
      KAFKA_TOPIC_PREFIX: `s${randomBytes(4).toString('hex')}.`,
      KAFKA_TOPIC_PARTITIONS: '3',
      DATA_DIR: dataDir,
      ADMIN_TOKEN: `adm_${randomBytes(16).toString('hex')}`,
      LOG_LEVEL: 'info',
      ...(inject('clickhouseUrl') ? { CLICKHOUSE_URL: inject('clickhouseUrl')!, CLICKHOUSE_DATABASE: `db_${randomBytes(4).toString('hex')}` } : {}),
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
});
