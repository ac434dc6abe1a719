import { describe, expect, it } from 'vitest';
import { InsertTouches, videoScope, visitorScope } from '../../shared/read-touches.ts';
import { ReadCache } from './read-cache.ts';

class Gone extends Error {}

const cacheOf = (opts: Partial<ConstructorParameters<typeof ReadCache>[0]> = {}) =>
  new ReadCache({ maxWeight: 1000, tenantMaxWeight: 1000, ttlMs: 0, clientGone: () => new Gone('gone'), ...opts });

/** A load that resolves when told to, counting its calls. */
function deferredLoads<T>() {
  const pending: { resolve: (v: T) => void; signal: AbortSignal }[] = [];
  let calls = 0;
  return {
    load: (signal: AbortSignal) => {
      calls++;
      return new Promise<T>((resolve, reject) => {
        pending.push({ resolve, signal });
        signal.addEventListener('abort', () => reject(new Gone('aborted')));
      });
    },
    get calls() {
      return calls;
    },
    pending,
  };
}

const score = (tenant: string, visitor: string) => ({ tenant, key: `score ${visitor}`, scope: visitorScope(tenant, visitor), weight: () => 1 });
const touched = (f: (t: InsertTouches) => void) => {
  const t = new InsertTouches();
  f(t);
  return t;
};
/** Both reports of an insert at once, as the projector makes them around an insert that returned. */
const invalidate = (c: ReadCache, touches: InsertTouches) => {
  c.inserting(touches);
  c.insertDone(touches);
};

/** A page of video v's events of three rows at most, from `from`: a full page depends on [from, its last row], a short one reaches the end. */
const page = (from: number, rows: number[]) => ({
  tenant: 'T',
  key: `page ${from}`,
  scope: videoScope('T', 'v'),
  from,
  to: (r: number[]) => (r.length >= 3 ? r.at(-1)! : Number.POSITIVE_INFINITY),
  weight: (r: number[]) => r.length,
  rows,
});

describe('ReadCache', () => {
  it('answers a repeat from memory until an insert touches its scope', async () => {
    const c = cacheOf();
    let n = 0;
    const load = async () => ++n;
    expect(await c.read(score('T', 'a'), load)).toBe(1);
    expect(await c.read(score('T', 'a'), load)).toBe(1);
    invalidate(c, touched((t) => t.event('T', 'vid', 'b', 5, true)));
    expect(await c.read(score('T', 'a'), load)).toBe(1);
    invalidate(c, touched((t) => t.event('T', 'vid', 'a', 5, false)));
    expect(await c.read(score('T', 'a'), load)).toBe(2);
    expect(c.counts).toMatchObject({ hit: 2, miss: 2 });
  });

  it('shares one running read among concurrent misses of the same key', async () => {
    const c = cacheOf();
    const d = deferredLoads<number>();
    const reads = [c.read(score('T', 'a'), d.load), c.read(score('T', 'a'), d.load), c.read(score('T', 'a'), d.load)];
    expect(d.calls).toBe(1);
    d.pending[0]!.resolve(7);
    expect(await Promise.all(reads)).toEqual([7, 7, 7]);
  });

  it('never stores a fill that an insert overtook, and starts a new read for later callers', async () => {
    const c = cacheOf();
    const d = deferredLoads<number>();
    const first = c.read(score('T', 'a'), d.load);
    invalidate(c, touched((t) => t.event('T', 'vid', 'a', 5, true)));
    // Started after the insert: must not join the fill that may have read before it.
    const second = c.read(score('T', 'a'), d.load);
    expect(d.calls).toBe(2);
    d.pending[0]!.resolve(1);
    d.pending[1]!.resolve(2);
    expect(await first).toBe(1);
    expect(await second).toBe(2);
    expect(await c.read(score('T', 'a'), d.load)).toBe(2);
    expect(c.counts.staleFills).toBe(1);
  });

  it('while an insert of a visitor is being sent, reads its score from ClickHouse each time and stores none', async () => {
    const c = cacheOf();
    let n = 0;
    const load = async () => ++n;
    await c.read(score('T', 'a'), load);
    const t = touched((x) => x.event('T', 'vid', 'a', 5, false));
    c.inserting(t);
    // Its rows may be readable already: no answer from before, no shared or stored fill.
    expect(await c.read(score('T', 'a'), load)).toBe(2);
    expect(await c.read(score('T', 'a'), load)).toBe(3);
    expect(await c.read(score('T', 'b'), load)).toBe(4);
    expect(await c.read(score('T', 'b'), load)).toBe(4);
    c.insertDone(t);
    expect(await c.read(score('T', 'a'), load)).toBe(5);
    expect(await c.read(score('T', 'a'), load)).toBe(5);
  });

  it('while an insert is being sent, still answers the pages it cannot change, and stores a fill whose range it missed', async () => {
    const c = cacheOf();
    let loads = 0;
    const read = (p: ReturnType<typeof page>) => c.read(p, async () => (loads++, p.rows));
    await read(page(100, [100, 110, 120]));
    const t = touched((x) => x.event('T', 'v', 'x', 500, true));
    c.inserting(t);
    await read(page(100, [100, 110, 120])); // cached before, range [100, 120]: a hit
    await read(page(130, [130, 140, 150])); // filled meanwhile, range [130, 150]: stored
    await read(page(130, [130, 140, 150]));
    await read(page(400, [400, 410])); // reaches the end, so the insert at 500 may be in it or not: read each time
    await read(page(400, [400, 410]));
    expect(loads).toBe(4);
    c.insertDone(t);
    await read(page(400, [400, 410]));
    await read(page(400, [400, 410]));
    expect(loads).toBe(5);
  });

  it('drops a page only when an inserted timestamp falls in its range', async () => {
    const c = cacheOf();
    let loads = 0;
    const read = (p: ReturnType<typeof page>) => c.read(p, async () => (loads++, p.rows));
    const deep = page(100, [100, 110, 120]); // full: depends on [100, 120]
    const newest = page(200, [200, 210]); // reached the end: depends on [200, ∞)
    await read(deep);
    await read(newest);
    invalidate(c, touched((t) => t.event('T', 'v', 'x', 300, true)));
    invalidate(c, touched((t) => t.event('T', 'v', 'x', 150, false))); // a signal is not listed
    invalidate(c, touched((t) => t.event('T', 'other', 'x', 110, true)));
    await read(deep);
    await read(newest);
    expect(loads).toBe(3); // the newest page only, read again
    invalidate(c, touched((t) => t.event('T', 'v', 'x', 120, true))); // a tie with the page's last row
    await read(deep);
    expect(loads).toBe(4);
  });

  it('gives up the shared read only when every waiter has gone', async () => {
    const c = cacheOf();
    const d = deferredLoads<number>();
    const a = new AbortController();
    const b = new AbortController();
    const ra = c.read(score('T', 'a'), d.load, a.signal);
    const rb = c.read(score('T', 'a'), d.load, b.signal);
    a.abort();
    await expect(ra).rejects.toBeInstanceOf(Gone);
    expect(d.pending[0]!.signal.aborted).toBe(false);
    b.abort();
    await expect(rb).rejects.toBeInstanceOf(Gone);
    expect(d.pending[0]!.signal.aborted).toBe(true);
    // The next reader starts afresh rather than joining the abandoned read.
    const rc = c.read(score('T', 'a'), d.load);
    expect(d.calls).toBe(2);
    d.pending[1]!.resolve(3);
    expect(await rc).toBe(3);
  });

  it('keeps each tenant within its share: a flood of one tenant evicts its own entries, not another\'s', async () => {
    const c = cacheOf({ maxWeight: 100, tenantMaxWeight: 60 });
    for (let i = 0; i < 30; i++) await c.read(score('quiet', `v${i}`), async () => i);
    for (let i = 0; i < 10_000; i++) await c.read(score('hostile', `v${i}`), async () => i);
    expect(c.weightOf('hostile')).toBeLessThanOrEqual(60);
    expect(c.weight).toBeLessThanOrEqual(100);
    expect(c.weightOf('quiet')).toBe(30);
    let reloaded = 0;
    for (let i = 0; i < 30; i++) await c.read(score('quiet', `v${i}`), async () => (reloaded++, i));
    expect(reloaded).toBe(0);
  });

  it('expires entries after ttlMs when nothing reports inserts', async () => {
    let now = 0;
    const c = cacheOf({ ttlMs: 250, now: () => now });
    let n = 0;
    const load = async () => ++n;
    await c.read(score('T', 'a'), load);
    now = 249;
    expect(await c.read(score('T', 'a'), load)).toBe(1);
    now = 250;
    expect(await c.read(score('T', 'a'), load)).toBe(2);
  });
});
