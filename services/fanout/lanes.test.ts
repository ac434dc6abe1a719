import { describe, expect, it, vi } from 'vitest';
import { admit, Lanes, MAX_DEFERRALS, MAX_DEFERRALS_PROGRESSING, type Entry } from './lanes.ts';

/** Work that runs until the test opens its gate. */
function gated(log: string[], name: string) {
  let open!: () => void;
  const gate = new Promise<void>((r) => (open = r));
  const work = async () => {
    log.push(`start ${name}`);
    await gate;
    log.push(`end ${name}`);
  };
  return { work, open };
}

const run = (entry: Entry): Promise<void> => {
  if (entry.kind !== 'run') throw new Error(`expected run, got ${entry.kind}`);
  return entry.done;
};

describe('admit', () => {
  const lane = { concurrency: 2, queueBound: 3 };

  it('runs a delivery while the lane has a free slot, however long its queue', () => {
    expect(admit({ ...lane, active: 0, pending: 0, deferrals: 0 })).toEqual({ kind: 'run' });
    expect(admit({ ...lane, active: 1, pending: 50, deferrals: 0 })).toEqual({ kind: 'run' });
  });

  it('queues a delivery while all slots are taken and the queue is under its bound', () => {
    expect(admit({ ...lane, active: 2, pending: 2, deferrals: 0 })).toEqual({ kind: 'run' });
  });

  it('defers a full lane’s delivery and counts the deferral', () => {
    expect(admit({ ...lane, active: 2, pending: 3, deferrals: 0 })).toEqual({ kind: 'defer', deferrals: 1 });
    expect(admit({ ...lane, active: 2, pending: 9, deferrals: MAX_DEFERRALS - 1 })).toEqual({ kind: 'defer', deferrals: MAX_DEFERRALS });
  });

  it(`counts a full lane as a backlogged attempt after ${MAX_DEFERRALS} deferrals`, () => {
    expect(MAX_DEFERRALS).toBe(3);
    expect(admit({ ...lane, active: 2, pending: 3, deferrals: MAX_DEFERRALS })).toEqual({ kind: 'backlogged' });
    expect(admit({ ...lane, active: 5, pending: 7, deferrals: MAX_DEFERRALS + 4 })).toEqual({ kind: 'backlogged' });
  });

  it('runs a delivery deferred the most times once its lane has room again', () => {
    expect(admit({ ...lane, active: 2, pending: 2, deferrals: MAX_DEFERRALS })).toEqual({ kind: 'run' });
    expect(admit({ ...lane, active: 0, pending: 0, deferrals: MAX_DEFERRALS })).toEqual({ kind: 'run' });
  });

  it(`defers a full lane of a destination that is answering up to ${MAX_DEFERRALS_PROGRESSING} times before a backlogged attempt counts`, () => {
    const full = { ...lane, active: 2, pending: 3, progressing: true };
    expect(admit({ ...full, deferrals: MAX_DEFERRALS })).toEqual({ kind: 'defer', deferrals: MAX_DEFERRALS + 1 });
    expect(admit({ ...full, deferrals: MAX_DEFERRALS_PROGRESSING - 1 })).toEqual({ kind: 'defer', deferrals: MAX_DEFERRALS_PROGRESSING });
    expect(admit({ ...full, deferrals: MAX_DEFERRALS_PROGRESSING })).toEqual({ kind: 'backlogged' });
    // A destination that stopped answering is back to MAX_DEFERRALS.
    expect(admit({ ...full, progressing: false, deferrals: MAX_DEFERRALS })).toEqual({ kind: 'backlogged' });
  });

  it('with a queue bound of 0 defers as soon as every slot is taken', () => {
    expect(admit({ concurrency: 1, queueBound: 0, active: 0, pending: 0, deferrals: 0 })).toEqual({ kind: 'run' });
    expect(admit({ concurrency: 1, queueBound: 0, active: 1, pending: 0, deferrals: 0 })).toEqual({ kind: 'defer', deferrals: 1 });
  });
});

describe('Lanes', () => {
  it('runs up to the concurrency at once, queues up to the bound in order, then refuses', async () => {
    const lanes = new Lanes({ concurrency: 2, queueBound: 2, progressWindowMs: 30_000 });
    const log: string[] = [];
    const jobs = ['a', 'b', 'c', 'd'].map((n) => gated(log, n));
    const done = jobs.map((j) => run(lanes.enter('dest', 0, j.work)));
    expect(lanes.sizeOf('dest')).toEqual({ active: 2, pending: 2 });
    expect(lanes.enter('dest', 0, gated(log, 'e').work)).toEqual({ kind: 'defer', deferrals: 1 });
    expect(lanes.enter('dest', MAX_DEFERRALS, gated(log, 'f').work)).toEqual({ kind: 'backlogged' });
    await vi.waitFor(() => expect(log).toEqual(['start a', 'start b']));

    jobs[1]!.open();
    await done[1];
    await vi.waitFor(() => expect(log).toEqual(['start a', 'start b', 'end b', 'start c']));
    expect(lanes.sizeOf('dest')).toEqual({ active: 2, pending: 1 });
    // A queue place is free again.
    const g = gated(log, 'g');
    const gDone = run(lanes.enter('dest', 2, g.work));

    for (const j of [jobs[0]!, jobs[2]!, jobs[3]!, g]) j.open();
    await Promise.all([...done, gDone]);
    expect(log.filter((l) => l.startsWith('start'))).toEqual(['start a', 'start b', 'start c', 'start d', 'start g']);
    expect(log).not.toContain('start e');
    expect(log).not.toContain('start f');
    await vi.waitFor(() => expect(lanes.sizeOf('dest')).toEqual({ active: 0, pending: 0 }));
  });

  it('keeps destinations apart: a full lane does not hold back another', async () => {
    const lanes = new Lanes({ concurrency: 1, queueBound: 1, progressWindowMs: 30_000 });
    const log: string[] = [];
    const slow = [gated(log, 'slow1'), gated(log, 'slow2')];
    const slowDone = slow.map((j) => run(lanes.enter('slow', 0, j.work)));
    expect(lanes.enter('slow', 0, gated(log, 'slow3').work).kind).toBe('defer');

    const fast = gated(log, 'fast');
    const fastDone = run(lanes.enter('fast', 0, fast.work));
    fast.open();
    await fastDone;
    expect(log).toEqual(['start slow1', 'start fast', 'end fast']);

    for (const j of slow) j.open();
    await Promise.all(slowDone);
    expect(log.slice(-3)).toEqual(['end slow1', 'start slow2', 'end slow2']);
  });

  it('hands a failed attempt’s error to its caller and frees its slot', async () => {
    const lanes = new Lanes({ concurrency: 1, queueBound: 0, progressWindowMs: 30_000 });
    await expect(run(lanes.enter('d', 0, () => Promise.reject(new Error('boom'))))).rejects.toThrow('boom');
    await vi.waitFor(() => expect(lanes.sizeOf('d')).toEqual({ active: 0, pending: 0 }));
    const ran: string[] = [];
    await run(lanes.enter('d', 0, async () => void ran.push('next')));
    expect(ran).toEqual(['next']);
  });
});

describe('Lanes: a destination that is answering', () => {
  it('counts as answering for the progress window after a success, and only for the destination that answered', async () => {
    const lanes = new Lanes({ concurrency: 1, queueBound: 0, progressWindowMs: 1000 });
    expect(lanes.progressing('a', 5000)).toBe(false);
    lanes.noteSuccess('a', 5000);
    expect(lanes.progressing('a', 5000)).toBe(true);
    expect(lanes.progressing('a', 6000)).toBe(true);
    expect(lanes.progressing('a', 6001)).toBe(false);
    expect(lanes.progressing('b', 5500)).toBe(false);
    // An older success reported late does not move the last one back.
    lanes.noteSuccess('a', 4000);
    expect(lanes.progressing('a', 5900)).toBe(true);

    // A full lane: deferred past MAX_DEFERRALS while answering, backlogged once it no longer is.
    const log: string[] = [];
    const held = gated(log, 'held');
    const running = run(lanes.enter('a', 0, held.work, 5900));
    expect(lanes.enter('a', MAX_DEFERRALS, async () => undefined, 5900)).toEqual({ kind: 'defer', deferrals: MAX_DEFERRALS + 1 });
    expect(lanes.enter('a', MAX_DEFERRALS, async () => undefined, 6500)).toEqual({ kind: 'backlogged' });
    held.open();
    await running;
  });
});
