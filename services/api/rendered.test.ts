import Fastify from 'fastify';
import { ResponseSerializationError } from 'fastify-type-provider-zod';
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { jsonBody, sendJson } from './rendered.ts';

describe('jsonBody / sendJson', () => {
  const Page = z.object({ data: z.array(z.object({ n: z.number(), at: z.string() })) });

  it('encodes as the route schema does, dropping fields it does not list, and sends the text as JSON', async () => {
    const body = jsonBody(Page, '/page')({ data: [{ n: 1, at: 't1', secret: 'x' } as never] });
    expect(body).toBe('{"data":[{"n":1,"at":"t1"}]}');
    const app = Fastify();
    app.get('/', async (_req, reply) => sendJson(reply, body));
    const res = await app.inject('/');
    expect(res.headers['content-type']).toBe('application/json; charset=utf-8');
    expect(res.body).toBe(body);
    await app.close();
  });

  it('refuses an answer its schema does not hold', () => {
    expect(() => jsonBody(Page, '/page')({ data: [{ n: 'one', at: 't' }] } as never)).toThrow(ResponseSerializationError);
  });
});
