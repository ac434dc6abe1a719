import { describe, expect, it } from 'vitest';
import { FairSlots } from './fair-slots.ts';

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
      await new Promise((r) => setImmediate(r));
    }
    await Promise.all(waiters);
    // The small tenant queued after five of the big tenant's, and is served second.
    expect(order).toEqual(['big0', 'small', 'big1', 'big2', 'big3', 'big4']);
  });

  it('never lends more slots than it has', async () => {
    const slots = new FairSlots(3);
    let held = 0;
    let most = 0;
    await Promise.all(
      Array.from({ length: 30 }, async (_, i) => {
        await slots.acquire(`t${i % 4}`);
        held++;
        most = Math.max(most, held);
        await new Promise((r) => setTimeout(r, 1));
        held--;
        slots.release();
      }),
    );
    expect(most).toBe(3);
  });
});
