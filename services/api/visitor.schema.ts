import { z } from 'zod';

/**
 * A visitor's fields as the API shows them, apart from api.schema.ts so the
 * dashboard's types can use them without the intake's schemas.
 */

export const ScoreFactors = z
  .object({
    watched_percent: z.number().min(0).max(1),
    focus_time_ratio: z.number().min(0).max(1),
    cta_clicks: z.number().int(),
    rewinds: z.number().int(),
  })
  .meta({ id: 'ScoreFactors' });

/** A visitor as the visitor read model holds it (its latest snapshot). */
export const visitorFields = {
  visitor_id: z.string(),
  score: z.number().int().min(0).max(100),
  score_version: z.number().int().meta({ description: 'Version of the score formula' }),
  factors: ScoreFactors,
  first_seen: z.string().meta({ description: 'ISO 8601 UTC: time of its first event (player time)' }),
  last_seen: z.string().meta({ description: 'ISO 8601 UTC: time of its newest event (player time)' }),
  videos: z.array(z.string()).meta({ description: 'Videos it watched (vid_…), most recent last, at most 20' }),
  lead_at: z.string().nullable().meta({ description: 'ISO 8601 UTC: when its high_intent_lead was raised; null while none' }),
};

