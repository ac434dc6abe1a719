/**
 * DNS for webhook destinations, kept off the libuv thread pool. `dns.lookup`
 * runs getaddrinfo on that pool, which the embedded ClickHouse and file I/O
 * share: a destination whose DNS never answers would hold a pool thread per
 * attempt. Here names are resolved by c-ares (a node:dns/promises `Resolver`,
 * non-blocking sockets on the event loop), A and AAAA in parallel, with a
 * hard time budget per look-up and a bound on look-ups in flight.
 *
 * c-ares does not read /etc/hosts or nsswitch: only `localhost` (and names
 * under `.localhost`, RFC 6761) is answered here, as 127.0.0.1.
 */
import { Resolver } from 'node:dns/promises';
import { isIP } from 'node:net';

/** One address a host name resolved to. */
export interface ResolvedAddress {
  address: string;
  /** 4 or 6. */
  family: number;
}

/**
 * Resolves a host name to all of its addresses. `signal` aborts the look-up
 * (the caller's own deadline); a resolver may ignore it.
 */
export type HostResolver = (host: string, signal?: AbortSignal) => Promise<ResolvedAddress[]>;

/** Options of {@link WebhookResolver}. */
export interface WebhookResolverOptions {
  /** Budget of one look-up, time spent waiting for a free slot included (`WEBHOOK_DNS_TIMEOUT_MS`). */
  timeoutMs: number;
  /** Look-ups in flight at once; further ones wait in arrival order (`WEBHOOK_DNS_MAX_CONCURRENT`). */
  maxConcurrent: number;
  /** DNS servers, e.g. `['127.0.0.1:5353']`; default: the system's (resolv.conf). */
  servers?: readonly string[];
}

/**
 * A look-up that did not finish within its budget (or before the caller
 * aborted it). `code` is `ETIMEOUT`, the code c-ares uses for its own timeout.
 * Retrying later is the right response: the name may well resolve then.
 */
export class DnsTimeoutError extends Error {
  readonly code = 'ETIMEOUT';
  readonly host: string;
  /** True when the budget ran out before a look-up slot became free (no query was sent). */
  readonly queued: boolean;

  constructor(host: string, queued: boolean) {
    super(queued ? `DNS look-up of ${host} timed out waiting for a free look-up slot` : `DNS look-up of ${host} timed out`);
    this.name = 'DnsTimeoutError';
    this.host = host;
    this.queued = queued;
  }
}

/** A look-up that got an answer, and the answer was "no usable address"; `code` is the c-ares code. */
export class DnsLookupError extends Error {
  readonly code: string;
  readonly host: string;

  constructor(host: string, code: string) {
    super(`DNS look-up of ${host} failed: ${code}`);
    this.name = 'DnsLookupError';
    this.host = host;
    this.code = code;
  }
}

/**
 * c-ares tries per server, each with half the budget. Long tries rather than
 * many short ones: c-ares drops a late answer to a query it has already sent
 * again, so a per-try timeout below the server's usual latency would make a
 * slow but working server never succeed. A lost UDP packet is asked again at
 * about half the budget. c-ares's own give-up time is never before the
 * budget, so the budget's timer, not c-ares, decides when a look-up failed.
 */
const TRIES = 2;

// NOTE: 127.0.0.1 only, not ::1 as well. Every resolved address must pass the
// address policy, so answering ::1 too would refuse `localhost` wherever the
// allow list names 127.0.0.0/8 alone (the usual set-up for local receivers),
// and a receiver on localhost most commonly listens on 127.0.0.1.
const LOCALHOST: readonly ResolvedAddress[] = [{ address: '127.0.0.1', family: 4 }];

/** One caller waiting for a resolver from the pool. */
interface Waiter {
  start: (resolver: Resolver) => void;
  fail: (error: Error) => void;
}

/**
 * A pool of at most `maxConcurrent` c-ares resolvers, one per look-up in
 * flight. A look-up holds its resolver until both of its queries have
 * settled, so at most `maxConcurrent` names are being asked at any moment;
 * on timeout the look-up's own resolver is cancelled (`cancel()` aborts only
 * that resolver's queries), which settles them at once and frees the slot.
 */
export class WebhookResolver {
  readonly #timeoutMs: number;
  readonly #maxConcurrent: number;
  readonly #servers: readonly string[] | undefined;
  readonly #idle: Resolver[] = [];
  readonly #busy = new Set<Resolver>();
  readonly #waiting: Waiter[] = [];
  #closed = false;

  /** {@link lookup} as a bound {@link HostResolver}. */
  readonly resolve: HostResolver = (host, signal) => this.lookup(host, signal);

  constructor(options: WebhookResolverOptions) {
    const { timeoutMs, maxConcurrent } = options;
    if (!Number.isFinite(timeoutMs) || timeoutMs <= 0) throw new RangeError('timeoutMs must be a positive number');
    if (!Number.isSafeInteger(maxConcurrent) || maxConcurrent < 1) throw new RangeError('maxConcurrent must be a positive integer');
    this.#timeoutMs = timeoutMs;
    this.#maxConcurrent = maxConcurrent;
    this.#servers = options.servers;
    // Built now so that a malformed server list fails at start-up, not at the first delivery.
    this.#idle.push(this.#newResolver());
  }

  /** Look-ups holding a resolver, and look-ups waiting for one. */
  stats(): { active: number; queued: number } {
    return { active: this.#busy.size, queued: this.#waiting.length };
  }

  /**
   * Resolves `host` to its IPv4 and IPv6 addresses (IPv4 first). IP literals
   * and `localhost` (127.0.0.1) are answered without DNS. Rejects with
   * {@link DnsTimeoutError} when the budget runs out (waiting for a slot
   * included) or `signal` aborts, with {@link DnsLookupError} when the name
   * has no address (`ENOTFOUND`, `ENODATA`) or the server refused
   * (`ESERVFAIL`, `EREFUSED`, `ECONNREFUSED`, …).
   */
  lookup(host: string, signal?: AbortSignal): Promise<ResolvedAddress[]> {
    const name = host.replace(/^\[(.*)\]$/, '$1');
    const family = isIP(name);
    if (family !== 0) return Promise.resolve([{ address: name, family }]);
    if (isLocalhost(name)) return Promise.resolve(LOCALHOST.map((a) => ({ ...a })));
    if (this.#closed) return Promise.reject(new Error('the webhook resolver is closed'));

    return new Promise<ResolvedAddress[]>((resolve, reject) => {
      let done = false;
      let held: Resolver | undefined;
      const finish = (settle: () => void): void => {
        if (done) return;
        done = true;
        clearTimeout(timer);
        signal?.removeEventListener('abort', giveUp);
        settle();
      };
      const waiter: Waiter = {
        start: (resolver) => {
          held = resolver;
          void Promise.allSettled([resolver.resolve4(name), resolver.resolve6(name)]).then(([v4, v6]) => {
            // Only now are both queries over (answered, failed or cancelled): the slot is free.
            this.#release(resolver);
            let addresses: ResolvedAddress[];
            try {
              addresses = combineAnswers(host, v4, v6);
            } catch (err) {
              finish(() => reject(err as Error));
              return;
            }
            finish(() => resolve(addresses));
          });
        },
        fail: (error) => finish(() => reject(error)),
      };
      const giveUp = (): void => {
        if (done) return;
        const queued = held === undefined;
        if (queued) {
          const at = this.#waiting.indexOf(waiter);
          if (at !== -1) this.#waiting.splice(at, 1);
        }
        finish(() => reject(new DnsTimeoutError(host, queued)));
        // Settles this look-up's queries with ECANCELLED; the slot is released once they have.
        held?.cancel();
      };
      const timer = setTimeout(giveUp, this.#timeoutMs);
      if (signal?.aborted) {
        giveUp();
        return;
      }
      signal?.addEventListener('abort', giveUp, { once: true });
      this.#acquire(waiter);
    });
  }

  /** Cancels every look-up in flight and fails those waiting; later look-ups reject. */
  close(): void {
    this.#closed = true;
    for (const waiter of this.#waiting.splice(0)) waiter.fail(new Error('the webhook resolver is closed'));
    for (const resolver of this.#busy) resolver.cancel();
  }

  #acquire(waiter: Waiter): void {
    const idle = this.#idle.pop();
    if (idle !== undefined) {
      this.#busy.add(idle);
      waiter.start(idle);
    } else if (this.#busy.size < this.#maxConcurrent) {
      const created = this.#newResolver();
      this.#busy.add(created);
      waiter.start(created);
    } else {
      this.#waiting.push(waiter);
    }
  }

  #release(resolver: Resolver): void {
    const next = this.#waiting.shift();
    if (next !== undefined) {
      next.start(resolver);
    } else {
      this.#busy.delete(resolver);
      this.#idle.push(resolver);
    }
  }

  #newResolver(): Resolver {
    const resolver = new Resolver({
      timeout: Math.max(1, Math.floor(this.#timeoutMs / TRIES)),
      tries: TRIES,
      maxTimeout: Math.max(1, Math.ceil(this.#timeoutMs)),
    });
    if (this.#servers !== undefined) resolver.setServers([...this.#servers]);
    return resolver;
  }
}

/** `localhost`, `localhost.` and names under `.localhost` (RFC 6761 section 6.3: always loopback, never sent to DNS). */
export function isLocalhost(host: string): boolean {
  const name = host.toLowerCase().replace(/\.$/, '');
  return name === 'localhost' || name.endsWith('.localhost');
}

/**
 * Merges the settled A and AAAA queries of `host`: every address found (IPv4
 * first), else the most telling failure. An answer for one family is enough;
 * the other may fail in any way (ENODATA is the normal "no AAAA record").
 * Without addresses: `ENOTFOUND` (the name does not exist) wins, then a
 * c-ares timeout (a {@link DnsTimeoutError}), then a server failure, then
 * `ENODATA`.
 *
 * @throws DnsTimeoutError | DnsLookupError
 */
export function combineAnswers(
  host: string,
  v4: PromiseSettledResult<readonly string[]>,
  v6: PromiseSettledResult<readonly string[]>,
): ResolvedAddress[] {
  // NOTE: IPv4 first: the connection tries addresses in this order (with
  // Happy Eyeballs fallback), and IPv4 is the family a container most
  // reliably has a route for.
  const addresses: ResolvedAddress[] = [
    ...(v4.status === 'fulfilled' ? v4.value.map((address) => ({ address, family: 4 })) : []),
    ...(v6.status === 'fulfilled' ? v6.value.map((address) => ({ address, family: 6 })) : []),
  ];
  if (addresses.length > 0) return addresses;

  const codes = [v4, v6].map((r) => (r.status === 'rejected' ? codeOf(r.reason) : 'ENODATA'));
  if (codes.includes('ENOTFOUND')) throw new DnsLookupError(host, 'ENOTFOUND');
  if (codes.includes('ETIMEOUT')) throw new DnsTimeoutError(host, false);
  const other = codes.find((code) => code !== 'ENODATA');
  throw new DnsLookupError(host, other ?? 'ENODATA');
}

function codeOf(err: unknown): string {
  const code = (err as { code?: unknown } | null)?.code;
  return typeof code === 'string' && code !== '' ? code : 'EUNKNOWN';
}
