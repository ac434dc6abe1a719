import { keysetPages } from '../../shared/http/cursor-param.ts';
import { isoTime, isoTimeOrNull } from '../../shared/http/schemas.ts';
import { VISITOR_ID_RE, toVideoId } from '../../shared/ids.ts';
import type { VisitorKeyset, VisitorRow } from './visitors.repository.ts';

/**
 * Keyset pages of a list of visitors: keysetPages with the order's key in
 * place of a time and a visitor id in place of a UUID.
 */
export function visitorPages(prefix: string, secret: string) {
  const pages = keysetPages(prefix, secret, (id) => VISITOR_ID_RE.test(id));
  return {
    after(cursor: string | undefined, scope: unknown): VisitorKeyset | undefined {
      const at = pages.after(cursor, scope);
      return at && { key: at.ts, visitorId: at.id };
    },
    page<T>(rows: readonly VisitorRow[], limit: number, scope: unknown, view: (row: VisitorRow) => T) {
      return pages.page(rows, limit, scope, (row) => ({ ts: row.key, id: row.visitor_id }), view);
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
