import { describe, expect, it } from 'vitest';
import { PoisonRecordError } from '../../shared/kafka/poison.ts';
import { visitorSnapshot, type VisitorState } from '../derived/intent-rules.ts';
import { decodeVisitorState, visitorRow } from './visitor-rows.ts';

const snapshot = {
  tenant_id: '0f8fad5b-d9cb-469f-a165-70867728950e',
  visitor_id: 'vis_1',
  score: 73,
  score_version: 1,
  factors: { watched_percent: 1, focus_time_ratio: 1, cta_clicks: 1, rewinds: 0 },
  first_seen: Date.UTC(2026, 0, 1, 12),
  last_seen: Date.UTC(2026, 0, 1, 12, 5),
  videos: ['7c9e6679-7425-40de-944b-e07fc1f90ae7'],
  lead_at: Date.UTC(2026, 0, 1, 12, 5),
};
const key = `v:${snapshot.tenant_id}:vis_1`;
/** The derived-events service's state of the visitor above (score 73: watched all, all focused, one click). */
const state: VisitorState = {
  inputs: { max_watched_percentage: 100, play_ms: 10_000, focus_ms: 10_000, cta_clicks: 1, rewinds: 0 },
  src: { '0': 12 },
  recent: ['e1'],
  lead: 1,
  leadAt: snapshot.lead_at,
  firstSeen: snapshot.first_seen,
  lastSeen: snapshot.last_seen,
  seenAt: snapshot.last_seen,
  videos: snapshot.videos,
};
const message = (k: string, value: unknown) => ({ key: Buffer.from(k), value: value === null ? null : Buffer.from(typeof value === 'string' ? value : JSON.stringify(value)) });

describe('visitor rows from the derived-events state', () => {
  it("makes a visitor's snapshot from its state, and its row, versioned by the offset", () => {
    expect(visitorSnapshot(key, state)).toEqual(snapshot);
    expect(decodeVisitorState(message(key, state))).toEqual({ kind: 'value', value: snapshot });
    expect(visitorRow(snapshot, '42')).toEqual({
      tenant_id: snapshot.tenant_id,
      visitor_id: 'vis_1',
      score: 73,
      score_version: 1,
      watched_percent: 1,
      focus_time_ratio: 1,
      cta_clicks: 1,
      rewinds: 0,
      first_seen: '2026-01-01 12:00:00.000',
      last_seen: '2026-01-01 12:05:00.000',
      videos: snapshot.videos,
      lead_at: '2026-01-01 12:05:00.000',
      version: '42',
    });
    expect(visitorRow({ ...snapshot, lead_at: null }, '0').lead_at).toBeNull();
  });

  it('passes over session state, stream time and tombstones, and refuses a broken visitor state as poison', () => {
    expect(decodeVisitorState(message(key, null))).toEqual({ kind: 'tombstone' });
    expect(decodeVisitorState(message(`s:${snapshot.tenant_id}:ses_1`, { session_id: 'ses_1' }))).toEqual({ kind: 'tombstone' });
    expect(decodeVisitorState(message('t', 12345))).toEqual({ kind: 'tombstone' });
    for (const [k, bad] of [
      [key, ''],
      [key, '{'],
      [key, { ...state, inputs: undefined }],
      [key, { ...state, lastSeen: 1e15 }],
      [key, { ...state, videos: ['x'] }],
      [`v:${snapshot.tenant_id}:nope`, state],
    ] as const) {
      expect(() => decodeVisitorState(message(k, bad))).toThrow(PoisonRecordError);
    }
  });
});
