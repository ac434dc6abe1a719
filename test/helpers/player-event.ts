import type { PlayerEventRecord } from '../../schemas/records.ts';

/** One valid player-event record (a heartbeat with a client event id), for tests of the record's schemas. */
export const PLAYER_EVENT: PlayerEventRecord = {
  event_id: '3f1c2b8e-4b1a-4c55-9a57-0d7f8f7d2c11',
  tenant_id: 'a9e4d1b2-5c6f-4e7a-8b9c-0d1e2f3a4b5c',
  video_id: '0f8fad5b-d9cb-469f-a165-70867728950e',
  session_id: 'ses_abc',
  visitor_id: 'vis_xyz',
  event_name: 'heartbeat',
  timestamp: 1_763_700_000_123,
  received_at: 1_763_700_000_456,
  current_time: 12.5,
  duration: 120,
  watched_percentage: 10.4,
  play_ms: 5000,
  focus_ms: 4000,
  seek_from: null,
  seek_to: null,
  utm_source: 'newsletter',
  utm_campaign: null,
  ctwa_clid: null,
  external_lead_id: 'lead-1',
  source: 'player',
  conversion_value: null,
  conversion_currency: null,
  event_id_from_client: true,
  lead: null,
};

/** One valid event of a /v1/collect body (a video_play) of video `videoId`; `over` replaces or adds fields. */
export const collectEvent = (videoId: string, over: Record<string, unknown> = {}) => ({
  event_name: 'video_play',
  video_id: videoId,
  session_id: 'ses_1',
  visitor_id: 'vis_1',
  current_time: 12.5,
  duration: 90,
  watched_percentage: 13.9,
  ...over,
});
