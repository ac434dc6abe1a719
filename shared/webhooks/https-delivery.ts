/**
 * The HTTPS POST client of webhook fan-out: one attempt of one delivery,
 * returned as a value. SSRF-safe: the host is resolved once, every resolved
 * address is checked against the address policy, and the connection goes to
 * a checked address (no second lookup that a rebinding DNS could answer
 * differently), while TLS still verifies the certificate against the host name.
 * Names are resolved by c-ares (./resolver.ts), not by `dns.lookup` on the
 * libuv thread pool.
 */
import type { ClientRequest, IncomingMessage, OutgoingHttpHeaders } from 'node:http';
import { Agent, request, type AgentOptions } from 'node:https';
import { isIP, type LookupFunction, type Socket } from 'node:net';
import { performance } from 'node:perf_hooks';
import { createSecureContext, rootCertificates } from 'node:tls';
import { classifyAddress, isAllowedAddress, type CidrList } from './address-policy.ts';
import { DnsTimeoutError, WebhookResolver, type HostResolver, type ResolvedAddress } from './resolver.ts';

export type { HostResolver, ResolvedAddress } from './resolver.ts';

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
   * Requests in flight per destination host (host and port), whatever their
   * pool keys; later ones wait in order, within their own timeout. Default 16.
   */
  maxSocketsPerHost?: number;
  /**
   * Host name resolver; default a c-ares {@link WebhookResolver} built from
   * the `dns*` options. A resolver that rejects with `code: 'ETIMEOUT'` gives
   * `dns_timeout`, any other rejection `dns`.
   */
  resolve?: HostResolver;
  /** Budget of one DNS look-up, waiting for a free look-up slot included (`WEBHOOK_DNS_TIMEOUT_MS`); default 5000. */
  dnsTimeoutMs?: number;
  /** DNS look-ups in flight at once (`WEBHOOK_DNS_MAX_CONCURRENT`); default 16. */
  dnsMaxConcurrent?: number;
  /** DNS servers (`'127.0.0.1:5353'`); default the system's. */
  dnsServers?: readonly string[];
  /** How long an unread response body may take to drain before the socket is destroyed; default 1000. */
  drainTimeoutMs?: number;
  /** Idle keep-alive sockets are closed after this long; default 4000 (below the common 5 s server keep-alive). */
  idleSocketTimeoutMs?: number;
}

/** Response bodies are ignored; past this many bytes the socket is dropped rather than read further. */
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

type Phase = 'connecting' | 'tls' | 'http';

/**
 * A keep-alive agent whose pools are per (host, pool key), not per host
 * alone. The fan-out keys each post by its destination: two destinations on
 * one host (`/hook-a` and a dead `/hook-b`) then never share sockets. A dead
 * one's timed-out requests destroy only its own sockets, and its new
 * connections never take the warm sockets of the other, whose posts would
 * otherwise pay a new TLS handshake after each of the dead one's timeouts.
 * The per-host bound is kept by {@link HostSlots}, across pool keys.
 */
class PooledAgent extends Agent {
  override getName(options?: Parameters<Agent['getName']>[0] & { poolKey?: string }): string {
    const name = super.getName(options);
    return options?.poolKey ? `${name}:${options.poolKey}` : name;
  }
}

/**
 * At most `limit` requests in flight per host, across pool keys, the rest
 * waiting first come, first served. Without it, separate pools would lift the
 * agent's per-host bound: a tenant's 100 destinations on one host could run
 * hundreds of posts at once there, and another tenant's post to that host
 * would wait behind nearly all of them.
 */
class HostSlots {
  readonly #limit: number;
  readonly #hosts = new Map<string, { active: number; waiting: (() => void)[] }>();

  constructor(limit: number) {
    this.#limit = limit;
  }

  /**
   * Calls `run` with a release function once a slot of `host` is free (at
   * once when one is); returns a function that withdraws a request still
   * waiting (and does nothing once `run` was called).
   */
  acquire(host: string, run: (release: () => void) => void): () => void {
    let entry = this.#hosts.get(host);
    if (!entry) {
      entry = { active: 0, waiting: [] };
      this.#hosts.set(host, entry);
    }
    const e = entry;
    let released = false;
    const release = () => {
      if (released) return;
      released = true;
      e.active--;
      const next = e.waiting.shift();
      if (next) next();
      else if (e.active === 0) this.#hosts.delete(host);
    };
    const start = () => {
      e.active++;
      run(release);
    };
    if (e.active < this.#limit) {
      start();
      return () => {};
    }
    e.waiting.push(start);
    return () => {
      const at = e.waiting.indexOf(start);
      if (at >= 0) e.waiting.splice(at, 1);
    };
  }

  /** Requests in flight to `host` (for tests). */
  active(host: string): number {
    return this.#hosts.get(host)?.active ?? 0;
  }
}

/**
 * Posts webhook deliveries over HTTPS with a shared keep-alive agent, pooled
 * by host and pool key, and at most `maxSocketsPerHost` requests in flight
 * per host. One instance per process; `close()` at shutdown.
 */
export class HttpsDeliveryClient {
  /** The keep-alive agent shared by every post (pools per host and pool key). */
  readonly agent: Agent;
  readonly #hostSlots: HostSlots;
  readonly #timeoutMs: number;
  readonly #allowList: CidrList;
  readonly #resolve: HostResolver;
  /** The resolver this client built (and closes), when none was injected. */
  readonly #ownResolver: WebhookResolver | undefined;
  readonly #drainTimeoutMs: number;

  constructor(options: HttpsDeliveryClientOptions) {
    const { timeoutMs, maxSocketsPerHost = 16, drainTimeoutMs = 1000, idleSocketTimeoutMs = 4000 } = options;
    if (!Number.isFinite(timeoutMs) || timeoutMs <= 0) throw new RangeError('timeoutMs must be a positive number');
    if (!Number.isSafeInteger(maxSocketsPerHost) || maxSocketsPerHost < 1) {
      throw new RangeError('maxSocketsPerHost must be a positive integer');
    }
    this.#timeoutMs = timeoutMs;
    this.#allowList = options.allowList;
    if (options.resolve) {
      this.#ownResolver = undefined;
      this.#resolve = options.resolve;
    } else {
      this.#ownResolver = new WebhookResolver({
        timeoutMs: options.dnsTimeoutMs ?? 5000,
        maxConcurrent: options.dnsMaxConcurrent ?? 16,
        ...(options.dnsServers ? { servers: options.dnsServers } : {}),
      });
      this.#resolve = this.#ownResolver.resolve;
    }
    this.#drainTimeoutMs = drainTimeoutMs;
    const agentOptions: AgentOptions = {
      keepAlive: true,
      maxSockets: maxSocketsPerHost,
      timeout: idleSocketTimeoutMs,
      // NOTE: `ca` replaces the trust store, so the bundled roots are listed
      // again; an extra private CA adds to them rather than replacing them.
      // The context is built once: given `ca` instead, tls.connect builds a
      // context per connection, parsing every root certificate again (about
      // 12 ms of blocked event loop per new connection here), which a dead
      // destination's timeouts, each ending a socket, made several times a
      // second.
      ...(options.extraCaPem ? { secureContext: createSecureContext({ ca: [...rootCertificates, options.extraCaPem] }) } : {}),
    };
    this.agent = new PooledAgent(agentOptions);
    this.#hostSlots = new HostSlots(maxSocketsPerHost);
  }

  /** Requests in flight to `host:port` (for tests). */
  inFlight(hostPort: string): number {
    return this.#hostSlots.active(hostPort);
  }

  /**
   * POSTs `body` to `url` and classifies the outcome. Never rejects for a
   * delivery failure (only for headers Node refuses to send, a programming
   * fault). Only `https:` URLs are accepted; the host must resolve to
   * addresses that are all allowed (see `isAllowedAddress`), else nothing is
   * sent. Redirects are not followed: a 3xx is an `http_status` failure.
   * Posts with a `pool` key (the fan-out passes the destination id) use
   * keep-alive sockets of their own: see {@link PooledAgent}.
   */
  async post(url: string, headers: Record<string, string>, body: string, pool?: string): Promise<DeliveryResult> {
    const started = performance.now();
    const deadline = started + this.#timeoutMs;
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

    let addresses: ResolvedAddress[];
    const literalFamily = isIP(host);
    if (literalFamily !== 0) {
      addresses = [{ address: host, family: literalFamily }];
    } else {
      // The delivery budget bounds the look-up too: abort tells the resolver
      // to free its slot, the race covers a resolver that ignores the signal.
      const abort = new AbortController();
      const resolved = await beforeDeadline(Promise.resolve().then(() => this.#resolve(host, abort.signal)), deadline);
      if (resolved.kind === 'timeout' || (resolved.kind === 'error' && errorCode(resolved.error) === 'ETIMEOUT')) {
        abort.abort();
        const queued = resolved.kind === 'error' && resolved.error instanceof DnsTimeoutError && resolved.error.queued;
        return {
          ok: false,
          errorClass: 'dns_timeout',
          durationMs: elapsed(),
          message: `timed out resolving ${host}${queued ? ' (waiting for a free DNS look-up slot)' : ''}`,
        };
      }
      if (resolved.kind === 'error' || resolved.value.length === 0) {
        const code = resolved.kind === 'error' ? errorCode(resolved.error) : 'no addresses';
        return { ok: false, errorClass: 'dns', durationMs: elapsed(), message: `could not resolve ${host}: ${code}` };
      }
      addresses = resolved.value.map((a) => ({ address: a.address, family: isIP(a.address) }));
    }

    // Every address is checked, not only the one used: the connection may
    // fall back to any of them (autoSelectFamily), and a name that mixes
    // public and internal addresses is itself a warning sign.
    const refused = addresses.find((a) => !isAllowedAddress(a.address, this.#allowList));
    if (refused) {
      const { range, name } = classifyAddress(refused.address);
      return {
        ok: false,
        errorClass: 'refused_address',
        durationMs: elapsed(),
        address: refused.address,
        message: `refused to deliver to ${host}: it resolves to an address in ${range ?? 'an unparseable form'} (${name ?? 'reserved'})`,
      };
    }

    const attempt = { target, host, addresses, headers, body, deadline, elapsed, pool };
    const first = await this.#send(attempt, true);
    // Node's documented pattern: a keep-alive socket the server closed at the
    // moment of reuse fails with ECONNRESET before anything was processed.
    return first === 'retry' ? (this.#send(attempt, false) as Promise<DeliveryResult>) : first;
  }

  /** Destroys the agent and every pooled socket, and cancels DNS look-ups in flight. */
  close(): void {
    this.agent.destroy();
    this.#ownResolver?.close();
  }

  #send(
    a: {
      target: URL;
      host: string;
      addresses: ResolvedAddress[];
      headers: Record<string, string>;
      body: string;
      deadline: number;
      elapsed: () => number;
      pool: string | undefined;
    },
    retryOnStaleSocket: boolean,
  ): Promise<DeliveryResult | 'retry'> {
    const { target, host, addresses, elapsed } = a;
    const remaining = a.deadline - performance.now();
    if (remaining <= 0) {
      return Promise.resolve({ ok: false, errorClass: 'timeout', durationMs: elapsed(), message: `timed out delivering to ${host}` });
    }

    // Answers Node's connect-time lookup with the addresses already checked,
    // so no second resolution can substitute an unchecked one.
    const lookup: LookupFunction = (_hostname, options, callback) => {
      const family = options.family === 4 || options.family === 6 ? options.family : undefined;
      const usable = family === undefined ? addresses : addresses.filter((x) => x.family === family);
      const first = usable[0];
      if (first === undefined) {
        callback(Object.assign(new Error(`no checked address of family ${family}`), { code: 'ENOTFOUND' }), '', 0);
      } else if (options.all) {
        callback(null, usable);
      } else {
        callback(null, first.address, first.family);
      }
    };

    const outgoing: OutgoingHttpHeaders = {};
    for (const [name, value] of Object.entries(a.headers)) {
      if (name.toLowerCase() !== 'content-length') outgoing[name] = value;
    }
    outgoing['Content-Length'] = Buffer.byteLength(a.body);

    const port = a.target.port === '' ? 443 : Number(a.target.port);
    return new Promise((resolve, reject) => {
      let settled = false;
      let phase: Phase = 'connecting';
      let req: ClientRequest | undefined;
      let releaseSlot: (() => void) | undefined;
      const connectedAddress = (): string | undefined => req?.socket?.remoteAddress ?? addresses[0]?.address;
      const settle = (result: DeliveryResult | 'retry'): void => {
        if (settled) return;
        settled = true;
        clearTimeout(timer);
        resolve(result);
      };
      const timer = setTimeout(() => {
        // Also when still waiting for a slot of the host: then nothing was sent.
        withdraw();
        settle({ ok: false, errorClass: 'timeout', durationMs: elapsed(), address: connectedAddress(), message: `timed out delivering to ${host}` });
        req?.destroy();
      }, remaining);
      const send = (): void => {
        let built: ClientRequest;
        try {
          built = request({
            host,
            port,
            path: `${a.target.pathname}${a.target.search}`,
            method: 'POST',
            headers: outgoing,
            agent: this.agent,
            lookup,
            ...(a.pool ? { poolKey: a.pool } : {}),
            // SNI carries the name, never an IP literal (RFC 6066).
            ...(isIP(host) === 0 ? { servername: host } : {}),
            ...(a.target.username || a.target.password
              ? { auth: `${safeDecode(a.target.username)}:${safeDecode(a.target.password)}` }
              : {}),
          });
        } catch (err) {
          clearTimeout(timer);
          releaseSlot?.();
          settled = true;
          // Node's own message can quote the offending header value.
          reject(new TypeError(`cannot build the delivery request for ${host}: ${errorCode(err)}`));
          return;
        }
        req = built;
        // The request is done (response read, or the socket gone): the host's slot is free.
        built.once('close', () => releaseSlot?.());
        built.on('socket', (socket: Socket) => {
          // NOTE: not `built.reusedSocket` alone: Node sets it only when a free
          // socket is taken at once, not when a queued request gets a socket
          // another request freed (maxSocketsPerHost reached). Such a socket is
          // long past its handshake, its 'secureConnect' never comes, and a
          // listener per request piled up on it while a timeout in the HTTP
          // phase was classed as tls.
          if (built.reusedSocket || handshaken.has(socket)) {
            phase = 'http';
            return;
          }
          const onConnect = () => (phase = 'tls');
          const onSecure = () => {
            handshaken.add(socket);
            phase = 'http';
          };
          if (socket.connecting) socket.once('connect', onConnect);
          else phase = 'tls';
          socket.once('secureConnect', onSecure);
          built.once('close', () => {
            socket.off('connect', onConnect);
            socket.off('secureConnect', onSecure);
          });
        });
        built.on('response', (res: IncomingMessage) => {
          const status = res.statusCode ?? 0;
          const ok = status >= 200 && status < 300;
          settle({
            ok,
            status,
            durationMs: elapsed(),
            address: connectedAddress(),
            ...(ok ? {} : { errorClass: 'http_status' as const, message: `${host} answered HTTP ${status}` }),
          });
          this.#drain(res);
        });
        built.on('error', (err: Error) => {
          if (settled) return;
          const code = errorCode(err);
          if (retryOnStaleSocket && built.reusedSocket && code === 'ECONNRESET') {
            settle('retry');
            return;
          }
          const errorClass = classifyError(code, phase);
          settle({ ok: false, errorClass, durationMs: elapsed(), address: connectedAddress(), message: `${errorClass} error delivering to ${host}: ${code}` });
        });
        built.end(a.body);
      };
      const withdraw = this.#hostSlots.acquire(`${host}:${port}`, (release) => {
        releaseSlot = release;
        if (settled) release();
        else send();
      });
    });
  }

  /** Reads and discards the body so the socket can return to the pool, within bounds. */
  #drain(res: IncomingMessage): void {
    let bytes = 0;
    const bound = setTimeout(() => res.destroy(), this.#drainTimeoutMs);
    bound.unref();
    res.on('data', (chunk: Buffer) => {
      bytes += chunk.length;
      if (bytes > MAX_DRAIN_BYTES) res.destroy();
    });
    res.on('error', () => {});
    res.on('close', () => clearTimeout(bound));
  }
}

/** Sockets whose TLS handshake this client saw complete. */
const handshaken = new WeakSet<Socket>();

function classifyError(code: string, phase: Phase): DeliveryErrorClass {
  if (TLS_VERIFY_CODES.has(code) || code.startsWith('ERR_TLS_') || code.startsWith('ERR_SSL_')) return 'tls';
  if (phase === 'connecting') return 'connect';
  if (phase === 'tls') return 'tls';
  return 'network';
}

/** URL userinfo is percent-encoded; a malformed escape is sent as written rather than thrown. */
function safeDecode(text: string): string {
  try {
    return decodeURIComponent(text);
  } catch {
    return text;
  }
}

function errorCode(err: unknown): string {
  const code = (err as { code?: unknown } | null)?.code;
  if (typeof code === 'string' && code !== '') return code;
  return err instanceof Error ? err.name : 'unknown error';
}

type Raced<T> = { kind: 'value'; value: T } | { kind: 'error'; error: unknown } | { kind: 'timeout' };

/** Races `promise` against the deadline; a late rejection is swallowed, not left unhandled. */
async function beforeDeadline<T>(promise: Promise<T>, deadline: number): Promise<Raced<T>> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<Raced<T>>((resolve) => {
    timer = setTimeout(() => resolve({ kind: 'timeout' }), Math.max(0, deadline - performance.now()));
  });
  try {
    return await Promise.race([
      promise.then(
        (value): Raced<T> => ({ kind: 'value', value }),
        (error: unknown): Raced<T> => ({ kind: 'error', error }),
      ),
      timeout,
    ]);
  } finally {
    clearTimeout(timer);
  }
}
