import { describe, expect, it } from 'vitest';
import { chTime } from '../../shared/clickhouse/clickhouse.ts';
import { applyFirstRecords, lookupKeys, needsLookup, type DedupeRow, type FirstRecord } from './event-dedupe.ts';

const T = 'a9e4d1b2-5c6f-4e7a-8b9c-0d1e2f3a4b5c';
const V1 = '0f8fad5b-d9cb-469f-a165-70867728950e';
const V2 = '1c9d7f4e-2a3b-4c5d-8e6f-7a8b9c0d1e2f';
const ID = '3f1c2b8e-4b1a-4c55-9a57-0d7f8f7d2c11';

/** A row stamped at receipt `at` (no occurred_at) with a client id, unless told otherwise. */
const row = (over: Partial<DedupeRow> & { n?: number } = {}, at = 1_763_700_000_000): DedupeRow & { n?: number } => ({
  tenant_id: T,
  event_id: ID,
  video_id: V1,
  timestamp: chTime(at),
  received_at: chTime(at),
  event_id_from_client: true,
  ...over,
});

describe('event dedupe: which rows need a lookup', () => {
  it('only rows with a client id whose time is their receipt time', () => {
    expect(needsLookup(row())).toBe(true);
    expect(needsLookup(row({ event_id_from_client: false }))).toBe(false);
    expect(needsLookup(row({ timestamp: chTime(1_763_600_000_000) }))).toBe(false); // occurred_at given
  });

  it('collects each tenant and id once, lower case, and nothing when no row needs it', () => {
    const upper = ID.toUpperCase();
    expect(lookupKeys([row(), row({ event_id: upper }, 5), row({ event_id: 'b0000000-0000-4000-8000-000000000001', event_id_from_client: false })])).toEqual({
      tenantIds: [T],
      eventIds: [ID],
    });
    expect(lookupKeys([row({ event_id_from_client: false }), row({ timestamp: chTime(1) })])).toEqual({ tenantIds: [], eventIds: [] });
  });
});

describe('event dedupe: first record wins', () => {
  const recorded = (first: FirstRecord) => new Map([[`${T}:${ID}`, first]]);

  it('gives a retry of a recorded event the first timestamp, so it shares the first row key', () => {
    const first = { video_id: V1, timestamp: chTime(1_000) };
    const out = applyFirstRecords([row({}, 9_000)], recorded(first));
    expect(out.rows).toEqual([{ ...row({}, 9_000), timestamp: first.timestamp }]);
    expect(out.rows[0]!.received_at).toBe(chTime(9_000)); // only the key moves
    expect(out.retimed).toBe(1);
    expect(out.dropped).toEqual([]);
  });

  it('leaves a replay of the first record itself as it is', () => {
    const out = applyFirstRecords([row({}, 1_000)], recorded({ video_id: V1, timestamp: chTime(1_000) }));
    expect(out).toEqual({ rows: [row({}, 1_000)], retimed: 0, dropped: [] });
  });

  it('drops a repeat on another video: the id was reused, the first record stays the event', () => {
    const first = { video_id: V1, timestamp: chTime(1_000) };
    const other = row({ video_id: V2 }, 9_000);
    const out = applyFirstRecords([other], recorded(first));
    expect(out.rows).toEqual([]);
    expect(out.dropped).toEqual([{ row: other, first }]);
  });

  it('within a batch the first occurrence is the first record, whatever the case of the id', () => {
    const a = row({ n: 1 }, 1_000);
    const retry = row({ n: 2, event_id: ID.toUpperCase() }, 2_000);
    const elsewhere = row({ n: 3, video_id: V2 }, 3_000);
    const out = applyFirstRecords([a, retry, elsewhere], new Map());
    expect(out.rows).toEqual([a, { ...retry, timestamp: chTime(1_000) }]);
    expect(out.retimed).toBe(1);
    expect(out.dropped.map((d) => d.row)).toEqual([elsewhere]);
  });

  it('keeps ids apart per tenant, and passes rows that need no lookup through untouched and in order', () => {
    const otherTenant = row({ n: 1, tenant_id: 'b9e4d1b2-5c6f-4e7a-8b9c-0d1e2f3a4b5c' }, 9_000);
    const server = row({ n: 2, event_id_from_client: false }, 9_000);
    const stamped = row({ n: 3, timestamp: chTime(500) }, 9_000);
    const retry = row({ n: 4 }, 9_000);
    const out = applyFirstRecords([otherTenant, server, stamped, retry], recorded({ video_id: V1, timestamp: chTime(1_000) }));
    expect(out.rows).toEqual([otherTenant, server, stamped, { ...retry, timestamp: chTime(1_000) }]);
  });
});
