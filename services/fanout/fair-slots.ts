/**
 * A semaphore shared by tenants: waiters queue per tenant and a freed slot
 * goes to the tenants in turn, so one tenant's thousands of waiting
 * deliveries delay another tenant's by at most one slot each.
 *
 * NOTE: not a `p-limit` like the destination lanes (lanes.ts): p-limit keeps
 * one FIFO queue, so a tenant with thousands of queued deliveries would hold
 * every other tenant's back behind all of them.
 */
export class FairSlots {
  #free: number;
  readonly #waiting = new Map<string, (() => void)[]>();
  constructor(n: number) {
    this.#free = n;
  }
  async acquire(tenant: string): Promise<void> {
    if (this.#free > 0) {
      this.#free--;
      return;
    }
    await new Promise<void>((r) => {
      const q = this.#waiting.get(tenant);
      if (q) q.push(r);
      else this.#waiting.set(tenant, [r]);
    });
  }
  release(): void {
    const next = this.#waiting.entries().next();
    if (next.done) {
      this.#free++;
      return;
    }
    const [tenant, queue] = next.value;
    const wake = queue.shift()!;
    // The tenant goes to the back of the turn order.
    this.#waiting.delete(tenant);
    if (queue.length > 0) this.#waiting.set(tenant, queue);
    wake();
  }
}
