import { z } from 'zod';
import { definedParams, type BoundedReads, type ReadQuery } from '../../shared/clickhouse/bounded-reads.ts';
import { chFloat, chInt, chNullableInt, chUuid } from '../../shared/clickhouse/rows.ts';
import type { VisitorSnapshot } from '../../shared/score.ts';
import { appendDistinct, keysetTail, readDistinct, rowsToFetch, sinceClause } from './event-page.ts';

/** How a list of visitors is ordered: newest first by last_seen, by score, or by when its lead was raised. */
export type VisitorOrder = 'last_seen' | 'score' | 'lead';

/**
 * The sort key of each order, an Int64 expression over `visitors` (desc,
 * then visitor_id asc). A lead not raised yet (the threshold lowered since)
 * sorts by its last event.
 */
const ORDER_KEY: Record<VisitorOrder, string> = {
  last_seen: 'toUnixTimestamp64Milli(last_seen)',
  score: 'toInt64(score)',
  lead: 'toUnixTimestamp64Milli(ifNull(lead_at, last_seen))',
};

/** A position in a list of visitors: the sort key's value and the visitor id. */
export interface VisitorKeyset {
  key: number;
  visitorId: string;
}

export interface VisitorListQuery {
  tenantId: string;
  order: VisitorOrder;
  minScore?: number;
  sinceMs?: number;
  /** Only visitors that watched this video (UUID). */
  videoId?: string;
  after?: VisitorKeyset;
  limit: number;
}

/** A visitor's snapshot as the projector stored it, read back within its tenant. */
export interface VisitorRow extends Omit<VisitorSnapshot, 'tenant_id'> {
  /** The value of the list's sort key (for its cursor). */
  key: number;
}

/** What a keyset page of a visitor's timeline asks for. */
export interface TimelineQuery {
  tenantId: string;
  visitorId: string;
  sinceMs?: number;
  after?: { ts: number; id: string };
  limit: number;
}

/** One event of a visitor's timeline (`timelineRow`). */
export type TimelineRow = ReturnType<typeof timelineRow>;

/** A delivery about a visitor (`leadDeliveryRow`). */

const VisitorListRow = z.object({
  vis: z.string(),
  score: chInt,
  score_version: chInt,
  watched_percent: chFloat,
  focus_time_ratio: chFloat,
  cta_clicks: chInt,
  rewinds: chInt,
  first_ms: chInt,
  last_ms: chInt,
  video_ids: z.array(chUuid),
  lead_ms: chNullableInt,
  sort_key: chInt,
});
const TimelinePageRow = z.object({ event_name: z.string(), vid: chUuid, session_id: z.string(), ts: chInt, id_text: chUuid });

/**
 * The SQL of a page of a tenant's visitors (exported for tests and the
 * benchmark). FINAL keeps each visitor's newest snapshot only, and the
 * filters apply after it (ClickHouse does not move them before FINAL's
 * merge), so a superseded snapshot can neither show nor match. The keyset
 * (sort key desc, visitor_id asc) continues after the cursor without OFFSET.
 * NOTE: aliases differ from column names, which they would shadow in WHERE.
 */
export function visitorListQuery(q: VisitorListQuery): ReadQuery {
  const key = ORDER_KEY[q.order];
  const where = ['tenant_id = {tenant:UUID}'];
  if (q.minScore !== undefined) where.push('score >= {min_score:UInt8}');
  if (q.sinceMs !== undefined) where.push("last_seen >= fromUnixTimestamp64Milli({since:Int64}, 'UTC')");
  if (q.videoId !== undefined) where.push('has(videos, {video:UUID})');
  if (q.after) where.push(`(${key} < {after_key:Int64} OR (${key} = {after_key:Int64} AND visitor_id > {after_id:String}))`);
  return {
    query: `
        SELECT visitor_id AS vis, score, score_version, watched_percent, focus_time_ratio, cta_clicks, rewinds,
               toUnixTimestamp64Milli(first_seen) AS first_ms, toUnixTimestamp64Milli(last_seen) AS last_ms,
               arrayMap(v -> toString(v), videos) AS video_ids, toUnixTimestamp64Milli(lead_at) AS lead_ms,
               ${key} AS sort_key
        FROM visitors FINAL
        WHERE ${where.join(' AND ')}
        ORDER BY sort_key DESC, vis
        LIMIT {rows:UInt32}`,
    query_params: definedParams({
      tenant: q.tenantId,
      min_score: q.minScore,
      since: q.sinceMs,
      video: q.videoId,
      after_key: q.after?.key,
      after_id: q.after?.visitorId,
      rows: q.limit,
    }),
  };
}

const TIMELINE_COLUMNS = 'event_name, toString(video_id) AS vid, session_id, toUnixTimestamp64Milli(timestamp) AS ts, toString(event_id) AS id_text';

/**
 * The SQL of one read of a visitor's timeline: up to `rows` rows of
 * visitor_timeline in key order, a replay's copies included (event-page.ts
 * drops them). No FINAL, as for a video's events (events.repository.ts).
 */
export function timelineQuery(q: Omit<TimelineQuery, 'limit'>, rows: number): ReadQuery {
  return {
    query: `
        SELECT ${TIMELINE_COLUMNS}
        FROM visitor_timeline
        WHERE tenant_id = {tenant:UUID} AND visitor_id = {visitor:String}
          ${keysetTail(q)}`,
    query_params: definedParams({
      tenant: q.tenantId,
      visitor: q.visitorId,
      since: q.sinceMs,
      after_ts: q.after?.ts,
      after_id: q.after?.id,
      rows,
    }),
  };
}

/**
 * The SQL of the first pages of several visitors' timelines in one read
 * (read-batcher.ts): up to `rows` rows of each, in key order, copies
 * included. `visitor_id IN` keeps to the visitors' key ranges as `=` does.
 */
export function timelineFirstPagesQuery(q: { tenantId: string; visitorIds: string[]; sinceMs?: number }, rows: number): ReadQuery {
  return {
    query: `
        SELECT visitor_id AS vis, ${TIMELINE_COLUMNS}
        FROM visitor_timeline
        WHERE tenant_id = {tenant:UUID} AND visitor_id IN {visitors:Array(String)}
          ${sinceClause(q.sinceMs)}
        ORDER BY visitor_id, timestamp, event_id
        LIMIT {rows:UInt32} BY visitor_id
        SETTINGS max_block_size = 1024`,
    query_params: definedParams({ tenant: q.tenantId, visitors: q.visitorIds, since: q.sinceMs, rows }),
  };
}

const TimelinePagesRow = TimelinePageRow.extend({ vis: z.string() });
const timelineRow = (r: z.output<typeof TimelinePageRow>) => ({ event_name: r.event_name, video_id: r.vid, session_id: r.session_id, ts: r.ts, event_id: r.id_text });

/** Reads of the visitor read model (`visitors`, `visitor_timeline`), bounded. */
export class VisitorsRepository {
  readonly #reads: BoundedReads;

  constructor(reads: BoundedReads) {
    this.#reads = reads;
  }

  /** A keyset page of the tenant's visitors, each in its newest snapshot. */
  async list(q: VisitorListQuery, signal?: AbortSignal): Promise<VisitorRow[]> {
    const rows = await this.#reads.rows('visitor list', VisitorListRow, visitorListQuery(q), signal);
    return rows.map((r) => ({
      visitor_id: r.vis,
      score: r.score,
      score_version: r.score_version,
      factors: { watched_percent: r.watched_percent, focus_time_ratio: r.focus_time_ratio, cta_clicks: r.cta_clicks, rewinds: r.rewinds },
      first_seen: r.first_ms,
      last_seen: r.last_ms,
      videos: r.video_ids,
      lead_at: r.lead_ms,
      key: r.sort_key,
    }));
  }

  /** A keyset page of one visitor's events in (timestamp, event_id) order, each event once. */
  async timeline(q: TimelineQuery, signal?: AbortSignal): Promise<TimelineRow[]> {
    return readDistinct(q.limit, q.after, async (after, rows) => {
      const found = await this.#reads.rows('visitor timeline', TimelinePageRow, timelineQuery({ ...q, after }, rows), signal);
      return found.map(timelineRow);
    });
  }

  /**
   * The first page of each visitor's timeline, as `timeline` reads it with
   * no cursor, in as few queries as the row bound allows; visitors without
   * events are absent. A page that a replay's copies left short while more
   * rows follow is read on alone, as `timeline` would.
   */
  async firstPages(
    q: { tenantId: string; visitorIds: string[]; sinceMs?: number; limit: number },
    signal?: AbortSignal,
  ): Promise<Map<string, TimelineRow[]>> {
    const want = rowsToFetch(q.limit);
    const perQuery = Math.max(1, Math.floor(this.#reads.maxResultRows / want));
    const pages = new Map<string, TimelineRow[]>();
    for (let i = 0; i < q.visitorIds.length; i += perQuery) {
      const visitorIds = q.visitorIds.slice(i, i + perQuery);
      const found = await this.#reads.rows('visitor timelines', TimelinePagesRow, timelineFirstPagesQuery({ ...q, visitorIds }, want), signal);
      for (const [visitorId, pageRows] of Map.groupBy(found, (r) => r.vis)) {
        const rows = pageRows.map(timelineRow);
        const page: TimelineRow[] = [];
        appendDistinct(page, rows);
        const whole = page.length >= q.limit || rows.length < want;
        pages.set(visitorId, whole ? page.slice(0, q.limit) : await this.timeline({ tenantId: q.tenantId, visitorId, sinceMs: q.sinceMs, limit: q.limit }, signal));
      }
    }
    return pages;
  }

  /**
   * Whether the tenant has recorded any event of the visitor (signals
   * included): one granule of visitor_events, whose key starts with the
   * visitor.
   */
  async seen(tenantId: string, visitorId: string, signal?: AbortSignal): Promise<boolean> {
    const rows = await this.#reads.rows('visitor seen', z.object({ one: chInt }), {
      query: `SELECT 1 AS one FROM visitor_events WHERE visitor_id = {visitor:String} AND tenant_id = {tenant:UUID} LIMIT 1`,
      query_params: { visitor: visitorId, tenant: tenantId },
    }, signal);
    return rows.length > 0;
  }
}
