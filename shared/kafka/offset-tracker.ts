/**
 * Commit points for out-of-order completion: messages of a partition finish
 * in any order (a slow destination's delivery after a fast one's), but the
 * committed offset may only pass a message once it and every earlier one are
 * done. Pure bookkeeping; the consumer commits what it returns.
 */
export class OffsetTracker {
  readonly #pending = new Map<string, Set<bigint>>();
  readonly #next = new Map<string, bigint>();
  readonly #committed = new Map<string, bigint>();

  /** Registers an offset handed out for processing. */
  start(topic: string, partition: number, offset: string): void {
    const key = `${topic}\u0000${partition}`;
    const o = BigInt(offset);
    let set = this.#pending.get(key);
    if (!set) this.#pending.set(key, (set = new Set()));
    // The first offset seen is where reading began: nothing before it is ours to commit.
    if (!this.#committed.has(key)) this.#committed.set(key, o);
    set.add(o);
    if ((this.#next.get(key) ?? -1n) < o + 1n) this.#next.set(key, o + 1n);
  }

  /**
   * Marks an offset done; returns the offset to commit (the next offset to
   * read) when the commit point moved, else undefined.
   */
  finish(topic: string, partition: number, offset: string): string | undefined {
    const key = `${topic}\u0000${partition}`;
    const set = this.#pending.get(key);
    set?.delete(BigInt(offset));
    let point = this.#next.get(key) ?? 0n;
    for (const o of set ?? []) if (o < point) point = o;
    if (point <= (this.#committed.get(key) ?? -1n)) return undefined;
    this.#committed.set(key, point);
    return point.toString();
  }

  /** Messages started but not finished, over all partitions. */
  get inFlight(): number {
    let n = 0;
    for (const s of this.#pending.values()) n += s.size;
    return n;
  }

  /** Forgets every partition (a rebalance: the new assignment starts from the committed offsets). */
  clear(): void {
    this.#pending.clear();
    this.#next.clear();
    this.#committed.clear();
  }

  /** Forgets a partition (after it was revoked or seeked back). */
  reset(topic: string, partition: number): void {
    const key = `${topic}\u0000${partition}`;
    this.#pending.delete(key);
    this.#next.delete(key);
    this.#committed.delete(key);
  }
}
