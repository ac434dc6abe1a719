import type { InsertTouches } from '../../shared/read-touches.ts';

/**
 * The read API's in-process cache of answers read from ClickHouse (scores,
 * events pages, timelines, visitor lists), with single-flight fills.
 *
 * Exactness: the projector of this process reports each insert twice, as it
 * sends it and once it has returned (InsertTouches: what it touched). From
 * the first report to the second its rows may be readable in ClickHouse
 * before the insert's call returns. So the first report drops the entries
 * it overlaps, and a fill that overlapped an insert in progress (running
 * when it began, or begun while it ran) is never stored and never shared
 * with a later request: those each read ClickHouse themselves. An entry
 * that survives is one no insert since its fill can change (a page whose
 * range the insert missed), so it stays a hit meanwhile. A read that starts
 * after an event became readable therefore never answers from before it.
 * With no projector in the process, entries instead expire after `ttlMs`
 * (docs/scaling.md).
 *
 * Bounds: entries weigh what the caller says (the read API: bytes); each
 * tenant holds at most `tenantMaxWeight` and evicts its own least recently
 * used entries beyond it; over `maxWeight` in all, the tenant holding the most
 * evicts. The player key is public and visitor ids are the players' own, so
 * one tenant's hostile keys can fill its own share, never another's.
 */
export interface ReadCacheOptions {
  maxWeight: number;
  tenantMaxWeight: number;
  /** 0: entries live until invalidated (a projector in the process); else their lifetime. */
  ttlMs: number;
  /** What a waiter whose client has gone is rejected with. */
  clientGone: () => Error;
  now?: () => number;
}

/** One read through the cache. */
export interface CachedRead<T> {
  tenant: string;
  /** Unique within the tenant: the read's kind and every parameter it depends on. */
  key: string;
  /** What invalidates it (shared/read-touches.ts). */
  scope: string;
  /** For a ranged scope: the earliest timestamp the answer depends on (inclusive); -Infinity for all. */
  from?: number;
  /** For a ranged scope: the latest timestamp it depends on (inclusive), known once read; Infinity when the answer reached the end. */
  to?: (value: T) => number;
  /** The answer's share of the bound; at least 1. */
  weight: (value: T) => number;
}

export type CacheOutcome = 'hit' | 'miss' | 'joined';

interface Entry {
  tenant: string;
  key: string;
  scope: string;
  value: unknown;
  weight: number;
  from: number;
  to: number;
  expiresAt: number;
}

interface Flight {
  id: string;
  scope: string;
  from: number;
  /** Ranges of inserts in progress while it ran (at or after `from`): stored only if its answer's range misses them all. */
  overlaps: [number, number][];
  waiters: number;
  controller: AbortController;
  promise: Promise<unknown>;
}

interface TenantSpace {
  /** In least recently used first order (a hit moves its entry to the end). */
  entries: Map<string, Entry>;
  weight: number;
}

export class ReadCache {
  readonly #opts: Required<ReadCacheOptions>;
  readonly #tenants = new Map<string, TenantSpace>();
  readonly #byScope = new Map<string, Set<Entry>>();
  readonly #flights = new Map<string, Flight>();
  readonly #flightsByScope = new Map<string, Set<Flight>>();
  /** Scopes an insert is being made into: the ranges inserted (whole scopes as one unbounded range), one per insert. */
  readonly #inserting = new Map<string, [number, number][]>();
  #weight = 0;
  /** Counts since start, for metrics and the benchmark. */
  readonly counts = { hit: 0, miss: 0, joined: 0, evicted: 0, invalidated: 0, staleFills: 0 };
  /** Called with each read's outcome (metrics). */
  onOutcome?: (outcome: CacheOutcome) => void;

  constructor(opts: ReadCacheOptions) {
    this.#opts = { now: () => performance.now(), ...opts };
  }

  /** Weight held in all. */
  get weight(): number {
    return this.#weight;
  }

  /** Weight held by one tenant. */
  weightOf(tenant: string): number {
    return this.#tenants.get(tenant)?.weight ?? 0;
  }

  /**
   * The answer of `read`: from the cache, from a fill already running for
   * the same key, or from `load` (given a signal that aborts once every
   * waiter's client has gone). `signal` is the caller's client.
   */
  read<T>(read: CachedRead<T>, load: (signal: AbortSignal) => Promise<T>, signal?: AbortSignal): Promise<T> {
    if (signal?.aborted) return Promise.reject(this.#opts.clientGone());
    const space = this.#tenants.get(read.tenant);
    const entry = space?.entries.get(read.key);
    if (entry) {
      if (entry.expiresAt > this.#opts.now()) {
        space!.entries.delete(read.key);
        space!.entries.set(read.key, entry);
        this.#count('hit');
        return Promise.resolve(entry.value as T);
      }
      this.#remove(entry);
    }
    const id = `${read.tenant}\u0000${read.key}`;
    let flight = this.#flights.get(id);
    if (flight) this.#count('joined');
    else {
      this.#count('miss');
      flight = this.#fill(id, read, load);
    }
    return this.#wait(flight, signal) as Promise<T>;
  }

  /** An insert of what `touches` names is being sent: drop what it overlaps; until insertDone, fills that meet it are stored only if their range missed it. */
  inserting(touches: InsertTouches): void {
    for (const [scope, lo, hi] of spans(touches)) {
      this.#dropScope(scope, lo, hi);
      let list = this.#inserting.get(scope);
      if (!list) this.#inserting.set(scope, (list = []));
      list.push([lo, hi]);
    }
  }

  /** The insert `inserting` announced has returned or failed. */
  insertDone(touches: InsertTouches): void {
    for (const [scope, lo, hi] of spans(touches)) {
      const list = this.#inserting.get(scope);
      const i = list?.findIndex(([a, b]) => a === lo && b === hi) ?? -1;
      if (list && i >= 0) list.splice(i, 1);
      if (list?.length === 0) this.#inserting.delete(scope);
      // Nothing it overlaps was stored meanwhile (fills that met it are not stored); dropped again all the same.
      this.#dropScope(scope, lo, hi);
    }
  }

  #dropScope(scope: string, lo: number, hi: number): void {
    const entries = this.#byScope.get(scope);
    if (entries) {
      for (const e of [...entries]) {
        if (hi >= e.from && lo <= e.to) {
          this.#remove(e);
          this.counts.invalidated++;
        }
      }
    }
    const flights = this.#flightsByScope.get(scope);
    if (flights) {
      // A running fill's upper end is not known yet: any insert at or after its start counts, and nobody joins it now.
      for (const f of flights) {
        if (hi >= f.from) {
          f.overlaps.push([lo, hi]);
          if (this.#flights.get(f.id) === f) this.#flights.delete(f.id);
        }
      }
    }
  }

  #fill<T>(id: string, read: CachedRead<T>, load: (signal: AbortSignal) => Promise<T>): Flight {
    const controller = new AbortController();
    const from = read.from ?? Number.NEGATIVE_INFINITY;
    // Inserts already in progress: their rows may or may not be in what this fill reads.
    const overlaps = (this.#inserting.get(read.scope) ?? []).filter(([, hi]) => hi >= from);
    const flight: Flight = { id, scope: read.scope, from, overlaps, waiters: 0, controller, promise: undefined as never };
    if (overlaps.length === 0) this.#flights.set(id, flight);
    let set = this.#flightsByScope.get(read.scope);
    if (!set) this.#flightsByScope.set(read.scope, (set = new Set()));
    set.add(flight);
    flight.promise = (async () => {
      try {
        const value = await load(controller.signal);
        const to = read.to ? read.to(value) : Number.POSITIVE_INFINITY;
        if (flight.overlaps.some(([lo, hi]) => hi >= from && lo <= to)) this.counts.staleFills++;
        else this.#store(read, value, from, to);
        return value;
      } finally {
        this.#forgetFlight(flight);
      }
    })();
    // A fill every waiter left still settles; nobody is there to see its failure.
    flight.promise.catch(() => undefined);
    return flight;
  }

  #forgetFlight(f: Flight): void {
    if (this.#flights.get(f.id) === f) this.#flights.delete(f.id);
    const set = this.#flightsByScope.get(f.scope);
    if (set?.delete(f) && set.size === 0) this.#flightsByScope.delete(f.scope);
  }

  /** The flight's answer for one waiter, who may leave before it: the last to leave aborts the read. */
  #wait(flight: Flight, signal?: AbortSignal): Promise<unknown> {
    flight.waiters++;
    if (!signal) return flight.promise;
    return new Promise((resolve, reject) => {
      const leave = () => {
        if (--flight.waiters === 0) {
          flight.controller.abort();
          // Nobody waits: a later read must not join a fill that is giving up.
          this.#forgetFlight(flight);
        }
        reject(this.#opts.clientGone());
      };
      signal.addEventListener('abort', leave, { once: true });
      flight.promise.then(
        (v) => {
          signal.removeEventListener('abort', leave);
          resolve(v);
        },
        (err: unknown) => {
          signal.removeEventListener('abort', leave);
          reject(err);
        },
      );
    });
  }

  #store<T>(read: CachedRead<T>, value: T, from: number, to: number): void {
    const weight = Math.max(1, read.weight(value));
    if (weight > this.#opts.tenantMaxWeight || weight > this.#opts.maxWeight) return;
    let space = this.#tenants.get(read.tenant);
    if (!space) this.#tenants.set(read.tenant, (space = { entries: new Map(), weight: 0 }));
    const old = space.entries.get(read.key);
    if (old) this.#remove(old);
    const entry: Entry = {
      tenant: read.tenant,
      key: read.key,
      scope: read.scope,
      value,
      weight,
      from,
      to,
      expiresAt: this.#opts.ttlMs > 0 ? this.#opts.now() + this.#opts.ttlMs : Number.POSITIVE_INFINITY,
    };
    space.entries.set(read.key, entry);
    space.weight += weight;
    this.#weight += weight;
    let set = this.#byScope.get(read.scope);
    if (!set) this.#byScope.set(read.scope, (set = new Set()));
    set.add(entry);
    while (space.weight > this.#opts.tenantMaxWeight) this.#evictOldest(space);
    while (this.#weight > this.#opts.maxWeight) this.#evictOldest(this.#largest());
  }

  #largest(): TenantSpace {
    let largest: TenantSpace | undefined;
    for (const s of this.#tenants.values()) if (!largest || s.weight > largest.weight) largest = s;
    return largest!;
  }

  #evictOldest(space: TenantSpace): void {
    const oldest = space.entries.values().next().value;
    if (!oldest) return;
    this.#remove(oldest);
    this.counts.evicted++;
  }

  #remove(e: Entry): void {
    const space = this.#tenants.get(e.tenant);
    if (!space || space.entries.get(e.key) !== e) return;
    space.entries.delete(e.key);
    space.weight -= e.weight;
    this.#weight -= e.weight;
    if (space.entries.size === 0) this.#tenants.delete(e.tenant);
    const set = this.#byScope.get(e.scope);
    if (set?.delete(e) && set.size === 0) this.#byScope.delete(e.scope);
  }

  #count(outcome: CacheOutcome): void {
    this.counts[outcome]++;
    this.onOutcome?.(outcome);
  }
}

/** Each scope of `touches` with the range it touched (a whole scope: unbounded). */
function* spans(touches: InsertTouches): Generator<[string, number, number]> {
  for (const scope of touches.scopes) yield [scope, Number.NEGATIVE_INFINITY, Number.POSITIVE_INFINITY];
  for (const [scope, [lo, hi]] of touches.ranges) yield [scope, lo, hi];
}
