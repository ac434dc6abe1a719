import { Kafka, logLevel, type Admin } from 'kafkajs';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { createClickHouse, type ClickHouseClient } from '../shared/clickhouse/clickhouse.ts';
import { topicDefinitions, topicNames } from '../shared/kafka/topics.ts';
import { captureProcessOutput } from './helpers/browser.ts';
import { startHttpsReceiver, type HttpsReceiver } from './helpers/https-receiver.ts';
import { metricSum } from './helpers/prometheus-text.ts';
import { TestStack, eventually, type TestTenant } from './helpers/stack.ts';

// Long enough that a loaded machine's slow group join is not taken for a stall.
const STALL_MS = 10_000;

describe('health that tells the truth, under injected faults', () => {
  let s: TestStack;
  let rx: HttpsReceiver;
  let t: TestTenant;
  let admin: Admin;
  let ch: ClickHouseClient;
  let output: ReturnType<typeof captureProcessOutput>;

  beforeAll(async () => {
    output = captureProcessOutput();
    rx = await startHttpsReceiver();
    s = await TestStack.start({
      LOG_LEVEL: 'warn',
      CONSUMER_STALL_TIMEOUT_MS: String(STALL_MS),
      PRODUCER_FAILURES_UNHEALTHY: '2',
      WEBHOOK_RETRY_DELAYS_S: '1,1,1',
      ...rx.env,
    });
    t = await s.createTenant();
    const kafka = new Kafka({ clientId: 'fault-injector', brokers: inject('kafkaBrokers'), logLevel: logLevel.NOTHING });
    admin = kafka.admin();
    await admin.connect();
    const url = inject('clickhouseUrl');
    ch = (await createClickHouse({ url, database: url ? s.topicPrefix.replace('.', '') : undefined, dataDir: s.dataDir })).client;
  });
  afterAll(async () => {
    await admin?.disconnect();
    await s?.stop();
    await rx?.close();
    output?.restore();
  });

  /**
   * /readyz's states, and what is wrong as the last `readiness_failed` log
   * line says (the answer names failing checks only).
   */
  const readyz = async () => {
    const r = await s.request('GET', '/readyz');
    const failed = output
      .text()
      .split('\n')
      .filter((line) => line.includes('"msg":"readiness_failed"'))
      .map((line) => JSON.parse(line) as { checks: Record<string, string> });
    return { status: r.status, checks: r.body.checks as Record<string, string>, details: failed.at(-1)?.checks ?? {} };
  };
  const collect = async (visitor: string) => {
    const res = await eventually(async () => {
      const r = await s.collect(t.player_key, [{ event_name: 'video_play', video_id: t.videoId, session_id: 'ses_health', visitor_id: visitor }]);
      return r.status === 503 ? undefined : r;
    }, 30_000, 250);
    expect(res.status).toBe(202);
  };

  it('exports consumer lag per group and partition, sampled from the broker', async () => {
    await collect('vis_lag');
    const groups = ['projector', 'fanout', 'fanout-retry-1m', 'projector-attempts'];
    // Sampled every 5 s: wait for a sample that covers every group.
    const metrics = await eventually(async () => {
      const m = await s.request('GET', '/metrics');
      return m.text.includes(`kafka_consumer_lag{group="${s.topicPrefix}projector",topic="${s.topicPrefix}player.events.v1",partition=`) &&
        groups.every((g) => m.text.includes(`kafka_consumer_lag{group="${s.topicPrefix}${g}"`))
        ? m.text
        : undefined;
    }, 30_000, 500);
    for (const group of groups) expect(metrics).toContain(`kafka_consumer_lag{group="${s.topicPrefix}${group}"`);
    expect((await readyz()).status).toBe(200);
  });

  it('a projector that cannot write to ClickHouse is reported stalled by name, and skips nothing once it can again', async () => {
    await ch.command({ query: 'RENAME TABLE events TO events_parked' });
    try {
      for (let i = 0; i < 5; i++) await collect(`vis_ch_down_${i}`);
      const down = await eventually(async () => {
        const r = await readyz();
        return r.status === 503 ? r : undefined;
      }, STALL_MS + 20_000, 250);
      expect(down.checks.projector).toBe('error');
      expect(down.details.projector).toMatch(new RegExp(`^error: ${s.topicPrefix.replace('.', '\\.')}projector: stalled: work pending and no progress for \\d+ s`));
      expect(down.checks.fanout).toBe('ok');
      expect(down.details.fanout).toBeUndefined();
      const m = await s.request('GET', '/metrics');
      expect(metricSum(m.text, 'kafka_consumer_transient_failures_total', { group: `${s.topicPrefix}projector` })).toBeGreaterThan(0);
    } finally {
      await ch.command({ query: 'RENAME TABLE events_parked TO events' });
    }
    // Retried with backoff, never skipped: every event sent during the outage is served.
    const visitors = await eventually(async () => {
      const all = (await s.allEvents(t.videoId, t.apiKey)).map((e) => e.visitor_id).filter((v) => v.startsWith('vis_ch_down_'));
      return all.length >= 5 ? all : undefined;
    }, 30_000, 250);
    expect(visitors.sort()).toEqual([0, 1, 2, 3, 4].map((i) => `vis_ch_down_${i}`));
    await expect.poll(async () => (await readyz()).status, { timeout: 20_000, interval: 250 }).toBe(200);
  });

  it('a fan-out producer that keeps failing is reported by name, and its deliveries go through once the broker accepts again', async () => {
    const dest = await s.admin('POST', `/tenants/${t.id}/destinations`, { name: 'health', url: rx.url('/health'), events: ['video_play'] });
    expect(dest.status).toBe(201);
    const attempts = topicNames(s.topicPrefix).webhookAttempts;
    const [definition] = topicDefinitions(topicNames(s.topicPrefix), 3).filter((d) => d.topic === attempts);
    // The attempts topic disappears: the broker refuses every write to it until it is back.
    await admin.deleteTopics({ topics: [attempts] });
    try {
      // deleteTopics returns once the controller recorded the deletion; the
      // broker's own view follows. Only then is the event sent: an attempt
      // record written in between would land in the doomed topic, no write
      // would fail, and there would be no fault to report.
      await expect.poll(async () => (await admin.fetchTopicMetadata({ topics: [attempts] }).then(() => false, () => true)), { timeout: 30_000, interval: 100 }).toBe(true);
      await collect('vis_producer_down');
      const down = await eventually(async () => {
        const r = await readyz();
        return r.status === 503 && r.details.fanout?.includes('fanout.deliveries: producer failing') ? r : undefined;
      }, 90_000, 500);
      expect(down.checks.fanout).toBe('error');
      expect(down.details.fanout).toMatch(/fanout\.deliveries: producer failing: \d+ requests in a row/);
      const m = await s.request('GET', '/metrics');
      expect(metricSum(m.text, 'kafka_produce_failures_total', { producer: 'fanout', topic: attempts })).toBeGreaterThanOrEqual(2);
    } finally {
      await eventually(async () => {
        await admin.createTopics({ topics: [definition!], waitForLeaders: true });
        return (await admin.listTopics()).includes(attempts) ? true : undefined;
      }, 30_000, 500);
    }
    // The attempt happened; its record was retried until the broker took it.
    await eventually(async () => {
      const list = await s.admin('GET', `/tenants/${t.id}/deliveries?destination_id=${dest.body.id}`);
      return list.body?.data?.[0]?.status === 'succeeded' ? true : undefined;
    }, 60_000, 500);
    expect(rx.to('/health').length).toBeGreaterThanOrEqual(1);
    await expect.poll(async () => (await readyz()).status, { timeout: 30_000, interval: 250 }).toBe(200);
  });

  it('a config store whose topic is deleted under it restarts with a growing wait, is reported crashing by name, and follows again once the topic is back', async () => {
    const usage = topicNames(s.topicPrefix).apiKeyUsage;
    const [definition] = topicDefinitions(topicNames(s.topicPrefix), 3).filter((d) => d.topic === usage);
    await admin.deleteTopics({ topics: [usage] });
    try {
      const down = await eventually(async () => {
        const r = await readyz();
        return r.status === 503 && r.details.config_store?.includes('crashing: ') ? r : undefined;
      }, STALL_MS + 60_000, 500);
      expect(down.checks.config_store).toBe('error');
      expect(down.details.config_store).toMatch(/^error: config_store: crashing: \d+ restarts in a row for \d+ s \(.+\)$/);
      // Over the stall limit (10 s) of crashes, the waits (250 ms doubling) allow a handful of restarts, not ten a second.
      const restarts = Number(/crashing: (\d+) restarts/.exec(down.details.config_store!)![1]);
      expect(restarts).toBeGreaterThanOrEqual(2);
      expect(restarts).toBeLessThanOrEqual(12);
    } finally {
      await eventually(async () => {
        await admin.createTopics({ topics: [definition!], waitForLeaders: true });
        return (await admin.listTopics()).includes(usage) ? true : undefined;
      }, 30_000, 500);
    }
    await expect.poll(async () => (await readyz()).status, { timeout: 60_000, interval: 250 }).toBe(200);
  });
});
