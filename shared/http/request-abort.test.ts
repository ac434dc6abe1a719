import http from 'node:http';
import { afterAll, describe, expect, it } from 'vitest';
import { metricSum } from '../../test/helpers/prometheus-text.ts';
import { createLogger } from '../logger.ts';
import { createMetrics } from '../metrics.ts';
import { buildHttpApp, type App } from './app.ts';

/** A client that gives up before the answer still shows in the request metrics. */
describe('request metrics of abandoned requests', () => {
  const metrics = createMetrics();
  let app: App;
  afterAll(async () => app?.close());

  it('counts a request whose client left before the answer as "aborted", with its time until then, and only once', async () => {
    app = await buildHttpApp({ log: createLogger({ level: 'silent' }), metrics, bodyLimit: 1024, version: 't' });
    let finish!: () => void;
    const handled = new Promise<void>((r) => (finish = r));
    let release!: () => void;
    const held = new Promise<void>((r) => (release = r));
    app.get('/slow', async () => {
      await held; // answers only after the client has gone
      finish();
      return { ok: true };
    });
    app.get('/fast', async () => ({ ok: true }));
    await app.listen({ port: 0, host: '127.0.0.1' });
    const { port } = app.server.address() as { port: number };

    const get = (path: string, abortAfterMs?: number) =>
      new Promise<number | 'aborted'>((resolve) => {
        const req = http.get({ host: '127.0.0.1', port, path, agent: false }, (res) => {
          res.resume();
          res.on('end', () => resolve(res.statusCode!));
        });
        req.on('error', () => resolve('aborted'));
        if (abortAfterMs !== undefined) setTimeout(() => req.destroy(), abortAfterMs);
      });

    expect(await get('/fast')).toBe(200);
    expect(await get('/slow', 300)).toBe('aborted');
    const text = async () => metrics.registry.metrics();
    await expect.poll(async () => metricSum(await text(), 'http_requests_total', { route: '/slow', status: 'aborted' }), { timeout: 5_000, interval: 20 }).toBe(1);
    release();
    await handled;
    await new Promise((r) => setTimeout(r, 100)); // the late answer has had its chance to be counted
    const after = await text();
    expect(metricSum(after, 'http_requests_total', { route: '/slow' })).toBe(1); // aborted, not also 200
    expect(metricSum(after, 'http_request_duration_seconds_count', { route: '/slow' })).toBe(1);
    // Its time is the wait until the client left (300 ms), not 0: above the 0.25-s bucket.
    expect(metricSum(after, 'http_request_duration_seconds_bucket', { route: '/slow', le: '0.25' })).toBe(0);
    expect(metricSum(after, 'http_request_duration_seconds_bucket', { route: '/slow', le: '10' })).toBe(1);
    expect(metricSum(after, 'http_requests_total', { route: '/fast', status: '200' })).toBe(1);
  });
});
