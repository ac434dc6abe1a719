import { randomUUID } from 'node:crypto';
import { Kafka, logLevel } from 'kafkajs';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { SchemaRegistry } from '../schemas/registry.ts';
import { JavaCompatiblePartitioner } from '../shared/kafka/partitioner.ts';
import { topicNames } from '../shared/kafka/topics.ts';
import { PLAYER_EVENT } from './helpers/player-event.ts';
import { parseVideoId } from '../shared/ids.ts';
import { verifyWebhook } from '../shared/webhooks/verify.ts';
import { startHttpsReceiver, type HttpsReceiver, type ReceivedRequest } from './helpers/https-receiver.ts';
import { metricSum } from './helpers/prometheus-text.ts';
import { TestStack, eventually, type TestTenant } from './helpers/stack.ts';

/**
 * The events the service raises itself, from player events (or a
 * conversion) to a signed delivery at a real HTTPS receiver.
 */
describe('derived events, end to end', () => {
  let s: TestStack;
  let rx: HttpsReceiver;
  let t: TestTenant;
  const secrets = new Map<string, string>();

  beforeAll(async () => {
    rx = await startHttpsReceiver();
    // Sessions end after 1.5 s without events; ticks every 200 ms, 300 ms late.
    // State bounds of 60 visitors and 60 sessions per tenant (20 per partition): far above what `t` uses.
    s = await TestStack.start({
      DERIVED_SESSION_IDLE_MS: '1500',
      DERIVED_TICK_MS: '200',
      DERIVED_LATENESS_MS: '300',
      DERIVED_MAX_VISITORS_PER_TENANT: '60',
      DERIVED_MAX_SESSIONS_PER_TENANT: '60',
      ...rx.env,
    });
    t = await s.createTenant();
  });
  afterAll(async () => {
    await s?.stop();
    await rx?.close();
  });

  /** A destination that selects `events`, at its own path. */
  const destination = async (path: string, events: string[]) => {
    const res = await s.admin('POST', `/tenants/${t.id}/destinations`, { name: path, url: rx.url(path), events });
    expect(res.status, res.text).toBe(201);
    secrets.set(path, res.body.secret);
  };

  /** The deliveries at `path` once there are `n`, each checked against its signature. */
  const delivered = async (path: string, n: number): Promise<(ReceivedRequest & { body: any })[]> => {
    const got = await eventually(async () => (rx.to(path).length >= n ? rx.to(path) : undefined), 30_000, 100);
    return got.map((r) => {
      const verdict = verifyWebhook({ secret: secrets.get(path)!, rawBody: r.rawBody, headers: r.headers as Record<string, string> });
      expect(verdict, JSON.stringify(verdict)).toMatchObject({ ok: true });
      return { ...r, body: JSON.parse(r.rawBody.toString('utf8')) };
    });
  };

  it('high_intent_lead: once, when the score first reaches the threshold (70), with the score and its factors', async () => {
    await destination('/leads', ['high_intent_lead']);
    const base = { video_id: t.videoId, visitor_id: 'vis_lead', session_id: 'ses_lead', external_lead_id: 'crm-42' };
    // watched 100 % → 40, all of play time focused → +20: 60, below the threshold.
    expect((await s.collect(t.player_key, [{ ...base, event_name: 'watched_90_percent', watched_percentage: 100, current_time: 108 }, { ...base, event_name: 'heartbeat', play_ms: 5000, focus_ms: 5000 }])).status).toBe(202);
    // One CTA click: +12.5 → 73. Then a second click (85): no second lead.
    expect((await s.collect(t.player_key, [{ ...base, event_name: 'cta_clicked', current_time: 110 }])).status).toBe(202);
    expect((await s.collect(t.player_key, [{ ...base, event_name: 'cta_clicked', current_time: 111 }])).status).toBe(202);
    const [lead] = await delivered('/leads', 1);
    expect(lead!.headers['x-player-event']).toBe('high_intent_lead');
    expect(lead!.body).toMatchObject({
      tenant_id: t.id,
      visitor_id: 'vis_lead',
      session_id: 'ses_lead',
      event_name: 'high_intent_lead',
      external_lead_id: 'crm-42',
      current_time: 110,
      score: 73,
      score_version: 1,
      factors: { watched_percent: 1, focus_time_ratio: 1, cta_clicks: 1, rewinds: 0 },
    });
    // The read API agrees with the score that crossed (it has the second click by now: 85).
    const score = await s.api(`/visitors/vis_lead/score`, t.apiKey);
    expect(score.status).toBe(200);
    expect(score.body.score).toBeGreaterThanOrEqual(73);
    // The derived event is in the events API under its name.
    await expect.poll(async () => (await s.allEvents(t.videoId, t.apiKey)).filter((e) => e.event === 'high_intent_lead').length, { timeout: 20_000 }).toBe(1);
    await s.fanoutIdle();
    expect(rx.to('/leads')).toHaveLength(1);
  });

  it('reads by-visitor records of one copy each, as written before copies were packed (an upgrade meets them on the topic)', async () => {
    await destination('/legacy-leads', ['high_intent_lead']);
    const registry = SchemaRegistry.fromManifest();
    const kafka = new Kafka({ clientId: 'legacy-copies', brokers: inject('kafkaBrokers'), logLevel: logLevel.NOTHING });
    const producer = kafka.producer({ createPartitioner: JavaCompatiblePartitioner });
    await producer.connect();
    try {
      const now = Date.now();
      const base = { ...PLAYER_EVENT, tenant_id: t.id, video_id: parseVideoId(t.videoId)!, visitor_id: 'vis_legacy', session_id: 'ses_legacy', timestamp: now, received_at: now, event_id_from_client: false };
      // 100 % watched, play time all focused, one click: 73, over the threshold.
      const events = [
        { ...base, event_name: 'watched_90_percent', watched_percentage: 100, play_ms: null, focus_ms: null },
        { ...base, event_name: 'heartbeat', play_ms: 5000, focus_ms: 5000 },
        { ...base, event_name: 'cta_clicked', play_ms: null, focus_ms: null },
      ].map((e) => ({ ...e, event_id: randomUUID() }));
      await producer.send({
        topic: topicNames(s.topicPrefix).derivedByVisitor,
        acks: -1,
        // Keyed by visitor, the source partition and offset in the `src` header (numbers no player event of this test has).
        messages: events.map((e, i) => ({ key: `${t.id}:vis_legacy`, value: registry.encode('player-event', e), headers: { src: `0:${1_000_000 + i}` } })),
      });
    } finally {
      await producer.disconnect();
    }
    const [lead] = await delivered('/legacy-leads', 1);
    expect(lead!.body).toMatchObject({ event_name: 'high_intent_lead', visitor_id: 'vis_legacy', score: 73, factors: { watched_percent: 1, focus_time_ratio: 1, cta_clicks: 1, rewinds: 0 } });
  });

  it('conversion: each accepted /api/public/conversion is delivered with its value and currency', async () => {
    await destination('/conversions', ['conversion']);
    const res = await s.request('POST', '/api/public/conversion', {
      token: t.apiKey,
      body: { visitor_id: 'vis_buyer', session_id: 'ses_buyer', video_id: t.videoId, value: 49.9, currency: 'EUR', external_lead_id: 'crm-7' },
    });
    expect(res.status, res.text).toBe(202);
    const [conversion] = await delivered('/conversions', 1);
    expect(conversion!.headers['x-player-event']).toBe('conversion');
    expect(conversion!.body).toMatchObject({ event_name: 'conversion', visitor_id: 'vis_buyer', external_lead_id: 'crm-7', conversion_value: 49.9, conversion_currency: 'EUR' });
  });

  it('reached_pitch once per session when playback reaches the video\'s pitch; abandoned_before_pitch when a session that played ends before it', async () => {
    await destination('/pitch', ['reached_pitch', 'abandoned_before_pitch']);
    const pitched = await s.admin('POST', `/tenants/${t.id}/videos`, { title: 'Webinar', duration_sec: 600, pitch_at_sec: 300 });
    expect(pitched.status, pitched.text).toBe(201);
    const video_id = pitched.body.id as string;
    const watcher = { video_id, visitor_id: 'vis_watcher', session_id: 'ses_watcher', duration: 600 };
    const leaver = { video_id, visitor_id: 'vis_leaver', session_id: 'ses_leaver', duration: 600 };
    expect(
      (
        await s.collect(t.player_key, [
          { ...watcher, event_name: 'video_play', current_time: 0 },
          { ...watcher, event_name: 'seek', from: 10, to: 320, current_time: 320 }, // a seek past the pitch is not reaching it
          { ...watcher, event_name: 'heartbeat', current_time: 301, play_ms: 1000, focus_ms: 1000 },
          { ...watcher, event_name: 'heartbeat', current_time: 330, play_ms: 1000, focus_ms: 1000 },
          { ...leaver, event_name: 'video_play', current_time: 0 },
          { ...leaver, event_name: 'session_ended', current_time: 120 },
        ])
      ).status,
    ).toBe(202);
    const got = await delivered('/pitch', 2);
    const byEvent = Object.fromEntries(got.map((r) => [r.headers['x-player-event'], r.body]));
    const videoUuid = parseVideoId(video_id);
    expect(byEvent.reached_pitch).toMatchObject({ session_id: 'ses_watcher', video_id: videoUuid, current_time: 301 });
    expect(byEvent.abandoned_before_pitch).toMatchObject({ session_id: 'ses_leaver', video_id: videoUuid, current_time: 120 });
    // The watcher's session then ends by time, past the pitch: nothing more.
    await new Promise((r) => setTimeout(r, 2500));
    await s.fanoutIdle();
    expect(rx.to('/pitch').map((r) => r.headers['x-player-event']).sort()).toEqual(['abandoned_before_pitch', 'reached_pitch']);
  });

  it('abandoned_after_offer: the session ends (session_ended, or its events stop) within the window after cta_shown, without a click', async () => {
    await destination('/offer', ['abandoned_after_offer']);
    const shown = { video_id: t.videoId, event_name: 'cta_shown', current_time: 90 };
    expect((await s.collect(t.player_key, [{ ...shown, visitor_id: 'vis_left', session_id: 'ses_left' }, { video_id: t.videoId, event_name: 'session_ended', visitor_id: 'vis_left', session_id: 'ses_left', current_time: 95 }])).status).toBe(202);
    // This one sends no session_ended: its heartbeats stop, and the session ends by time.
    expect((await s.collect(t.player_key, [{ ...shown, visitor_id: 'vis_gone', session_id: 'ses_gone' }])).status).toBe(202);
    // This one clicks: not abandoned.
    expect((await s.collect(t.player_key, [{ ...shown, visitor_id: 'vis_kept', session_id: 'ses_kept' }, { video_id: t.videoId, event_name: 'cta_clicked', visitor_id: 'vis_kept', session_id: 'ses_kept' }, { video_id: t.videoId, event_name: 'session_ended', visitor_id: 'vis_kept', session_id: 'ses_kept' }])).status).toBe(202);
    const got = await delivered('/offer', 2);
    expect(got.map((r) => r.body.session_id).sort()).toEqual(['ses_gone', 'ses_left']);
    expect(got.every((r) => r.headers['x-player-event'] === 'abandoned_after_offer')).toBe(true);
    await new Promise((r) => setTimeout(r, 2500)); // past another idle period: nothing more
    await s.fanoutIdle();
    expect(rx.to('/offer')).toHaveLength(2);
  });

  it("a tenant whose public player key floods new visitor and session ids holds only its bound of derived state; another tenant's lead still comes", async () => {
    const flooder = await s.createTenant();
    const flood = Array.from({ length: 900 }, (_, i) => ({ video_id: flooder.videoId, event_name: 'heartbeat', visitor_id: `vis_flood_${i}`, session_id: `ses_flood_${i}`, play_ms: 1000, focus_ms: 0 }));
    for (let i = 0; i < flood.length; i += 300) expect((await s.collect(flooder.player_key, flood.slice(i, i + 300))).status).toBe(202);
    const metric = async (name: string, kind: string) => metricSum((await s.request('GET', '/metrics')).text, name, { kind });
    // Every flood event is worked through: 840 of the 900 visitors and sessions pushed out.
    await expect.poll(() => metric('derived_state_evicted_total', 'visitor'), { timeout: 30_000, interval: 200 }).toBe(840);
    expect(await metric('derived_state_evicted_total', 'session')).toBe(840);
    // What is held: the flooder's 60 and the few of `t`, not 900.
    expect(await metric('derived_state_keys', 'visitor')).toBeLessThanOrEqual(60 + 12);
    expect(await metric('derived_state_keys', 'session')).toBeLessThanOrEqual(60 + 12);

    await destination('/leads-after-flood', ['high_intent_lead']);
    const base = { video_id: t.videoId, visitor_id: 'vis_after_flood', session_id: 'ses_after_flood' };
    const crossing = [
      { ...base, event_name: 'watched_90_percent', watched_percentage: 100, current_time: 108 },
      { ...base, event_name: 'heartbeat', play_ms: 5000, focus_ms: 5000 },
      { ...base, event_name: 'cta_clicked', current_time: 110 },
    ];
    expect((await s.collect(t.player_key, crossing)).status).toBe(202);
    const [lead] = await delivered('/leads-after-flood', 1);
    expect(lead!.body).toMatchObject({ tenant_id: t.id, visitor_id: 'vis_after_flood', event_name: 'high_intent_lead', score: 73 });
  });
});
