import type { FastifyInstance, FastifyRequest } from 'fastify';
import type { ZodTypeProvider } from 'fastify-type-provider-zod';
import { z } from 'zod';
import type { VideoRecord } from '../../schemas/records.ts';
import { isoTime, problems } from '../../shared/http/schemas.ts';
import { clientGoneSignal } from '../../shared/http/client-gone.ts';
import { toVideoId } from '../../shared/ids.ts';
import { RetentionCurve, Stats, TopVisitors } from './analytics.schema.ts';
import type { AnalyticsRepository } from './analytics.repository.ts';

const errors = problems(401, 403, 404, 422, 429, 503);

export interface AnalyticsRoutesOptions {
  /** Path of the video, relative to the mount point. */
  base: string;
  params: z.ZodObject;
  tags: string[];
  security: Record<string, string[]>[];
  /** The OpenAPI operationId of each route: one per mount, since an id names one operation of the document. */
  operationIds: { stats: string; retention: string; topVisitors: string };
  /** The video the request may read (throws 403/404 otherwise). */
  videoOf: (req: FastifyRequest) => VideoRecord;
  analytics: AnalyticsRepository;
}

/**
 * Per-video analytics routes, a plugin mounted with the same handlers in
 * the read API (/v1, API key) and in the management routes (/admin/v1 and
 * the dashboard); auth belongs to the plugin that mounts it.
 */
export async function analyticsRoutes(app: FastifyInstance, opts: AnalyticsRoutesOptions): Promise<void> {
  const r = app.withTypeProvider<ZodTypeProvider>();
  const common = { tags: opts.tags, security: opts.security, params: opts.params };

  r.get(
    `${opts.base}/stats`,
    {
      schema: {
        ...common,
        operationId: opts.operationIds.stats,
        summary: 'Counts of a video: totals and per day',
        querystring: z.object({ days: z.coerce.number().int().min(1).max(366).default(30) }),
        response: { 200: Stats, ...errors },
      },
    },
    async (req, reply) => {
      const video = opts.videoOf(req);
      const stats = await opts.analytics.stats(video.tenant_id, video.id, req.query.days, clientGoneSignal(reply));
      return { video_id: toVideoId(video.id), ...stats };
    },
  );

  r.get(
    `${opts.base}/retention`,
    {
      schema: {
        ...common,
        operationId: opts.operationIds.retention,
        summary: 'Retention curve of a video',
        description: 'Share (0–100) of viewing sessions still watching at each 5% point of the video, from milestones and heartbeats.',
        response: { 200: RetentionCurve, ...errors },
      },
    },
    async (req, reply) => {
      const video = opts.videoOf(req);
      const curve = await opts.analytics.retention(video.tenant_id, video.id, clientGoneSignal(reply));
      return { video_id: toVideoId(video.id), duration_sec: video.duration_sec, ...curve };
    },
  );

  r.get(
    `${opts.base}/top-visitors`,
    {
      schema: {
        ...common,
        operationId: opts.operationIds.topVisitors,
        summary: 'Visitors of a video with the highest Lead Intent Score',
        querystring: z.object({ limit: z.coerce.number().int().min(1).max(100).default(10) }),
        response: { 200: TopVisitors, ...errors },
      },
    },
    async (req, reply) => {
      const video = opts.videoOf(req);
      const top = await opts.analytics.topVisitors(video.tenant_id, video.id, req.query.limit, clientGoneSignal(reply));
      return { data: top.map((v) => ({ ...v, computed_at: isoTime(v.computed_at) })) };
    },
  );
}
