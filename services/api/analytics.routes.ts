import type { FastifyReply, FastifyRequest } from 'fastify';
import type { ZodTypeProvider } from 'fastify-type-provider-zod';
import { z } from 'zod';
import type { VideoRecord } from '../../schemas/records.ts';
import type { App } from '../../shared/http/app.ts';
import { Problem, isoTime } from '../../shared/http/schemas.ts';
import { toVideoId } from '../../shared/ids.ts';
import type { AnalyticsRepository } from './analytics.repository.ts';

const errors = { 401: Problem, 403: Problem, 404: Problem, 422: Problem, 429: Problem };

const Stats = z
  .object({
    video_id: z.string(),
    totals: z.object({
      loads: z.number().int(),
      views: z.number().int(),
      plays: z.number().int(),
      cta_shown: z.number().int(),
      cta_clicked: z.number().int(),
      completions: z.number().int().meta({ description: 'watched_90_percent events' }),
      unique_visitors: z.number().int(),
    }),
    daily: z.array(z.object({ date: z.string(), loads: z.number().int(), views: z.number().int(), plays: z.number().int() })),
  })
  .meta({ id: 'VideoStats' });
const RetentionCurve = z
  .object({
    video_id: z.string(),
    duration_sec: z.number().int(),
    viewers: z.number().int().meta({ description: 'Viewing sessions (sessions that played)' }),
    points: z.array(z.object({ position_pct: z.number(), viewers_pct: z.number().min(0).max(100) })),
  })
  .meta({ id: 'RetentionCurve' });
const TopVisitors = z
  .object({
    data: z.array(
      z.object({
        visitor_id: z.string(),
        score: z.number().int(),
        factors: z.object({ watched_percent: z.number(), focus_time_ratio: z.number(), cta_clicks: z.number().int(), rewinds: z.number().int() }),
        computed_at: z.string(),
      }),
    ),
  })
  .meta({ id: 'TopVisitors' });

/**
 * Per-video analytics routes, registered twice with the same handlers: under
 * /v1 (API key, rate limit) and under /admin/v1 (admin token, for the
 * dashboard).
 */
export function registerAnalyticsRoutes(
  app: App,
  opts: {
    base: string;
    params: z.ZodObject;
    tags: string[];
    security: Record<string, string[]>[];
    preValidation: (req: FastifyRequest, reply: FastifyReply) => Promise<void>;
    /** The video the request may read (throws 403/404 otherwise). */
    videoOf: (req: FastifyRequest) => VideoRecord;
    analytics: AnalyticsRepository;
  },
): void {
  const r = app.withTypeProvider<ZodTypeProvider>();
    const common = { tags: opts.tags, security: opts.security, params: opts.params };

  r.get(
    `${opts.base}/stats`,
    {
      schema: {
        ...common,
        summary: 'Counts of a video: totals and per day',
        querystring: z.object({ days: z.coerce.number().int().min(1).max(366).default(30) }),
        response: { 200: Stats, ...errors },
      },
      preValidation: opts.preValidation,
    },
    async (req) => {
      const video = opts.videoOf(req);
      const stats = await opts.analytics.stats(video.tenant_id, video.id, req.query.days);
      return { video_id: toVideoId(video.id), ...stats };
    },
  );

  r.get(
    `${opts.base}/retention`,
    {
      schema: {
        ...common,
        summary: 'Retention curve of a video',
        description: 'Share (0–100) of viewing sessions still watching at each 5% point of the video, from milestones and heartbeats.',
        response: { 200: RetentionCurve, ...errors },
      },
      preValidation: opts.preValidation,
    },
    async (req) => {
      const video = opts.videoOf(req);
      return { video_id: toVideoId(video.id), duration_sec: video.duration_sec, ...(await opts.analytics.retention(video.tenant_id, video.id)) };
    },
  );

  r.get(
    `${opts.base}/top-visitors`,
    {
      schema: {
        ...common,
        summary: 'Visitors of a video with the highest Lead Intent Score',
        querystring: z.object({ limit: z.coerce.number().int().min(1).max(100).default(10) }),
        response: { 200: TopVisitors, ...errors },
      },
      preValidation: opts.preValidation,
    },
    async (req) => {
      const video = opts.videoOf(req);
      const top = await opts.analytics.topVisitors(video.tenant_id, video.id, req.query.limit);
      return { data: top.map((v) => ({ ...v, computed_at: isoTime(v.computed_at) })) };
    },
  );
}
