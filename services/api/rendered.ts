import type { FastifyReply } from 'fastify';
import type { z } from 'zod';

/**
 * The JSON body of an answer, checked and encoded as the route's serializer
 * would (fastify-type-provider-zod). The read cache holds these bodies, not
 * the rows they were made of: a hit then costs no mapping, cursor signing,
 * schema check or stringify, and a cached row weighs a few hundred bytes of
 * text instead of an object per field.
 */
export function jsonBody<S extends z.ZodType>(schema: S): (value: z.output<S>) => string {
  return (value) => {
    const encoded = schema.safeEncode(value);
    if (!encoded.success) throw encoded.error;
    return JSON.stringify(encoded.data);
  };
}

/** Sends a body made by {@link jsonBody}: a string with a JSON content type goes out as it is, past the serializer. */
export function sendJson(reply: FastifyReply, body: string): void {
  reply.type('application/json; charset=utf-8').send(body);
}
