import { clientGone } from '../../shared/clickhouse/bounded-reads.ts';
import { timelineScope, videoScope, visitorListScope, visitorScope } from '../../shared/read-touches.ts';
import type { EventPageQuery, EventRow, EventsRepository, VisitorFactors } from './events.repository.ts';
import type { ReadCache } from './read-cache.ts';
import { ReadBatcher } from './read-batcher.ts';
import type { TimelineQuery, TimelineRow, VisitorListQuery, VisitorRow, VisitorsRepository } from './visitors.repository.ts';

/**
 * An answer as the read routes send it: its JSON body, made by the route's
 * `render`, and how many rows it was made of. With a cache, the cache holds
 * these bodies, so `render` may use only what the read's key holds (the
 * tenant and every parameter of the query): concurrent misses of one key
 * share the first one's body.
 */
export interface Rendered {
  body: string;
  rows: number;
}

/** The reads of a video's events and a visitor's score, as the read routes use them. */
export interface EventsReads {
  page(q: EventPageQuery, render: (rows: EventRow[]) => string, signal?: AbortSignal): Promise<Rendered>;
  /** The visitor's score answer, or undefined when the tenant has no event of the visitor. */
  score(tenantId: string, visitorId: string, render: (factors: VisitorFactors) => string, signal?: AbortSignal): Promise<string | undefined>;
}

/** The reads of the visitor read model, as the read routes use them. */
export interface VisitorsReads {
  list(q: VisitorListQuery, render: (rows: VisitorRow[]) => string, signal?: AbortSignal): Promise<Rendered>;
  timeline(q: TimelineQuery, render: (rows: TimelineRow[]) => string, signal?: AbortSignal): Promise<Rendered>;
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
  const rendered = <R>(rows: R[], render: (rows: R[]) => string): Rendered => ({ body: render(rows), rows: rows.length });
  const score = async (tenantId: string, visitorId: string, render: (f: VisitorFactors) => string, signal?: AbortSignal) => {
    const found = await factors(tenantId, visitorId, signal);
    return found && render(found);
  };
  if (!cache) {
    return {
      events: { page: async (q, render, s) => rendered(await events.page(q, s), render), score },
      visitors: {
        list: async (q, render, s) => rendered(await visitors.list(q, s), render),
        timeline: async (q, render, s) => rendered(await timeline(q, s), render),
        seen: (t, v, s) => visitors.seen(t, v, s),
      },
    };
  }
  // An entry weighs its body and a fixed share for its key and bookkeeping (READ_CACHE_MAX_BYTES).
  const ENTRY_BYTES = 256;
  const fixed = () => ENTRY_BYTES;
  const bytesOf = (r: Rendered) => ENTRY_BYTES + r.body.length;
  return {
    events: {
      page: (q, render, signal) =>
        cache.read<Rendered & { to: number }>(
          {
            tenant: q.tenantId,
            key: `page\u0000${q.videoId}\u0000${q.sinceMs ?? ''}\u0000${q.after?.ts ?? ''}\u0000${q.after?.id ?? ''}\u0000${q.limit}`,
            scope: videoScope(q.tenantId, q.videoId),
            from: pageFrom(q.after, q.sinceMs),
            to: (r) => r.to,
            weight: bytesOf,
          },
          async (s) => {
            const rows = await events.page(q, s);
            return { ...rendered(rows, render), to: pageTo(rows, q.limit) };
          },
          signal,
        ),
      score: (tenantId, visitorId, render, signal) =>
        cache.read({ tenant: tenantId, key: `score\u0000${visitorId}`, scope: visitorScope(tenantId, visitorId), weight: (body) => ENTRY_BYTES + (body?.length ?? 0) }, (s) => score(tenantId, visitorId, render, s), signal),
    },
    visitors: {
      list: (q, render, signal) =>
        cache.read(
          {
            tenant: q.tenantId,
            key: `list\u0000${q.order}\u0000${q.minScore ?? ''}\u0000${q.sinceMs ?? ''}\u0000${q.videoId ?? ''}\u0000${q.after?.key ?? ''}\u0000${q.after?.visitorId ?? ''}\u0000${q.limit}`,
            scope: visitorListScope(q.tenantId),
            weight: bytesOf,
          },
          async (s) => rendered(await visitors.list(q, s), render),
          signal,
        ),
      timeline: (q, render, signal) =>
        cache.read(
          {
            tenant: q.tenantId,
            key: `timeline\u0000${q.visitorId}\u0000${q.sinceMs ?? ''}\u0000${q.after?.ts ?? ''}\u0000${q.after?.id ?? ''}\u0000${q.limit}`,
            scope: timelineScope(q.tenantId, q.visitorId),
            weight: bytesOf,
          },
          async (s) => rendered(await timeline(q, s), render),
          signal,
        ),
      seen: (tenantId, visitorId, signal) =>
        cache.read({ tenant: tenantId, key: `seen\u0000${visitorId}`, scope: visitorScope(tenantId, visitorId), weight: fixed }, (s) => visitors.seen(tenantId, visitorId, s), signal),
    },
  };
}
