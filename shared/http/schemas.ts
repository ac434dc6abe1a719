import { z } from 'zod';

/** The body of every error response (RFC 9457 problem+json), for the OpenAPI document. */
export const Problem = z
  .object({
    type: z.string(),
    title: z.string(),
    status: z.number().int(),
    detail: z.string(),
    request_id: z.string(),
    errors: z.array(z.object({ path: z.string(), message: z.string() })).optional(),
  })
  .passthrough()
  .meta({ id: 'Problem', description: 'application/problem+json' });

/** ISO 8601 UTC with milliseconds, as every API timestamp is written. */
export const isoTime = (ms: number): string => new Date(ms).toISOString();

export const isoTimeOrNull = (ms: number | null): string | null => (ms === null ? null : isoTime(ms));
