import { describe, expect, it } from 'vitest';
import type { VideoRecord } from '../../schemas/records.ts';
import { ApiError } from '../../shared/http/errors.ts';
import { toVideoId } from '../../shared/ids.ts';
import { collectEvent } from '../../test/helpers/player-event.ts';
import { CollectBody, ConversionBody, MAX_OCCURRED_AT_AGE_MS, type CollectEvent } from './collect.schema.ts';
import { collectRecords, conversionRecord, eventTime, type RecordContext } from './event-record.ts';

/**
 * Record building from a request that passed its schema: no Kafka, no
 * Fastify. Bodies go through the real zod schemas first, as the route does.
 */

const TENANT = '11111111-1111-4111-8111-111111111111';
const OTHER = '22222222-2222-4222-8222-222222222222';
const OWN: VideoRecord = { id: 'aaaaaaaa-aaaa-4aaa-8aaa-aaaaaaaaaaaa', tenant_id: TENANT, title: 'own', duration_sec: 90, created_at: 1, pitch_at_sec: null, offer_window_sec: 60 };
const FOREIGN: VideoRecord = { id: 'bbbbbbbb-bbbb-4bbb-8bbb-bbbbbbbbbbbb', tenant_id: OTHER, title: 'theirs', duration_sec: 30, created_at: 1, pitch_at_sec: null, offer_window_sec: 60 };
const RECEIVED = Date.UTC(2025, 5, 1, 12, 0, 0);

const ids = () => {
  let n = 0;
  return () => `00000000-0000-4000-8000-${String(++n).padStart(12, '0')}`;
};
const ctx = (over: Partial<RecordContext> = {}): RecordContext => ({
  tenantId: TENANT,
  received: RECEIVED,
  videoById: (id) => [OWN, FOREIGN].find((v) => v.id === id),
  newId: ids(),
  ...over,
});
const event = (over: Record<string, unknown> = {}) => collectEvent(toVideoId(OWN.id), over);
const parsed = (...events: Record<string, unknown>[]): CollectEvent[] => CollectBody.parse({ events }).events;

/** The ApiError `fn` throws, for assertions on its code, status, message and errors. */
function refusal(fn: () => unknown): ApiError {
  try {
    fn();
  } catch (err) {
    if (err instanceof ApiError) return err;
    throw err;
  }
  throw new Error('expected an ApiError, nothing was thrown');
}

describe('collectRecords', () => {
  it('looks a video up again only when the id changes, and still refuses a foreign one at its own index', () => {
    const SECOND: VideoRecord = { ...OWN, id: 'cccccccc-cccc-4ccc-8ccc-cccccccccccc', title: 'second' };
    const looked: string[] = [];
    const videoById = (id: string) => (looked.push(id), [OWN, SECOND, FOREIGN].find((v) => v.id === id));
    const own = toVideoId(OWN.id);
    const second = toVideoId(SECOND.id);
    const records = collectRecords(parsed(event({ video_id: own }), event({ video_id: own }), event({ video_id: second }), event({ video_id: own }), event({ video_id: OWN.id })), ctx({ videoById }));
    expect(records.map((r) => r.video_id)).toEqual([OWN.id, OWN.id, SECOND.id, OWN.id, OWN.id]);
    expect(looked).toEqual([OWN.id, SECOND.id, OWN.id, OWN.id]);
    const err = refusal(() => collectRecords(parsed(event(), event(), event({ video_id: toVideoId(FOREIGN.id) })), ctx({ videoById })));
    expect([err.code, err.message]).toEqual(['forbidden', 'body.events.2.video_id: the video belongs to another tenant']);
  });

  it('builds one player record per event, stamped at receipt, with a server id when the player sent none', () => {
    const [r, ...rest] = collectRecords(parsed(event()), ctx());
    expect(rest).toEqual([]);
    expect(r).toEqual({
      event_id: '00000000-0000-4000-8000-000000000001',
      event_id_from_client: false,
      tenant_id: TENANT,
      video_id: OWN.id,
      session_id: 'ses_1',
      visitor_id: 'vis_1',
      event_name: 'video_play',
      timestamp: RECEIVED,
      received_at: RECEIVED,
      current_time: 12.5,
      duration: 90,
      watched_percentage: 13.9,
      play_ms: null,
      focus_ms: null,
      seek_from: null,
      seek_to: null,
      utm_source: null,
      utm_campaign: null,
      ctwa_clid: null,
      external_lead_id: null,
      source: 'player',
      conversion_value: null,
      conversion_currency: null,
    });
  });

  it("keeps the player's event id in lower case, its occurred_at, attribution, and the signal fields of heartbeat and seek only", () => {
    const at = '2025-06-01T11:59:00.250+00:00';
    const records = collectRecords(
      parsed(
        event({ event_id: '0192F0C4-8F3E-7B6A-9D2E-5C4B3A291807', occurred_at: at, utm_source: 'news', ctwa_clid: 'c1', external_lead_id: 'l1' }),
        event({ event_name: 'heartbeat', play_ms: 5000, focus_ms: 4000, from: 1, to: 2 }),
        event({ event_name: 'seek', from: 40, to: 10, play_ms: 7 }),
        // The UUID form of the video id names the same video.
        event({ video_id: OWN.id.toUpperCase() }),
      ),
      ctx(),
    );
    expect(records.map((r) => r.event_id)).toEqual(['0192f0c4-8f3e-7b6a-9d2e-5c4b3a291807', ...['1', '2', '3'].map((n) => `00000000-0000-4000-8000-00000000000${n}`)]);
    expect(records.map((r) => r.event_id_from_client)).toEqual([true, false, false, false]);
    expect(records[0]).toMatchObject({ timestamp: Date.parse(at), received_at: RECEIVED, utm_source: 'news', utm_campaign: null, ctwa_clid: 'c1', external_lead_id: 'l1' });
    expect(records[1]).toMatchObject({ play_ms: 5000, focus_ms: 4000, seek_from: null, seek_to: null });
    expect(records[2]).toMatchObject({ play_ms: null, focus_ms: null, seek_from: 40, seek_to: 10 });
    expect(records[3]!.video_id).toBe(OWN.id);
  });

  it('refuses an unknown video with 422 naming the event, and another tenant\'s video with 403', () => {
    const unknown = refusal(() => collectRecords(parsed(event(), event({ video_id: toVideoId('cccccccc-cccc-4ccc-8ccc-cccccccccccc') })), ctx()));
    expect(unknown).toMatchObject({ code: 'validation_failed', status: 422, message: 'body.events.1.video_id: unknown video' });
    expect(unknown.errors).toEqual([{ path: 'body.events.1.video_id', message: 'unknown video' }]);

    const foreign = refusal(() => collectRecords(parsed(event({ video_id: toVideoId(FOREIGN.id) })), ctx()));
    expect(foreign).toMatchObject({ code: 'forbidden', status: 403, message: 'body.events.0.video_id: the video belongs to another tenant' });
    expect(foreign.errors).toBeUndefined();
  });

  it('refuses the first bad event in order, the video before the time of the same event', () => {
    const err = refusal(() =>
      collectRecords(parsed(event({ occurred_at: '1999-01-01T00:00:00Z' }), event({ video_id: toVideoId(FOREIGN.id) })), ctx()),
    );
    expect(err.message).toBe('body.events.0.occurred_at: more than 30 days in the past');
    const both = refusal(() => collectRecords(parsed(event({ video_id: toVideoId(FOREIGN.id), occurred_at: '1999-01-01T00:00:00Z' })), ctx()));
    expect(both.code).toBe('forbidden');
  });
});

describe('eventTime', () => {
  it('accepts 30 days before receipt up to 5 minutes after it, and refuses either side with 422 naming the path', () => {
    expect(MAX_OCCURRED_AT_AGE_MS).toBe(30 * 86_400_000);
    expect(eventTime(undefined, RECEIVED, 'p')).toBe(RECEIVED);
    expect(eventTime(new Date(RECEIVED - MAX_OCCURRED_AT_AGE_MS).toISOString(), RECEIVED, 'p')).toBe(RECEIVED - MAX_OCCURRED_AT_AGE_MS);
    expect(eventTime(new Date(RECEIVED + 300_000).toISOString(), RECEIVED, 'p')).toBe(RECEIVED + 300_000);
    const early = refusal(() => eventTime(new Date(RECEIVED - MAX_OCCURRED_AT_AGE_MS - 1).toISOString(), RECEIVED, 'body.occurred_at'));
    expect(early).toMatchObject({
      status: 422,
      message: 'body.occurred_at: more than 30 days in the past',
      errors: [{ path: 'body.occurred_at', message: 'more than 30 days in the past' }],
    });
    // The bound moves with the time of receipt, not with the calendar.
    expect(refusal(() => eventTime('2000-01-01T00:00:00.000Z', RECEIVED, 'p')).status).toBe(422);
    const late = refusal(() => eventTime(new Date(RECEIVED + 300_001).toISOString(), RECEIVED, 'x'));
    expect(late).toMatchObject({ status: 422, errors: [{ path: 'x', message: 'more than 5 minutes in the future' }] });
  });
});

describe('conversionRecord', () => {
  it('builds a server-side conversion event with the video duration, value and currency', () => {
    const body = ConversionBody.parse({ visitor_id: 'vis_9', video_id: toVideoId(OWN.id), value: 49.5, currency: 'EUR', external_lead_id: 'crm-1' });
    expect(conversionRecord(body, ctx())).toEqual({
      event_id: '00000000-0000-4000-8000-000000000001',
      event_id_from_client: false,
      tenant_id: TENANT,
      video_id: OWN.id,
      session_id: 'ses_server',
      visitor_id: 'vis_9',
      event_name: 'conversion',
      timestamp: RECEIVED,
      received_at: RECEIVED,
      current_time: 0,
      duration: 90,
      watched_percentage: 0,
      play_ms: null,
      focus_ms: null,
      seek_from: null,
      seek_to: null,
      utm_source: null,
      utm_campaign: null,
      ctwa_clid: null,
      external_lead_id: 'crm-1',
      source: 'server',
      conversion_value: 49.5,
      conversion_currency: 'EUR',
    });
  });

  it('keeps a given session and occurred_at, and refuses videos and times as the player intake does', () => {
    const at = '2025-05-20T10:00:00Z';
    const r = conversionRecord(ConversionBody.parse({ visitor_id: 'vis_9', session_id: 'ses_7', video_id: OWN.id, occurred_at: at }), ctx());
    expect(r).toMatchObject({ session_id: 'ses_7', timestamp: Date.parse(at), conversion_value: null, conversion_currency: null, external_lead_id: null });

    const foreign = refusal(() => conversionRecord(ConversionBody.parse({ visitor_id: 'vis_9', video_id: FOREIGN.id }), ctx()));
    expect(foreign).toMatchObject({ status: 403, message: 'body.video_id: the video belongs to another tenant' });
    const old = refusal(() => conversionRecord(ConversionBody.parse({ visitor_id: 'vis_9', video_id: OWN.id, occurred_at: '1990-01-01T00:00:00Z' }), ctx()));
    expect(old.errors).toEqual([{ path: 'body.occurred_at', message: 'more than 30 days in the past' }]);
  });
});
