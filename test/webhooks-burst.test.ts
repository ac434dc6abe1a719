import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startHttpsReceiver, type HttpsReceiver } from './helpers/https-receiver.ts';
import { TestStack, eventually } from './helpers/stack.ts';

/**
 * A healthy destination handed more deliveries at once than its lane holds
 * (a burst, or the backlog of a fan-out restarted after downtime): the lane
 * takes what it can and defers the rest, and the deferred deliveries must
 * come back when the lane can take them, not fail for a destination that
 * answers every request.
 */
describe('webhooks: a burst larger than a healthy destination’s lane', () => {
  let s: TestStack;
  let rx: HttpsReceiver;

  beforeAll(async () => {
    rx = await startHttpsReceiver();
    rx.setBehaviour(() => ({ status: 200, delayMs: 20 })); // healthy: every request answered 200 within 20 ms
    s = await TestStack.start({
      WEBHOOK_RETRY_DELAYS_S: '1,1,1',
      ...rx.env,
      FANOUT_PER_DESTINATION_CONCURRENCY: '2',
      FANOUT_PER_DESTINATION_QUEUE: '5',
    });
  });
  afterAll(async () => {
    await s?.stop();
    await rx?.close();
  });

  it('delivers every event once the lane can take it: none failed, none backlogged', async () => {
    const t = await s.createTenant();
    await s.admin('POST', `/tenants/${t.id}/destinations`, { name: 'healthy', url: rx.url('/burst'), events: ['video_play'] });
    // Twenty times what the lane holds (2 running + 5 queued), sent at once.
    const count = 140;
    for (let from = 0; from < count; from += 70) {
      const res = await s.collect(
        t.player_key,
        Array.from({ length: 70 }, (_, i) => ({ event_name: 'video_play', video_id: t.videoId, visitor_id: `vis_u${from + i}`, session_id: `ses_u${from + i}` })),
      );
      expect(res.status).toBe(202);
    }
    const settled = await eventually(
      async () => {
        const [ok, failed] = await Promise.all([
          s.admin('GET', `/tenants/${t.id}/deliveries?status=succeeded&limit=1000`),
          s.admin('GET', `/tenants/${t.id}/deliveries?status=failed&limit=1000`),
        ]);
        const settled = ok.body.data.length + failed.body.data.length;
        if (settled !== count) return undefined;
        // A backlogged attempt would count as an attempt; deferrals do not.
        const attempts = new Set([...ok.body.data, ...failed.body.data].map((d: { attempt_count: number }) => d.attempt_count));
        return { ok: ok.body.data.length, failed: failed.body.data.length, attempts: [...attempts] };
      },
      120_000,
      500,
    );
    const requests = rx.to('/burst');
    const received = new Set(requests.map((r) => String(r.headers['x-player-delivery-id'])));
    expect({ ...settled, received: received.size, requests: requests.length }).toEqual({ ok: count, failed: 0, attempts: [1], received: count, requests: count });
  }, 150_000);
});
