import { z } from 'zod';

/** Response shapes of the per-video analytics routes; the dashboard's types are inferred from them. */
export const Stats = z
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
export const RetentionCurve = z
  .object({
    video_id: z.string(),
    duration_sec: z.number().int(),
    viewers: z.number().int().meta({ description: 'Viewing sessions (sessions that played)' }),
    points: z.array(z.object({ position_pct: z.number(), viewers_pct: z.number().min(0).max(100) })),
  })
  .meta({ id: 'RetentionCurve' });
export const TopVisitors = z
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

