import { describe, expect, it, vi } from 'vitest';
import { FairSlots } from './fair-slots.ts';

// Waits for a state the slots reach within a few microtasks, with a deadline.
const settled = (check: () => void) => vi.waitFor(check, { timeout: 2_000, interval: 1 });

describe('FairSlots', () => {
  it('hands freed slots to waiting tenants in turn, not in arrival order', async () => {
    const slots = new FairSlots(1);
    await slots.acquire('big');
    const order: string[] = [];
    const waiters = [
      ...Array.from({ length: 5 }, (_, i) => slots.acquire('big').then(() => order.push(`big${i}`))),
      slots.acquire('small').then(() => order.push('small')),
    ];
    for (let i = 0; i < 6; i++) {
      slots.release();
      // Each release wakes exactly one waiter.
      await settled(() => expect(order).toHaveLength(i + 1));
    }
    await Promise.all(waiters);
    // The small tenant queued after five of the big tenant's, and is served second.
    expect(order).toEqual(['big0', 'small', 'big1', 'big2', 'big3', 'big4']);
  });

  it('never lends more slots than it has', async () => {
    const slots = new FairSlots(3);
    let held = 0;
    let most = 0;
    let finished = 0;
    const gates: (() => void)[] = [];
    const tasks = Array.from({ length: 30 }, async (_, i) => {
      await slots.acquire(`t${i % 4}`);
      held++;
      most = Math.max(most, held);
      await new Promise<void>((r) => gates.push(r));
      held--;
      finished++;
      slots.release();
    });
    for (let done = 0; done < 30; done++) {
      // Every slot is taken while enough tasks remain, and no more than that.
      const expected = Math.min(3, 30 - done);
      await settled(() => expect({ held, waiting: gates.length, finished }).toEqual({ held: expected, waiting: expected, finished: done }));
      gates.shift()!();
    }
    await Promise.all(tasks);
    expect(most).toBe(3);
  });

  it('keeps at most perHost slots to one host, handing a freed one to the first waiter whose host has room', async () => {
    const slots = new FairSlots(4, 2);
    await slots.acquire('a', 'dead.example:443');
    await slots.acquire('a', 'dead.example:443');
    const order: string[] = [];
    const waiters = [
      slots.acquire('a', 'dead.example:443').then(() => order.push('dead')),
      slots.acquire('a', 'ok.example:443').then(() => order.push('ok1')),
      slots.acquire('b', 'ok.example:443').then(() => order.push('ok2')),
    ];
    // The host's third post waits; posts to another host pass it while slots are free.
    await settled(() => expect(order).toEqual(['ok1', 'ok2']));
    slots.release('ok.example:443');
    await new Promise((r) => setTimeout(r, 20));
    expect(order).toEqual(['ok1', 'ok2']);
    slots.release('dead.example:443');
    await settled(() => expect(order).toEqual(['ok1', 'ok2', 'dead']));
    await Promise.all(waiters);
  });

  it('skips a tenant whose waiters are all for a full host, serving the next tenant in turn', async () => {
    const slots = new FairSlots(2, 1);
    await slots.acquire('big', 'h1');
    await slots.acquire('small', 'h2');
    const order: string[] = [];
    const waiters = [
      slots.acquire('big', 'h1').then(() => order.push('big-h1')),
      slots.acquire('small', 'h3').then(() => order.push('small-h3')),
    ];
    // h2 is freed: big's only waiter is for h1 (still full), so small's h3 goes.
    slots.release('h2');
    await settled(() => expect(order).toEqual(['small-h3']));
    slots.release('h1');
    await settled(() => expect(order).toEqual(['small-h3', 'big-h1']));
    await Promise.all(waiters);
  });
});
