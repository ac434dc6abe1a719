import { describe, expect, it } from 'vitest';
import { PoisonRecordError } from '../../shared/kafka/poison.ts';
import { decodeVisitorSnapshot, visitorRow } from './visitor-rows.ts';

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
const message = (value: unknown) => ({ value: value === null ? null : Buffer.from(typeof value === 'string' ? value : JSON.stringify(value)) });

describe('visitor snapshots', () => {
  it('decodes a snapshot and makes its row, versioned by the offset', () => {
    const d = decodeVisitorSnapshot(message(snapshot));
    expect(d).toEqual({ kind: 'value', value: snapshot });
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

  it('passes tombstones on and refuses anything else as poison', () => {
    expect(decodeVisitorSnapshot(message(null))).toEqual({ kind: 'tombstone' });
    for (const bad of ['', '{', { ...snapshot, score: 101 }, { ...snapshot, visitor_id: 'nope' }, { ...snapshot, last_seen: 1e15 }, { ...snapshot, videos: ['x'] }]) {
      expect(() => decodeVisitorSnapshot(message(bad))).toThrow(PoisonRecordError);
    }
  });
});
