import { z } from 'zod';
import { WEBHOOK_EVENTS } from '../../shared/event-names.ts';
import { VideoIdParam, VisitorId } from '../ingest/collect.schema.ts';

export const DEFAULT_PAGE_SIZE = 100;
export const MAX_PAGE_SIZE = 1000;

const shortNames = [...new Set(Object.values(WEBHOOK_EVENTS).map((e) => e.short))];

export const Video = z
  .object({
    id: z.string().meta({ example: 'vid_0f8fad5bd9cb469fa16570867728950e' }),
    title: z.string(),
    duration_sec: z.number().int(),
    created_at: z.string().meta({ description: 'ISO 8601 UTC' }),
  })
  .meta({ id: 'Video' });

export const VideoEvent = z
  .object({
    event: z.string().meta({ description: 'Short event name', enum: shortNames }),
    visitor_id: z.string(),
    timestamp: z.string().meta({ description: 'ISO 8601 UTC with milliseconds' }),
  })
  .meta({ id: 'VideoEvent' });

export const VisitorScore = z
  .object({
    visitor_id: z.string(),
    score: z.number().int().min(0).max(100),
    factors: z.object({
      watched_percent: z.number().min(0).max(1),
      focus_time_ratio: z.number().min(0).max(1),
      cta_clicks: z.number().int(),
      rewinds: z.number().int(),
    }),
    computed_at: z.string(),
    score_version: z.number().int().meta({ description: 'Version of the score formula' }),
  })
  .meta({ id: 'VisitorScore' });

const limit = z.coerce
  .number()
  .int()
  .min(1)
  .max(MAX_PAGE_SIZE)
  .default(DEFAULT_PAGE_SIZE)
  .meta({ description: `Page size, 1–${MAX_PAGE_SIZE} (default ${DEFAULT_PAGE_SIZE})` });
const cursor = z.string().max(512).optional().meta({ description: 'next_cursor of the previous page' });

export const ListVideosQuery = z.object({ cursor, limit });

export const EventsQuery = z.object({
  since: z
    .union([z.iso.date(), z.iso.datetime({ offset: true })])
    .optional()
    .meta({ description: 'Only events from that moment on: a date (YYYY-MM-DD, midnight UTC) or an ISO 8601 timestamp' }),
  cursor,
  limit,
});

export const VideoParams = z.object({ video_id: VideoIdParam });
export const VisitorParams = z.object({ visitor_id: VisitorId });
