import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { startHttpsReceiver } from './helpers/https-receiver.ts';
import { startServiceProcess } from './helpers/process.ts';
import { eventually, stackEnv } from './helpers/stack.ts';

describe('webhooks: no loss across a hard kill', () => {
  const cleanups: (() => Promise<void> | void)[] = [];
  afterAll(async () => {
    for (const c of cleanups.reverse()) await c();
  });

  it('every delivery reaches its final state after a kill while deliveries wait in retry tiers', async () => {
    const rx = await startHttpsReceiver();
    cleanups.push(() => rx.close());
    const seen = new Map<string, number>();
    // Each delivery fails twice, then succeeds: it must pass through tiers 1 and 2.
    rx.setBehaviour((req) => {
      const id = String(req.headers['x-player-delivery-id']);
      const n = (seen.get(id) ?? 0) + 1;
      seen.set(id, n);
      return { status: n <= 2 ? 500 : 200 };
    });
    const dataDir = mkdtempSync(join(tmpdir(), 'va-hook-kill-'));
    cleanups.push(() => rmSync(dataDir, { recursive: true, force: true }));
    const env = {
      ...stackEnv(dataDir),
      WEBHOOK_RETRY_DELAYS_S: '2,2,2',
      ...rx.env,
    };
    let proc = await startServiceProcess(env);
    cleanups.push(() => void proc.child.kill('SIGKILL'));
    const admin = async (method: string, path: string, body?: unknown) => {
      const res = await fetch(`${proc.url}/admin/v1${path}`, {
        method,
        headers: { authorization: `Bearer ${env.ADMIN_TOKEN}`, 'content-type': 'application/json' },
        body: body === undefined ? undefined : JSON.stringify(body),
      });
      return (await res.json()) as any;
    };
    const tenant = await admin('POST', '/tenants', { name: 'hooks' });
    const video = await admin('POST', `/tenants/${tenant.id}/videos`, { title: 'v', duration_sec: 60 });
    await admin('POST', `/tenants/${tenant.id}/destinations`, { name: 'k', url: rx.url('/k'), events: ['video_play'] });

    const N = 30;
    const res = await fetch(`${proc.url}/v1/collect`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'x-player-key': tenant.player_key },
      body: JSON.stringify({
        events: Array.from({ length: N }, (_, i) => ({
          event_name: 'video_play',
          video_id: video.id,
          session_id: `ses_${i}`,
          visitor_id: `vis_${i}`,
          current_time: 0,
          duration: 60,
          watched_percentage: 0,
        })),
      }),
    });
    expect(res.status).toBe(202);
    // Every first attempt has failed: the deliveries now wait in the 1-minute tier.
    await eventually(async () => (rx.to('/k').length >= N ? true : undefined), 20_000, 20);
    proc.child.kill('SIGKILL');
    await new Promise((r) => proc.child.once('exit', r));
    const atKill = rx.to('/k').length;
    expect(atKill).toBeLessThan(3 * N); // not all done before the kill

    proc = await startServiceProcess(env);
    const deliveries = await eventually(async () => {
      const page = await admin('GET', `/tenants/${tenant.id}/deliveries?limit=1000`);
      return page.data.length === N && page.data.every((d: { status: string }) => d.status === 'succeeded') ? page.data : undefined;
    }, 60_000, 500);

    const got = rx.to('/k');
    const ids = new Set(got.map((r) => String(r.headers['x-player-delivery-id'])));
    expect(ids.size).toBe(N);
    expect(new Set(deliveries.map((d: { id: string }) => d.id))).toEqual(ids);
    // One delivery id per event: the receiver may see repeats, never a changed id.
    const idsByVisitor = new Map<string, Set<string>>();
    for (const r of got) {
      const visitor = JSON.parse(r.rawBody.toString()).visitor_id as string;
      const set = idsByVisitor.get(visitor) ?? new Set();
      set.add(String(r.headers['x-player-delivery-id']));
      idsByVisitor.set(visitor, set);
    }
    expect(idsByVisitor.size).toBe(N);
    for (const set of idsByVisitor.values()) expect(set.size).toBe(1);
    for (const id of ids) expect(seen.get(id)).toBeGreaterThanOrEqual(3);
  });
});
