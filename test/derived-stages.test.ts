import { Kafka, logLevel } from 'kafkajs';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { verifyWebhook } from '../shared/webhooks/verify.ts';
import { startHttpsReceiver, type HttpsReceiver } from './helpers/https-receiver.ts';
import { metricSum } from './helpers/prometheus-text.ts';
import { TestStack, eventually, type TestTenant } from './helpers/stack.ts';

/**
 * The derived-events service's two stages in two stacks (DERIVED_STAGES),
 * as a busy deployment runs them in two processes: the repartition beside
 * the other services, the intent stage alone. They meet only through the
 * by-visitor log, and a lead still reaches a real HTTPS receiver once.
 */
describe('derived events: one stage per process', () => {
  let rx: HttpsReceiver;
  let main: TestStack;
  let intent: TestStack;
  let t: TestTenant;

  beforeAll(async () => {
    rx = await startHttpsReceiver();
    main = await TestStack.start({ DERIVED_STAGES: 'repartition', ...rx.env });
    intent = await TestStack.start({ SERVICES: 'derived', DERIVED_STAGES: 'intent', ...rx.env }, { dataDir: `${main.dataDir}-intent`, topicPrefix: main.topicPrefix });
    t = await main.createTenant();
  });
  afterAll(async () => {
    await intent?.stop();
    await main?.stop();
    await rx?.close();
  });

  const handled = async (s: TestStack, stage: string) => metricSum((await s.request('GET', '/metrics')).text, 'derived_records_total', { stage });

  it('raises a high_intent_lead with the repartition in one process and the intent stage in another', async () => {
    const res = await main.admin('POST', `/tenants/${t.id}/destinations`, { name: 'leads', url: rx.url('/leads'), events: ['high_intent_lead'] });
    expect(res.status, res.text).toBe(201);
    const base = { video_id: t.videoId, visitor_id: 'vis_split', session_id: 'ses_split' };
    // 100 % watched, play time all focused, one click: 73, over the threshold (70).
    const events = [
      { ...base, event_name: 'watched_90_percent', watched_percentage: 100, current_time: 108 },
      { ...base, event_name: 'heartbeat', play_ms: 5000, focus_ms: 5000 },
      { ...base, event_name: 'cta_clicked', current_time: 110 },
    ];
    expect((await main.collect(t.player_key, events)).status).toBe(202);
    const lead = await eventually(async () => rx.to('/leads')[0], 30_000, 100);
    expect(verifyWebhook({ secret: res.body.secret, rawBody: lead.rawBody, headers: lead.headers as Record<string, string> })).toMatchObject({ ok: true });
    expect(JSON.parse(lead.rawBody.toString('utf8'))).toMatchObject({ event_name: 'high_intent_lead', visitor_id: 'vis_split', score: 73 });

    // Each process ran only its own stage: one member in each stage's group, each stage's records counted by its process alone.
    const admin = new Kafka({ clientId: 'test-stages', brokers: inject('kafkaBrokers'), logLevel: logLevel.NOTHING }).admin();
    await admin.connect();
    try {
      const { groups } = await admin.describeGroups([`${main.topicPrefix}derived-repartition`, `${main.topicPrefix}derived-intent`]);
      expect(Object.fromEntries(groups.map((g) => [g.groupId.slice(main.topicPrefix.length), g.members.length]))).toEqual({ 'derived-repartition': 1, 'derived-intent': 1 });
    } finally {
      await admin.disconnect();
    }
    await expect.poll(() => handled(intent, 'intent'), { timeout: 10_000 }).toBeGreaterThanOrEqual(3);
    expect(await handled(main, 'repartition')).toBeGreaterThanOrEqual(3);
    expect(await handled(main, 'intent')).toBe(0);
    expect(await handled(intent, 'repartition')).toBe(0);
    await main.fanoutIdle();
    expect(rx.to('/leads')).toHaveLength(1);
  });
});
