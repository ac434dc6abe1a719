import { z } from 'zod';
import type { BoundedReads, ReadQuery } from '../../shared/clickhouse/bounded-reads.ts';
import { chFloat, chInt, chUuid } from '../../shared/clickhouse/rows.ts';
import { PLAYER_SIGNALS } from '../../shared/event-names.ts';
import type { FactorInputs } from '../../shared/score.ts';
import { keysetTail, readDistinct } from './event-page.ts';

const EventPageRow = z.object({ event_name: z.string(), visitor_id: z.string(), ts: chInt, id_text: chUuid });
const eventRow = (r: z.output<typeof EventPageRow>) => ({ event_name: r.event_name, visitor_id: r.visitor_id, ts: r.ts, event_id: r.id_text });
/** One event of a video's events page (`eventRow`). */
export type EventRow = ReturnType<typeof eventRow>;
/** A visitor's score inputs (FactorInputs) and newest event, as VISITOR_FACTORS_SQL reads them. */
export const VisitorFactorsRow = z.object({
  max_watched_percentage: chFloat,
  play_ms: chInt,
  focus_ms: chInt,
  cta_clicks: chInt,
  rewinds: chInt,
  last_ts: chInt,
});

/** The aggregates of visitor_events rows that make a visitor's score inputs, a SELECT list. */
export const VISITOR_FACTORS_SQL = `max(watched_percentage) AS max_watched_percentage,
               sum(play_ms) AS play_ms,
               sum(focus_ms) AS focus_ms,
               countIf(event_name = 'cta_clicked') AS cta_clicks,
               sum(is_rewind) AS rewinds,
               toUnixTimestamp64Milli(max(timestamp)) AS last_ts`;

/** What a keyset page of a video's events asks for. */
export interface EventPageQuery {
  tenantId: string;
  videoId: string;
  sinceMs: number | undefined;
  after?: { ts: number; id: string };
  limit: number;
}

/**
 * The SQL of one read of an events page: up to `rows` rows in key order,
 * copies left by a replay included (event-page.ts drops them). Exported for
 * the benchmark, which sends the same SQL straight to ClickHouse.
 *
 * NOTE: no FINAL. FINAL merges the rows of every part that overlaps the
 * video's key range, so past a cursor it would read the rest of the video
 * for one page; this read stops after the rows it returns (keysetTail).
 * The alias is not `event_id`: an alias shadows the column in WHERE and
 * ORDER BY, and the keyset must compare UUIDs, not strings.
 */
export function eventPageQuery(q: Omit<EventPageQuery, 'limit'>, rows: number): ReadQuery {
  return {
    query: `
        SELECT event_name, visitor_id, toUnixTimestamp64Milli(timestamp) AS ts, toString(event_id) AS id_text
        FROM events
        WHERE tenant_id = {tenant:UUID} AND video_id = {video:UUID}
          AND event_name NOT IN {signals:Array(String)}
          ${keysetTail(q)}`,
    query_params: {
      tenant: q.tenantId,
      video: q.videoId,
      signals: [...PLAYER_SIGNALS],
      since: q.sinceMs ?? 0,
      after_ts: q.after?.ts ?? 0,
      after_id: q.after?.id ?? '00000000-0000-0000-0000-000000000000',
      rows,
    },
  };
}

/**
 * The SQL of a visitor's factor inputs in one tenant (exported for the
 * benchmark). Visitor ids are chosen by players, not owned: only the
 * caller's tenant is read, so whether another tenant has seen the id never
 * shows.
 *
 * NOTE: FINAL stays here. It merges one visitor's key range only (a granule
 * or two per part, however large the table), and the sums must not count a
 * replay's copies.
 */
export function visitorFactorsQuery(tenantId: string, visitorId: string): ReadQuery {
  return {
    query: `
        SELECT ${VISITOR_FACTORS_SQL}
        FROM visitor_events FINAL
        WHERE visitor_id = {visitor:String} AND tenant_id = {tenant:UUID}
        GROUP BY tenant_id`,
    query_params: { visitor: visitorId, tenant: tenantId },
  };
}

/**
 * The same for several visitors of one tenant in one query (read-batcher.ts),
 * one row per visitor the tenant has events of. `visitor_id IN` keeps to the
 * visitors' key ranges as `=` does for one.
 */
export function visitorFactorsManyQuery(tenantId: string, visitorIds: string[]): ReadQuery {
  return {
    query: `
        SELECT visitor_id AS vis, ${VISITOR_FACTORS_SQL}
        FROM visitor_events FINAL
        WHERE visitor_id IN {visitors:Array(String)} AND tenant_id = {tenant:UUID}
        GROUP BY tenant_id, visitor_id`,
    query_params: { visitors: visitorIds, tenant: tenantId },
  };
}

const VisitorFactorsManyRow = VisitorFactorsRow.extend({ vis: z.string() });

/** A visitor's score inputs and the time of their newest event. */
export type VisitorFactors = FactorInputs & { last_ts: number };

/** ClickHouse reads of the API, bounded (shared/clickhouse/bounded-reads.ts). Both stay exact while a replay's copies are unmerged. */
export class EventsRepository {
  readonly #reads: BoundedReads;

  constructor(reads: BoundedReads) {
    this.#reads = reads;
  }

  /** One keyset page of a video's events ordered by (timestamp, event_id), signals excluded, each event once. */
  async page(q: EventPageQuery, signal?: AbortSignal): Promise<EventRow[]> {
    return readDistinct(q.limit, q.after, async (after, rows) => {
      const found = await this.#reads.rows('events page', EventPageRow, eventPageQuery({ ...q, after }, rows), signal);
      return found.map(eventRow);
    });
  }

  /** The visitor's factor inputs in the tenant; undefined when the tenant has no event of theirs. */
  async visitorFactors(tenantId: string, visitorId: string, signal?: AbortSignal): Promise<VisitorFactors | undefined> {
    const [row] = await this.#reads.rows('visitor factors', VisitorFactorsRow, visitorFactorsQuery(tenantId, visitorId), signal);
    return row;
  }

  /** Several visitors' factor inputs in the tenant, by visitor id; a visitor the tenant has no event of is absent. */
  async visitorFactorsMany(tenantId: string, visitorIds: string[], signal?: AbortSignal): Promise<Map<string, VisitorFactors>> {
    const rows = await this.#reads.rows('visitor factors', VisitorFactorsManyRow, visitorFactorsManyQuery(tenantId, visitorIds), signal);
    return new Map(rows.map(({ vis, ...factors }) => [vis, factors]));
  }
}
