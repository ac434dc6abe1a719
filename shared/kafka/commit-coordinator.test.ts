import { describe, expect, it } from 'vitest';
import { CommitCoordinator, type Lane, type Ticket } from './commit-coordinator.ts';

/** A coordinator whose commits are recorded as `partition:offset`. */
function coordinator(maxInFlight = 100) {
  const sent: string[] = [];
  const c = new CommitCoordinator({ delayMs: 1000, maxInFlight, commit: async (offsets) => void sent.push(...offsets.map((o) => `${o.partition}:${o.offset}`)) });
  const take = (lane: Lane, offset: string): Ticket => {
    const t: Ticket = { lane, message: { offset }, done: false };
    c.take(t);
    return t;
  };
  /** What the next commit sends. */
  const commits = async () => {
    await c.flush();
    return sent.splice(0);
  };
  return { c, take, commits };
}

describe('CommitCoordinator', () => {
  it('commits only past a contiguous prefix of finished offsets', async () => {
    const { c, take, commits } = coordinator();
    const lane = c.lane('t', 0);
    const [t10, t11, t12] = ['10', '11', '12'].map((o) => take(lane, o));
    expect(c.inFlight).toBe(3);
    c.finish(t11!);
    expect(await commits()).toEqual([]); // 10 still pending
    c.finish(t10!);
    expect(await commits()).toEqual(['0:12']); // 10 and 11 done: next to read is 12
    c.finish(t12!);
    expect(await commits()).toEqual(['0:13']);
    expect(c.inFlight).toBe(0);
  });

  it('keeps partitions apart and never moves backwards', async () => {
    const { c, take, commits } = coordinator();
    const a = take(c.lane('t', 0), '5');
    const b = take(c.lane('t', 1), '7');
    c.finish(b);
    expect(await commits()).toEqual(['1:8']);
    c.finish(b);
    expect(await commits()).toEqual([]);
    c.finish(a);
    expect(await commits()).toEqual(['0:6']);
  });

  it('finishes a handler call\'s tickets at once, over interleaved partitions, up to the first not done', async () => {
    const { c, take, commits } = coordinator();
    const [p0, p1] = [c.lane('t', 0), c.lane('t', 1)];
    const call = [take(p0, '0'), take(p0, '1'), take(p1, '0'), take(p0, '2')];
    const later = take(p1, '1');
    take(p1, '2');
    c.finishAll([...call, later]);
    expect(c.inFlight).toBe(1);
    expect((await commits()).sort()).toEqual(['0:3', '1:2']);
  });

  it('commits past markers once every record before them is done', async () => {
    const { c, take, commits } = coordinator();
    const lane = c.lane('t', 0);
    const t = take(lane, '3');
    c.skip(lane, '5');
    expect(await commits()).toEqual([]);
    c.finish(t);
    expect(await commits()).toEqual(['0:6']);
    // A fetch of markers alone, nothing outstanding: committed at once.
    c.skip(lane, '8');
    expect(await commits()).toEqual(['0:9']);
  });

  it('commits nothing for work of a revoked or rewound lane, and answers where a rewound lane is read again', async () => {
    const { c, take, commits } = coordinator();
    const old = take(c.lane('t', 0), '1');
    c.clear();
    expect(c.inFlight).toBe(0);
    c.finish(old);
    expect(await commits()).toEqual([]);
    const lane = c.lane('t', 0);
    const done = take(lane, '4');
    take(lane, '5');
    take(lane, '6');
    c.finish(done);
    expect(c.rewind(lane)).toBe('5');
    expect(c.inFlight).toBe(0);
    expect(await commits()).toEqual([]);
    expect(c.lane('t', 0)).not.toBe(lane);
  });

  it('is full at maxInFlight tickets outstanding, and frees room when one is done', async () => {
    const { c, take } = coordinator(2);
    const lane = c.lane('t', 0);
    const first = take(lane, '0');
    take(lane, '1');
    expect(c.full).toBe(true);
    let beats = 0;
    let freed = false;
    const waiting = c.freed(async () => void beats++).then(() => (freed = true));
    await new Promise((r) => setTimeout(r, 20));
    expect(freed).toBe(false);
    c.finish(first);
    await waiting;
    expect(beats).toBe(1);
    expect(c.full).toBe(false);
  });
});
