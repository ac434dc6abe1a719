import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startHttpsReceiver, type HttpsReceiver } from './helpers/https-receiver.ts';
import { TestStack, eventually } from './helpers/stack.ts';

// NOTE: only loopback addresses are used here; the classifier's other ranges
// are covered by unit tests that make no connection at all.
describe('SSRF: a loopback destination outside WEBHOOK_ALLOWED_CIDRS', () => {
  let s: TestStack;
  let rx: HttpsReceiver;

  beforeAll(async () => {
    rx = await startHttpsReceiver();
    s = await TestStack.start({ WEBHOOK_RETRY_DELAYS_S: '1,1,1', WEBHOOK_CA_FILE: rx.caFile, WEBHOOK_ALLOWED_CIDRS: '' });
  });
  afterAll(async () => {
    await s?.stop();
    await rx?.close();
  });

  it('is refused before any connection is made, on every attempt', async () => {
    const t = await s.createTenant();
    for (const url of [rx.url('/v4'), `https://localhost:${rx.port}/name`]) {
      const d = await s.admin('POST', `/tenants/${t.id}/destinations`, { name: 'loop', url, events: ['video_play'] });
      expect(d.status).toBe(201);
    }
    expect((await s.collect(t.player_key, [{ event_name: 'video_play', video_id: t.videoId }])).status).toBe(202);
    const failed = await eventually(async () => {
      const r = await s.admin('GET', `/tenants/${t.id}/deliveries?status=failed`);
      return r.body.data.length === 2 ? r.body.data : undefined;
    }, 30_000, 200);
    for (const d of failed) {
      expect(d.attempt_count).toBe(4);
      const detail = await s.admin('GET', `/tenants/${t.id}/deliveries/${d.id}`);
      expect(detail.body.attempts.map((a: { error_class: string }) => a.error_class)).toEqual(Array(4).fill('refused_address'));
    }
    expect(rx.connections).toBe(0);
    expect(rx.requests).toHaveLength(0);
  });
});
