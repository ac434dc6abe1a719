import { CursorError, type CursorCodec } from '../cursor.ts';
import { ApiError } from './errors.ts';

/**
 * Decodes a `cursor` query parameter and checks that it belongs to the list
 * being read; any failure is a 422 naming the parameter.
 */
export function readCursor<T>(codec: CursorCodec, raw: string, check: (payload: unknown[]) => T | undefined): T {
  try {
    const value = check(codec.decode(raw));
    if (value === undefined) throw new CursorError('cursor does not belong to this list');
    return value;
  } catch (err) {
    if (err instanceof CursorError) {
      throw new ApiError('validation_failed', `querystring.cursor: ${err.message}`, { errors: [{ path: 'querystring.cursor', message: err.message }] });
    }
    throw err;
  }
}
