import { afterEach, describe, expect, it } from 'vitest';
import { loadConfig } from '../config.ts';
import { createLogger } from '../logger.ts';
import { createMetrics } from '../metrics.ts';
import { buildHttpApp, type App } from './app.ts';

/** TRUST_PROXY decides whether X-Forwarded-Proto/-For are believed (and so the cookie's Secure and the client address). */
describe('TRUST_PROXY', () => {
  const apps: App[] = [];
  afterEach(async () => {
    for (const a of apps.splice(0)) await a.close();
  });
  const appFor = async (value: string | undefined) => {
    const app = await buildHttpApp({
      log: createLogger({ level: 'silent' }),
      metrics: createMetrics(),
      bodyLimit: 1024,
      version: 't',
      trustProxy: loadConfig(value === undefined ? {} : { TRUST_PROXY: value }).TRUST_PROXY,
    });
    apps.push(app);
    app.get('/whoami', async (req) => ({ protocol: req.protocol, ip: req.ip }));
    return app;
  };
  const ask = (app: App, remoteAddress: string) =>
    app.inject({ url: '/whoami', remoteAddress, headers: { 'x-forwarded-proto': 'https', 'x-forwarded-for': '203.0.113.9' } }).then((r) => r.json());

  it('ignores forwarded headers by default', async () => {
    expect(await ask(await appFor(undefined), '127.0.0.1')).toEqual({ protocol: 'http', ip: '127.0.0.1' });
  });

  it('believes them from a listed proxy only', async () => {
    const app = await appFor('127.0.0.1, 10.0.0.0/8');
    expect(await ask(app, '127.0.0.1')).toEqual({ protocol: 'https', ip: '203.0.113.9' });
    expect(await ask(app, '10.1.2.3')).toEqual({ protocol: 'https', ip: '203.0.113.9' });
    expect(await ask(app, '192.0.2.50')).toEqual({ protocol: 'http', ip: '192.0.2.50' });
  });

  it('takes a hop count', async () => {
    expect(await ask(await appFor('1'), '192.0.2.50')).toEqual({ protocol: 'https', ip: '203.0.113.9' });
  });
});
