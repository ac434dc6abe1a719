import { describe, expect, it } from 'vitest';
import { ConfigError, loadConfig } from './config.ts';

describe('configuration', () => {
  it('has defaults for a local run', () => {
    const c = loadConfig({});
    expect(c).toMatchObject({ PORT: 3000, DATA_DIR: '.data', SERVICES: ['ingest', 'projector', 'fanout', 'derived', 'api', 'admin'], RATE_LIMIT_PER_MINUTE: 1000 });
    expect(c.KAFKA_BROKERS).toBeUndefined();
    expect(c.CLICKHOUSE_URL).toBeUndefined();
  });

  it('bounds how long the HTTP server waits on a client, and refuses a headers timeout over the whole request\'s', () => {
    expect(loadConfig({})).toMatchObject({ HTTP_HEADERS_TIMEOUT_MS: 10_000, HTTP_BODY_IDLE_TIMEOUT_MS: 10_000, HTTP_REQUEST_TIMEOUT_MS: 30_000, HTTP_KEEP_ALIVE_TIMEOUT_MS: 72_000 });
    expect(() => loadConfig({ HTTP_HEADERS_TIMEOUT_MS: '40000' })).toThrow(/HTTP_HEADERS_TIMEOUT_MS: must not exceed HTTP_REQUEST_TIMEOUT_MS/);
  });

  it('parses lists', () => {
    const c = loadConfig({ KAFKA_BROKERS: 'a:9092, b:9092', SERVICES: 'api,projector' });
    expect(c.KAFKA_BROKERS).toEqual(['a:9092', 'b:9092']);
    expect(c.SERVICES).toEqual(['api', 'projector']);
    expect(loadConfig({}).DERIVED_STAGES).toEqual(['repartition', 'intent']);
    expect(loadConfig({ DERIVED_STAGES: ' intent ' }).DERIVED_STAGES).toEqual(['intent']);
  });

  it('names every bad variable', () => {
    try {
      loadConfig({ PORT: 'eighty', CLICKHOUSE_URL: 'not a url', SERVICES: 'api,mailer', ADMIN_TOKEN: 'short', DERIVED_STAGES: 'intent,shuffle' });
      expect.unreachable();
    } catch (err) {
      expect(err).toBeInstanceOf(ConfigError);
      const msg = (err as Error).message;
      for (const name of ['PORT', 'CLICKHOUSE_URL', 'SERVICES', 'ADMIN_TOKEN', 'DERIVED_STAGES']) expect(msg).toContain(name);
    }
  });

  it('reads TRUST_PROXY as off, all, a hop count or the proxies\' addresses', () => {
    expect(loadConfig({}).TRUST_PROXY).toBe(false);
    expect(loadConfig({ TRUST_PROXY: 'false' }).TRUST_PROXY).toBe(false);
    expect(loadConfig({ TRUST_PROXY: 'true' }).TRUST_PROXY).toBe(true);
    expect(loadConfig({ TRUST_PROXY: '2' }).TRUST_PROXY).toBe(2);
    expect(loadConfig({ TRUST_PROXY: '10.0.0.0/8, 192.0.2.1,::1, loopback' }).TRUST_PROXY).toEqual(['10.0.0.0/8', '192.0.2.1', '::1', 'loopback']);
    for (const bad of ['yes', '10.0.0.0/33', 'proxy.example', '1.2.3']) expect(() => loadConfig({ TRUST_PROXY: bad }), bad).toThrow(/TRUST_PROXY/);
  });
});
