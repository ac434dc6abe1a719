import { createHmac } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import type { DeliveryRecord, DestinationRecord, PlayerEventRecord } from '../../schemas/records.ts';
import { deliveryId, payloadOf, uuidV5 } from '../../shared/webhooks/fanout-plan.ts';
import { deferral, deferralsOf, LogThrottle, planAttempt, planFanOut, securityEvent, settlement } from './delivery-steps.ts';

const TENANT = '11111111-1111-4111-8111-111111111111';
const EVENT = '22222222-2222-4222-8222-222222222222';
const DELAYS = [60_000, 300_000, 1_800_000] as const;
const NOW = Date.UTC(2026, 0, 2, 3, 4, 5, 678);

function destination(n: number, over: Partial<DestinationRecord> = {}): DestinationRecord {
  return {
    id: `aaaaaaaa-aaaa-4aaa-8aaa-${String(n).padStart(12, '0')}`,
    tenant_id: TENANT,
    kind: 'webhook',
    name: `d${n}`,
    url: `https://hooks${n}.example.com:8443/secret/path?token=abc`,
    events: [],
    secret_enc: 'sealed',
    secret_hint: 'whsec_…abcd',
    created_at: 1,
    updated_at: 2,
    ...over,
  };
}

const event: PlayerEventRecord = {
  event_id: EVENT,
  tenant_id: TENANT,
  video_id: '33333333-3333-4333-8333-333333333333',
  session_id: 'ses_1',
  visitor_id: 'vis_1',
  event_name: 'video_play',
  timestamp: NOW - 1000,
  received_at: NOW - 500,
  current_time: 1.5,
  duration: 60,
  watched_percentage: 2.5,
  play_ms: null,
  focus_ms: null,
  seek_from: null,
  seek_to: null,
  utm_source: null,
  utm_campaign: 'c',
  ctwa_clid: null,
  external_lead_id: null,
  source: 'player',
  conversion_value: null,
  conversion_currency: null,
};

function delivery(over: Partial<DeliveryRecord> = {}): DeliveryRecord {
  const dest = destination(1);
  return {
    delivery_id: deliveryId(EVENT, dest.id),
    tenant_id: TENANT,
    destination_id: dest.id,
    event_id: EVENT,
    event_name: 'video_play',
    body: payloadOf(event),
    attempt: 1,
    due_at: NOW - 10,
    created_at: NOW - 20,
    origin: 'event',
    ...over,
  };
}

describe('planFanOut', () => {
  it('makes one first-attempt delivery per selecting destination with a secret', () => {
    const dests = [destination(1), destination(2, { events: ['video_play', 'video_pause'] }), destination(3, { events: ['video_pause'] })];
    const plan = planFanOut(event, dests, NOW);
    expect(plan.security).toEqual([]);
    expect(plan.deliveries).toEqual(
      [dests[0]!, dests[1]!].map((d) => ({
        delivery_id: deliveryId(EVENT, d.id),
        tenant_id: TENANT,
        destination_id: d.id,
        event_id: EVENT,
        event_name: 'video_play',
        body: payloadOf(event),
        attempt: 1,
        due_at: NOW,
        created_at: NOW,
        origin: 'event',
      })),
    );
  });

  it('makes a security event instead of a delivery for a selecting destination without a secret', () => {
    const noSecret = destination(4, { secret_enc: null });
    const integration = destination(5, { secret_enc: null, kind: 'integration' });
    const notSelecting = destination(6, { secret_enc: null, events: ['video_pause'] });
    const plan = planFanOut(event, [noSecret, destination(1), integration, notSelecting], NOW);
    expect(plan.deliveries.map((d) => d.destination_id)).toEqual([destination(1).id]);
    expect(plan.security).toEqual([securityEvent(noSecret, EVENT, 'video_play', NOW), securityEvent(integration, EVENT, 'video_play', NOW)]);
    expect(plan.security.map((s) => s.record.kind)).toEqual(['webhook_missing_secret', 'integration_missing_webhook_secret']);
  });

  it('delivers nothing for a signal (heartbeat, seek): only the events of spec 6.1 are delivered', () => {
    const plan = planFanOut({ ...event, event_name: 'heartbeat' }, [destination(1), destination(2, { secret_enc: null })], NOW);
    expect(plan).toEqual({ deliveries: [], security: [] });
    expect(planFanOut({ ...event, event_name: 'conversion' }, [destination(1)], NOW).deliveries).toHaveLength(1);
  });
});

describe('securityEvent', () => {
  it('names the host only, keyed by tenant, with a stable id per destination and event', () => {
    const dest = destination(4, { secret_enc: null });
    const out = securityEvent(dest, EVENT, 'video_play', NOW);
    expect(out).toEqual({
      topic: 'securityEvents',
      subject: 'security-event',
      key: TENANT,
      record: {
        id: uuidV5(`security:${dest.id}`, EVENT),
        kind: 'webhook_missing_secret',
        tenant_id: TENANT,
        endpoint_id: dest.id,
        host: 'hooks4.example.com:8443',
        event_id: EVENT,
        event_name: 'video_play',
        occurred_at: NOW,
      },
    });
    expect(JSON.stringify(out)).not.toMatch(/secret\/path|token=abc/);
  });
});

describe('planAttempt', () => {
  it('fails a delivery whose destination was deleted, without a security event', () => {
    const d = delivery({ attempt: 2 });
    const plan = planAttempt(d, undefined, '', NOW);
    expect(plan).toEqual({
      kind: 'settled',
      security: [],
      out: [
        {
          topic: 'webhookAttempts',
          subject: 'webhook-attempt',
          key: d.delivery_id,
          record: expect.objectContaining({ delivery_id: d.delivery_id, attempt: 2, state: 'failed', error_class: 'destination_deleted', recorded_at: NOW, started_at: null }),
        },
      ],
    });
  });

  it('fails a delivery whose destination has no secret and records a security event', () => {
    const d = delivery();
    const dest = destination(1, { secret_enc: null });
    const plan = planAttempt(d, dest, '', NOW);
    if (plan.kind !== 'settled') throw new Error('expected settled');
    expect(plan.out).toHaveLength(1);
    expect(plan.out[0]!.record).toMatchObject({ state: 'failed', error_class: 'missing_secret', attempt: 1, delivery_created_at: d.created_at });
    expect(plan.security).toEqual([securityEvent(dest, d.event_id, d.event_name, NOW)]);
  });

  it('signs and posts a delivery whose destination has a secret', () => {
    const d = delivery();
    const dest = destination(1);
    const plan = planAttempt(d, dest, 'whsec_test', NOW);
    if (plan.kind !== 'post') throw new Error('expected post');
    const ts = Math.floor(NOW / 1000);
    const expected = createHmac('sha256', 'whsec_test').update(`${ts}.${d.body}`).digest('hex');
    expect(plan).toEqual({
      kind: 'post',
      url: dest.url,
      host: 'hooks1.example.com:8443',
      body: d.body,
      startedAt: NOW,
      headers: {
        'Content-Type': 'application/json',
        'X-Player-Event': 'video_play',
        'X-Player-Signature': expected,
        'X-Player-Timestamp': String(ts),
        'X-Player-Delivery-Id': d.delivery_id,
      },
    });
  });
});

describe('settlement', () => {
  const opts = { startedAt: NOW - 250, now: NOW, delaysMs: DELAYS, host: 'hooks1.example.com:8443' };

  it('a success records one succeeded attempt and nothing else', () => {
    const d = delivery({ attempt: 3 });
    const s = settlement(d, { ok: true, status: 204, durationMs: 12.6 }, opts);
    expect(s.out).toEqual([
      {
        topic: 'webhookAttempts',
        subject: 'webhook-attempt',
        key: d.delivery_id,
        record: {
          delivery_id: d.delivery_id,
          tenant_id: TENANT,
          destination_id: d.destination_id,
          event_id: EVENT,
          event_name: 'video_play',
          attempt: 3,
          state: 'succeeded',
          started_at: NOW - 250,
          duration_ms: 13,
          status_code: 204,
          error_class: null,
          next_attempt_at: null,
          delivery_created_at: d.created_at,
          recorded_at: NOW,
          body: d.body,
        },
      },
    ]);
    expect(s.labels).toEqual({ outcome: 'succeeded', error_class: 'none' });
    expect(s.durationSec).toBeCloseTo(0.0126, 6);
    expect(s.failureLog).toBeNull();
  });

  it.each([
    [1, 'retry1', DELAYS[0]],
    [2, 'retry2', DELAYS[1]],
    [3, 'retry3', DELAYS[2]],
  ] as const)('a failed attempt %i goes on %s, due after its delay', (attempt, topic, delay) => {
    const d = delivery({ attempt });
    const s = settlement(d, { ok: false, status: 503, durationMs: 40 }, opts);
    expect(s.out).toHaveLength(2);
    expect(s.out[0]!.record).toMatchObject({ state: 'retrying', attempt, status_code: 503, error_class: 'http_status', next_attempt_at: NOW + delay });
    expect(s.out[1]).toEqual({
      topic,
      subject: 'delivery',
      key: d.delivery_id,
      record: { ...d, attempt: attempt + 1, due_at: NOW + delay },
      headers: { 'due-at': String(NOW + delay) },
    });
    expect(s.labels).toEqual({ outcome: 'retrying', error_class: 'http_status' });
  });

  it('a failed attempt 4 goes to the failed topic unchanged', () => {
    const d = delivery({ attempt: 4 });
    const s = settlement(d, { ok: false, errorClass: 'timeout', durationMs: 10_000 }, opts);
    expect(s.out[0]!.record).toMatchObject({ state: 'failed', attempt: 4, status_code: null, error_class: 'timeout', next_attempt_at: null });
    expect(s.out[1]).toEqual({ topic: 'webhooksFailed', subject: 'delivery', key: d.delivery_id, record: d });
    expect(s.labels).toEqual({ outcome: 'failed', error_class: 'timeout' });
  });

  it('a failed manual reprocess is failed again after its one attempt', () => {
    const d = delivery({ attempt: 1, origin: 'reprocess' });
    const s = settlement(d, { ok: false, status: 500, durationMs: 5 }, opts);
    expect(s.out.map((o) => o.topic)).toEqual(['webhookAttempts', 'webhooksFailed']);
    expect(s.labels.outcome).toBe('failed');
  });

  it('a failure logs the host, never the URL or the body', () => {
    const d = delivery({ attempt: 2 });
    const s = settlement(d, { ok: false, status: 500, durationMs: 5 }, opts);
    expect(s.failureLog).toEqual({
      delivery_id: d.delivery_id,
      destination_id: d.destination_id,
      host: 'hooks1.example.com:8443',
      attempt: 2,
      status: 500,
      error_class: undefined,
      outcome: 'retrying',
    });
    expect(JSON.stringify(s.failureLog)).not.toMatch(/secret\/path|token=abc|ses_1/);
  });

  it('a backlogged lane settles as a failed attempt of no duration and no host', () => {
    const d = delivery({ attempt: 1 });
    const s = settlement(d, { ok: false, errorClass: 'destination_backlogged', durationMs: 0 }, { startedAt: NOW, now: NOW, delaysMs: DELAYS });
    expect(s.out[0]!.record).toMatchObject({ state: 'retrying', error_class: 'destination_backlogged', duration_ms: 0, started_at: NOW });
    expect(s.out[1]!.topic).toBe('retry1');
    expect(s.labels).toEqual({ outcome: 'retrying', error_class: 'destination_backlogged' });
    expect(s.failureLog).toMatchObject({ host: undefined, error_class: 'destination_backlogged' });
  });
});

describe('deferral', () => {
  it('puts the delivery on the first tier, due a first-retry delay from now, without using an attempt', () => {
    const d = delivery({ attempt: 2 });
    expect(deferral(d, 3, NOW, DELAYS)).toEqual({
      topic: 'retry1',
      subject: 'delivery',
      key: d.delivery_id,
      record: { ...d, due_at: NOW + DELAYS[0] },
      headers: { 'due-at': String(NOW + DELAYS[0]), deferrals: '3' },
    });
  });

  it('reads the count back from its header', () => {
    expect(deferralsOf(undefined)).toBe(0);
    expect(deferralsOf(Buffer.from('2'))).toBe(2);
    expect(deferralsOf('3')).toBe(3);
    expect(deferralsOf(Buffer.from('many'))).toBe(0);
    expect(deferralsOf(deferral(delivery(), 1, NOW, DELAYS).headers!.deferrals)).toBe(1);
  });
});

describe('LogThrottle', () => {
  it('lets one line a minute through per key', () => {
    const t = new LogThrottle(60_000);
    expect(t.due('a', NOW)).toBe(true);
    expect(t.due('a', NOW + 59_999)).toBe(false);
    expect(t.due('b', NOW + 1)).toBe(true);
    expect(t.due('a', NOW + 60_000)).toBe(true);
    expect(t.due('a', NOW + 60_001)).toBe(false);
  });
});
