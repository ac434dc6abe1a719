import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startHttpsReceiver, type HttpsReceiver } from './helpers/https-receiver.ts';
import { TestStack, eventually } from './helpers/stack.ts';

describe('webhooks: a destination whose queue stays full', () => {
  let s: TestStack;
  let rx: HttpsReceiver;

  beforeAll(async () => {
    rx = await startHttpsReceiver();
    rx.setBehaviour(() => ({ status: 200, delayMs: 5_000 })); // never answers within the timeout
    s = await TestStack.start({
      WEBHOOK_RETRY_DELAYS_S: '1,1,1',
      WEBHOOK_TIMEOUT_MS: '800',
      ...rx.env,
      FANOUT_PER_DESTINATION_CONCURRENCY: '1',
      FANOUT_PER_DESTINATION_QUEUE: '1',
    });
  });
  afterAll(async () => {
    await s?.stop();
    await rx?.close();
  });

  it('defers past the queue bound, counts a backlogged attempt after 3 deferrals, and still ends every delivery', async () => {
    const t = await s.createTenant();
    await s.admin('POST', `/tenants/${t.id}/destinations`, { name: 'slow', url: rx.url('/slow'), events: ['video_play'] });
    const res = await s.collect(
      t.player_key,
      Array.from({ length: 8 }, (_, i) => ({ event_name: 'video_play', video_id: t.videoId, visitor_id: `vis_b${i}`, session_id: `ses_b${i}` })),
    );
    expect(res.status).toBe(202);
    const failed = await eventually(async () => {
      const r = await s.admin('GET', `/tenants/${t.id}/deliveries?status=failed`);
      return r.body.data.length === 8 ? r.body.data : undefined;
    }, 120_000, 500);
    const errorClasses: string[] = [];
    for (const d of failed) {
      const detail = await s.admin('GET', `/tenants/${t.id}/deliveries/${d.id}`);
      expect(detail.body.attempt_count).toBe(4);
      errorClasses.push(...detail.body.attempts.map((a: { error_class: string }) => a.error_class));
    }
    expect(errorClasses).toContain('destination_backlogged');
    expect(errorClasses).toContain('timeout');
    // Never more than 4 requests for one delivery reached the receiver.
    const perId = new Map<string, number>();
    for (const r of rx.to('/slow')) perId.set(String(r.headers['x-player-delivery-id']), (perId.get(String(r.headers['x-player-delivery-id'])) ?? 0) + 1);
    for (const n of perId.values()) expect(n).toBeLessThanOrEqual(4);
  });
});
