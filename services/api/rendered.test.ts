import Fastify from 'fastify';
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { renderedOnce } from './rendered.ts';

describe('renderedOnce', () => {
  const Item = z.object({ n: z.number(), at: z.string() });

  it('renders a value once, sends the same JSON for it after, and renders a new value anew', async () => {
    const body = renderedOnce(z.object({ data: z.array(Item) }));
    let renders = 0;
    const values = [{ rows: [1, 2] }, { rows: [3] }];
    const app = Fastify();
    app.get('/:i', async (req, reply) => {
      const value = values[Number((req.params as { i: string }).i)]!;
      // Extra fields are dropped as the route's serializer drops them.
      return body(reply, value, () => (renders++, { data: value.rows.map((n) => ({ n, at: `t${n}`, secret: 'x' })) }));
    });
    const a1 = await app.inject('/0');
    const a2 = await app.inject('/0');
    const b = await app.inject('/1');
    expect(a1.headers['content-type']).toBe('application/json; charset=utf-8');
    expect(a1.json()).toEqual({ data: [{ n: 1, at: 't1' }, { n: 2, at: 't2' }] });
    expect(a2.body).toBe(a1.body);
    expect(b.json()).toEqual({ data: [{ n: 3, at: 't3' }] });
    expect(renders).toBe(2);
    await app.close();
  });

  it('refuses an answer its schema does not hold', () => {
    const body = renderedOnce(Item);
    const reply = { type: () => reply, send: () => reply } as never;
    expect(() => body(reply, {}, () => ({ n: 'one', at: 't' }) as never)).toThrow(z.ZodError);
  });
});
