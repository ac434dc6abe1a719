import { createHmac } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { PLAYER_EVENT_NAMES } from '../shared/event-names.ts';
import { verifyWebhook } from '../shared/webhooks/verify.ts';
import { startHttpsReceiver, type HttpsReceiver } from './helpers/https-receiver.ts';
import { TestStack, eventually, type TestTenant } from './helpers/stack.ts';

// Short, so the tests that only need a delivery to run out of attempts do
// not wait long; a second apart, so the tier test can tell the tiers apart.
const DELAYS_S = [1, 2, 3];
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;

describe('signed webhooks to a real HTTPS receiver', () => {
  let s: TestStack;
  let rx: HttpsReceiver;
  let t: TestTenant;
  const videoUuid = () => {
    const h = t.videoId.slice(4);
    return `${h.slice(0, 8)}-${h.slice(8, 12)}-${h.slice(12, 16)}-${h.slice(16, 20)}-${h.slice(20)}`;
  };

  beforeAll(async () => {
    rx = await startHttpsReceiver();
    s = await TestStack.start({
      WEBHOOK_RETRY_DELAYS_S: DELAYS_S.join(','),
      // Tiers 1 s apart: the due batch (1 s by default) is kept below the gap between them.
      WEBHOOK_DUE_BATCH_MS: '300',
      ...rx.env,
    });
    t = await s.createTenant();
  });
  afterAll(async () => {
    await s?.stop();
    await rx?.close();
  });

  const createDestination = async (path: string, extra: Record<string, unknown> = {}) => {
    const res = await s.admin('POST', `/tenants/${t.id}/destinations`, { name: path, url: rx.url(path), ...extra });
    expect(res.status).toBe(201);
    return res.body as { id: string; secret: string; secret_masked: string | null; events: string[] };
  };
  const delivery = (id: string) => s.admin('GET', `/tenants/${t.id}/deliveries/${id}`);
  const waitStatus = (id: string, status: string, timeoutMs: number) =>
    eventually(async () => {
      const d = await delivery(id);
      return d.status === 200 && d.body.status === status ? d.body : undefined;
    }, timeoutMs, 200);

  it('delivers every player event with the exact headers, body and a signature both verifiers accept', async () => {
    const dest = await createDestination('/all');
    expect(dest.secret).toMatch(/^whsec_[A-Za-z0-9_-]{32}$/);
    expect(dest.events).toEqual([]);
    const names = [...PLAYER_EVENT_NAMES];
    const sent = names.map((event_name, i) => ({
      event_name,
      video_id: t.videoId,
      session_id: 'ses_hooks',
      visitor_id: `vis_hook_${i}`,
      current_time: i,
      duration: 120,
      watched_percentage: i * 2.5,
      utm_source: 'newsletter',
      occurred_at: new Date(Date.now() - 1000 + i).toISOString(),
    }));
    const res = await s.collect(t.player_key, [
      ...sent,
      { event_name: 'heartbeat', video_id: t.videoId, play_ms: 100, focus_ms: 50 },
      { event_name: 'seek', video_id: t.videoId, from: 10, to: 2 },
    ]);
    expect(res.status).toBe(202);
    // Only the player events are this test's: its 13 visitors share one
    // session, so the derived-events service (sessions kept per visitor's
    // partition) may also raise an abandonment, depending on where the
    // tenant's random id puts them (derived events: derived-events.test.ts).
    const playerEvents = () => rx.to('/all').filter((r) => (names as string[]).includes(String(r.headers['x-player-event'])));
    await eventually(async () => (playerEvents().length >= names.length ? true : undefined), 20_000);
    await s.fanoutIdle();
    const got = playerEvents();
    expect(got).toHaveLength(names.length); // signals are not delivered
    expect(got.map((r) => r.headers['x-player-event']).sort()).toEqual([...names].sort());
    for (const r of got) {
      const raw = r.rawBody.toString('utf8');
      const body = JSON.parse(raw);
      const i = names.indexOf(body.event_name);
      expect(r.headers['content-type']).toBe('application/json');
      expect(r.headers['x-player-event']).toBe(body.event_name);
      expect(r.headers['x-player-delivery-id']).toMatch(UUID);
      const ts = Number(r.headers['x-player-timestamp']);
      expect(Math.abs(ts - Date.now() / 1000)).toBeLessThan(30);
      expect(body).toEqual({
        tenant_id: t.id,
        video_id: videoUuid(),
        session_id: 'ses_hooks',
        visitor_id: `vis_hook_${i}`,
        event_name: names[i],
        current_time: i,
        duration: 120,
        watched_percentage: i * 2.5,
        utm_source: 'newsletter',
        utm_campaign: null,
        ctwa_clid: null,
        external_lead_id: null,
        created_at: sent[i]!.occurred_at,
      });
      // Independent computation over the raw bytes the receiver got.
      const expected = createHmac('sha256', dest.secret).update(`${r.headers['x-player-timestamp']}.`).update(r.rawBody).digest('hex');
      expect(r.headers['x-player-signature']).toBe(expected);
      expect(verifyWebhook({ secret: dest.secret, headers: r.headers, rawBody: r.rawBody })).toMatchObject({ ok: true });
      expect(verifyWebhook({ secret: `${dest.secret}x`, headers: r.headers, rawBody: r.rawBody }).ok).toBe(false);
    }
    expect(new Set(got.map((r) => r.headers['x-player-delivery-id'])).size).toBe(names.length);
    // The secret is never shown again.
    const list = await s.admin('GET', `/tenants/${t.id}/destinations`);
    expect(list.text).not.toContain(dest.secret);
    expect(list.body.data.find((d: { id: string }) => d.id === dest.id).secret_masked).toBe(`whsec_…${dest.secret.slice(-4)}`);
  });

  it('retries a receiver that fails 3 times on the configured tiers with one delivery id, then succeeds', async () => {
    let n = 0;
    rx.setBehaviour((req) => (req.path === '/flaky' ? { status: n++ < 3 ? 500 : 204 } : { status: 200 }));
    await createDestination('/flaky', { events: ['video_pause'] });
    expect((await s.collect(t.player_key, [{ event_name: 'video_pause', video_id: t.videoId }])).status).toBe(202);
    await eventually(async () => (rx.to('/flaky').length >= 4 ? true : undefined), 30_000, 100);
    await s.fanoutIdle();
    const got = rx.to('/flaky');
    expect(got).toHaveLength(4);
    const ids = new Set(got.map((r) => r.headers['x-player-delivery-id']));
    expect(ids.size).toBe(1);
    expect(new Set(got.map((r) => r.rawBody.toString())).size).toBe(1); // the body never changes
    // A retry is due its tier's delay after the failed attempt ended, never
    // sooner; it comes later by up to WEBHOOK_DUE_BATCH_MS (300 ms here) plus
    // the time to fetch and send it, which stays well under the second
    // between tiers, so a wrong tier shows.
    const gaps = [1, 2, 3].map((i) => got[i]!.receivedAt - got[i - 1]!.receivedAt);
    console.log(`retry gaps ${gaps.join(', ')} ms for tiers of ${DELAYS_S.join(', ')} s`);
    for (const [i, gap] of gaps.entries()) {
      expect(gap).toBeGreaterThanOrEqual(DELAYS_S[i]! * 1000 - 50);
      expect(gap).toBeLessThan(DELAYS_S[i]! * 1000 + 900);
    }
    const [id] = [...ids] as string[];
    const d = await waitStatus(id!, 'succeeded', 10_000);
    expect(d.attempt_count).toBe(4);
    expect(d.attempts.map((a: { outcome: string }) => a.outcome)).toEqual(['retrying', 'retrying', 'retrying', 'succeeded']);
    expect(d.attempts.map((a: { status_code: number }) => a.status_code)).toEqual([500, 500, 500, 204]);
  });

  it('ends failed after exactly 4 attempts, and a reprocess then succeeds with the same delivery id', async () => {
    let healthy = false;
    rx.setBehaviour((req) => (req.path === '/dead' ? { status: healthy ? 200 : 503 } : { status: 200 }));
    const dest = await createDestination('/dead', { events: ['video_resume'] });
    expect((await s.collect(t.player_key, [{ event_name: 'video_resume', video_id: t.videoId }])).status).toBe(202);
    const first = await eventually(async () => rx.to('/dead')[0], 10_000);
    const id = first.headers['x-player-delivery-id'] as string;
    const failed = await waitStatus(id, 'failed', 30_000);
    expect(failed.attempt_count).toBe(4);
    expect(rx.to('/dead')).toHaveLength(4);
    const list = await s.admin('GET', `/tenants/${t.id}/deliveries?status=failed&destination_id=${dest.id}`);
    expect(list.body.data.map((x: { id: string }) => x.id)).toEqual([id]);

    healthy = true;
    const re = await s.admin('POST', `/tenants/${t.id}/deliveries/${id}/reprocess`);
    expect(re.status).toBe(202);
    expect(re.body).toEqual({ id, status: 'pending' });
    const done = await waitStatus(id, 'succeeded', 15_000);
    expect(done.attempt_count).toBe(5);
    const after = rx.to('/dead');
    expect(after).toHaveLength(5);
    expect(after[4]!.headers['x-player-delivery-id']).toBe(id);
    expect(after[4]!.rawBody.toString()).toBe(after[0]!.rawBody.toString());
    expect((await s.admin('POST', `/tenants/${t.id}/deliveries/${id}/reprocess`)).status).toBe(409);
  });

  it('counts a response after 10.5 s as a failure', async () => {
    let n = 0;
    rx.setBehaviour((req) => (req.path === '/slow' ? (n++ === 0 ? { status: 200, delayMs: 10_500 } : { status: 200 }) : { status: 200 }));
    await createDestination('/slow', { events: ['video_unmute'] });
    expect((await s.collect(t.player_key, [{ event_name: 'video_unmute', video_id: t.videoId }])).status).toBe(202);
    const first = await eventually(async () => rx.to('/slow')[0], 10_000);
    const d = await waitStatus(first.headers['x-player-delivery-id'] as string, 'succeeded', 30_000);
    expect(d.attempts[0]).toMatchObject({ attempt: 1, outcome: 'retrying', error_class: 'timeout', status_code: null });
    expect(d.attempts[0].duration_ms).toBeGreaterThanOrEqual(9_900);
    expect(d.attempts[0].duration_ms).toBeLessThan(10_500);
    expect(d.attempts[1]).toMatchObject({ attempt: 2, outcome: 'succeeded', status_code: 200 });
  });

  it('sends nothing to a destination without a secret and records a security event with the host only', async () => {
    const created = await createDestination('/nosecret/path?token=abc', { kind: 'integration', name: 'crm', events: ['cta_clicked'], config: { webhook_secret: '' } });
    expect(created.secret_masked).toBeNull();
    expect((await s.collect(t.player_key, [{ event_name: 'cta_clicked', video_id: t.videoId }])).status).toBe(202);
    const events = await eventually(async () => {
      const r = await s.admin('GET', `/tenants/${t.id}/security-events`);
      return r.body.data.length > 0 ? r : undefined;
    }, 15_000, 200);
    expect(events.body.data[0]).toMatchObject({
      kind: 'integration_missing_webhook_secret',
      tenant_id: t.id,
      endpoint_id: created.id,
      host: `127.0.0.1:${rx.port}`,
      event_name: 'cta_clicked',
    });
    expect(events.text).not.toContain('/nosecret');
    expect(events.text).not.toContain('token');
    // Once the fan-out has committed past the event, nothing can be on its way there.
    await s.fanoutIdle();
    expect(rx.requests.filter((r) => r.path.startsWith('/nosecret'))).toHaveLength(0);
  });

  it('the Test button delivers one player_loaded to that destination only', async () => {
    rx.setBehaviour(() => ({ status: 200 }));
    const a = await createDestination('/test-a', { events: ['video_play'] });
    await createDestination('/test-b');
    const res = await s.admin('POST', `/tenants/${t.id}/destinations/${a.id}/test`);
    expect(res.status).toBe(202);
    const got = await eventually(async () => rx.to('/test-a')[0], 10_000);
    expect(got.headers['x-player-event']).toBe('player_loaded');
    expect(got.headers['x-player-delivery-id']).toBe(res.body.delivery_id);
    expect(verifyWebhook({ secret: a.secret, headers: got.headers, rawBody: got.rawBody })).toMatchObject({ ok: true });
    await waitStatus(res.body.delivery_id, 'succeeded', 10_000);
    await s.fanoutIdle();
    expect(rx.to('/test-a')).toHaveLength(1);
    expect(rx.to('/test-b')).toHaveLength(0);
  });

  it('delivers what a destination selects, a server-side conversion included, and nothing else', async () => {
    await createDestination('/selected', { events: ['conversion', 'video_view'] });
    const conv = await s.request('POST', '/api/public/conversion', { token: t.apiKey, body: { visitor_id: 'vis_conv', video_id: t.videoId, value: 10, currency: 'EUR' } });
    expect(conv.status).toBe(202);
    expect((await s.collect(t.player_key, [{ event_name: 'video_view', video_id: t.videoId }, { event_name: 'video_play', video_id: t.videoId }])).status).toBe(202);
    // The events have different keys, so no order between them holds: wait
    // until the fan-out has committed past every event, then look.
    await eventually(async () => (rx.to('/selected').length >= 2 ? true : undefined), 10_000);
    await s.fanoutIdle();
    expect(rx.to('/selected').map((r) => r.headers['x-player-event']).sort()).toEqual(['conversion', 'video_view']);
  });

  it('manages destinations: validation, patch, regenerate, delete', async () => {
    const bad = await s.admin('POST', `/tenants/${t.id}/destinations`, { name: 'x', url: 'http://127.0.0.1/hook' });
    expect(bad.status).toBe(422);
    const unknown = await s.admin('POST', `/tenants/${t.id}/destinations`, { name: 'x', url: rx.url('/x'), events: ['video_explode'] });
    expect(unknown.status).toBe(422);
    const d = await createDestination('/manage', { events: ['reached_pitch'] });
    expect(d.events).toEqual(['reached_pitch']);
    const patched = await s.admin('PATCH', `/tenants/${t.id}/destinations/${d.id}`, { name: 'renamed', events: ['video_play', 'video_pause'] });
    expect(patched.status).toBe(200);
    expect(patched.body).toMatchObject({ name: 'renamed', events: ['video_play', 'video_pause'] });
    expect((await s.admin('PATCH', `/tenants/${t.id}/destinations/${d.id}`, { url: 'ftp://x' })).status).toBe(422);
    const regen = await s.admin('POST', `/tenants/${t.id}/destinations/${d.id}/secret`);
    expect(regen.status).toBe(200);
    expect(regen.body.secret).toMatch(/^whsec_/);
    expect(regen.body.secret).not.toBe(d.secret);
    const one = await s.admin('GET', `/tenants/${t.id}/destinations/${d.id}`);
    expect(one.text).not.toContain(regen.body.secret);
    expect(one.body.secret_masked).toBe(`whsec_…${regen.body.secret.slice(-4)}`);
    expect((await s.admin('DELETE', `/tenants/${t.id}/destinations/${d.id}`)).status).toBe(204);
    expect((await s.admin('GET', `/tenants/${t.id}/destinations/${d.id}`)).status).toBe(404);
  });
});
