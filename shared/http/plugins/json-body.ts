import type { FastifyInstance } from 'fastify';
import fp from 'fastify-plugin';
import { parseJsonBody } from '../json-body.ts';

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
