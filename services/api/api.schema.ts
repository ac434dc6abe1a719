import { z } from 'zod';
import { WEBHOOK_EVENTS } from '../../shared/event-names.ts';
import { pageQuery } from '../../shared/http/schemas.ts';
import { VideoIdParam, VisitorId } from '../ingest/collect.schema.ts';
import { ScoreFactors, visitorFields } from './visitor.schema.ts';

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
    factors: ScoreFactors,
    computed_at: z.string(),
    score_version: z.number().int().meta({ description: 'Version of the score formula' }),
  })
  .meta({ id: 'VisitorScore' });

export const Visitor = z.object(visitorFields).meta({ id: 'Visitor' });

export const VisitorEvent = z
  .object({
    event: z.string().meta({ description: 'Short event name', enum: shortNames }),
    video_id: z.string().meta({ example: 'vid_0f8fad5bd9cb469fa16570867728950e' }),
    session_id: z.string(),
    timestamp: z.string().meta({ description: 'ISO 8601 UTC with milliseconds' }),
  })
  .meta({ id: 'VisitorEvent' });

const pages = pageQuery(DEFAULT_PAGE_SIZE, MAX_PAGE_SIZE);

export const ListVideosQuery = z.object(pages);

const sinceTime = z.union([z.iso.date(), z.iso.datetime({ offset: true })]).optional();

/** A `since` parameter as epoch ms: a date is midnight UTC. */
export const sinceMs = (since: string | undefined): number | undefined =>
  since === undefined ? undefined : Date.parse(since.length === 10 ? `${since}T00:00:00Z` : since);

export const EventsQuery = z.object({
  since: sinceTime.meta({ description: 'Only events from that moment on: a date (YYYY-MM-DD, midnight UTC) or an ISO 8601 timestamp' }),
  ...pages,
});

export const DEFAULT_VISITORS_PAGE_SIZE = 50;

export const ListVisitorsQuery = z.object({
  min_score: z.coerce.number().int().min(0).max(100).optional().meta({ description: 'Only visitors with at least this score (0–100)' }),
  since: sinceTime.meta({ description: 'Only visitors seen from that moment on (last_seen ≥ since): a date (YYYY-MM-DD, midnight UTC) or an ISO 8601 timestamp' }),
  video_id: VideoIdParam.optional().meta({ description: 'Only visitors that watched this video (vid_… or a UUID)' }),
  order: z.enum(['last_seen', 'score']).default('last_seen').meta({ description: 'last_seen: most recently seen first (default); score: highest score first. Ties by visitor_id.' }),
  ...pageQuery(DEFAULT_VISITORS_PAGE_SIZE, MAX_PAGE_SIZE),
});

export const VideoParams = z.object({ video_id: VideoIdParam });
export const VisitorParams = z.object({ visitor_id: VisitorId });
