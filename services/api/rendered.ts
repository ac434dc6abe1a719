import type { FastifyReply } from 'fastify';
import type { z } from 'zod';

/**
 * JSON answers rendered once per value read. The read cache hands out the
 * same object for a key until an insert invalidates it, so a hit need not map
 * rows, sign a cursor, check the schema and stringify again: those were most
 * of a cached answer's CPU. Callers key by the value alone, so `render` may
 * use only what the read's cache key already holds (the tenant, the filters,
 * the limit). A value read afresh (no cache) is a new object and renders anew.
 */
export function renderedOnce<S extends z.ZodType>(schema: S) {
  const bodies = new WeakMap<object, string>();
  return (reply: FastifyReply, value: object, render: () => z.output<S>): void => {
    let body = bodies.get(value);
    if (body === undefined) {
      // The same check and encoding the route's serializer makes (fastify-type-provider-zod).
      const encoded = schema.safeEncode(render());
      if (!encoded.success) throw encoded.error;
      body = JSON.stringify(encoded.data);
      bodies.set(value, body);
    }
    // A string with a JSON content type is sent as it is, past the serializer.
    reply.type('application/json; charset=utf-8').send(body);
  };
}
