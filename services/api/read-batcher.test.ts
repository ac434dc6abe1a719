import { describe, expect, it } from 'vitest';
import { ReadBatcher } from './read-batcher.ts';

class Gone extends Error {}

/** A batcher whose reads are held until released, recording each query's visitors. */
function held(maxBatch: number, maxInFlight = 1) {
  const queries: { tenant: string; visitors: string[]; signal: AbortSignal; release: () => void }[] = [];
  const batcher = new ReadBatcher<string>({
    maxBatch,
    maxInFlight,
    clientGone: () => new Gone('gone'),
    read: (tenant, visitors, signal) =>
      new Promise((resolve, reject) => {
        signal.addEventListener('abort', () => reject(new Gone('aborted')));
        queries.push({ tenant, visitors, signal, release: () => resolve(new Map(visitors.filter((v) => !v.startsWith('none')).map((v) => [v, `${tenant}/${v}`]))) });
      }),
  });
  return { batcher, queries };
}

const tick = () => new Promise((r) => setImmediate(r));

describe('ReadBatcher', () => {
  it('sends the first read at once and the reads that arrive meanwhile as one query per tenant', async () => {
    const { batcher, queries } = held(64);
    const first = batcher.get('T', 'a');
    const rest = [batcher.get('T', 'b'), batcher.get('T', 'c'), batcher.get('T', 'b'), batcher.get('U', 'a'), batcher.get('T', 'none1')];
    expect(queries.map((q) => q.visitors)).toEqual([['a']]);
    queries[0]!.release();
    expect(await first).toBe('T/a');
    await tick();
    expect(queries.slice(1).map((q) => [q.tenant, q.visitors])).toEqual([['T', ['b', 'c', 'none1']]]);
    queries[1]!.release();
    await tick();
    expect(queries[2]).toMatchObject({ tenant: 'U', visitors: ['a'] });
    queries[2]!.release();
    expect(await Promise.all(rest)).toEqual(['T/b', 'T/c', 'T/b', 'U/a', undefined]);
  });

  it('splits a queue longer than maxBatch', async () => {
    const { batcher, queries } = held(2);
    const all = ['a', 'b', 'c', 'd', 'e'].map((v) => batcher.get('T', v));
    for (let i = 0; i < 3; i++) {
      queries[i]!.release();
      await tick();
    }
    expect(queries.map((q) => q.visitors)).toEqual([['a'], ['b', 'c'], ['d', 'e']]);
    expect(await Promise.all(all)).toEqual(['T/a', 'T/b', 'T/c', 'T/d', 'T/e']);
  });

  it('lets a waiter leave, and aborts a sent query only when all its waiters have left', async () => {
    const { batcher, queries } = held(64);
    const a = new AbortController();
    const b = new AbortController();
    const c = new AbortController();
    const ra = batcher.get('T', 'a', a.signal);
    const rb = batcher.get('T', 'b', b.signal);
    const rc = batcher.get('T', 'c', c.signal);
    b.abort(); // still queued: leaves the queue
    await expect(rb).rejects.toBeInstanceOf(Gone);
    queries[0]!.release();
    await ra;
    await tick();
    expect(queries[1]!.visitors).toEqual(['c']);
    c.abort();
    await expect(rc).rejects.toBeInstanceOf(Gone);
    expect(queries[1]!.signal.aborted).toBe(true);
  });
});
