/**
 * The request slots shared by tenants: at most `total` requests in flight,
 * and at most `perHost` to one host (host and port). Waiters queue per
 * tenant and a freed slot goes to the tenants in turn, each to its first
 * waiter whose host has room, so one tenant's thousands of waiting
 * deliveries delay another tenant's by at most one slot each.
 *
 * NOTE: not a `p-limit` like the destination lanes (lanes.ts): p-limit keeps
 * one FIFO queue, so a tenant with thousands of queued deliveries would hold
 * every other tenant's back behind all of them. The host bound keeps a
 * tenant's many destinations on one host from running hundreds of posts at
 * once there, while each destination keeps connections of its own.
 */
export class FairSlots {
  #free: number;
  readonly #perHost: number;
  readonly #hosts = new Map<string, number>();
  readonly #waiting = new Map<string, { host: string; wake: () => void }[]>();

  constructor(total: number, perHost = total) {
    this.#free = total;
    this.#perHost = perHost;
  }

  /** Resolves once a slot, and a slot of `host`, is taken for `tenant`; give it back with {@link release}. */
  async acquire(tenant: string, host = ''): Promise<void> {
    if (this.#free > 0 && (this.#hosts.get(host) ?? 0) < this.#perHost) return this.#take(host);
    await new Promise<void>((wake) => {
      const q = this.#waiting.get(tenant);
      if (q) q.push({ host, wake });
      else this.#waiting.set(tenant, [{ host, wake }]);
    });
  }

  release(host = ''): void {
    const left = (this.#hosts.get(host) ?? 1) - 1;
    if (left > 0) this.#hosts.set(host, left);
    else this.#hosts.delete(host);
    this.#free++;
    for (const [tenant, queue] of this.#waiting) {
      const at = queue.findIndex((w) => (this.#hosts.get(w.host) ?? 0) < this.#perHost);
      if (at < 0) continue;
      const [next] = queue.splice(at, 1);
      // The tenant goes to the back of the turn order.
      this.#waiting.delete(tenant);
      if (queue.length > 0) this.#waiting.set(tenant, queue);
      this.#take(next!.host);
      next!.wake();
      return;
    }
  }

  #take(host: string): void {
    this.#free--;
    this.#hosts.set(host, (this.#hosts.get(host) ?? 0) + 1);
  }
}
