import type { FastifyReply } from 'fastify';
import { serializerCompiler } from 'fastify-type-provider-zod';
import type { z } from 'zod';

/**
 * The JSON body of an answer of `GET url`, made by the app's own response
 * serializer (fastify-type-provider-zod's, shared/http/app.ts) ahead of the
 * reply: the read cache holds these bodies, not the rows they were made of,
 * so a hit costs no mapping, cursor signing, schema check or stringify, and
 * a cached row weighs a few hundred bytes of text instead of an object per
 * field. An answer the schema does not hold throws what the serializer
 * throws on any route (ResponseSerializationError, a 500).
 */
export function jsonBody<S extends z.ZodType>(schema: S, url: string): (value: z.output<S>) => string {
  return serializerCompiler({ schema, method: 'GET', url, httpStatus: '200' }) as (value: z.output<S>) => string;
}

/** Sends a body made by {@link jsonBody}: a string with a JSON content type goes out as it is, past the serializer. */
export function sendJson(reply: FastifyReply, body: string): void {
  reply.type('application/json; charset=utf-8').send(body);
}
