/**
 * Fixed-window request counter per key (spec 8: 1000 requests a minute per
 * API key). In memory, so the limit holds per process; replicas behind a
 * load balancer would need a shared store.
 */
export interface RateDecision {
  allowed: boolean;
  limit: number;
  remaining: number;
  /** Seconds until the window resets (≥ 1). */
  resetSeconds: number;
}

export class FixedWindowRateLimiter {
  readonly #limit: number;
  readonly #windowMs: number;
  readonly #now: () => number;
  readonly #windows = new Map<string, { start: number; count: number }>();
  #lastSweep = 0;

  constructor(opts: { limit: number; windowMs?: number; now?: () => number }) {
    this.#limit = opts.limit;
    this.#windowMs = opts.windowMs ?? 60_000;
    this.#now = opts.now ?? Date.now;
  }

  hit(key: string): RateDecision {
    const now = this.#now();
    this.#sweep(now);
    let w = this.#windows.get(key);
    if (!w || now - w.start >= this.#windowMs) {
      w = { start: now, count: 0 };
      this.#windows.set(key, w);
    }
    const resetSeconds = Math.max(1, Math.ceil((w.start + this.#windowMs - now) / 1000));
    if (w.count >= this.#limit) return { allowed: false, limit: this.#limit, remaining: 0, resetSeconds };
    w.count++;
    return { allowed: true, limit: this.#limit, remaining: this.#limit - w.count, resetSeconds };
  }

  /** The decision a hit would get, without counting one. */
  peek(key: string): RateDecision {
    const now = this.#now();
    const w = this.#windows.get(key);
    if (!w || now - w.start >= this.#windowMs) return { allowed: true, limit: this.#limit, remaining: this.#limit, resetSeconds: Math.ceil(this.#windowMs / 1000) };
    const resetSeconds = Math.max(1, Math.ceil((w.start + this.#windowMs - now) / 1000));
    return { allowed: w.count < this.#limit, limit: this.#limit, remaining: Math.max(0, this.#limit - w.count), resetSeconds };
  }

  /** Headers of the IETF RateLimit draft, sent on every response. */
  headers(d: RateDecision): Record<string, string> {
    return {
      'RateLimit-Limit': String(d.limit),
      'RateLimit-Remaining': String(d.remaining),
      'RateLimit-Reset': String(d.resetSeconds),
      'RateLimit-Policy': `${d.limit};w=${Math.round(this.#windowMs / 1000)}`,
    };
  }

  #sweep(now: number): void {
    if (now - this.#lastSweep < this.#windowMs) return;
    this.#lastSweep = now;
    for (const [k, w] of this.#windows) if (now - w.start >= this.#windowMs) this.#windows.delete(k);
  }
}
