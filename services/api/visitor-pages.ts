import { CursorError, cursorCodec } from '../../shared/cursor.ts';
import { invalidField } from '../../shared/http/errors.ts';
import { isoTime, isoTimeOrNull } from '../../shared/http/schemas.ts';
import { VISITOR_ID_RE, toVideoId } from '../../shared/ids.ts';
import type { VisitorKeyset, VisitorRow } from './visitors.repository.ts';

/**
 * Keyset pages of a list of visitors, with cursors `[scope, key, visitor_id]`:
 * the scope (the tenant, the order and the filters) ties a cursor to the
 * list it came from, as keysetPages does for lists keyed by a UUID.
 */
export function visitorPages(prefix: string, secret: string) {
  const codec = cursorCodec(prefix, secret);
  return {
    /** The position the `cursor` query parameter names, if any; any failure is a 422 naming the parameter. */
    after(cursor: string | undefined, scope: unknown): VisitorKeyset | undefined {
      if (!cursor) return undefined;
      try {
        const [s, key, id] = codec.decode(cursor);
        if (JSON.stringify(s) !== JSON.stringify(scope) || !Number.isSafeInteger(key) || typeof id !== 'string' || !VISITOR_ID_RE.test(id)) {
          throw new CursorError('cursor does not belong to this list');
        }
        return { key: key as number, visitorId: id };
      } catch (err) {
        if (!(err instanceof CursorError)) throw err;
        throw invalidField('querystring.cursor', err.message);
      }
    },
    /** The first `limit` of `rows` (read with one more) as `view` shows them, and the next page's cursor or null. */
    page<T>(rows: readonly VisitorRow[], limit: number, scope: unknown, view: (row: VisitorRow) => T): { data: T[]; next_cursor: string | null } {
      const items = rows.slice(0, limit);
      const last = items.at(-1);
      return { data: items.map(view), next_cursor: rows.length > limit && last ? codec.encode([scope, last.key, last.visitor_id]) : null };
    },
  };
}

/** A visitor as the API shows it: times in ISO 8601, videos as vid_… ids. */
export const visitorView = (v: VisitorRow) => ({
  visitor_id: v.visitor_id,
  score: v.score,
  score_version: v.score_version,
  factors: v.factors,
  first_seen: isoTime(v.first_seen),
  last_seen: isoTime(v.last_seen),
  videos: v.videos.map(toVideoId),
  lead_at: isoTimeOrNull(v.lead_at),
});
