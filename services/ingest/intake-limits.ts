import ipaddr from 'ipaddr.js';

/**
 * Fixed one-minute windows counted in memory, per key (a player key, a
 * client address). Pure: no Fastify, no clock of its own.
 *
 * NOTE: not @fastify/rate-limit (the per-API-key and failed-attempt limits):
 * it counts one per request, and the player key's limit counts events, the
 * unit each webhook destination multiplies; both player limits share this.
 * The counts live in this process only, as the per-API-key limit's do
 * (shared/http/plugins/rate-limit.ts): with N replicas behind a balancer a key gets
 * up to N times its limit. They bound abuse; they are not billing.
 */
export type Take = { ok: true } | { ok: false; retryAfterMs: number };

export interface WindowCounterOptions {
  /** Units (events, requests) a key may take in one window; 0 means no limit. */
  max: number;
  windowMs?: number;
  /** Keys remembered at once; beyond that the least recently started window is forgotten (its key starts afresh). */
  maxKeys?: number;
}

export class WindowCounter {
  readonly max: number;
  readonly windowMs: number;
  readonly #maxKeys: number;
  /** Insertion order is the order windows started: the first entry is the oldest. */
  readonly #windows = new Map<string, { start: number; used: number }>();

  constructor(opts: WindowCounterOptions) {
    this.max = opts.max;
    this.windowMs = opts.windowMs ?? 60_000;
    this.#maxKeys = opts.maxKeys ?? 100_000;
  }

  /**
   * Takes `units` for `key` at `now`, or refuses and takes nothing: a
   * refused request leaves the key's remaining budget for requests that fit.
   * A request larger than the whole budget is always refused.
   */
  take(key: string, units: number, now: number): Take {
    if (this.max === 0) return { ok: true };
    let w = this.#windows.get(key);
    if (!w || now - w.start >= this.windowMs) {
      if (w) this.#windows.delete(key);
      w = { start: now, used: 0 };
      this.#windows.set(key, w);
      if (this.#windows.size > this.#maxKeys) this.#windows.delete(this.#windows.keys().next().value!);
    }
    if (w.used + units > this.max) return { ok: false, retryAfterMs: w.start + this.windowMs - now };
    w.used += units;
    return { ok: true };
  }

  /** Units `key` has taken in its current window. */
  used(key: string, now: number): number {
    const w = this.#windows.get(key);
    return w && now - w.start < this.windowMs ? w.used : 0;
  }
}

/**
 * The key a client address is counted under: an IPv4 address as it is, an
 * IPv6 address by its /64. NOTE: one IPv6 subscriber usually holds a whole
 * /64, so counting single addresses would give it 2^64 budgets.
 */
export function clientAddressKey(ip: string): string {
  if (!ipaddr.isValid(ip)) return ip;
  let addr = ipaddr.parse(ip);
  if (addr.kind() === 'ipv6' && (addr as ipaddr.IPv6).isIPv4MappedAddress()) addr = (addr as ipaddr.IPv6).toIPv4Address();
  if (addr.kind() === 'ipv4') return addr.toString();
  const parts = (addr as ipaddr.IPv6).parts.slice(0, 4).map((p) => p.toString(16));
  return `${parts.join(':')}::/64`;
}
