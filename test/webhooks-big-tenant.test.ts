import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startHttpsReceiver, type HttpsReceiver } from './helpers/https-receiver.ts';
import { metricSum, parsePrometheusText } from './helpers/prometheus-text.ts';
import { TestStack, eventually, type TestTenant } from './helpers/stack.ts';

const WITH_SECRET = 100;
const WITHOUT_SECRET = 200;
const LIMIT = WITH_SECRET + WITHOUT_SECRET;
const EVENTS = 100;

/** Distinct deliveries the receiver saw for the big tenant's webhooks. */
const bigDeliveries = (rx: HttpsReceiver) => new Set(rx.requests.filter((q) => q.path.startsWith('/big/')).map((q) => String(q.headers['x-player-delivery-id']))).size;

describe('webhooks: a tenant with 300 destinations beside a small tenant', () => {
  let s: TestStack;
  let rx: HttpsReceiver;
  let big: TestTenant;
  let small: TestTenant;

  beforeAll(async () => {
    rx = await startHttpsReceiver();
    s = await TestStack.start({
      MAX_DESTINATIONS_PER_TENANT: String(LIMIT),
      // A loaded machine may time attempts out: retry soon, so the run ends in time.
      WEBHOOK_RETRY_DELAYS_S: '1,1,1',
      ...rx.env,
    });
    big = await s.createTenant('big');
    small = await s.createTenant('small');
    for (let i = 0; i < WITH_SECRET; i++) {
      const res = await s.admin('POST', `/tenants/${big.id}/destinations`, { name: `hook ${i}`, url: rx.url(`/big/${i}`) });
      expect(res.status).toBe(201);
    }
    for (let i = 0; i < WITHOUT_SECRET; i++) {
      const res = await s.admin('POST', `/tenants/${big.id}/destinations`, {
        kind: 'integration',
        name: `integration ${i}`,
        url: rx.url(`/big-integration/${i}`),
        config: { webhook_secret: '' },
      });
      expect(res.status).toBe(201);
    }
  });
  afterAll(async () => {
    await s?.stop();
    await rx?.close();
  });

  it('refuses a destination past the per-tenant limit with 422', async () => {
    const res = await s.admin('POST', `/tenants/${big.id}/destinations`, { name: 'one too many', url: rx.url('/too-many') });
    expect(res.status).toBe(422);
    expect(res.headers.get('content-type')).toContain('application/problem+json');
    expect(res.body.detail).toContain(`at most ${LIMIT} destinations`);
    // Another tenant is not affected by the big tenant's count.
    const other = await s.admin('POST', `/tenants/${small.id}/destinations`, { name: 'fine', url: rx.url('/small-first') });
    expect(other.status).toBe(201);
  });

  it("keeps the small tenant's Test delivery within seconds while the big tenant's events fan out", { timeout: 300_000 }, async () => {
    // EVENTS events, each making 100 deliveries and 200 security events (all keyed by the big tenant).
    const events = Array.from({ length: 20 }, (_, i) => ({ event_name: 'video_play', video_id: big.videoId, visitor_id: `vis_big_${i}` }));
    for (let r = 0; r < EVENTS / 20; r++) {
      const res = await eventually(async () => {
        const x = await s.collect(big.player_key, events.map((e) => ({ ...e, session_id: `ses_big_${r}` })));
        return x.status === 503 ? undefined : x;
      }, 30_000, 250);
      expect(res.status).toBe(202);
    }
    // The fan-out is busy with the big tenant: wait until its deliveries are arriving.
    await eventually(async () => (bigDeliveries(rx) >= 500 ? true : undefined), 60_000, 100);

    const dest = await s.admin('POST', `/tenants/${small.id}/destinations`, { name: 'small', url: rx.url('/small') });
    expect(dest.status).toBe(201);
    const started = Date.now();
    const test = await s.admin('POST', `/tenants/${small.id}/destinations/${dest.body.id}/test`);
    expect(test.status).toBe(202);
    await eventually(async () => {
      const d = await s.admin('GET', `/tenants/${small.id}/deliveries/${test.body.delivery_id}`);
      return d.body?.status === 'succeeded' ? true : undefined;
    }, 20_000, 100);
    const tookMs = Date.now() - started;
    const bigSoFar = bigDeliveries(rx);
    console.log(`small tenant's Test delivery succeeded in ${tookMs} ms while the big tenant had ${bigSoFar} of ${EVENTS * WITH_SECRET} deliveries received`);
    // The big tenant still had work queued: the Test delivery did not wait for it to drain.
    expect(bigSoFar).toBeLessThan(EVENTS * WITH_SECRET);
    expect(tookMs).toBeLessThan(15_000);

    // Everything of the big tenant arrives: no produce refused for its size, none retried forever.
    const progress = setInterval(() => {
      void s.request('GET', '/metrics').then((m) => {
        const attempts = parsePrometheusText(m.text, 'webhook_attempts_total').map((x) => `${x.labels.outcome}/${x.labels.error_class} ${x.value}`);
        console.log(`big tenant deliveries received: ${bigDeliveries(rx)}; webhook attempts (outcome/error_class): ${attempts.join(' ')}`);
      });
    }, 10_000);
    try {
      await eventually(async () => (bigDeliveries(rx) >= EVENTS * WITH_SECRET ? true : undefined), 240_000, 500);
    } finally {
      clearInterval(progress);
    }
    expect(rx.requests.filter((q) => q.path.startsWith('/big-integration/'))).toHaveLength(0);
    const metrics = await s.request('GET', '/metrics');
    expect(metricSum(metrics.text, 'kafka_produce_failures_total')).toBe(0);
    expect(metricSum(metrics.text, 'dead_lettered_records_total')).toBe(0);
    expect(metricSum(metrics.text, 'security_events_total')).toBe(EVENTS * WITHOUT_SECRET);
    const ready = await s.request('GET', '/readyz');
    expect(ready.status, JSON.stringify(ready.body)).toBe(200);
  });
});
