// The resolver against a real DNS server: a UDP responder on 127.0.0.1 that
// this file controls (test/helpers/dns-server.ts), never the machine's resolv.conf.
import { performance } from 'node:perf_hooks';
import { afterEach, describe, expect, it } from 'vitest';
import { startDnsServer, type DnsAnswer, type DnsQuestion, type DnsServer } from '../../test/helpers/dns-server.ts';
import { combineAnswers, DnsLookupError, DnsTimeoutError, isLocalhost, WebhookResolver, type WebhookResolverOptions } from './resolver.ts';

/** The zone the fake server answers from; names not listed are NXDOMAIN. */
const ZONE: Record<string, DnsAnswer> = {
  'both.test': { addresses: ['93.184.216.34', '2606:2800:220:1:248:1893:25c8:1946'] },
  'v4only.test': { addresses: ['93.184.216.34'] },
  'v6only.test': { addresses: ['2606:2800:220:1:248:1893:25c8:1946'] },
  'norecords.test': { addresses: [] },
  'servfail.test': { rcode: 'SERVFAIL' },
  'hang.test': 'never',
};

function zone(q: DnsQuestion): DnsAnswer {
  if (q.name.startsWith('slow-')) return { addresses: ['93.184.216.34'], delayMs: 100 };
  return ZONE[q.name] ?? { rcode: 'NXDOMAIN' };
}

const cleanups: Array<() => Promise<void> | void> = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

async function dnsServer(answer: (q: DnsQuestion) => DnsAnswer = zone): Promise<DnsServer> {
  const server = await startDnsServer(answer);
  cleanups.push(() => server.close());
  return server;
}

function resolverFor(server: DnsServer, options: Partial<WebhookResolverOptions> = {}): WebhookResolver {
  const resolver = new WebhookResolver({ timeoutMs: 2000, servers: [server.address], ...options });
  cleanups.push(() => resolver.close());
  return resolver;
}

/** Runs `promise` to its rejection and measures how long that took. */
async function timedRejection(promise: Promise<unknown>): Promise<{ error: unknown; ms: number }> {
  const started = performance.now();
  try {
    await promise;
  } catch (error) {
    return { error, ms: performance.now() - started };
  }
  throw new Error('expected a rejection');
}

describe('combineAnswers (pure)', () => {
  const ok = (value: string[]): PromiseSettledResult<string[]> => ({ status: 'fulfilled', value });
  const failed = (code: string): PromiseSettledResult<string[]> => ({ status: 'rejected', reason: Object.assign(new Error(code), { code }) });

  it('returns every address, IPv4 first, and is content with one family', () => {
    expect(combineAnswers('h', ok(['1.2.3.4', '1.2.3.5']), ok(['2001:4860::1']))).toEqual([
      { address: '1.2.3.4', family: 4 },
      { address: '1.2.3.5', family: 4 },
      { address: '2001:4860::1', family: 6 },
    ]);
    expect(combineAnswers('h', ok(['1.2.3.4']), failed('ENODATA'))).toEqual([{ address: '1.2.3.4', family: 4 }]);
    expect(combineAnswers('h', failed('ETIMEOUT'), ok(['2001:4860::1']))).toEqual([{ address: '2001:4860::1', family: 6 }]);
    expect(combineAnswers('h', ok(['1.2.3.4']), failed('ESERVFAIL'))).toEqual([{ address: '1.2.3.4', family: 4 }]);
  });

  it.each([
    ['ENOTFOUND', 'ENOTFOUND', 'ETIMEOUT'],
    ['ENOTFOUND', 'ENODATA', 'ENOTFOUND'],
    ['ESERVFAIL', 'ENODATA', 'ESERVFAIL'],
    ['EREFUSED', 'EREFUSED', 'EREFUSED'],
    ['ENODATA', 'ENODATA', 'ENODATA'],
  ])('without addresses fails with %s (A: %s, AAAA: %s)', (expected, a, aaaa) => {
    expect(() => combineAnswers('h.example', failed(a), failed(aaaa))).toThrow(new DnsLookupError('h.example', expected));
  });

  it('without addresses and with a c-ares timeout (and no NXDOMAIN) fails as a DNS timeout', () => {
    expect(() => combineAnswers('h', failed('ETIMEOUT'), failed('ENODATA'))).toThrow(DnsTimeoutError);
    expect(() => combineAnswers('h', failed('ESERVFAIL'), failed('ETIMEOUT'))).toThrow(DnsTimeoutError);
  });

  it('treats two empty answers as ENODATA', () => {
    expect(() => combineAnswers('h', ok([]), ok([]))).toThrow(new DnsLookupError('h', 'ENODATA'));
  });

  it('knows localhost names (RFC 6761) and nothing else', () => {
    for (const name of ['localhost', 'LOCALHOST', 'localhost.', 'api.localhost']) expect(isLocalhost(name), name).toBe(true);
    for (const name of ['localhost.example.com', 'mylocalhost', 'example.com', '127.0.0.1']) expect(isLocalhost(name), name).toBe(false);
  });

  it('refuses a non-positive budget', () => {
    expect(() => new WebhookResolver({ timeoutMs: 0 })).toThrow(RangeError);
    expect(() => new WebhookResolver({ timeoutMs: -1 })).toThrow(RangeError);
  });
});

describe('WebhookResolver against a UDP DNS server on 127.0.0.1', () => {
  it('asks A and AAAA at once and returns both families', async () => {
    const server = await dnsServer((q) => {
      const answer = zone(q);
      return answer === 'never' ? answer : { ...answer, delayMs: 100 };
    });
    const resolver = resolverFor(server);
    await expect(resolver.lookup('both.test')).resolves.toEqual([
      { address: '93.184.216.34', family: 4 },
      { address: '2606:2800:220:1:248:1893:25c8:1946', family: 6 },
    ]);
    expect(server.questions).toEqual([
      { name: 'both.test', type: 'A' },
      { name: 'both.test', type: 'AAAA' },
    ]);
    // Both questions were outstanding together: the look-ups run in parallel, not one after the other.
    expect(server.peakPending()).toBe(2);
  });

  it('returns one family when the other has no record', async () => {
    const resolver = resolverFor(await dnsServer());
    await expect(resolver.lookup('v4only.test')).resolves.toEqual([{ address: '93.184.216.34', family: 4 }]);
    await expect(resolver.lookup('v6only.test')).resolves.toEqual([{ address: '2606:2800:220:1:248:1893:25c8:1946', family: 6 }]);
  });

  it('fails with the DNS code when the name does not exist, has no address, or the server fails', async () => {
    const resolver = resolverFor(await dnsServer());
    await expect(resolver.lookup('missing.test')).rejects.toMatchObject({ name: 'DnsLookupError', code: 'ENOTFOUND', host: 'missing.test' });
    await expect(resolver.lookup('norecords.test')).rejects.toMatchObject({ code: 'ENODATA' });
    await expect(resolver.lookup('servfail.test')).rejects.toMatchObject({ code: 'ESERVFAIL' });
  });

  it('fails with a DnsTimeoutError within the budget when the server never answers, and goes on answering others', async () => {
    const server = await dnsServer();
    const resolver = resolverFor(server, { timeoutMs: 300 });
    const { error, ms } = await timedRejection(resolver.lookup('hang.test'));
    expect(error).toBeInstanceOf(DnsTimeoutError);
    expect(error).toMatchObject({ code: 'ETIMEOUT', message: 'DNS look-up of hang.test timed out' });
    expect(ms).toBeGreaterThanOrEqual(295);
    expect(ms).toBeLessThan(300 + 400);
    expect(server.questions.filter((q) => q.name === 'hang.test').map((q) => q.type)).toEqual(expect.arrayContaining(['A', 'AAAA']));
    await expect(resolver.lookup('v4only.test')).resolves.toEqual([{ address: '93.184.216.34', family: 4 }]);
  });

  it('runs look-ups side by side on one channel, each name asked once per family', async () => {
    const server = await dnsServer();
    const resolver = resolverFor(server);
    const names = Array.from({ length: 12 }, (_, i) => `slow-${i}.test`);
    const results = await Promise.all(names.map((name) => resolver.lookup(name)));
    expect(results.every((r) => r.length === 1 && r[0]!.address === '93.184.216.34')).toBe(true);
    // All twelve were outstanding together (each answers after 100 ms).
    expect(server.peakPendingNames()).toBe(12);
    // Each name asked exactly twice (A, AAAA): nothing was retransmitted or asked again.
    expect(server.questions).toHaveLength(24);
  });

  it('a name that never answers does not hold back another one', async () => {
    // held.test answers after 250 ms, well within c-ares's per-try timeout (half the budget).
    const server = await dnsServer((q) => (q.name === 'held.test' ? { addresses: ['93.184.216.34'], delayMs: 250 } : zone(q)));
    const resolver = resolverFor(server, { timeoutMs: 600 });
    const hanging = timedRejection(resolver.lookup('hang.test'));
    const started = performance.now();
    await expect(resolver.lookup('held.test')).resolves.toHaveLength(1);
    const heldMs = performance.now() - started;
    const { error, ms } = await hanging;
    expect(error).toBeInstanceOf(DnsTimeoutError);
    // The held name was answered while the hanging one still waited on the
    // server (an order, not a time: it holds on a loaded machine too), and
    // the hanging one gave up at its budget rather than waiting on.
    expect(heldMs).toBeLessThan(ms);
    expect(ms).toBeGreaterThanOrEqual(595);
    expect(ms).toBeLessThan(600 + 1500);
  });

  it('gives up as soon as the caller aborts', async () => {
    const server = await dnsServer();
    const resolver = resolverFor(server, { timeoutMs: 5000 });
    const abort = new AbortController();
    setTimeout(() => abort.abort(), 100);
    const { error, ms } = await timedRejection(resolver.lookup('hang.test', abort.signal));
    expect(error).toBeInstanceOf(DnsTimeoutError);
    expect(ms).toBeLessThan(1000);
    const already = new AbortController();
    already.abort();
    await expect(resolver.lookup('v4only.test', already.signal)).rejects.toBeInstanceOf(DnsTimeoutError);
    expect(server.questions.map((q) => q.name)).not.toContain('v4only.test');
  });

  it('answers IP literals and localhost without asking the server', async () => {
    const server = await dnsServer();
    const resolver = resolverFor(server);
    await expect(resolver.lookup('localhost')).resolves.toEqual([{ address: '127.0.0.1', family: 4 }]);
    await expect(resolver.lookup('hooks.localhost')).resolves.toEqual([{ address: '127.0.0.1', family: 4 }]);
    await expect(resolver.lookup('10.1.2.3')).resolves.toEqual([{ address: '10.1.2.3', family: 4 }]);
    await expect(resolver.lookup('[::1]')).resolves.toEqual([{ address: '::1', family: 6 }]);
    expect(server.questions).toEqual([]);
  });

  it('close() cancels look-ups in flight and refuses new ones', async () => {
    const server = await dnsServer();
    const resolver = resolverFor(server, { timeoutMs: 5000 });
    const holding = resolver.lookup('hang.test');
    resolver.close();
    await expect(holding).rejects.toMatchObject({ code: 'ECANCELLED' });
    await expect(resolver.lookup('v4only.test')).rejects.toThrow('the webhook resolver is closed');
  });
});
