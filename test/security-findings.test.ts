import { mkdtempSync, writeFileSync } from 'node:fs';
import { request as httpRequest } from 'node:http';
import { randomBytes } from 'node:crypto';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { inject } from 'vitest';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ADMIN_AUTH_FAILURES } from '../services/admin/admin.service.ts';
import { captureProcessOutput } from './helpers/browser.ts';
import { expectProblem } from './helpers/contract.ts';
import { startServiceProcess, waitForExit } from './helpers/process.ts';
import { TestStack, type TestTenant } from './helpers/stack.ts';

/**
 * The security findings of issue 8, one test each, against the whole stack
 * over real HTTP. The stack trusts the loopback proxy (TRUST_PROXY), so a
 * test can speak as a TLS proxy would: X-Forwarded-For and -Proto.
 */
describe('security findings', () => {
  let s: TestStack;
  let A: TestTenant;
  let output: ReturnType<typeof captureProcessOutput>;

  beforeAll(async () => {
    output = captureProcessOutput();
    s = await TestStack.start({ TRUST_PROXY: '127.0.0.1', LOG_LEVEL: 'info' });
    A = await s.createTenant('security');
  });
  afterAll(async () => {
    await s?.stop();
    output?.restore();
  });

  const asClient = (ip: string, extra: Record<string, string> = {}) => ({ 'x-forwarded-for': ip, ...extra });
  const signIn = (token: string, headers: Record<string, string> = {}) =>
    s.request('POST', '/dashboard/session', { body: { token }, headers });

  it('answers 422 for a destination URL the URL parser refuses, and logs no part of it', async () => {
    const urls = ['', 'https://exa mple.com/?token=x-secret-1', 'https://h:99999/?token=x-secret-2', 'https://[::1/?token=x-secret-3', 'https://%zz/?token=x-secret-4'];
    const created = await s.admin('POST', `/tenants/${A.id}/destinations`, { name: 'ok', url: 'https://example.com/hook' });
    expect(created.status, created.text).toBe(201);
    for (const url of urls) {
      const post = await s.admin('POST', `/tenants/${A.id}/destinations`, { name: 'bad url', url });
      expectProblem(post, 422, /body\.url/);
      expect(post.text).not.toContain('x-secret');
      const patch = await s.admin('PATCH', `/tenants/${A.id}/destinations/${created.body.id}`, { url });
      expectProblem(patch, 422, /body\.url/);
      expect(patch.text).not.toContain('x-secret');
    }
    expect(output.text()).not.toContain('x-secret');
    expect(output.text()).not.toMatch(/exa mple|h:99999/);
  });

  it('stores destination URLs normalised', async () => {
    const post = await s.admin('POST', `/tenants/${A.id}/destinations`, { name: 'normalised', url: 'HTTPS://Hooks.EXAMPLE.com:443/a/./b/../c?x=1#frag' });
    expect(post.status, post.text).toBe(201);
    expect(post.body.url).toBe('https://hooks.example.com/a/c?x=1#frag');
    const idn = await s.admin('PATCH', `/tenants/${A.id}/destinations/${post.body.id}`, { url: 'https://bücher.example:8443/ä b' });
    expect(idn.status, idn.text).toBe(200);
    expect(idn.body.url).toBe('https://xn--bcher-kva.example:8443/%C3%A4%20b');
    const got = await s.admin('GET', `/tenants/${A.id}/destinations/${post.body.id}`);
    expect(got.body.url).toBe('https://xn--bcher-kva.example:8443/%C3%A4%20b');
  });

  it('refuses names with NUL, CR/LF or bidirectional controls', async () => {
    const bad = ['a\u0000b', 'line\r\nX-Injected: 1', 'tab\there', 'evil\u202Egpj.exe', 'iso\u2066late\u2069', 'mark\u200F', 'c1\u0085'];
    for (const name of bad) {
      expectProblem(await s.admin('POST', '/tenants', { name }), 422, /body\.name: must not contain control characters/);
      expectProblem(await s.admin('POST', `/tenants/${A.id}/api-keys`, { name }), 422, /body\.name/);
      expectProblem(await s.admin('POST', `/tenants/${A.id}/videos`, { title: name, duration_sec: 1 }), 422, /body\.title/);
      expectProblem(await s.admin('POST', `/tenants/${A.id}/destinations`, { name, url: 'https://example.com/' }), 422, /body\.name/);
    }
    // Other scripts, emoji and ordinary punctuation are names like any other.
    expect((await s.admin('POST', '/tenants', { name: 'Zoë — ütf 名前 🎬' })).status).toBe(201);
  });

  it('refuses a genuine cursor with trailing junk characters', async () => {
    await s.createVideo(A.id, 'second');
    const first = await s.api('/videos?limit=1', A.apiKey);
    const cursor: string = first.body.next_cursor;
    expect(cursor).toMatch(/^cur_/);
    expect((await s.api(`/videos?limit=1&cursor=${encodeURIComponent(cursor)}`, A.apiKey)).status).toBe(200);
    for (const junk of ['A', 'x', '-', '=', '!']) {
      expectProblem(await s.api(`/videos?limit=1&cursor=${encodeURIComponent(cursor + junk)}`, A.apiKey), 422, /cursor/);
    }
  });

  it('limits failed admin tokens per client across /admin/v1 and the dashboard sign-in, never the right token', async () => {
    const attacker = asClient('198.51.100.7');
    const wrong = `${s.stack.adminToken}x`;
    for (let i = 0; i < ADMIN_AUTH_FAILURES.max; i++) {
      const via = i % 2 === 0 ? s.request('GET', '/admin/v1/tenants', { token: wrong, headers: attacker }) : signIn(wrong, attacker);
      expectProblem(await via, 401);
    }
    // Over the limit: wrong tokens are refused with 429 on both doors.
    const limited = await s.request('GET', '/admin/v1/tenants', { token: wrong, headers: attacker });
    expectProblem(limited, 429);
    expect(Number(limited.headers.get('retry-after'))).toBeGreaterThanOrEqual(1);
    expectProblem(await signIn(wrong, attacker), 429);
    expectProblem(await signIn('', attacker), 401);
    // The right token still works from the same address, on both doors.
    expect((await s.request('GET', '/admin/v1/tenants', { token: s.stack.adminToken, headers: attacker })).status).toBe(200);
    expect((await signIn(s.stack.adminToken!, attacker)).status).toBe(200);
    // Another client is not affected.
    expectProblem(await s.request('GET', '/admin/v1/tenants', { token: wrong, headers: asClient('198.51.100.8') }), 401);
  });

  it('marks the session cookie Secure behind a trusted TLS proxy (TRUST_PROXY), and only then', async () => {
    const viaTls = await signIn(s.stack.adminToken!, { 'x-forwarded-proto': 'https', 'x-forwarded-for': '192.0.2.10' });
    expect(viaTls.status).toBe(200);
    expect(viaTls.headers.get('set-cookie')).toMatch(/;\s*Secure/i);
    const plain = await signIn(s.stack.adminToken!);
    expect(plain.status).toBe(200);
    expect(plain.headers.get('set-cookie')).not.toMatch(/;\s*Secure/i);
  });

  it('keeps the dashboard API inside the management routes: encoded dot segments do not reach /metrics', async () => {
    const signed = await signIn(s.stack.adminToken!);
    const cookie = (signed.headers.get('set-cookie') ?? '').split(';')[0]!;
    // Sent byte for byte (fetch would resolve dot segments before sending).
    for (const path of ['/dashboard/api/..%2F..%2Fmetrics', '/dashboard/api/..%2f..%2fmetrics', '/dashboard/api/%2E%2E/%2E%2E/metrics', '/dashboard/api/..%2F..%2Fadmin%2Fv1%2Ftenants']) {
      const res = await rawGet(s.url, path, { cookie });
      expect(res.status, `${path}: ${res.text.slice(0, 200)}`).toBe(404);
      expect(res.text).not.toContain('process_cpu');
      expect(JSON.parse(res.text)).toMatchObject({ status: 404 });
      expect((await rawGet(s.url, path, {})).status).toBe(401);
    }
    // The routes themselves answer under the session.
    expect((await s.request('GET', '/dashboard/api/tenants', { headers: { cookie } })).status).toBe(200);
  });

  it('refuses to start on an empty admin-token file', async () => {
    const dataDir = mkdtempSync(join(tmpdir(), 'va-empty-token-'));
    writeFileSync(join(dataDir, 'admin-token'), '\n');
    await expect(TestStack.start({ ADMIN_TOKEN: '' }, { dataDir, topicPrefix: `t${randomBytes(4).toString('hex')}.` })).rejects.toThrow(/admin-token is empty/);
  });

  it('never prints the admin token at start, only where it comes from', async () => {
    const token = `adm_${randomBytes(16).toString('hex')}`;
    const dataDir = mkdtempSync(join(tmpdir(), 'va-print-'));
    const proc = await startServiceProcess({
      ADMIN_TOKEN: token,
      DATA_DIR: dataDir,
      KAFKA_BROKERS: inject('kafkaBrokers').join(','),
      KAFKA_TOPIC_PREFIX: `t${randomBytes(4).toString('hex')}.`,
      KAFKA_TOPIC_PARTITIONS: '1',
      SERVICES: 'admin',
    });
    try {
      expect(proc.output()).toContain('Admin token   from the ADMIN_TOKEN environment variable');
      expect(proc.output()).not.toContain(token);
      expect((await fetch(`${proc.url}/admin/v1/tenants`, { headers: { authorization: `Bearer ${token}` } })).status).toBe(200);
    } finally {
      proc.child.kill('SIGTERM');
      await waitForExit(proc.child, proc.output);
    }
  });
});

/** A GET whose path goes on the wire exactly as given. */
function rawGet(base: string, path: string, headers: Record<string, string>): Promise<{ status: number; text: string }> {
  const { hostname, port } = new URL(base);
  return new Promise((resolve, reject) => {
    const req = httpRequest({ hostname, port, path, method: 'GET', headers }, (res) => {
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (d) => (text += d));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, text }));
    });
    req.on('error', reject);
    req.end();
  });
}
