import { spawn } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { TestStack, type TestTenant } from './helpers/stack.ts';

/**
 * The OpenAPI document is complete (every named schema in
 * components.schemas, every refusal of a JSON operation documented), and
 * the service keeps to it: schemathesis (PyPI; installed by
 * infra/schemathesis/install.sh) generates requests for every operation
 * with its auth and checks that no answer is a 5xx, violates its schema or
 * has a status the document does not list.
 */
const ROOT = resolve(import.meta.dirname, '..');
const SCHEMATHESIS = join(ROOT, '.cache/schemathesis/bin/schemathesis');
/** Generated cases per operation and phase, and the wall-clock cap of the whole run. */
const MAX_EXAMPLES = Number(process.env.SCHEMATHESIS_MAX_EXAMPLES ?? 10);
const WALL_CLOCK_MS = Number(process.env.SCHEMATHESIS_WALL_CLOCK_S ?? 300) * 1000;

type OpenApi = {
  paths: Record<string, Record<string, { operationId?: string; requestBody?: unknown; responses: Record<string, unknown>; security?: Record<string, string[]>[] }>>;
  components: { schemas?: Record<string, unknown>; securitySchemes: Record<string, unknown> };
};

/** A few operations and the names clients generated from the document call them by. */
const EXPECTED_IDS: Record<string, string> = {
  listVideos: 'GET /v1/videos',
  listVideoEvents: 'GET /v1/videos/{video_id}/events',
  getVisitorScore: 'GET /v1/visitors/{visitor_id}/score',
  getVideoStats: 'GET /v1/videos/{video_id}/stats',
  collectEvents: 'POST /v1/collect',
  recordConversion: 'POST /api/public/conversion',
  createTenant: 'POST /admin/v1/tenants',
  updateTenant: 'PATCH /admin/v1/tenants/{tenant_id}',
  createVideo: 'POST /admin/v1/tenants/{tenant_id}/videos',
  updateVideo: 'PATCH /admin/v1/tenants/{tenant_id}/videos/{video_id}',
  getTenantVideoStats: 'GET /admin/v1/tenants/{tenant_id}/videos/{video_id}/stats',
  createDestination: 'POST /admin/v1/tenants/{tenant_id}/destinations',
  reprocessDelivery: 'POST /admin/v1/tenants/{tenant_id}/deliveries/{delivery_id}/reprocess',
};

describe('OpenAPI document', () => {
  let s: TestStack;
  let A: TestTenant;
  let doc: OpenApi;

  beforeAll(async () => {
    // The API-key limit is not what this run is about (its 429 is documented either way).
    s = await TestStack.start({ RATE_LIMIT_PER_MINUTE: '100000' });
    A = await s.createTenant('contract');
    doc = (await s.request('GET', '/v1/openapi.json')).body as OpenApi;
  });
  afterAll(async () => {
    await s?.stop();
  });

  it('defines every schema it references in components.schemas', () => {
    const refs = new Set([...JSON.stringify(doc).matchAll(/"\$ref":"#\/components\/schemas\/([^"]+)"/g)].map((m) => m[1]!));
    expect(refs.size).toBeGreaterThanOrEqual(16);
    const defined = Object.keys(doc.components.schemas ?? {});
    expect(defined).toEqual(expect.arrayContaining([...refs]));
    for (const name of ['Problem', 'Video', 'VideoEvent', 'VisitorScore', 'Tenant', 'Destination', 'Delivery', 'VideoStats']) expect(defined).toContain(name);
  });

  it('documents 400, 413 and 415 for every operation with a JSON body, and 400 for every operation', () => {
    let withBody = 0;
    for (const [path, item] of Object.entries(doc.paths)) {
      for (const [method, op] of Object.entries(item)) {
        expect(Object.keys(op.responses), `${method} ${path}`).toContain('400');
        if (!op.requestBody) continue;
        withBody++;
        expect(Object.keys(op.responses), `${method} ${path}`).toEqual(expect.arrayContaining(['400', '413', '415']));
      }
    }
    expect(withBody).toBeGreaterThanOrEqual(7);
  });

  it('names every operation with a unique lowerCamelCase operationId', () => {
    const ids = new Map<string, string>();
    for (const [path, item] of Object.entries(doc.paths)) {
      for (const [method, op] of Object.entries(item)) {
        const where = `${method.toUpperCase()} ${path}`;
        expect(op.operationId, where).toMatch(/^[a-z][A-Za-z0-9]+$/);
        expect(ids.get(op.operationId!), `${where} reuses ${op.operationId}`).toBeUndefined();
        ids.set(op.operationId!, where);
      }
    }
    expect(ids.size).toBeGreaterThanOrEqual(30);
    expect(Object.fromEntries([...ids].filter(([id]) => EXPECTED_IDS[id] !== undefined))).toEqual(EXPECTED_IDS);
  });

  it('keeps to the document under schemathesis: no 5xx, no schema violation, no undocumented status', async () => {
    expect(existsSync(SCHEMATHESIS), 'schemathesis is installed by infra/schemathesis/install.sh').toBe(true);
    const operations = Object.values(doc.paths).reduce((n, item) => n + Object.keys(item).length, 0);
    const dir = mkdtempSync(join(tmpdir(), 'va-schemathesis-'));
    const config = join(dir, 'schemathesis.toml');
    // Each operation gets the credential of the scheme it declares.
    writeFileSync(
      config,
      [
        '[auth.openapi.apiKey]',
        `bearer = "${A.apiKey}"`,
        '[auth.openapi.adminToken]',
        `bearer = "${s.stack.adminToken}"`,
        '[auth.openapi.playerKey]',
        `api_key = "${A.player_key}"`,
        // Real ids, so that cases get past the 404 of an unknown tenant or video to the logic behind it.
        '[parameters]',
        `"path.tenant_id" = "${A.id}"`,
        `"path.video_id" = "${A.videoId}"`,
        '',
      ].join('\n'),
    );
    const ndjson = join(dir, 'events.ndjson');
    const args = [
      '--config-file', config,
      'run', `${s.url}/v1/openapi.json`,
      '--url', s.url,
      '--checks', 'not_a_server_error,status_code_conformance,response_schema_conformance',
      '--phases', 'examples,coverage,fuzzing',
      '--max-examples', String(MAX_EXAMPLES),
      '--seed', '8',
      // NOTE: one worker: with threads, Python 3.11.7's ast.parse (hypothesis
      // calls it to describe strategies) fails with "AST constructor recursion
      // depth mismatch" (a CPython bug fixed in 3.11.8).
      '--workers', '1',
      '--request-timeout', '20',
      '--generation-database', 'none',
      '--suppress-health-check', 'all',
      '--no-color',
      '--report', 'ndjson', '--report-ndjson-path', ndjson,
    ];
    const run = await runWithCap(SCHEMATHESIS, args, WALL_CLOCK_MS, dir);
    const summary = summarise(existsSync(ndjson) ? readFileSync(ndjson, 'utf8') : '');
    process.stdout.write(
      `schemathesis: ${summary.operations} operations tested of ${operations} in the document, ${summary.cases} test cases, checks ${JSON.stringify(summary.checks)}, ${summary.failures} failed, exit ${run.code}${run.timedOut ? ' (wall-clock cap reached)' : ''}\n`,
    );
    expect(run.timedOut, `schemathesis ran past ${WALL_CLOCK_MS / 1000} s:\n${run.output.slice(-4000)}`).toBe(false);
    expect(run.code, run.output.slice(-8000)).toBe(0);
    expect(summary.operations).toBe(operations);
    expect(summary.cases).toBeGreaterThan(operations);
    expect(summary.failures).toBe(0);
    for (const check of ['not_a_server_error', 'status_code_conformance', 'response_schema_conformance']) expect(summary.checks[check] ?? 0, check).toBeGreaterThan(0);
  }, WALL_CLOCK_MS + 60_000);
});

/** Runs `cmd` in `cwd` (schemathesis leaves a .schemathesis/ folder there) and kills it at `capMs`. */
async function runWithCap(cmd: string, args: string[], capMs: number, cwd: string): Promise<{ code: number | null; output: string; timedOut: boolean }> {
  const child = spawn(cmd, args, { cwd, stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, NO_COLOR: '1' } });
  let output = '';
  child.stdout.on('data', (d) => (output += d));
  child.stderr.on('data', (d) => (output += d));
  let timedOut = false;
  const timer = setTimeout(() => {
    timedOut = true;
    child.kill('SIGKILL');
  }, capMs);
  const code = await new Promise<number | null>((r) => child.once('exit', (c) => r(c)));
  clearTimeout(timer);
  return { code, output, timedOut };
}

/** Operation, case, check and failure counts from schemathesis' NDJSON event stream. */
function summarise(ndjson: string): { operations: number; cases: number; checks: Record<string, number>; failures: number } {
  const operations = new Set<string>();
  let cases = 0;
  let failures = 0;
  const checks: Record<string, number> = {};
  for (const line of ndjson.split('\n')) {
    if (!line.trim()) continue;
    const finished = (JSON.parse(line) as { ScenarioFinished?: { recorder?: ScenarioRecorder } }).ScenarioFinished;
    const recorder = finished?.recorder;
    if (!recorder?.cases) continue;
    operations.add(recorder.label);
    cases += Object.keys(recorder.cases).length;
    for (const results of Object.values(recorder.checks ?? {})) {
      for (const c of results) {
        checks[c.name] = (checks[c.name] ?? 0) + 1;
        if (c.status !== 'success') failures++;
      }
    }
  }
  return { operations: operations.size, cases, checks, failures };
}

type ScenarioRecorder = { label: string; cases?: Record<string, unknown>; checks?: Record<string, { name: string; status: string }[]> };
