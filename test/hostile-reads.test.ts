import { chmodSync, mkdtempSync, readFileSync, readdirSync, rmSync, statSync } from 'node:fs';
import { request as httpRequest } from 'node:http';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { parse } from 'yaml';
import { loadEventsSql } from '../bench/read-latency.ts';
import { SESSION_REACH_SQL } from '../services/api/analytics.repository.ts';
import { SECRET_READERS, stackSecrets } from '../services/stack/stack-secrets.ts';
import { createClickHouse, type ClickHouseClient } from '../shared/clickhouse/clickhouse.ts';
import { loadConfig, type ServiceName } from '../shared/config.ts';
import { parseVideoId } from '../shared/ids.ts';
import { factorsFrom, scoreV1 } from '../shared/score.ts';
import { captureProcessOutput } from './helpers/browser.ts';
import { expectProblem } from './helpers/contract.ts';
import { TestStack, eventually, type TestTenant } from './helpers/stack.ts';

/** Synthetic events of one video, loaded straight into ClickHouse: 15,000 viewing sessions, 10,000 visitors. */
const STORED = 600_000;

/**
 * Findings 4 and 5 of the hostile-input issue, against the whole stack over
 * real HTTP: reads bounded in time, memory and rows, given up when their
 * client leaves, aggregated by ClickHouse; /readyz, compose.yaml, secret
 * hints, the score across tenants and DATA_DIR's modes.
 */
describe('hostile but well-formed reads', () => {
  let s: TestStack;
  let A: TestTenant;
  let B: TestTenant;
  let ch: ClickHouseClient;
  let output: ReturnType<typeof captureProcessOutput>;
  let video: string;
  const clickhouseUrl = inject('clickhouseUrl');

  const openClickHouse = async () =>
    (await createClickHouse({ url: clickhouseUrl, database: clickhouseUrl ? s.topicPrefix.replace('.', '') : undefined, dataDir: s.dataDir })).client;
  const restart = async (env: Record<string, string>) => {
    await s.stop({ keepData: true });
    s = await TestStack.start({ LOG_LEVEL: 'warn', ...env }, { dataDir: s.dataDir, topicPrefix: s.topicPrefix });
  };
  const rows = async <T>(query: string, query_params: Record<string, unknown> = {}) =>
    (await ch.query({ query, query_params, format: 'JSONEachRow' })).json<T>();

  beforeAll(async () => {
    output = captureProcessOutput();
    s = await TestStack.start({ LOG_LEVEL: 'warn' });
    A = await s.createTenant('hostile-a');
    B = await s.createTenant('hostile-b');
    video = parseVideoId(A.videoId)!;
    ch = await openClickHouse();
    await ch.command({ query: loadEventsSql(A.id, [video], STORED, Date.now() - 7 * 86_400_000, 6 * 86_400_000) });
  }, 120_000);
  afterAll(async () => {
    await ch?.close();
    await s?.stop();
    output?.restore();
  });

  it('computes the retention curve in ClickHouse, equal to the curve computed from one row per session', async () => {
    const res = await s.api(`/videos/${A.videoId}/retention`, A.apiKey);
    expect(res.status, res.text).toBe(200);
    // The curve as it was computed before: every session's furthest point, counted here.
    const reached = (await rows<{ reached: number }>(SESSION_REACH_SQL, { tenant: A.id, video })).map((r) => r.reached);
    expect(reached.length).toBe(15_000);
    const points = Array.from({ length: 21 }, (_, i) => {
      const count = reached.filter((r) => r >= i * 5).length;
      return { position_pct: i * 5, viewers_pct: Math.round((count / reached.length) * 1000) / 10 };
    });
    expect(res.body).toEqual({ video_id: A.videoId, duration_sec: 120, viewers: reached.length, points });
  });

  it('ranks the top visitors in ClickHouse exactly as scoring every candidate did', async () => {
    const res = await s.api(`/videos/${A.videoId}/top-visitors?limit=100`, A.apiKey);
    expect(res.status, res.text).toBe(200);
    const candidates = await rows<{ visitor_id: string; max_watched_percentage: number; play_ms: string; focus_ms: string; cta_clicks: string; rewinds: string; last_ts: string }>(
      `SELECT visitor_id, max(watched_percentage) AS max_watched_percentage, sum(play_ms) AS play_ms, sum(focus_ms) AS focus_ms,
              countIf(event_name = 'cta_clicked') AS cta_clicks, sum(is_rewind) AS rewinds, toUnixTimestamp64Milli(max(timestamp)) AS last_ts
       FROM visitor_events FINAL WHERE tenant_id = {tenant:UUID} GROUP BY visitor_id`,
      { tenant: A.id },
    );
    const expected = candidates
      .map((r) => {
        const factors = factorsFrom({ max_watched_percentage: r.max_watched_percentage, play_ms: Number(r.play_ms), focus_ms: Number(r.focus_ms), cta_clicks: Number(r.cta_clicks), rewinds: Number(r.rewinds) });
        return { visitor_id: r.visitor_id, score: scoreV1(factors), factors, computed_at: Number(r.last_ts) };
      })
      .sort((a, b) => b.score - a.score || b.computed_at - a.computed_at || a.visitor_id.localeCompare(b.visitor_id))
      .slice(0, 100)
      .map((v) => ({ ...v, computed_at: new Date(v.computed_at).toISOString() }));
    expect(new Set(expected.map((v) => v.score)).size).toBeGreaterThan(1);
    expect(res.body.data).toEqual(expected);
  });

  it('does not run the reads of a client that left: the next read waits for the one running, not for every one queued', async () => {
    const timed = async () => {
      const started = performance.now();
      const res = await s.api(`/videos/${A.videoId}/retention`, A.apiKey);
      expect(res.status).toBe(200);
      return performance.now() - started;
    };
    await timed();
    const one = Math.max(await timed(), await timed());
    // SELECTs the engine has started (the count's own read included).
    const selects = async () => Number((await rows<{ value: string }>("SELECT value FROM system.events WHERE event = 'SelectQuery'"))[0]?.value ?? 0);
    const before = await selects();
    // Reads with parameters queue behind each other in the embedded engine;
    // the client of these six leaves while the first runs.
    await Promise.all(Array.from({ length: 6 }, () => abandonedGet(s.url, `/v1/videos/${A.videoId}/retention`, A.apiKey, 20)));
    const started = performance.now();
    const next = await s.api(`/videos/${A.videoId}/stats?days=7`, A.apiKey);
    const waited = performance.now() - started;
    expect(next.status).toBe(200);
    // Whatever was started has finished once the next read (queued last) has answered.
    const ran = (await selects()) - before - 1 - 2;
    process.stdout.write(`one retention read ${one.toFixed(0)} ms; of six abandoned, ${ran} started; the next read waited ${waited.toFixed(0)} ms\n`);
    expect(ran).toBeLessThanOrEqual(2);
    expect(output.text()).not.toContain('unhandled_error');
  });

  it('answers the score for the caller\'s tenant only: a visitor only another tenant has seen is answered as one never seen', async () => {
    const elsewhere = `vis_elsewhere_${Date.now()}`;
    expect((await s.collect(B.player_key, [{ event_name: 'video_play', video_id: B.videoId, visitor_id: elsewhere }])).status).toBe(202);
    await expect.poll(async () => (await s.api(`/visitors/${elsewhere}/score`, B.apiKey)).status, { timeout: 20_000 }).toBe(200);
    const seen = await s.api(`/visitors/${elsewhere}/score`, A.apiKey);
    const never = await s.api(`/visitors/vis_never_${Date.now()}/score`, A.apiKey);
    expectProblem(seen, 404);
    expectProblem(never, 404);
    const { request_id: _a, ...seenBody } = seen.body;
    const { request_id: _b, ...neverBody } = never.body;
    expect(seenBody).toEqual(neverBody);
  });

  it('shows at most an eighth of a typed integration secret, from its end only', async () => {
    const secret = 'Kq7vR2mXp9LwT4zN';
    const created = await s.admin('POST', `/tenants/${A.id}/destinations`, { kind: 'integration', name: 'crm', url: 'https://example.com/hook', config: { webhook_secret: secret } });
    expect(created.status, created.text).toBe(201);
    for (const view of [created.body, (await s.admin('GET', `/tenants/${A.id}/destinations/${created.body.id}`)).body]) {
      const masked: string = view.secret_masked;
      const shown = masked.replace('…', '');
      expect(shown.length, masked).toBeLessThanOrEqual(secret.length / 8);
      expect(secret.endsWith(shown)).toBe(true);
      expect(masked.startsWith('…')).toBe(true);
    }
    const webhook = await s.admin('POST', `/tenants/${A.id}/destinations`, { name: 'hook', url: 'https://example.com/w' });
    expect(webhook.body.secret_masked).toBe(`whsec_…${webhook.body.secret.slice(-4)}`);
  });

  it('hands each compose service only the secrets its services read', () => {
    const compose = parse(readFileSync(resolve(import.meta.dirname, '../compose.yaml'), 'utf8'), { merge: true }) as {
      services: Record<string, { environment?: Record<string, string> }>;
    };
    // The ClickHouse password is read where the process opens ClickHouse (services/stack.ts, startClickHouse).
    const readers: Record<string, readonly ServiceName[]> = { ...SECRET_READERS, CLICKHOUSE_PASSWORD: ['api', 'admin', 'projector'] };
    const apps = Object.entries(compose.services).filter(([, svc]) => svc.environment?.SERVICES);
    expect(apps.map(([name]) => name).sort()).toEqual(['api', 'derived', 'fanout', 'ingest', 'projector']);
    for (const [name, svc] of apps) {
      const services = String(svc.environment!.SERVICES).split(',') as ServiceName[];
      const expected = Object.keys(readers).filter((secret) => readers[secret]!.some((r) => services.includes(r)));
      const given = Object.keys(svc.environment!).filter((k) => k in readers);
      expect(given.sort(), name).toEqual(expected.sort());
    }
    // And the table is what the code reads: a process of one service generates only that service's secrets.
    for (const [services, files] of [
      ['ingest', []],
      ['projector', []],
      ['fanout', ['secrets-key']],
      ['derived', []],
      ['api', ['cursor-secret']],
      ['admin', ['admin-token', 'cursor-secret', 'secrets-key']],
    ] as const) {
      const dir = mkdtempSync(join(tmpdir(), 'va-secrets-'));
      try {
        stackSecrets(loadConfig({ SERVICES: services }), dir);
        expect(readdirSync(dir).sort(), services).toEqual([...files]);
      } finally {
        rmSync(dir, { recursive: true, force: true });
      }
    }
  });

  it('answers /readyz with component names and states only, and logs what is wrong', async () => {
    const ready = await s.request('GET', '/readyz');
    expect(ready.status).toBe(200);
    for (const state of Object.values(ready.body.checks)) expect(state).toBe('ok');
    await restart({ CONSUMER_STALL_TIMEOUT_MS: '2000' });
    await ch.command({ query: 'RENAME TABLE events TO events_parked' });
    try {
      expect((await s.collect(A.player_key, [{ event_name: 'video_play', video_id: A.videoId, visitor_id: 'vis_stall' }])).status).toBe(202);
      const down = await eventually(async () => {
        const r = await s.request('GET', '/readyz');
        return r.status === 503 ? r : undefined;
      }, 30_000, 250);
      expect(down.body.checks.projector).toBe('error');
      for (const state of Object.values(down.body.checks)) expect(['ok', 'error']).toContain(state);
      expect(down.text).not.toContain(s.topicPrefix);
      expect(down.text).not.toContain('stalled');
      expect(output.text()).toMatch(/"msg":"readiness_failed"/);
      expect(output.text()).toContain(`${s.topicPrefix}projector: stalled`);
    } finally {
      await ch.command({ query: 'RENAME TABLE events_parked TO events' });
    }
    await expect.poll(async () => (await s.request('GET', '/readyz')).status, { timeout: 30_000, interval: 250 }).toBe(200);
  });

  it('creates DATA_DIR for its owner only and fixes the modes an earlier start left', async () => {
    chmodSync(s.dataDir, 0o755);
    chmodSync(join(s.dataDir, 'cursor-secret'), 0o644);
    chmodSync(join(s.dataDir, 'clickhouse'), 0o755);
    await restart({});
    const mode = (p: string) => statSync(join(s.dataDir, p)).mode & 0o777;
    expect(mode('.')).toBe(0o700);
    expect(mode('cursor-secret')).toBe(0o600);
    expect(mode('secrets-key')).toBe(0o600);
    expect(mode('clickhouse')).toBe(0o700);
  });

  it('answers a read over its time bound with a problem that says to narrow it, not a 500', async () => {
    await restart({ READ_MAX_EXECUTION_MS: '1' });
    const res = await s.api(`/videos/${A.videoId}/retention`, A.apiKey);
    expectReadLimit(res, /longer than this service allows.*narrow the request/);
    expect(res.text).not.toMatch(/TIMEOUT_EXCEEDED|DB::Exception|at .*\.ts/);
  });

  it('answers a read over its memory bound with a problem that says to narrow it, not a 500', async () => {
    await restart({ READ_MAX_MEMORY_BYTES: String(1024 * 1024) });
    const res = await s.api(`/videos/${A.videoId}/retention`, A.apiKey);
    expectReadLimit(res, /more memory than this service allows.*narrow the request/);
    expect(res.text).not.toMatch(/MEMORY_LIMIT_EXCEEDED|DB::Exception/);
    // A small read stays within the bound.
    expect((await s.api(`/visitors/vis_lt_1/score`, A.apiKey)).status).toBe(200);
    expect(output.text()).not.toContain('unhandled_error');
  });
});

/** The problem of a read over one of its bounds: 503, what to do, when to retry. */
function expectReadLimit(res: { status: number; headers: Headers; body: any; text: string }, detail: RegExp): void {
  expect(res.status, res.text).toBe(503);
  expect(res.headers.get('content-type')).toMatch(/^application\/problem\+json/);
  expect(res.body).toMatchObject({ type: 'urn:video-analytics:problem:read_limit_exceeded', status: 503, detail: expect.stringMatching(detail) });
  expect(res.headers.get('retry-after')).toBe('5');
}

/** A GET whose client leaves `afterMs` after sending it; resolves once the connection is gone. */
function abandonedGet(base: string, path: string, apiKey: string, afterMs: number): Promise<void> {
  const { hostname, port } = new URL(base);
  return new Promise((resolve) => {
    const req = httpRequest({ hostname, port, path, method: 'GET', agent: false, headers: { authorization: `Bearer ${apiKey}` } }, (res) => {
      res.resume();
      res.on('end', () => resolve());
    });
    req.on('error', () => resolve());
    req.on('close', () => resolve());
    req.end();
    setTimeout(() => req.destroy(), afterMs);
  });
}
