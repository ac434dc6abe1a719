import { z } from 'zod';
import { visitorSnapshot, type VisitorState } from '../derived/intent-rules.ts';
import type { VisitorSnapshot as Snapshot } from '../../shared/score.ts';
import { chTime } from '../../shared/clickhouse/clickhouse.ts';
import { VISITOR_ID_RE } from '../../shared/ids.ts';
import { PoisonRecordError, type RecordDecoder } from '../../shared/kafka/poison.ts';
import { LATEST_EVENT_TIME } from './event-rows.ts';

/** A time the table can hold (epoch ms up to 2299-12-31). */
const millis = z.number().int().min(0).max(LATEST_EVENT_TIME);

/** What the visitor read model stores of a visitor: its latest score, factors and activity. */
export const VisitorSnapshot = z.object({
  tenant_id: z.uuid(),
  visitor_id: z.string().regex(VISITOR_ID_RE),
  score: z.number().int().min(0).max(100),
  score_version: z.number().int().min(1).max(65_535),
  factors: z.object({
    watched_percent: z.number().min(0).max(1),
    focus_time_ratio: z.number().min(0).max(1),
    cta_clicks: z.number().int().min(0).max(4_294_967_295),
    rewinds: z.number().int().min(0).max(4_294_967_295),
  }),
  first_seen: millis,
  last_seen: millis,
  videos: z.array(z.uuid()).max(100),
  lead_at: millis.nullable(),
}) satisfies z.ZodType<Snapshot>;

/**
 * The decoder of the visitor read model's source, the derived-events
 * service's compacted state (derived.state.v1): a visitor's state (key
 * `v:<tenant>:<visitor>`, JSON) becomes its snapshot, checked against
 * VisitorSnapshot. Session state, stream time and tombstones (a visitor
 * forgotten by the state's bounds keeps its row) are passed over as
 * tombstones. Anything else is poison and dead-lettered.
 */
export const decodeVisitorState: RecordDecoder<Snapshot> = (message) => {
  const key = message.key?.toString('utf8') ?? '';
  const bytes = message.value;
  if (!key.startsWith('v:') || bytes === null || bytes === undefined) return { kind: 'tombstone' };
  if (bytes.length === 0) throw new PoisonRecordError('empty_value', 'empty value');
  let snapshot: unknown;
  try {
    snapshot = visitorSnapshot(key, JSON.parse(bytes.toString('utf8')) as VisitorState);
  } catch {
    throw new PoisonRecordError('undecodable', 'not a visitor state');
  }
  const parsed = VisitorSnapshot.safeParse(snapshot);
  if (!parsed.success) {
    const first = parsed.error.issues[0];
    throw new PoisonRecordError('schema_violation', `${first?.path.join('.') || '(root)'}: ${first?.message ?? 'invalid'}`);
  }
  return { kind: 'value', value: parsed.data };
};

/** The `visitors` row of a snapshot read at `offset` (its version: a visitor's snapshots share a partition). */
export function visitorRow(s: Snapshot, offset: string) {
  return {
    tenant_id: s.tenant_id,
    visitor_id: s.visitor_id,
    score: s.score,
    score_version: s.score_version,
    watched_percent: s.factors.watched_percent,
    focus_time_ratio: s.factors.focus_time_ratio,
    cta_clicks: s.factors.cta_clicks,
    rewinds: s.factors.rewinds,
    first_seen: chTime(s.first_seen),
    last_seen: chTime(s.last_seen),
    videos: s.videos,
    lead_at: s.lead_at === null ? null : chTime(s.lead_at),
    version: offset,
  };
}
