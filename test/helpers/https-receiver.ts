import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import https from 'node:https';
import type { IncomingHttpHeaders } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

export interface ReceivedRequest {
  path: string;
  headers: IncomingHttpHeaders;
  rawBody: Buffer;
  receivedAt: number;
}

/** What the receiver answers; may wait first. */
export type Behaviour = (req: ReceivedRequest, index: number) => { status: number; delayMs?: number } | Promise<{ status: number; delayMs?: number }>;

/** A self-signed certificate for localhost and 127.0.0.1, made with openssl. */
export function makeCertificate(): { dir: string; certFile: string; keyFile: string; cert: string; key: string } {
  const dir = mkdtempSync(join(tmpdir(), 'va-cert-'));
  const certFile = join(dir, 'cert.pem');
  const keyFile = join(dir, 'key.pem');
  execFileSync('openssl', [
    'req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-days', '2',
    '-subj', '/CN=localhost',
    '-addext', 'subjectAltName=DNS:localhost,IP:127.0.0.1',
    '-keyout', keyFile, '-out', certFile,
  ], { stdio: 'ignore' });
  return { dir, certFile, keyFile, cert: readFileSync(certFile, 'utf8'), key: readFileSync(keyFile, 'utf8') };
}

/**
 * A real HTTPS receiver on 127.0.0.1 that records every request with its raw
 * bytes and answers as the current behaviour says.
 */
export async function startHttpsReceiver(cert = makeCertificate()) {
  const requests: ReceivedRequest[] = [];
  let connections = 0;
  let behaviour: Behaviour = () => ({ status: 200 });
  const server = https.createServer({ cert: cert.cert, key: cert.key }, (req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', async () => {
      const received: ReceivedRequest = { path: req.url ?? '/', headers: req.headers, rawBody: Buffer.concat(chunks), receivedAt: Date.now() };
      requests.push(received);
      const answer = await behaviour(received, requests.length - 1);
      if (answer.delayMs) await new Promise((r) => setTimeout(r, answer.delayMs));
      if (!res.destroyed) res.writeHead(answer.status, { 'content-type': 'text/plain' }).end('ok');
    });
  });
  server.on('secureConnection', () => connections++);
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const { port } = server.address() as AddressInfo;
  return {
    port,
    url: (path = '/hook') => `https://127.0.0.1:${port}${path}`,
    caFile: cert.certFile,
    /** What a stack under test needs to deliver here: trust in its certificate and its loopback address allowed. */
    env: { WEBHOOK_CA_FILE: cert.certFile, WEBHOOK_ALLOWED_CIDRS: '127.0.0.0/8' },
    requests,
    get connections() {
      return connections;
    },
    setBehaviour(b: Behaviour) {
      behaviour = b;
    },
    /** Requests to one path (each destination gets its own path). */
    to(path: string) {
      return requests.filter((r) => r.path === path);
    },
    async close() {
      server.closeAllConnections();
      await new Promise((r) => server.close(r));
      rmSync(cert.dir, { recursive: true, force: true });
    },
  };
}

export type HttpsReceiver = Awaited<ReturnType<typeof startHttpsReceiver>>;
