// Real TLS against a local server on 127.0.0.1 only; the certificate is
// generated per run with the openssl CLI so nothing secret is checked in.
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { createServer, type Server } from 'node:https';
import { createServer as createNetServer, type AddressInfo, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import tls, { type TLSSocket } from 'node:tls';
import v8 from 'node:v8';
import { runInNewContext } from 'node:vm';
import { afterAll, afterEach, beforeAll, describe, expect, it, vi } from 'vitest';
import { startDnsServer, type DnsAnswer, type DnsQuestion, type DnsServer } from '../../test/helpers/dns-server.ts';
import { parseCidrList } from './address-policy.ts';
import { HttpsDeliveryClient, type HttpsDeliveryClientOptions } from './https-delivery.ts';

const LOOPBACK = parseCidrList('127.0.0.0/8');
const TIMEOUT_MS = 500;
const HEADERS = {
  'Content-Type': 'application/json',
  'X-Player-Event': 'video_play',
  'X-Player-Signature': 'f'.repeat(64),
  'X-Player-Timestamp': '1700000000',
  'X-Player-Delivery-Id': '3f2504e0-4f89-41d3-9a0c-0305e82c3301',
};
const BODY = '{"event_name":"video_play","current_time":1.5}';

let dir: string;
let certPem: string;
let keyPem: string;

beforeAll(() => {
  dir = mkdtempSync(join(tmpdir(), 'webhook-tls-'));
  try {
    execFileSync('openssl', ['version'], { stdio: 'pipe' });
  } catch {
    throw new Error('these tests need the openssl CLI on PATH to generate a throwaway certificate');
  }
  execFileSync(
    'openssl',
    [
      'req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-days', '1',
      '-subj', '/CN=localhost',
      // hooks.test: the name the c-ares tests resolve through their own DNS server.
      '-addext', 'subjectAltName=DNS:localhost,DNS:hooks.test,IP:127.0.0.1',
      '-keyout', join(dir, 'key.pem'),
      '-out', join(dir, 'cert.pem'),
    ],
    { stdio: 'pipe' },
  );
  certPem = readFileSync(join(dir, 'cert.pem'), 'utf8');
  keyPem = readFileSync(join(dir, 'key.pem'), 'utf8');
});

afterAll(() => {
  rmSync(dir, { recursive: true, force: true });
});

interface Received {
  method: string | undefined;
  url: string | undefined;
  headers: IncomingMessage['headers'];
  body: string;
  servername: string | false | null | undefined;
}

interface TestServer {
  port: number;
  /** TCP connections accepted, whether or not TLS or HTTP followed. */
  connections: () => number;
  received: Received[];
  /** Resolves when a request's connection closed before the handler answered. */
  abandoned: Promise<void>;
  /** Connections open now. */
  open: () => number;
  /** Connections closed so far. */
  closed: () => number;
  /** TLS handshakes completed: in all, and of those the ones that resumed a session. */
  handshakes: () => { all: number; resumed: number };
  /** Connections (open or closed) that never carried a request. */
  unused: () => number;
}

type Handler = (req: IncomingMessage, res: ServerResponse) => void;

const cleanups: Array<() => Promise<void> | void> = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

async function startServer(handler: Handler, listenAddress = '127.0.0.1'): Promise<TestServer> {
  let connections = 0;
  let closed = 0;
  const received: Received[] = [];
  const sockets = new Set<Socket>();
  const handshakes = { all: 0, resumed: 0 };
  const tlsSockets = new Set<TLSSocket>();
  const used = new WeakSet<Socket>();
  let markAbandoned!: () => void;
  const abandoned = new Promise<void>((resolve) => (markAbandoned = resolve));
  const server: Server = createServer({ key: keyPem, cert: certPem }, (req, res) => {
    const chunks: Buffer[] = [];
    used.add(req.socket);
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      received.push({
        method: req.method,
        url: req.url,
        headers: req.headers,
        body: Buffer.concat(chunks).toString('utf8'),
        servername: (req.socket as TLSSocket).servername,
      });
      handler(req, res);
    });
    res.on('close', () => {
      if (!res.writableEnded) markAbandoned();
    });
  });
  server.on('connection', (socket: Socket) => {
    connections++;
    sockets.add(socket);
    socket.on('close', () => {
      sockets.delete(socket);
      closed++;
    });
  });
  server.on('secureConnection', (socket: TLSSocket) => {
    handshakes.all++;
    if (socket.isSessionReused()) handshakes.resumed++;
    tlsSockets.add(socket);
  });
  server.on('tlsClientError', () => {});
  await new Promise<void>((resolve) => server.listen(0, listenAddress, resolve));
  cleanups.push(
    () =>
      new Promise<void>((resolve) => {
        for (const s of sockets) s.destroy();
        server.close(() => resolve());
      }),
  );
  return {
    port: (server.address() as AddressInfo).port,
    connections: () => connections,
    received,
    abandoned,
    open: () => sockets.size,
    closed: () => closed,
    handshakes: () => ({ ...handshakes }),
    unused: () => [...tlsSockets].filter((s) => !used.has(s)).length,
  };
}

function client(overrides: Partial<HttpsDeliveryClientOptions> = {}): HttpsDeliveryClient {
  const c = new HttpsDeliveryClient({ timeoutMs: TIMEOUT_MS, extraCaPem: certPem, allowList: LOOPBACK, ...overrides });
  cleanups.push(() => c.close());
  return c;
}

const ok200: Handler = (_req, res) => res.writeHead(200, { 'content-type': 'text/plain' }).end('ok');

describe('HttpsDeliveryClient against a local HTTPS server', () => {
  it('delivers with a 2xx when the CA is trusted through extraCaPem', async () => {
    const server = await startServer(ok200);
    const started = performance.now();
    const result = await client().post(`https://127.0.0.1:${server.port}/hooks/in?x=1`, HEADERS, BODY);
    const elapsed = performance.now() - started;

    expect(result).toMatchObject({ ok: true, status: 200, address: '127.0.0.1' });
    expect(result.errorClass).toBeUndefined();
    // The duration is the call's own, however slow a loaded machine makes the
    // first TLS handshake (a bound on the timeout flaked at 532 ms under CI load).
    expect(result.durationMs).toBeGreaterThan(0);
    expect(result.durationMs).toBeLessThanOrEqual(elapsed + 1);
    expect(server.received).toHaveLength(1);
    const got = server.received[0]!;
    expect(got.method).toBe('POST');
    expect(got.url).toBe('/hooks/in?x=1');
    expect(got.body).toBe(BODY);
    expect(got.headers).toMatchObject({
      'content-type': 'application/json',
      'content-length': String(Buffer.byteLength(BODY)),
      'x-player-event': 'video_play',
      'x-player-signature': HEADERS['X-Player-Signature'],
      'x-player-timestamp': '1700000000',
      'x-player-delivery-id': HEADERS['X-Player-Delivery-Id'],
    });
  });

  it('sends URL credentials as basic auth and keeps them out of messages', async () => {
    const server = await startServer((_req, res) => res.writeHead(401).end());
    const result = await client().post(`https://hook-user:p%40ss-w0rd@127.0.0.1:${server.port}/`, HEADERS, BODY);
    expect(server.received[0]?.headers.authorization).toBe(`Basic ${Buffer.from('hook-user:p@ss-w0rd').toString('base64')}`);
    expect(result).toMatchObject({ ok: false, status: 401, errorClass: 'http_status' });
    expect(result.message).not.toMatch(/hook-user|p@ss|p%40ss/);
  });

  it('counts any 2xx as success', async () => {
    const server = await startServer((_req, res) => res.writeHead(204).end());
    expect(await client().post(`https://127.0.0.1:${server.port}/`, HEADERS, BODY)).toMatchObject({ ok: true, status: 204 });
  });

  it('fails with tls when the certificate is not trusted', async () => {
    const server = await startServer(ok200);
    const result = await client({ extraCaPem: undefined }).post(`https://127.0.0.1:${server.port}/`, HEADERS, BODY);
    expect(result).toMatchObject({ ok: false, errorClass: 'tls' });
    expect(result.message).toMatch(/SELF_SIGNED|UNABLE_TO_VERIFY/);
    expect(server.connections()).toBe(1);
    expect(server.received).toHaveLength(0);
  });

  it('fails with http_status and the status on a 500, and does not follow a redirect', async () => {
    const server = await startServer((req, res) => {
      if (req.url === '/moved') res.writeHead(302, { location: `https://127.0.0.1:${server.port}/` }).end();
      else res.writeHead(500).end('boom');
    });
    const c = client();
    expect(await c.post(`https://127.0.0.1:${server.port}/`, HEADERS, BODY)).toMatchObject({ ok: false, status: 500, errorClass: 'http_status' });
    expect(await c.post(`https://127.0.0.1:${server.port}/moved`, HEADERS, BODY)).toMatchObject({ ok: false, status: 302, errorClass: 'http_status' });
    expect(server.received.map((r) => r.url)).toEqual(['/', '/moved']);
  });

  it('times out when the headers come after timeoutMs, and destroys the request', async () => {
    const server = await startServer((_req, res) => {
      setTimeout(() => res.writeHead(200).end(), TIMEOUT_MS + 1000).unref();
    });
    const result = await client().post(`https://127.0.0.1:${server.port}/`, HEADERS, BODY);

    expect(result).toMatchObject({ ok: false, errorClass: 'timeout', address: '127.0.0.1' });
    expect(result.durationMs).toBeGreaterThanOrEqual(TIMEOUT_MS - 5);
    expect(result.durationMs).toBeLessThan(TIMEOUT_MS + 300);
    // The server sees its response abandoned long before it would have answered.
    await expect(Promise.race([server.abandoned.then(() => 'closed'), sleep(500).then(() => 'still open')])).resolves.toBe('closed');
  });

  it('succeeds when the status line and headers arrive in time, however slow the body is', async () => {
    const server = await startServer((_req, res) => {
      res.writeHead(200, { 'content-type': 'text/plain' });
      res.write('partial');
      setTimeout(() => res.end('rest'), 3000).unref();
    });
    const c = client({ drainTimeoutMs: 100 });
    const result = await c.post(`https://127.0.0.1:${server.port}/`, HEADERS, BODY);
    expect(result).toMatchObject({ ok: true, status: 200 });
    expect(result.durationMs).toBeLessThan(3000); // answered before the body ends
    // The unfinished body does not pin a pooled connection: the drain bound
    // (100 ms) destroys it, well before the server would end the body (3 s).
    await vi.waitFor(() => expect(server.closed()).toBe(1), { timeout: 2000, interval: 20 });
  });

  it('refuses loopback without connecting when the allow list is empty', async () => {
    const server = await startServer(ok200);
    const c = client({ allowList: [] });
    const byLiteral = await c.post(`https://127.0.0.1:${server.port}/`, HEADERS, BODY);
    const byName = await client({ allowList: [], resolve: async () => [{ address: '127.0.0.1', family: 4 }] }).post(
      `https://localhost:${server.port}/`,
      HEADERS,
      BODY,
    );
    const byMappedLiteral = await c.post(`https://[::ffff:127.0.0.1]:${server.port}/`, HEADERS, BODY);

    for (const result of [byLiteral, byName]) {
      expect(result).toMatchObject({ ok: false, errorClass: 'refused_address', address: '127.0.0.1' });
      expect(result.message).toMatch(/127\.0\.0\.0\/8 \(loopback\)/);
    }
    expect(byMappedLiteral).toMatchObject({ ok: false, errorClass: 'refused_address', address: '::ffff:7f00:1' });
    expect(server.connections()).toBe(0);
  });

  it('refuses a name when any one of its addresses is refused, connecting to none', async () => {
    const server = await startServer(ok200);
    const c = client({
      allowList: parseCidrList('127.0.0.1/32'),
      resolve: async () => [
        { address: '127.0.0.1', family: 4 },
        { address: '127.0.0.2', family: 4 },
      ],
    });
    const result = await c.post(`https://localhost:${server.port}/`, HEADERS, BODY);
    expect(result).toMatchObject({ ok: false, errorClass: 'refused_address', address: '127.0.0.2' });
    expect(server.connections()).toBe(0);
  });

  it('connects to the injected resolver’s address with SNI and certificate check on the host name', async () => {
    const server = await startServer(ok200);
    const asked: string[] = [];
    const c = client({
      resolve: async (host) => {
        asked.push(host);
        return [{ address: '127.0.0.1', family: 4 }];
      },
    });
    const result = await c.post(`https://localhost:${server.port}/in`, HEADERS, BODY);
    expect(result).toMatchObject({ ok: true, status: 200, address: '127.0.0.1' });
    expect(asked).toEqual(['localhost']);
    expect(server.received[0]).toMatchObject({ servername: 'localhost', headers: { host: `localhost:${server.port}` } });
  });

  it('checks the certificate against the host name, not the address connected to', async () => {
    const server = await startServer(ok200);
    // The certificate is valid for IP 127.0.0.1 but not for this name.
    const c = client({ resolve: async () => [{ address: '127.0.0.1', family: 4 }] });
    const result = await c.post(`https://webhooks.example.invalid:${server.port}/`, HEADERS, BODY);
    expect(result).toMatchObject({ ok: false, errorClass: 'tls' });
    expect(result.message).toContain('ERR_TLS_CERT_ALTNAME_INVALID');
    expect(server.received).toHaveLength(0);
  });

  it('refuses anything but an https: URL as invalid_url, without connecting', async () => {
    const server = await startServer(ok200);
    const c = client();
    for (const url of [`http://127.0.0.1:${server.port}/`, 'not a url', `ftp://127.0.0.1:${server.port}/`, '//127.0.0.1/', 'https://']) {
      expect(await c.post(url, HEADERS, BODY), url).toMatchObject({ ok: false, errorClass: 'invalid_url' });
    }
    expect(server.connections()).toBe(0);
  });

  it('fails with connect on a closed port', async () => {
    const port = await closedPort();
    const result = await client().post(`https://127.0.0.1:${port}/`, HEADERS, BODY);
    expect(result).toMatchObject({ ok: false, errorClass: 'connect' });
    expect(result.message).toContain('ECONNREFUSED');
    expect(result.durationMs).toBeLessThan(TIMEOUT_MS);
  });

  it('fails with dns when the name does not resolve, and with dns_timeout when resolution hangs past the delivery budget', async () => {
    const notFound = Object.assign(new Error('getaddrinfo ENOTFOUND nowhere.invalid'), { code: 'ENOTFOUND' });
    const failing = client({ resolve: async () => Promise.reject(notFound) });
    expect(await failing.post('https://nowhere.invalid/', HEADERS, BODY)).toMatchObject({
      ok: false,
      errorClass: 'dns',
      message: 'could not resolve nowhere.invalid: ENOTFOUND',
    });
    expect(await client({ resolve: async () => [] }).post('https://empty.invalid/', HEADERS, BODY)).toMatchObject({ errorClass: 'dns' });

    // A resolver that ignores its abort signal is still cut off at the delivery deadline.
    let aborted: AbortSignal | undefined;
    const hanging = await client({
      timeoutMs: 300,
      resolve: (_host, signal) => {
        aborted = signal;
        return new Promise(() => {});
      },
    }).post('https://slow.invalid/', HEADERS, BODY);
    expect(hanging).toMatchObject({ ok: false, errorClass: 'dns_timeout', message: 'timed out resolving slow.invalid' });
    expect(hanging.durationMs).toBeGreaterThanOrEqual(295);
    await vi.waitFor(() => expect(aborted?.aborted).toBe(true), { timeout: 500, interval: 10 });
  });

  it('reuses a keep-alive connection', async () => {
    const server = await startServer(ok200);
    const c = client();
    const url = `https://127.0.0.1:${server.port}/`;
    for (let i = 0; i < 4; i++) {
      expect((await c.post(url, HEADERS, BODY)).ok).toBe(true);
      // undici checks an idle connection for a close from the server before reusing it, one event-loop turn later.
      await sleep(10);
    }
    expect(server.received).toHaveLength(4);
    expect(server.connections()).toBe(1);
  });

  it('keeps the connections of each pool key apart: a dead destination on the same host never takes or destroys a healthy one\'s warm socket', async () => {
    // One host, two destinations: /ok answers at once, /dead never does.
    const server = await startServer((req, res) => {
      if (req.url === '/dead') return; // held until the client gives up
      ok200(req, res);
    });
    // A budget far above a handshake on a loaded machine: only /dead may time out.
    const c = client({ timeoutMs: 1500 });
    const base = `https://127.0.0.1:${server.port}`;
    expect(await c.post(`${base}/ok`, HEADERS, BODY, 'dest-ok')).toMatchObject({ ok: true });
    // The dead destination's post opens a connection of its own (the warm one stays open) and destroys it on its timeout.
    expect(await c.post(`${base}/dead`, HEADERS, BODY, 'dest-dead')).toMatchObject({ ok: false, errorClass: 'timeout' });
    expect(server.connections()).toBe(2);
    await vi.waitFor(() => expect(server.closed()).toBe(1), { timeout: 1000, interval: 10 });
    await sleep(100);
    const opened = server.connections();
    // The healthy destination's next post reuses its warm connection: no new handshake.
    expect(await c.post(`${base}/ok`, HEADERS, BODY, 'dest-ok')).toMatchObject({ ok: true });
    expect(server.connections()).toBe(opened);
    expect(server.closed()).toBe(1);
  });

  it('a dead destination costs one connection per timed-out post, and its new connections resume the TLS session', async () => {
    const server = await startServer(() => {}); // never answers
    // One post at a time to one destination, as a lane of concurrency 1 (and a pool bounded to match).
    const c = client({ timeoutMs: 1000, connectionsPerPool: 1 });
    const url = `https://127.0.0.1:${server.port}/dead`;
    // A garbage collection between posts: a session held only weakly is gone after it.
    v8.setFlagsFromString('--expose-gc');
    const gc = runInNewContext('gc') as () => void;
    for (let i = 0; i < 3; i++) {
      expect(await c.post(url, HEADERS, BODY, 'dest-dead')).toMatchObject({ ok: false, errorClass: 'timeout' });
      gc();
    }
    expect(server.received).toHaveLength(3);
    // undici connects again at once for a request it aborted, then drops it:
    // the next post takes that connection rather than opening yet another one.
    // Only the last timeout's leaves one unused.
    await vi.waitFor(() => expect(server.handshakes().all).toBeGreaterThanOrEqual(4), { timeout: 2000, interval: 10 });
    await sleep(100);
    expect(server.connections()).toBe(4);
    expect(server.unused()).toBe(1);
    // One full handshake; every later connection resumed its session.
    expect(server.handshakes()).toEqual({ all: 4, resumed: 3 });
  });

  it('trusts an extra CA through one TLS context built up front, not a context (every root parsed again) per new connection', async () => {
    const server = await startServer(ok200);
    const c = client();
    // tls.connect builds a context per connection when given `ca`; given a context, it uses it.
    const built = vi.spyOn(tls, 'createSecureContext');
    try {
      const results = await Promise.all([1, 2, 3].map((i) => c.post(`https://127.0.0.1:${server.port}/`, HEADERS, BODY, `dest-${i}`)));
      expect(results.map((r) => r.ok)).toEqual([true, true, true]);
      expect(server.connections()).toBe(3);
      expect(built).not.toHaveBeenCalled();
    } finally {
      built.mockRestore();
    }
  });

  it('close() destroys pooled connections', async () => {
    const server = await startServer(ok200);
    const c = client();
    await c.post(`https://127.0.0.1:${server.port}/`, HEADERS, BODY);
    expect(server.open()).toBe(1);
    c.close();
    await vi.waitFor(() => expect(server.open()).toBe(0), { timeout: 1000, interval: 10 });
  });

  it('closes an idle keep-alive connection after idleSocketTimeoutMs, before the server would', async () => {
    const server = await startServer(ok200);
    const c = client({ idleSocketTimeoutMs: 200 });
    await c.post(`https://127.0.0.1:${server.port}/`, HEADERS, BODY);
    expect(server.open()).toBe(1);
    await vi.waitFor(() => expect(server.open()).toBe(0), { timeout: 1500, interval: 10 });
    expect((await c.post(`https://127.0.0.1:${server.port}/`, HEADERS, BODY)).ok).toBe(true);
    expect(server.connections()).toBe(2);
  });

  it('fails with network when a fresh connection dies after the request was sent', async () => {
    const server = await startServer((req) => req.socket.destroy());
    const result = await client().post(`https://127.0.0.1:${server.port}/`, HEADERS, BODY);
    expect(result).toMatchObject({ ok: false, errorClass: 'network', message: 'network error delivering to 127.0.0.1: UND_ERR_SOCKET' });
    expect(server.received).toHaveLength(1);
  });

  it('fails with tls when the peer accepts TCP but does not complete a TLS handshake', async () => {
    const peers = [
      (socket: Socket) => socket.destroy(),
      (socket: Socket) => socket.end('HTTP/1.1 400 Bad Request\r\nconnection: close\r\n\r\n'),
    ];
    for (const behave of peers) {
      const accepted: Socket[] = [];
      const plain = createNetServer((socket) => {
        accepted.push(socket);
        behave(socket);
      });
      await new Promise<void>((resolve) => plain.listen(0, '127.0.0.1', resolve));
      cleanups.push(() => {
        for (const socket of accepted) socket.destroy();
        return new Promise<void>((resolve) => plain.close(() => resolve()));
      });
      const result = await client().post(`https://127.0.0.1:${(plain.address() as AddressInfo).port}/`, HEADERS, BODY);
      expect(result).toMatchObject({ ok: false, errorClass: 'tls' });
    }
  });

  it('never puts the path, query or header values into messages', async () => {
    const server = await startServer((_req, res) => res.writeHead(503).end());
    const secretish = ['private-path', 'token=abc123', HEADERS['X-Player-Signature'], HEADERS['X-Player-Delivery-Id']];
    const path = '/private-path?token=abc123';
    const results = [
      await client().post(`https://127.0.0.1:${server.port}${path}`, HEADERS, BODY),
      await client({ extraCaPem: undefined }).post(`https://127.0.0.1:${server.port}${path}`, HEADERS, BODY),
      await client({ allowList: [] }).post(`https://127.0.0.1:${server.port}${path}`, HEADERS, BODY),
      await client().post(`http://127.0.0.1:${server.port}${path}`, HEADERS, BODY),
      await client().post(`https://127.0.0.1:${await closedPort()}${path}`, HEADERS, BODY),
    ];
    expect(results.map((r) => r.errorClass)).toEqual(['http_status', 'tls', 'refused_address', 'invalid_url', 'connect']);
    for (const { message } of results) {
      expect(message).toContain('127.0.0.1');
      for (const s of secretish) expect(message).not.toContain(s);
    }
  });
});

describe('HttpsDeliveryClient resolving through c-ares, at a DNS server on 127.0.0.1', () => {
  const PUBLIC_V4 = '93.184.216.34';

  async function dnsServer(answer: (q: DnsQuestion) => DnsAnswer): Promise<DnsServer> {
    const server = await startDnsServer(answer);
    cleanups.push(() => server.close());
    return server;
  }

  function dnsClient(dns: DnsServer, overrides: Partial<HttpsDeliveryClientOptions> = {}): HttpsDeliveryClient {
    return client({ timeoutMs: 2000, dnsServers: [dns.address], dnsTimeoutMs: 1000, ...overrides });
  }

  it('connects to the address it resolved and checked, resolving once, with SNI and Host on the name', async () => {
    const server = await startServer(ok200, '127.0.0.3');
    // A rebinding name: the first answer is the receiver, any later one points elsewhere.
    let answered = 0;
    const dns = await dnsServer((q) => {
      if (q.name !== 'hooks.test') return { rcode: 'NXDOMAIN' };
      if (q.type !== 'A') return { addresses: [] };
      return { addresses: [answered++ === 0 ? '127.0.0.3' : '127.0.0.1'] };
    });
    const result = await dnsClient(dns, { allowList: parseCidrList('127.0.0.3/32') }).post(`https://hooks.test:${server.port}/in?k=v`, HEADERS, BODY);

    expect(result).toMatchObject({ ok: true, status: 200, address: '127.0.0.3' });
    expect(server.received).toHaveLength(1);
    expect(server.received[0]).toMatchObject({ url: '/in?k=v', servername: 'hooks.test', headers: { host: `hooks.test:${server.port}` } });
    expect(dns.questions).toEqual([
      { name: 'hooks.test', type: 'A' },
      { name: 'hooks.test', type: 'AAAA' },
    ]);
  });

  it('refuses a name whose answer holds a private or loopback address, connecting to nothing', async () => {
    const server = await startServer(ok200);
    const records: Record<string, string[]> = {
      'internal.test': ['10.0.0.5'],
      'mixed.test': [PUBLIC_V4, '192.168.1.10'],
      'ula.test': ['fd00::1'],
      'metadata.test': ['169.254.169.254'],
      'hooks.test': ['127.0.0.1'],
    };
    const dns = await dnsServer((q) => ({ addresses: records[q.name] ?? [] }));
    const c = dnsClient(dns, { allowList: [] });
    const refused: Array<[string, string, RegExp]> = [
      ['internal.test', '10.0.0.5', /10\.0\.0\.0\/8 \(private\)/],
      ['mixed.test', '192.168.1.10', /192\.168\.0\.0\/16 \(private\)/],
      ['ula.test', 'fd00::1', /fc00::\/7 \(unique-local\)/],
      ['metadata.test', '169.254.169.254', /169\.254\.0\.0\/16 \(link-local\)/],
      ['hooks.test', '127.0.0.1', /127\.0\.0\.0\/8 \(loopback\)/],
    ];
    for (const [name, address, range] of refused) {
      const result = await c.post(`https://${name}:${server.port}/`, HEADERS, BODY);
      expect(result, name).toMatchObject({ ok: false, errorClass: 'refused_address', address });
      expect(result.message, name).toMatch(range);
    }
    expect(server.connections()).toBe(0);
  });

  it('fails with dns_timeout within the DNS budget when the DNS server never answers', async () => {
    const dns = await dnsServer(() => 'never');
    const result = await dnsClient(dns, { dnsTimeoutMs: 300 }).post('https://hang.test/private-path?token=abc123', HEADERS, BODY);
    expect(result).toMatchObject({ ok: false, errorClass: 'dns_timeout', message: 'timed out resolving hang.test' });
    expect(result.durationMs).toBeGreaterThanOrEqual(295);
    expect(result.durationMs).toBeLessThan(300 + 400);
    expect(dns.questions.map((q) => q.name)).toContain('hang.test');
  });

  it('fails with dns when the name does not exist or has no address', async () => {
    const dns = await dnsServer((q) => (q.name === 'empty.test' ? { addresses: [] } : { rcode: 'NXDOMAIN' }));
    const c = dnsClient(dns);
    expect(await c.post('https://missing.test/', HEADERS, BODY)).toMatchObject({ ok: false, errorClass: 'dns', message: 'could not resolve missing.test: ENOTFOUND' });
    expect(await c.post('https://empty.test/', HEADERS, BODY)).toMatchObject({ ok: false, errorClass: 'dns', message: 'could not resolve empty.test: ENODATA' });
  });

  it('reaches https://localhost as loopback without asking DNS', async () => {
    const server = await startServer(ok200);
    const dns = await dnsServer(() => ({ rcode: 'NXDOMAIN' }));
    const result = await dnsClient(dns).post(`https://localhost:${server.port}/`, HEADERS, BODY);
    expect(result).toMatchObject({ ok: true, status: 200, address: '127.0.0.1' });
    expect(server.received[0]).toMatchObject({ servername: 'localhost' });
    expect(dns.questions).toEqual([]);
  });
});

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

/** A loopback port that was just free: listen on an ephemeral port, then close it. */
async function closedPort(): Promise<number> {
  const probe = createNetServer();
  await new Promise<void>((resolve) => probe.listen(0, '127.0.0.1', resolve));
  const { port } = probe.address() as AddressInfo;
  await new Promise<void>((resolve) => probe.close(() => resolve()));
  return port;
}
