import { clientGone } from '../../shared/clickhouse/bounded-reads.ts';
import { timelineScope, videoScope, visitorListScope, visitorScope } from '../../shared/read-touches.ts';
import type { EventPageQuery, EventRow, EventsRepository, VisitorFactors } from './events.repository.ts';
import type { ReadCache } from './read-cache.ts';
import { ReadBatcher } from './read-batcher.ts';
import type { TimelineRow, VisitorListQuery, VisitorRow, VisitorsRepository } from './visitors.repository.ts';

/** The reads of a video's events and a visitor's score, as the read routes use them. */
export interface EventsReads {
  page(q: EventPageQuery, signal?: AbortSignal): Promise<EventRow[]>;
  visitorFactors(tenantId: string, visitorId: string, signal?: AbortSignal): Promise<VisitorFactors | undefined>;
}

export interface TimelineQuery {
  tenantId: string;
  visitorId: string;
  sinceMs?: number;
  after?: { ts: number; id: string };
  limit: number;
}

/** The reads of the visitor read model, as the read routes use them. */
export interface VisitorsReads {
  list(q: VisitorListQuery, signal?: AbortSignal): Promise<VisitorRow[]>;
  timeline(q: TimelineQuery, signal?: AbortSignal): Promise<TimelineRow[]>;
  seen(tenantId: string, visitorId: string, signal?: AbortSignal): Promise<boolean>;
}

export interface ReadModelOptions {
  events: EventsRepository;
  visitors: VisitorsRepository;
  /** Absent: every read goes to ClickHouse. */
  cache?: ReadCache;
  /** READ_BATCH_MAX: visitors in one score or timeline query; 1: each read is a query of its own, sent at once. */
  batchMax: number;
  /** Batched queries of each kind running at once: the embedded engine runs one query at a time anyway. */
  batchInFlight: number;
}

/** The earliest timestamp a keyset page depends on: its cursor's or its `since`, whichever is earlier. */
const pageFrom = (after: { ts: number } | undefined, sinceMs: number | undefined): number =>
  after === undefined && sinceMs === undefined ? Number.NEGATIVE_INFINITY : Math.min(after?.ts ?? Number.POSITIVE_INFINITY, sinceMs ?? Number.POSITIVE_INFINITY);

/**
 * The latest timestamp a page read with `rows` wanted depends on: the last
 * row's when the read was full (a later event cannot change it), else none
 * (it reached the end, so any later event belongs on it).
 */
const pageTo = (rows: readonly { ts: number }[], wanted: number): number => (rows.length >= wanted ? rows.at(-1)!.ts : Number.POSITIVE_INFINITY);

/**
 * The read routes' view of ClickHouse: the repositories, with score reads
 * and timelines' first pages batched (read-batcher.ts) and, when a cache is given, every read
 * through it (read-cache.ts), keyed by every parameter that shapes its
 * answer and scoped by what invalidates it (shared/read-touches.ts).
 */
export function readModel(opts: ReadModelOptions): { events: EventsReads; visitors: VisitorsReads } {
  const { events, visitors, cache } = opts;
  const batched = opts.batchMax > 1;
  const batcher = <V>(read: (group: string, ids: string[], signal: AbortSignal) => Promise<Map<string, V>>) =>
    new ReadBatcher<V>({ read, maxBatch: opts.batchMax, maxInFlight: opts.batchInFlight, clientGone });
  const scores = batcher((tenant, ids, signal) => events.visitorFactorsMany(tenant, ids, signal));
  const factors = (tenantId: string, visitorId: string, signal?: AbortSignal) =>
    batched ? scores.get(tenantId, visitorId, signal) : events.visitorFactors(tenantId, visitorId, signal);
  // First pages batch by what their query shares; a page after a cursor is read alone.
  const firstPages = batcher((group, visitorIds, signal) => {
    const [tenantId, sinceMs, limit] = JSON.parse(group) as [string, number | null, number];
    return visitors.firstPages({ tenantId, visitorIds, sinceMs: sinceMs ?? undefined, limit }, signal);
  });
  const timeline = async (q: TimelineQuery, signal?: AbortSignal): Promise<TimelineRow[]> =>
    batched && !q.after ? ((await firstPages.get(JSON.stringify([q.tenantId, q.sinceMs ?? null, q.limit]), q.visitorId, signal)) ?? []) : visitors.timeline(q, signal);
  if (!cache) {
    return {
      events: { page: (q, signal) => events.page(q, signal), visitorFactors: factors },
      visitors: { list: (q, s) => visitors.list(q, s), timeline, seen: (t, v, s) => visitors.seen(t, v, s) },
    };
  }
  const one = () => 1;
  const rowsOf = <R>(rows: readonly R[]) => rows.length;
  return {
    events: {
      page: (q, signal) =>
        cache.read(
          {
            tenant: q.tenantId,
            key: `page\u0000${q.videoId}\u0000${q.sinceMs ?? ''}\u0000${q.after?.ts ?? ''}\u0000${q.after?.id ?? ''}\u0000${q.limit}`,
            scope: videoScope(q.tenantId, q.videoId),
            from: pageFrom(q.after, q.sinceMs),
            to: (rows: EventRow[]) => pageTo(rows, q.limit),
            weight: rowsOf,
          },
          (s) => events.page(q, s),
          signal,
        ),
      visitorFactors: (tenantId, visitorId, signal) =>
        cache.read({ tenant: tenantId, key: `score\u0000${visitorId}`, scope: visitorScope(tenantId, visitorId), weight: one }, (s) => factors(tenantId, visitorId, s), signal),
    },
    visitors: {
      list: (q, signal) =>
        cache.read(
          {
            tenant: q.tenantId,
            key: `list\u0000${q.order}\u0000${q.minScore ?? ''}\u0000${q.sinceMs ?? ''}\u0000${q.videoId ?? ''}\u0000${q.after?.key ?? ''}\u0000${q.after?.visitorId ?? ''}\u0000${q.limit}`,
            scope: visitorListScope(q.tenantId),
            weight: rowsOf,
          },
          (s) => visitors.list(q, s),
          signal,
        ),
      timeline: (q, signal) =>
        cache.read(
          {
            tenant: q.tenantId,
            key: `timeline\u0000${q.visitorId}\u0000${q.sinceMs ?? ''}\u0000${q.after?.ts ?? ''}\u0000${q.after?.id ?? ''}\u0000${q.limit}`,
            scope: timelineScope(q.tenantId, q.visitorId),
            weight: rowsOf,
          },
          (s) => timeline(q, s),
          signal,
        ),
      seen: (tenantId, visitorId, signal) =>
        cache.read({ tenant: tenantId, key: `seen\u0000${visitorId}`, scope: visitorScope(tenantId, visitorId), weight: one }, (s) => visitors.seen(tenantId, visitorId, s), signal),
    },
  };
}
