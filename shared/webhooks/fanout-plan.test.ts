import { describe, expect, it } from 'vitest';
import { deliveryId, hostOf, nextStep, payloadOf, selects, uuidV5 } from './fanout-plan.ts';

describe('fan-out plan', () => {
  it('uuidV5 matches the RFC 4122 reference vector', () => {
    // The DNS namespace and "www.example.com" (Python's uuid.uuid5 gives the same).
    expect(uuidV5('www.example.com', '6ba7b810-9dad-11d1-80b4-00c04fd430c8')).toBe('2ed6657d-e927-568b-95e1-2665a8aea6a2');
  });

  it('delivery ids are stable per (event, destination) and differ otherwise', () => {
    const e = '3f1c2b8e-4b1a-4c55-9a57-0d7f8f7d2c11';
    const d1 = 'a9e4d1b2-5c6f-4e7a-8b9c-0d1e2f3a4b5c';
    const d2 = 'b9e4d1b2-5c6f-4e7a-8b9c-0d1e2f3a4b5c';
    expect(deliveryId(e, d1)).toBe(deliveryId(e, d1));
    expect(deliveryId(e, d1)).not.toBe(deliveryId(e, d2));
    expect(deliveryId(e, d1)).toMatch(/^[0-9a-f]{8}-[0-9a-f]{4}-5[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);
  });

  it('selects the events of spec 6.1, never a signal; an empty selection means every event', () => {
    expect(selects({ events: [] }, 'video_play')).toBe(true);
    expect(selects({ events: [] }, 'conversion')).toBe(true);
    expect(selects({ events: [] }, 'high_intent_lead')).toBe(true);
    expect(selects({ events: ['conversion', 'video_play'] }, 'conversion')).toBe(true);
    expect(selects({ events: ['video_pause'] }, 'video_play')).toBe(false);
    expect(selects({ events: [] }, 'heartbeat')).toBe(false);
    expect(selects({ events: ['heartbeat'] }, 'heartbeat')).toBe(false);
    expect(selects({ events: [] }, 'toString')).toBe(false);
  });

  it('retries on tiers 1m, 5m, 30m, fails after attempt 4, reprocess is one attempt', () => {
    const delaysMs = [60_000, 300_000, 1_800_000];
    const base = { ok: false, origin: 'event' as const, now: 1000, delaysMs };
    expect(nextStep({ ...base, attempt: 1 })).toEqual({ kind: 'retry', tier: 0, nextAttempt: 2, dueAt: 61_000 });
    expect(nextStep({ ...base, attempt: 2 })).toEqual({ kind: 'retry', tier: 1, nextAttempt: 3, dueAt: 301_000 });
    expect(nextStep({ ...base, attempt: 3 })).toEqual({ kind: 'retry', tier: 2, nextAttempt: 4, dueAt: 1_801_000 });
    expect(nextStep({ ...base, attempt: 4 })).toEqual({ kind: 'failed' });
    expect(nextStep({ ...base, attempt: 5, origin: 'reprocess' })).toEqual({ kind: 'failed' });
    expect(nextStep({ ...base, attempt: 2, ok: true })).toEqual({ kind: 'succeeded' });
  });

  it('serialises the spec 2.7 payload with every field', () => {
    const body = payloadOf({
      tenant_id: 't',
      video_id: 'v',
      session_id: 'ses_1',
      visitor_id: 'vis_1',
      event_name: 'video_play',
      current_time: 1.5,
      duration: 60,
      watched_percentage: 2.5,
      utm_source: null,
      utm_campaign: 'c',
      ctwa_clid: null,
      external_lead_id: null,
      timestamp: Date.UTC(2026, 0, 2, 3, 4, 5, 6),
    });
    expect(Object.keys(JSON.parse(body))).toEqual([
      'tenant_id', 'video_id', 'session_id', 'visitor_id', 'event_name', 'current_time', 'duration',
      'watched_percentage', 'utm_source', 'utm_campaign', 'ctwa_clid', 'external_lead_id', 'created_at',
    ]);
    expect(JSON.parse(body).created_at).toBe('2026-01-02T03:04:05.006Z');
  });

  it('adds the value to a conversion, and the score and factors to a high_intent_lead', () => {
    const base = {
      tenant_id: 't', video_id: 'v', session_id: 'ses_1', visitor_id: 'vis_1', current_time: 0, duration: 60, watched_percentage: 0,
      utm_source: null, utm_campaign: null, ctwa_clid: null, external_lead_id: 'crm-7', timestamp: 0, lead: null,
    };
    const conversion = JSON.parse(payloadOf({ ...base, event_name: 'conversion', conversion_value: 49.9, conversion_currency: 'EUR' }));
    expect(conversion).toMatchObject({ event_name: 'conversion', conversion_value: 49.9, conversion_currency: 'EUR' });
    const lead = { score: 82, score_version: 1, watched_percent: 0.9, focus_time_ratio: 0.75, cta_clicks: 1, rewinds: 2 };
    const body = JSON.parse(payloadOf({ ...base, event_name: 'high_intent_lead', lead }));
    expect(Object.keys(body).slice(13)).toEqual(['score', 'score_version', 'factors']);
    expect(body).toMatchObject({ score: 82, score_version: 1, factors: { watched_percent: 0.9, focus_time_ratio: 0.75, cta_clicks: 1, rewinds: 2 } });
    expect(Object.keys(JSON.parse(payloadOf({ ...base, event_name: 'video_play' })))).toHaveLength(13);
  });

  it('keeps only the host of a URL', () => {
    expect(hostOf('https://hooks.example.com:8443/secret/path?token=x')).toBe('hooks.example.com:8443');
    expect(hostOf('not a url')).toBe('invalid-url');
  });
});
