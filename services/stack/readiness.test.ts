import { describe, expect, it } from 'vitest';
import { componentCheck, publicReadiness, readiness } from './readiness.ts';

describe('readiness', () => {
  it('is ready when every probe and component is ok, listing probes first, then components in order', () => {
    const r = readiness({ kafka: 'ok', clickhouse: 'ok' }, [
      { name: 'config_store', problems: {} },
      { name: 'projector', problems: {} },
    ]);
    expect(r.ready).toBe(true);
    expect(r.body).toEqual({ status: 'ready', checks: { kafka: 'ok', clickhouse: 'ok', config_store: 'ok', projector: 'ok' } });
    expect(Object.keys(r.body.checks)).toEqual(['kafka', 'clickhouse', 'config_store', 'projector']);
  });

  it('is not ready when a probe failed, and passes its text through', () => {
    const r = readiness({ kafka: 'error: Connection timeout', clickhouse: 'ok' }, [{ name: 'fanout', problems: {} }]);
    expect(r).toEqual({ ready: false, body: { status: 'not_ready', checks: { kafka: 'error: Connection timeout', clickhouse: 'ok', fanout: 'ok' } } });
  });

  it('names every problem of a component, joined in one check', () => {
    const r = readiness({ kafka: 'ok' }, [
      { name: 'config_store', problems: {} },
      { name: 'fanout', problems: { 'fanout.deliveries': 'producer failing: 3 requests in a row', 'p.fanout-retry-1m': 'crashed' } },
    ]);
    expect(r.ready).toBe(false);
    expect(r.body.status).toBe('not_ready');
    expect(r.body.checks.fanout).toBe('error: fanout.deliveries: producer failing: 3 requests in a row; p.fanout-retry-1m: crashed');
    expect(r.body.checks.config_store).toBe('ok');
  });

  it('with nothing to check is ready (a process of one service without consumers)', () => {
    expect(readiness({}, []).ready).toBe(true);
    expect(componentCheck({})).toBe('ok');
    expect(componentCheck({ config_store: 'not running' })).toBe('error: config_store: not running');
  });

  it('answers anyone the states only, never the text of what is wrong', () => {
    const r = readiness({ kafka: 'error: connect ECONNREFUSED 10.1.2.3:9092', clickhouse: 'error: Authentication failed: password is incorrect for user analytics' }, [
      { name: 'fanout', problems: {} },
    ]);
    expect(publicReadiness(r.body)).toEqual({ status: 'not_ready', checks: { kafka: 'error', clickhouse: 'error', fanout: 'ok' } });
    expect(JSON.stringify(publicReadiness(r.body))).not.toMatch(/10\.1\.2\.3|analytics|password/);
  });
});
