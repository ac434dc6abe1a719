import type { FastifyInstance } from 'fastify';
import type { ZodTypeProvider } from 'fastify-type-provider-zod';
import type { ConfigStore } from '../../shared/config-store/config-store.ts';
import type { ApiKeyAuth } from '../../shared/http/api-key-auth.ts';
import type { VideoRecord } from '../../schemas/records.ts';
import { keysetPages } from '../../shared/http/cursor-param.ts';
import { clientGoneSignal } from '../../shared/http/client-gone.ts';
import { shortName } from '../../shared/event-names.ts';
import { isoTime, page, problems } from '../../shared/http/schemas.ts';
import { ApiError } from '../../shared/http/errors.ts';
import { parseVideoId, toVideoId } from '../../shared/ids.ts';
import { SCORE_VERSION, factorsFrom, scoreV1 } from '../../shared/score.ts';
import { EventsQuery, ListVideosQuery, ListVisitorsQuery, Video, VideoEvent, VideoParams, Visitor, VisitorEvent, VisitorParams, VisitorScore, sinceMs } from './api.schema.ts';
import type { EventsReads, VisitorsReads } from './cached-reads.ts';
import { visitorPages, visitorView } from './visitor-pages.ts';
import type { AnalyticsRepository } from './analytics.repository.ts';
import { analyticsRoutes } from './analytics.routes.ts';
import { jsonBody, sendJson } from './rendered.ts';

export interface ReadApiRoutesOptions {
  store: ConfigStore;
  events: EventsReads;
  analytics: AnalyticsRepository;
  visitors: VisitorsReads;
  cursorSecret: string;
  apiKeyAuth: ApiKeyAuth;
}

const errors = problems(401, 403, 404, 422, 429, 503);
/** What every route's schema shares. */
const common = { tags: ['read'], security: [{ apiKey: [] }] };

/** Where a listed event (of a video or of a visitor) stands in its keyset pages. */
const eventKey = (r: { ts: number; event_id: string }) => ({ ts: r.ts, id: r.event_id });

/** A video as the read API and the management API show it. */
export const videoView = (v: VideoRecord) => ({ id: toVideoId(v.id), title: v.title, duration_sec: v.duration_sec, created_at: isoTime(v.created_at) });

/**
 * The read API of spec 4.1–4.3, relative to its mount point (/v1), under
 * API-key auth: one onRequest hook for every route of the context
 * authenticates the key and sets `req.principal` (the tenant and key). The
 * per-key rate limit (shared/http/plugins/rate-limit.ts) then counts it.
 * Encapsulated: the hook applies to these routes only.
 */
export async function readApiRoutes(root: FastifyInstance, deps: ReadApiRoutesOptions): Promise<void> {
  root.decorateRequest('principal', null);
  root.addHook('onRequest', deps.apiKeyAuth);
  const app = root.withTypeProvider<ZodTypeProvider>();
  const eventPages = keysetPages('evt', deps.cursorSecret);
  const videoPages = keysetPages('cur', deps.cursorSecret);
  const visitorListPages = visitorPages('vsr', deps.cursorSecret);
  const timelinePages = keysetPages('vtl', deps.cursorSecret);
  const eventsBody = jsonBody(page(VideoEvent), `${root.prefix}/videos/:video_id/events`);
  const scoreBody = jsonBody(VisitorScore, `${root.prefix}/visitors/:visitor_id/score`);
  const visitorsBody = jsonBody(page(Visitor), `${root.prefix}/visitors`);
  const timelineBody = jsonBody(page(VisitorEvent), `${root.prefix}/visitors/:visitor_id/events`);

  /** The video, if the caller's tenant owns it: 404 for none, 403 for another tenant's. */
  const ownedVideo = (tenantId: string, raw: string) => {
    const video = deps.store.videos.get(parseVideoId(raw)!);
    if (!video) throw new ApiError('not_found', 'no such video');
    if (video.tenant_id !== tenantId) throw new ApiError('forbidden', 'the video belongs to another tenant');
    return video;
  };

  app.get(
    '/videos',
    {
      schema: {
        operationId: 'listVideos',
        ...common,
        summary: 'List videos',
        querystring: ListVideosQuery,
        response: { 200: page(Video), ...errors },
      },
    },
    async (req) => {
      const tenantId = req.principal!.tenantId;
      const after = videoPages.after(req.query.cursor, tenantId);
      const sorted = deps.store
        .videosOf(tenantId)
        .sort((a, b) => a.created_at - b.created_at || a.id.localeCompare(b.id))
        .filter((v) => !after || v.created_at > after.ts || (v.created_at === after.ts && v.id > after.id));
      return videoPages.page(sorted, req.query.limit, tenantId, (v) => ({ ts: v.created_at, id: v.id }), videoView);
    },
  );

  app.get(
    '/videos/:video_id/events',
    {
      schema: {
        operationId: 'listVideoEvents',
        ...common,
        summary: 'Events of a video',
        description:
          'Keyset-paginated in (timestamp, event id) order. Player signals (heartbeat, seek) feed the score and are not listed. `event` is the short name (see docs/api.md for the mapping).',
        params: VideoParams,
        querystring: EventsQuery,
        response: { 200: page(VideoEvent), ...errors },
      },
    },
    async (req, reply) => {
      const tenantId = req.principal!.tenantId;
      const video = ownedVideo(tenantId, req.params.video_id);
      const { limit, since, cursor } = req.query;
      const after = eventPages.after(cursor, video.id);
      const answer = await deps.events.page(
        { tenantId, videoId: video.id, sinceMs: sinceMs(since), after, limit: limit + 1 },
        (rows) =>
          eventsBody(eventPages.page(rows, limit, video.id, eventKey, (r) => ({ event: shortName(r.event_name), visitor_id: r.visitor_id, timestamp: isoTime(r.ts) }))),
        clientGoneSignal(reply),
      );
      sendJson(reply, answer.body);
    },
  );

  app.get(
    '/visitors/:visitor_id/score',
    {
      schema: {
        operationId: 'getVisitorScore',
        ...common,
        summary: 'Lead Intent Score of a visitor',
        description:
          'Score version 1: round(100 × (0.40·watched_percent + 0.20·focus_time_ratio + 0.25·min(cta_clicks,2)/2 + 0.15·min(rewinds,3)/3)). computed_at is the time of the newest event that fed it.',
        params: VisitorParams,
        response: { 200: VisitorScore, ...errors },
      },
    },
    async (req, reply) => {
      const tenantId = req.principal!.tenantId;
      const visitorId = req.params.visitor_id;
      // Visitor ids are chosen by players, so another tenant's events under
      // the same id are not a resource of that tenant: only the caller's
      // own events count, and none is 404 whoever else has seen the id.
      const body = await deps.events.score(
        tenantId,
        visitorId,
        (mine) => {
          const factors = factorsFrom(mine);
          return scoreBody({ visitor_id: visitorId, score: scoreV1(factors), factors, computed_at: isoTime(mine.last_ts), score_version: SCORE_VERSION });
        },
        clientGoneSignal(reply),
      );
      if (body === undefined) throw new ApiError('not_found', 'no events for this visitor');
      sendJson(reply, body);
    },
  );

  app.get(
    '/visitors',
    {
      schema: {
        operationId: 'listVisitors',
        ...common,
        summary: 'List visitors',
        description:
          "Each visitor of the tenant with its latest Lead Intent Score, factors and activity (the visitor read model, kept by the derived-events service: a visitor shows up shortly after its events). Keyset-paginated: order=last_seen (default) lists the most recently seen first, order=score the highest score first, ties by visitor_id. A cursor belongs to the order and filters it was issued for.",
        querystring: ListVisitorsQuery,
        response: { 200: page(Visitor), ...errors },
      },
    },
    async (req, reply) => {
      const tenantId = req.principal!.tenantId;
      const q = req.query;
      const videoId = q.video_id === undefined ? undefined : parseVideoId(q.video_id)!;
      const since = sinceMs(q.since);
      const scope = [tenantId, q.order, q.min_score ?? null, since ?? null, videoId ?? null];
      const after = visitorListPages.after(q.cursor, scope);
      const answer = await deps.visitors.list(
        { tenantId, order: q.order, minScore: q.min_score, sinceMs: since, videoId, after, limit: q.limit + 1 },
        (rows) => visitorsBody(visitorListPages.page(rows, q.limit, scope, visitorView)),
        clientGoneSignal(reply),
      );
      sendJson(reply, answer.body);
    },
  );

  app.get(
    '/visitors/:visitor_id/events',
    {
      schema: {
        operationId: 'listVisitorEvents',
        ...common,
        summary: 'Events of a visitor',
        description:
          "One visitor's events across the tenant's videos, keyset-paginated in (timestamp, event id) order, oldest first, as the events of a video. Player signals (heartbeat, seek) are not listed. 404 when the tenant has no event of the visitor.",
        params: VisitorParams,
        querystring: EventsQuery,
        response: { 200: page(VisitorEvent), ...errors },
      },
    },
    async (req, reply) => {
      const tenantId = req.principal!.tenantId;
      const visitorId = req.params.visitor_id;
      const { limit, since, cursor } = req.query;
      // The scope holds the filter, so a cursor cannot be moved to another since.
      const scope = [tenantId, visitorId, since ?? null];
      const after = timelinePages.after(cursor, scope);
      const signal = clientGoneSignal(reply);
      const answer = await deps.visitors.timeline(
        { tenantId, visitorId, sinceMs: sinceMs(since), after, limit: limit + 1 },
        (rows) =>
          timelineBody(
            timelinePages.page(rows, limit, scope, eventKey, (r) => ({ event: shortName(r.event_name), video_id: toVideoId(r.video_id), session_id: r.session_id, timestamp: isoTime(r.ts) })),
          ),
        signal,
      );
      // As for the score: only the caller's tenant counts, so another tenant's visitor is 404 too.
      if (answer.rows === 0 && !after && !(await deps.visitors.seen(tenantId, visitorId, signal))) throw new ApiError('not_found', 'no events for this visitor');
      sendJson(reply, answer.body);
    },
  );

  await app.register(analyticsRoutes, {
    base: '/videos/:video_id',
    params: VideoParams,
    ...common,
    operationIds: { stats: 'getVideoStats', retention: 'getVideoRetention', topVisitors: 'listVideoTopVisitors' },
    videoOf: (req) => ownedVideo(req.principal!.tenantId, (req.params as { video_id: string }).video_id),
    analytics: deps.analytics,
  });
}
