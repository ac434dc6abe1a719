import type { FastifyInstance } from 'fastify';
import fp from 'fastify-plugin';
import sjson from 'secure-json-parse';
import { ApiError } from './errors.ts';

/**
 * Parses a request body as JSON for every JSON route, whatever its
 * Content-Type (`application/json`, or `text/plain` from `sendBeacon`), so
 * that one body gets one answer on either path.
 *
 * A key `__proto__`, or `constructor` holding `prototype`, is refused (400
 * bad_request naming it) rather than parsed: merged into another object it
 * would change that object's prototype. Unknown keys are otherwise ignored by
 * the schemas, but these two are not data any route takes.
 */
export function parseJsonBody(text: string): unknown {
  try {
    return sjson.parse(text, { protoAction: 'error', constructorAction: 'error' });
  } catch (err) {
    if (err instanceof SyntaxError && FORBIDDEN.test(err.message)) {
      throw new ApiError('bad_request', 'body has a "__proto__" key or a "constructor" key holding "prototype"; such keys are refused');
    }
    throw new ApiError('invalid_json', text.trim() === '' ? 'body is empty; a JSON document was expected' : 'body is not valid JSON');
  }
}

/** secure-json-parse's own message for a refused key (any other SyntaxError is JSON.parse's). */
const FORBIDDEN = /^Object contains forbidden (prototype|constructor) property$/;

/**
 * One JSON parser for both media types. NOTE: text/plain is JSON here on
 * purpose: sendBeacon cannot set Content-Type: application/json without a
 * CORS preflight, so the player sends its JSON as text/plain.
 */
async function jsonBodyPlugin(app: FastifyInstance): Promise<void> {
  const json = (_req: unknown, body: string | Buffer, done: (err: Error | null, body?: unknown) => void) => {
    try {
      done(null, parseJsonBody(body as string));
    } catch (err) {
      done(err as Error, undefined);
    }
  };
  app.removeContentTypeParser('application/json');
  app.addContentTypeParser('application/json', { parseAs: 'string' }, json);
  app.addContentTypeParser('text/plain', { parseAs: 'string' }, json);
}

export const jsonBody = fp(jsonBodyPlugin, { name: 'json-body', fastify: '5.x' });
