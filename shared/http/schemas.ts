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

/** A route's error responses by status, each a Problem, for the OpenAPI document. */
export function problems<const S extends number>(...statuses: S[]): Record<S, typeof Problem> {
  return Object.fromEntries(statuses.map((s) => [s, Problem])) as Record<S, typeof Problem>;
}

/** The query of a keyset-paginated list: the previous page's cursor, and the page size. */
export const pageQuery = (byDefault: number, max: number) => ({
  cursor: z.string().max(512).optional().meta({ description: 'next_cursor of the previous page' }),
  limit: z.coerce.number().int().min(1).max(max).default(byDefault).meta({ description: `Page size, 1–${max} (default ${byDefault})` }),
});

/** A keyset-paginated list. */
export const page = <T extends z.ZodType>(item: T) => z.object({ data: z.array(item), next_cursor: z.string().nullable() });

/** An unpaginated list (every item in one answer). */
export const list = <T extends z.ZodType>(item: T) => z.object({ data: z.array(item), next_cursor: z.null() });

/**
 * C0 and C1 controls (NUL, CR, LF, …) and the Unicode bidirectional
 * controls (LRM/RLM/ALM, embeddings, overrides, isolates): a name holding
 * one can split a log line or show different text than it stores.
 */
// eslint-disable-next-line no-control-regex
export const UNSAFE_TEXT = /[\u0000-\u001f\u007f-\u009f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]/u;

/** A name a person types and others read (tenants, keys, videos, destinations). */
export const DisplayName = z
  .string()
  .trim()
  .min(1)
  .max(200)
  .refine((s) => !UNSAFE_TEXT.test(s), 'must not contain control characters (NUL, CR, LF, …) or bidirectional controls');

/** ISO 8601 UTC with milliseconds, as every API timestamp is written. */
export const isoTime = (ms: number): string => new Date(ms).toISOString();

export const isoTimeOrNull = (ms: number | null): string | null => (ms === null ? null : isoTime(ms));
