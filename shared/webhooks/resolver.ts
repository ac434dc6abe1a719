/**
 * DNS for webhook destinations, kept off the libuv thread pool. `dns.lookup`
 * runs getaddrinfo on that pool, which the embedded ClickHouse and file I/O
 * share: a destination whose DNS never answers would hold a pool thread per
 * attempt. Here names are resolved by c-ares (a node:dns/promises `Resolver`,
 * non-blocking sockets on the event loop), A and AAAA in parallel, with a
 * hard time budget per look-up.
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
  /** Budget of one look-up (`WEBHOOK_DNS_TIMEOUT_MS`). */
  timeoutMs: number;
  /** DNS servers, e.g. `['127.0.0.1:5353']`; default: the system's (resolv.conf). */
  servers?: readonly string[];
}

/**
 * A look-up that got an answer, and the answer was "no usable address", or
 * (as {@link DnsTimeoutError}) got none in time; `code` is the c-ares code.
 */
export class DnsLookupError extends Error {
  override name = 'DnsLookupError';
  readonly code: string;
  readonly host: string;

  constructor(host: string, code: string, message = `DNS look-up of ${host} failed: ${code}`) {
    super(message);
    this.host = host;
    this.code = code;
  }
}

/**
 * A look-up that did not finish within its budget (or before the caller
 * aborted it). `code` is `ETIMEOUT`, the code c-ares uses for its own timeout.
 * Retrying later is the right response: the name may well resolve then.
 */
export class DnsTimeoutError extends DnsLookupError {
  override name = 'DnsTimeoutError';

  constructor(host: string) {
    super(host, 'ETIMEOUT', `DNS look-up of ${host} timed out`);
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

/**
 * One c-ares channel for every look-up: its queries are non-blocking
 * sockets on the event loop, so look-ups in flight hold no thread and need
 * no bound of their own. A look-up past its budget is given up at once; its
 * queries end by c-ares's own timeout, about the same budget.
 */
export class WebhookResolver {
  readonly #timeoutMs: number;
  readonly #resolver: Resolver;
  #closed = false;

  constructor(options: WebhookResolverOptions) {
    const { timeoutMs } = options;
    if (!Number.isFinite(timeoutMs) || timeoutMs <= 0) throw new RangeError('timeoutMs must be a positive number');
    this.#timeoutMs = timeoutMs;
    this.#resolver = new Resolver({ timeout: Math.max(1, Math.floor(timeoutMs / TRIES)), tries: TRIES, maxTimeout: Math.max(1, Math.ceil(timeoutMs)) });
    // Set now so that a malformed server list fails at start-up, not at the first delivery.
    if (options.servers !== undefined) this.#resolver.setServers([...options.servers]);
  }

  /**
   * Resolves `host` to its IPv4 and IPv6 addresses (IPv4 first). IP literals
   * and `localhost` (127.0.0.1) are answered without DNS. Rejects with
   * {@link DnsTimeoutError} when the budget runs out or `signal` aborts, with
   * {@link DnsLookupError} when the name has no address (`ENOTFOUND`,
   * `ENODATA`) or the server refused (`ESERVFAIL`, `EREFUSED`, …).
   */
  lookup(host: string, signal?: AbortSignal): Promise<ResolvedAddress[]> {
    const name = host.replace(/^\[(.*)\]$/, '$1');
    const family = isIP(name);
    if (family !== 0) return Promise.resolve([{ address: name, family }]);
    if (isLocalhost(name)) return Promise.resolve(LOCALHOST.map((a) => ({ ...a })));
    if (this.#closed) return Promise.reject(new Error('the webhook resolver is closed'));
    const budget = signal ? AbortSignal.any([signal, AbortSignal.timeout(this.#timeoutMs)]) : AbortSignal.timeout(this.#timeoutMs);
    return withinBudget(host, budget, () =>
      Promise.allSettled([this.#resolver.resolve4(name), this.#resolver.resolve6(name)]).then(([v4, v6]) => combineAnswers(host, v4, v6)),
    );
  }

  /** Cancels every look-up in flight; later look-ups reject. */
  close(): void {
    this.#closed = true;
    this.#resolver.cancel();
  }
}

/**
 * Runs the look-up `run` of `host` unless `signal` has aborted, and answers
 * as it does, or with a {@link DnsTimeoutError} as soon as `signal` aborts.
 */
export function withinBudget<T>(host: string, signal: AbortSignal, run: () => Promise<T>): Promise<T> {
  return new Promise<T>((resolve, reject) => {
    const giveUp = (): void => reject(new DnsTimeoutError(host));
    if (signal.aborted) return giveUp();
    signal.addEventListener('abort', giveUp, { once: true });
    run()
      .then(resolve, reject)
      .finally(() => signal.removeEventListener('abort', giveUp));
  });
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

  const codes = [v4, v6].map((r) => (r.status === 'rejected' ? errorCode(r.reason, 'EUNKNOWN') : 'ENODATA'));
  if (codes.includes('ENOTFOUND')) throw new DnsLookupError(host, 'ENOTFOUND');
  if (codes.includes('ETIMEOUT')) throw new DnsTimeoutError(host);
  const other = codes.find((code) => code !== 'ENODATA');
  throw new DnsLookupError(host, other ?? 'ENODATA');
}

/** The string `code` of an error (Node's and c-ares's), else `fallback`. */
export function errorCode(err: unknown, fallback: string): string {
  const code = (err as { code?: unknown } | null)?.code;
  return typeof code === 'string' && code !== '' ? code : fallback;
}
