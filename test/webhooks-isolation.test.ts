import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startHttpsReceiver, type HttpsReceiver } from './helpers/https-receiver.ts';
import { TestStack, eventually } from './helpers/stack.ts';

const TIMEOUT_MS = 5000;

describe('webhooks: a dead destination does not delay a healthy one', () => {
  let s: TestStack;
  let rx: HttpsReceiver;

  beforeAll(async () => {
    rx = await startHttpsReceiver();
    // The dead destination never answers in time; the healthy one answers at once.
    rx.setBehaviour((req) => (req.path === '/dead' ? { status: 200, delayMs: 30_000 } : { status: 200 }));
    s = await TestStack.start({
      // NOTE: long on purpose, and never waited for: the dead destination's
      // retries stay out of the few seconds measured, so only first attempts
      // (each held for the full timeout) compete with the healthy ones.
      WEBHOOK_RETRY_DELAYS_S: '60,60,60',
      WEBHOOK_TIMEOUT_MS: String(TIMEOUT_MS),
      ...rx.env,
    });
  });
  afterAll(async () => {
    await s?.stop();
    await rx?.close();
  });

  /** Sends `n` events 100 ms apart; returns each event's latency from the 202 to its arrival at /ok. */
  const latencies = async (t: { player_key: string; videoId: string }, tag: string, n: number) => {
    const acked = new Map<string, number>();
    for (let i = 0; i < n; i++) {
      const visitor = `vis_${tag}_${i}`;
      const res = await s.collect(t.player_key, [{ event_name: 'video_play', video_id: t.videoId, visitor_id: visitor }]);
      expect(res.status).toBe(202);
      acked.set(visitor, Date.now());
      await new Promise((r) => setTimeout(r, 100));
    }
    await eventually(async () => (rx.to('/ok').filter((r) => r.rawBody.toString().includes(`vis_${tag}_`)).length >= n ? true : undefined), 30_000);
    return rx
      .to('/ok')
      .map((r) => ({ r, visitor: JSON.parse(r.rawBody.toString()).visitor_id as string }))
      .filter(({ visitor }) => visitor.startsWith(`vis_${tag}_`))
      .map(({ r, visitor }) => r.receivedAt - acked.get(visitor)!)
      .sort((a, b) => a - b);
  };

  it('keeps the healthy destination at its normal latency', async () => {
    const t = await s.createTenant();
    await s.admin('POST', `/tenants/${t.id}/destinations`, { name: 'ok', url: rx.url('/ok'), events: ['video_play'] });
    const baseline = await latencies(t, 'base', 20);

    await s.admin('POST', `/tenants/${t.id}/destinations`, { name: 'dead', url: rx.url('/dead'), events: ['video_play'] });
    const withDead = await latencies(t, 'dead', 40);
    const p = (xs: number[], q: number) => xs[Math.min(xs.length - 1, Math.floor(q * xs.length))]!;
    console.log(
      `healthy destination latency (ack → receipt): baseline p50 ${p(baseline, 0.5)} ms p99 ${p(baseline, 0.99)} ms; ` +
        `beside a dead destination p50 ${p(withDead, 0.5)} ms p99 ${p(withDead, 0.99)} ms; dead attempts so far ${rx.to('/dead').length}`,
    );
    // The dead destination was being tried (and timing out) throughout...
    expect(rx.to('/dead').length).toBeGreaterThanOrEqual(8);
    // ...yet no healthy delivery waited for one of its timeouts (the figures
    // themselves are the bench's business: npm run bench:webhooks).
    expect(p(withDead, 0.99)).toBeLessThan(TIMEOUT_MS);
    expect(p(withDead, 0.5)).toBeLessThan(Math.max(3 * p(baseline, 0.5), p(baseline, 0.5) + 1000));
  });
});
