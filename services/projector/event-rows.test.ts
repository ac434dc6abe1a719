import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import type { PlayerEventRecord } from '../../schemas/records.ts';
import { chTime } from '../../shared/clickhouse/clickhouse.ts';
import { candidateLine, EVENT_COLUMNS, eventLine, eventRow, retryCandidate } from './event-rows.ts';

const text = fc.string({ unit: 'binary', maxLength: 20 });
const nullableText = fc.option(text, { nil: null });
const finite = fc.double({ noNaN: true, noDefaultInfinity: true });
const nullableFinite = fc.option(finite, { nil: null });
const millis = fc.integer({ min: 0, max: 4_102_444_800_000 });

const record: fc.Arbitrary<PlayerEventRecord> = fc.record(
  {
    event_id: fc.uuid(),
    tenant_id: fc.uuid(),
    video_id: fc.uuid(),
    session_id: fc.constantFrom('ses_a', 'ses_B-9_z'),
    visitor_id: fc.constantFrom('vis_a', 'vis_B-9_z'),
    event_name: text,
    timestamp: millis,
    received_at: millis,
    current_time: finite,
    duration: finite,
    watched_percentage: finite,
    play_ms: fc.option(fc.integer(), { nil: null }),
    focus_ms: fc.option(fc.integer(), { nil: null }),
    seek_from: nullableFinite,
    seek_to: nullableFinite,
    utm_source: nullableText,
    utm_campaign: nullableText,
    ctwa_clid: nullableText,
    external_lead_id: nullableText,
    source: fc.constantFrom('player' as const, 'server' as const),
    conversion_value: nullableFinite,
    conversion_currency: nullableText,
    event_id_from_client: fc.boolean(),
  },
  { requiredKeys: ['event_id', 'tenant_id', 'video_id', 'session_id', 'visitor_id', 'event_name', 'timestamp', 'received_at', 'current_time', 'duration', 'watched_percentage', 'play_ms', 'focus_ms', 'seek_from', 'seek_to', 'utm_source', 'utm_campaign', 'ctwa_clid', 'external_lead_id', 'source', 'conversion_value', 'conversion_currency'] },
);

describe('eventLine', () => {
  it("is the record's row as a JSON array of EVENT_COLUMNS in order, and the row has no other column", () => {
    fc.assert(
      fc.property(record, (e) => {
        const row = eventRow(e);
        expect(Object.keys(row)).toEqual([...EVENT_COLUMNS]);
        // Through JSON both ways, as JSON.stringify of the object sends them (-0 as 0).
        expect(JSON.parse(eventLine(e))).toEqual(JSON.parse(JSON.stringify(EVENT_COLUMNS.map((c) => row[c]))));
      }),
      { numRuns: 300 },
    );
  });

  it('with a timestamp given, is the row with that timestamp and nothing else changed', () => {
    fc.assert(
      fc.property(record, millis, (e, at) => {
        const row = { ...eventRow(e), timestamp: chTime(at) };
        expect(JSON.parse(eventLine(e, chTime(at)))).toEqual(JSON.parse(JSON.stringify(EVENT_COLUMNS.map((c) => row[c]))));
      }),
      { numRuns: 100 },
    );
  });
});

describe('candidateLine', () => {
  it("keeps a candidate's line from arrival, and gives a re-timed copy a line with its new timestamp", () => {
    fc.assert(
      fc.property(record, millis, (e, first) => {
        const atReceipt = { ...e, timestamp: e.received_at, event_id_from_client: true };
        const arrival = eventLine(atReceipt);
        const c = retryCandidate(atReceipt, arrival);
        expect(candidateLine(c)).toBe(arrival);
        const retimed = { ...c, timestamp: chTime(first) }; // as applyFirstRecords copies it
        fc.pre(retimed.timestamp !== c.timestamp);
        expect(candidateLine(retimed)).toBe(eventLine(atReceipt, chTime(first)));
        expect(JSON.parse(candidateLine(retimed))[EVENT_COLUMNS.indexOf('timestamp')]).toBe(chTime(first));
      }),
      { numRuns: 200 },
    );
  });
});
