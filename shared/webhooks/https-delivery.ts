/**
 * The HTTPS POST client of webhook fan-out, on undici: one attempt of one
 * delivery, returned as a value. SSRF-safe: undici's connector looks the host
 * up through {@link checkedLookup}, which resolves once with c-ares
 * (./resolver.ts, not `dns.lookup` on the libuv thread pool), checks every
 * address against the address policy and hands only checked addresses to the
 * socket, while TLS still verifies the certificate against the host name.
 */
import { isIP, type LookupFunction, type Socket } from 'node:net';
import { performance } from 'node:perf_hooks';
import { createSecureContext, rootCertificates } from 'node:tls';
import { buildConnector, Pool } from 'undici';
import { classifyAddress, isAllowedAddress, type CidrList } from './address-policy.ts';
import { DnsLookupError, DnsTimeoutError, errorCode, WebhookResolver, withinBudget, type HostResolver } from './resolver.ts';

/**
 * Why an attempt failed; `http_status` is the only class that carries
 * `status`. `dns_timeout`: the name did not resolve within the DNS budget;
 * `dns`: it resolved to nothing (or the DNS server refused); `timeout`: the
 * delivery's own budget ran out after the name had resolved.
 */
export type DeliveryErrorClass =
  | 'timeout'
  | 'dns_timeout'
  | 'dns'
  | 'refused_address'
  | 'connect'
  | 'tls'
  | 'http_status'
  | 'network'
  | 'invalid_url';

/**
 * Outcome of one POST. `ok` means a 2xx status line and headers arrived
 * within the timeout (spec 3). `message` names the host only, never the
 * URL path or query, header values or the body, so it can be logged as is.
 */
export interface DeliveryResult {
  ok: boolean;
  status?: number;
  errorClass?: DeliveryErrorClass;
  /** From the start of `post` (DNS and connect included) to the response headers or the failure. */
  durationMs: number;
  /** The address connected to, or the address refused by the policy. */
  address?: string;
  message?: string;
}

/** Options of {@link HttpsDeliveryClient}. */
export interface HttpsDeliveryClientOptions {
  /** Budget for DNS + connect + TLS + request + response headers (spec 3: 10 s). */
  timeoutMs: number;
  /** Extra trusted CA certificate(s) in PEM, trusted in addition to Node's bundled roots. */
  extraCaPem?: string;
  /** Operator exceptions to the address policy (`WEBHOOK_ALLOWED_CIDRS`); normally empty. */
  allowList: CidrList;
  /**
   * Host name resolver; default a c-ares {@link WebhookResolver} built from
   * the `dns*` options. A resolver that rejects with `code: 'ETIMEOUT'` gives
   * `dns_timeout`, any other rejection `dns`.
   */
  resolve?: HostResolver;
  /** Budget of one DNS look-up (`WEBHOOK_DNS_TIMEOUT_MS`); default 5000. */
  dnsTimeoutMs?: number;
  /** DNS servers (`'127.0.0.1:5353'`); default the system's. */
  dnsServers?: readonly string[];
  /** How long an unread response body may take to drain before the connection is destroyed; default 1000. */
  drainTimeoutMs?: number;
  /** Idle keep-alive connections are closed after this long; default 4000 (below the common 5 s server keep-alive). */
  idleSocketTimeoutMs?: number;
  /**
   * Connections one pool (one pool key and origin) may have open; posts
   * beyond them wait in the pool for a free one, within their budget. The
   * fan-out passes FANOUT_PER_DESTINATION_CONCURRENCY, the most posts it runs
   * at one destination at once; default 8, its default.
   *
   * NOTE: bounded, not unlimited, because of how undici ends a timed-out
   * request: it destroys the connection and at once connects again for the
   * aborted request, which it then drops. Unbounded, the next post takes
   * yet another connection, and each timeout of a dead destination leaves
   * one more idle connection (and its handshake) behind. At the fan-out's
   * concurrency, the next post takes the one connected for nothing.
   */
  connectionsPerPool?: number;
}

/** Response bodies are ignored; past this many bytes the connection is dropped rather than read further. */
const MAX_DRAIN_BYTES = 64 * 1024;

/** OpenSSL certificate-verification codes, as Node reports them on `err.code`. */
const TLS_VERIFY_CODES = new Set([
  'UNABLE_TO_GET_ISSUER_CERT',
  'UNABLE_TO_GET_ISSUER_CERT_LOCALLY',
  'UNABLE_TO_VERIFY_LEAF_SIGNATURE',
  'UNABLE_TO_DECRYPT_CERT_SIGNATURE',
  'UNABLE_TO_DECODE_ISSUER_PUBLIC_KEY',
  'CERT_SIGNATURE_FAILURE',
  'CERT_NOT_YET_VALID',
  'CERT_HAS_EXPIRED',
  'CERT_REVOKED',
  'CERT_UNTRUSTED',
  'CERT_REJECTED',
  'CERT_CHAIN_TOO_LONG',
  'DEPTH_ZERO_SELF_SIGNED_CERT',
  'SELF_SIGNED_CERT_IN_CHAIN',
  'INVALID_CA',
  'INVALID_PURPOSE',
  'PATH_LENGTH_EXCEEDED',
  'HOSTNAME_MISMATCH',
  'EPROTO',
]);

/** A name with an address the policy refuses: nothing is connected to. */
class RefusedAddressError extends Error {
  readonly code = 'EREFUSEDADDRESS';
  readonly address: string;
  constructor(host: string, address: string) {
    const { range, name } = classifyAddress(address);
    super(`refused to deliver to ${host}: it resolves to an address in ${range ?? 'an unparseable form'} (${name ?? 'reserved'})`);
    this.address = address;
  }
}

/** What one pool's connector saw: look-ups in flight, the last address connected to, and where failed connections stopped. */
interface PoolState {
  lookups: number;
  address: string | undefined;
  /** Connection errors and the step they ended: before TCP was up (`connect`) or during the handshake (`tls`). */
  failed: WeakMap<Error, 'connect' | 'tls'>;
  /**
   * The last TLS session the pool's connections received. undici's connector
   * caches sessions through a WeakRef only, which a garbage collection may
   * clear, forcing a full handshake; held here, the connector's cache
   * keeps it and new connections resume it.
   */
  session: Buffer | undefined;
}

/**
 * Posts webhook deliveries over HTTPS through undici pools of keep-alive
 * connections, one pool per origin and pool key. One instance per process;
 * `close()` at shutdown.
 */
export class HttpsDeliveryClient {
  readonly #timeoutMs: number;
  readonly #drainTimeoutMs: number;
  readonly #idleMs: number;
  readonly #connectionsPerPool: number;
  readonly #allowList: CidrList;
  readonly #resolve: HostResolver;
  /** The resolver this client built (and closes), when none was injected. */
  readonly #ownResolver: WebhookResolver | undefined;
  readonly #secureContext: ReturnType<typeof createSecureContext> | undefined;
  readonly #pools = new Map<string, { pool: Pool; state: PoolState }>();

  constructor(options: HttpsDeliveryClientOptions) {
    const { timeoutMs, drainTimeoutMs = 1000, idleSocketTimeoutMs = 4000, connectionsPerPool = 8 } = options;
    if (!Number.isFinite(timeoutMs) || timeoutMs <= 0) throw new RangeError('timeoutMs must be a positive number');
    if (!Number.isSafeInteger(connectionsPerPool) || connectionsPerPool < 1) throw new RangeError('connectionsPerPool must be a positive integer');
    this.#connectionsPerPool = connectionsPerPool;
    this.#timeoutMs = timeoutMs;
    this.#drainTimeoutMs = drainTimeoutMs;
    this.#idleMs = idleSocketTimeoutMs;
    this.#allowList = options.allowList;
    this.#ownResolver = options.resolve
      ? undefined
      : new WebhookResolver({ timeoutMs: options.dnsTimeoutMs ?? 5000, ...(options.dnsServers ? { servers: options.dnsServers } : {}) });
    this.#resolve = options.resolve ?? ((host, signal) => this.#ownResolver!.lookup(host, signal));
    // NOTE: `ca` replaces the trust store, so the bundled roots are listed
    // again. The context is built once: given `ca` instead, tls.connect
    // parses every root certificate again for each new connection.
    this.#secureContext = options.extraCaPem ? createSecureContext({ ca: [...rootCertificates, options.extraCaPem] }) : undefined;
  }

  /**
   * POSTs `body` to `url` and classifies the outcome. Never rejects for a
   * delivery failure. Only `https:` URLs are accepted; the host must resolve
   * to addresses that are all allowed (see `isAllowedAddress`), else nothing
   * is sent. Redirects are not followed: a 3xx is an `http_status` failure.
   * Posts with a `pool` key (the fan-out passes the destination id) use
   * connections of their own: a dead destination's timed-out requests then
   * destroy only its own connections, never a warm one of another
   * destination on the same host, whose next post would pay a new handshake.
   */
  async post(url: string, headers: Record<string, string>, body: string, pool?: string): Promise<DeliveryResult> {
    const started = performance.now();
    const elapsed = (): number => Math.round(performance.now() - started);
    let target: URL;
    try {
      target = new URL(url);
    } catch {
      return { ok: false, errorClass: 'invalid_url', durationMs: elapsed(), message: 'delivery URL is not a valid URL' };
    }
    const host = target.hostname.replace(/^\[(.*)\]$/, '$1');
    if (target.protocol !== 'https:' || host === '') {
      return { ok: false, errorClass: 'invalid_url', durationMs: elapsed(), message: `delivery URL for ${host || '(no host)'} must use https:` };
    }
    // An IP literal is connected to without a look-up, so it is checked here.
    if (isIP(host) !== 0 && !isAllowedAddress(host, this.#allowList)) {
      const refused = new RefusedAddressError(host, host);
      return { ok: false, errorClass: 'refused_address', durationMs: elapsed(), address: host, message: refused.message };
    }

    const outgoing: Record<string, string> = {};
    for (const [name, value] of Object.entries(headers)) {
      if (name.toLowerCase() !== 'content-length') outgoing[name] = value;
    }
    if (target.username || target.password) {
      outgoing['authorization'] = `Basic ${Buffer.from(`${safeDecode(target.username)}:${safeDecode(target.password)}`).toString('base64')}`;
    }
    const { pool: dispatcher, state } = this.#poolOf(target.origin, pool);
    const timer = deadline(this.#timeoutMs);
    const budget = timer.signal;
    try {
      const res = await dispatcher.request({ method: 'POST', path: `${target.pathname}${target.search}`, headers: outgoing, body, signal: budget });
      const ok = res.statusCode >= 200 && res.statusCode < 300;
      const result: DeliveryResult = {
        ok,
        status: res.statusCode,
        durationMs: elapsed(),
        address: state.address,
        ...(ok ? {} : { errorClass: 'http_status' as const, message: `${host} answered HTTP ${res.statusCode}` }),
      };
      // The body is ignored: read and dropped within bounds (a larger or slower
      // one ends its connection), so the connection is free for the next post.
      const drain = deadline(this.#drainTimeoutMs);
      await res.body.dump({ limit: MAX_DRAIN_BYTES, signal: drain.signal }).catch(() => {});
      drain.clear();
      return result;
    } catch (err) {
      const durationMs = elapsed();
      if (err instanceof RefusedAddressError) return { ok: false, errorClass: 'refused_address', durationMs, address: err.address, message: err.message };
      if (err instanceof DnsTimeoutError || (budget.aborted && state.lookups > 0)) {
        return { ok: false, errorClass: 'dns_timeout', durationMs, message: `timed out resolving ${host}` };
      }
      if (err instanceof DnsLookupError) {
        return { ok: false, errorClass: 'dns', durationMs, message: `could not resolve ${host}: ${codeOf(err)}` };
      }
      const code = codeOf(err);
      if (budget.aborted || code === 'UND_ERR_CONNECT_TIMEOUT' || code === 'UND_ERR_HEADERS_TIMEOUT') {
        return { ok: false, errorClass: 'timeout', durationMs, address: state.address, message: `timed out delivering to ${host}` };
      }
      if (code === 'UND_ERR_INVALID_ARG' || code === 'ERR_INVALID_CHAR' || code === 'ERR_INVALID_HTTP_TOKEN') {
        // A programming fault, not a delivery failure; Node's message can quote the offending header value.
        throw new TypeError(`cannot build the delivery request for ${host}: ${code}`);
      }
      const errorClass = classifyError(code, err instanceof Error ? state.failed.get(err) : undefined);
      return { ok: false, errorClass, durationMs, address: state.address, message: `${errorClass} error delivering to ${host}: ${code}` };
    } finally {
      timer.clear();
    }
  }

  /** Closes every pool, destroying its connections, and cancels DNS look-ups in flight. */
  close(): void {
    for (const { pool } of this.#pools.values()) void pool.destroy().catch(() => {});
    this.#pools.clear();
    this.#ownResolver?.close();
  }

  #poolOf(origin: string, key: string | undefined): { pool: Pool; state: PoolState } {
    const id = `${key ?? ''} ${origin}`;
    let entry = this.#pools.get(id);
    if (entry) return entry;
    const state: PoolState = { lookups: 0, address: undefined, failed: new WeakMap(), session: undefined };
    const connector = buildConnector({
      timeout: this.#timeoutMs,
      lookup: this.#checkedLookup(state),
      ...(this.#secureContext ? { secureContext: this.#secureContext } : {}),
    } as buildConnector.BuildOptions);
    const pool = new Pool(origin, {
      connect: (opts, callback) => {
        let tcpUp = false;
        const socket: Socket = connector(opts, (err, connected) => {
          if (err) state.failed.set(err, tcpUp ? 'tls' : 'connect');
          else state.address = (connected as Socket).remoteAddress;
          callback(err, connected as never);
        }) as unknown as Socket;
        socket?.once('connect', () => (tcpUp = true));
        socket?.on('session', (session: Buffer) => (state.session = session));
      },
      connections: this.#connectionsPerPool,
      keepAliveTimeout: this.#idleMs,
      keepAliveMaxTimeout: this.#idleMs,
      headersTimeout: this.#timeoutMs,
      bodyTimeout: this.#drainTimeoutMs,
    });
    // A pool whose last connection closed with nothing queued is dropped, so
    // that deleted destinations and changed URLs leave no pools behind.
    pool.on('disconnect', () => {
      if (pool.stats.connected > 0 || pool.stats.size > 0 || this.#pools.get(id)?.pool !== pool) return;
      this.#pools.delete(id);
      void pool.close().catch(() => {});
    });
    entry = { pool, state };
    this.#pools.set(id, entry);
    return entry;
  }

  /**
   * The connector's look-up: resolves through the injected or c-ares
   * resolver, fails the connection when any address is refused (it may fall
   * back to any of them, and a name that mixes public and internal addresses
   * is itself a warning sign), and answers only with checked addresses, so
   * no second resolution can substitute an unchecked one.
   */
  #checkedLookup(state: PoolState): LookupFunction {
    return (hostname, options, callback) => {
      state.lookups++;
      const timer = deadline(this.#timeoutMs);
      const signal = timer.signal;
      withinBudget(hostname, signal, () => this.#resolve(hostname, signal))
        .finally(timer.clear)
        .then((addresses) => {
          if (addresses.length === 0) throw new DnsLookupError(hostname, 'ENODATA');
          const refused = addresses.find((a) => !isAllowedAddress(a.address, this.#allowList));
          if (refused) throw new RefusedAddressError(hostname, refused.address);
          const family = options.family === 4 || options.family === 6 ? options.family : undefined;
          const usable = addresses.filter((a) => family === undefined || a.family === family).map((a) => ({ address: a.address, family: isIP(a.address) }));
          if (usable.length === 0) throw Object.assign(new Error(`no checked address of family ${family}`), { code: 'ENOTFOUND' });
          if (options.all) callback(null, usable);
          else callback(null, usable[0]!.address, usable[0]!.family);
        })
        .catch((err: unknown) => {
          const known = err instanceof RefusedAddressError || err instanceof DnsLookupError;
          const code = codeOf(err);
          callback(known ? err : code === 'ETIMEOUT' ? new DnsTimeoutError(hostname) : new DnsLookupError(hostname, code), '', 0);
        })
        .finally(() => state.lookups--);
    };
  }
}

function classifyError(code: string, failedAt: 'connect' | 'tls' | undefined): DeliveryErrorClass {
  if (TLS_VERIFY_CODES.has(code) || code.startsWith('ERR_TLS_') || code.startsWith('ERR_SSL_')) return 'tls';
  return failedAt ?? 'network';
}

/** URL userinfo is percent-encoded; a malformed escape is sent as written rather than thrown. */
function safeDecode(text: string): string {
  try {
    return decodeURIComponent(text);
  } catch {
    return text;
  }
}

function codeOf(err: unknown): string {
  return errorCode(err, err instanceof Error ? err.name : 'unknown error');
}

/**
 * A signal that aborts after `ms`, as AbortSignal.timeout does, whose timer
 * `clear` ends: AbortSignal.timeout's timer runs out after the work is done
 * and builds its error then, at every delivery.
 */
function deadline(ms: number): { signal: AbortSignal; clear: () => void } {
  const controller = new AbortController();
  const timer = setTimeout(() => controller.abort(new DOMException('The operation was aborted due to timeout', 'TimeoutError')), ms);
  timer.unref();
  return { signal: controller.signal, clear: () => clearTimeout(timer) };
}
