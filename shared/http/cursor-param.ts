import { CursorError, cursorCodec } from '../cursor.ts';
import { isUuid } from '../ids.ts';
import { invalidField } from './errors.ts';

/** A position in a list ordered by an integer (milliseconds, a score) and then an id. */
export interface Keyset {
  ts: number;
  id: string;
}

/**
 * Keyset pages of one kind of list, with cursors `[scope, ts, id]`: the
 * scope (the tenant, the video, a filter) ties a cursor to the list it came
 * from, so a cursor of another list is refused. `isId` tells the list's ids
 * (UUIDs unless said otherwise).
 */
export function keysetPages(prefix: string, secret: string, isId: (id: string) => boolean = isUuid) {
  const codec = cursorCodec(prefix, secret);
  return {
    /** The position the `cursor` query parameter names, if any; any failure is a 422 naming the parameter. */
    after(cursor: string | undefined, scope: unknown): Keyset | undefined {
      if (!cursor) return undefined;
      try {
        const [s, ts, id] = codec.decode(cursor);
        if (JSON.stringify(s) !== JSON.stringify(scope) || typeof ts !== 'number' || !Number.isSafeInteger(ts) || typeof id !== 'string' || !isId(id)) {
          throw new CursorError('cursor does not belong to this list');
        }
        return { ts, id };
      } catch (err) {
        if (!(err instanceof CursorError)) throw err;
        throw invalidField('querystring.cursor', err.message);
      }
    },
    /**
     * The page of `rows` (read with one more than `limit`, to know whether a
     * page follows): its first `limit` rows as `view` shows them, and the
     * cursor of the next page, or null.
     */
    page<R, T>(rows: readonly R[], limit: number, scope: unknown, key: (row: R) => Keyset, view: (row: R) => T): { data: T[]; next_cursor: string | null } {
      const items = rows.slice(0, limit);
      const last = items.at(-1);
      const next = rows.length > limit && last ? key(last) : undefined;
      return { data: items.map(view), next_cursor: next ? codec.encode([scope, next.ts, next.id]) : null };
    },
  };
}
