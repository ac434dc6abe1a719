// Classification only: nothing here resolves a name or opens a socket.
import { describe, expect, it } from 'vitest';
import { classifyAddress, isAllowedAddress, matchesCidrList, parseCidrList } from './address-policy.ts';

/** [address, refused range]; each range is probed at its first, a middle and its last address. */
const REFUSED_V4: Array<[string, string]> = [
  ['0.0.0.0', '0.0.0.0/8'],
  ['0.255.255.255', '0.0.0.0/8'],
  ['10.0.0.0', '10.0.0.0/8'],
  ['10.20.30.40', '10.0.0.0/8'],
  ['10.255.255.255', '10.0.0.0/8'],
  ['100.64.0.0', '100.64.0.0/10'],
  ['100.100.100.100', '100.64.0.0/10'],
  ['100.127.255.255', '100.64.0.0/10'],
  ['127.0.0.1', '127.0.0.0/8'],
  ['127.255.255.254', '127.0.0.0/8'],
  ['169.254.169.254', '169.254.0.0/16'],
  ['169.254.0.1', '169.254.0.0/16'],
  ['172.16.0.0', '172.16.0.0/12'],
  ['172.20.1.1', '172.16.0.0/12'],
  ['172.31.255.255', '172.16.0.0/12'],
  ['192.0.0.8', '192.0.0.0/24'],
  ['192.0.0.170', '192.0.0.0/24'],
  ['192.0.2.1', '192.0.2.0/24'],
  ['192.88.99.1', '192.88.99.0/24'],
  ['192.168.0.1', '192.168.0.0/16'],
  ['192.168.255.255', '192.168.0.0/16'],
  ['198.18.0.1', '198.18.0.0/15'],
  ['198.19.255.255', '198.18.0.0/15'],
  ['198.51.100.7', '198.51.100.0/24'],
  ['203.0.113.9', '203.0.113.0/24'],
  ['224.0.0.1', '224.0.0.0/4'],
  ['239.255.255.250', '224.0.0.0/4'],
  ['240.0.0.1', '240.0.0.0/4'],
  ['255.255.255.254', '240.0.0.0/4'],
  ['255.255.255.255', '255.255.255.255/32'],
];

const ALLOWED_V4 = [
  '8.8.8.8',
  '1.1.1.1',
  '93.184.216.34',
  '9.255.255.255', // just below 10/8
  '11.0.0.0', // just above 10/8
  '100.63.255.255', // just below 100.64/10
  '100.128.0.0', // just above 100.64/10
  '126.255.255.255',
  '128.0.0.0',
  '169.253.255.255',
  '172.15.255.255',
  '172.32.0.0',
  '192.0.1.255',
  '192.0.3.0',
  '192.88.98.255',
  '192.169.0.0',
  '198.17.255.255',
  '198.20.0.0',
  '223.255.255.255', // last address below multicast
];

const REFUSED_V6: Array<[string, string]> = [
  ['::', '::/128'],
  ['::1', '::1/128'],
  ['0:0:0:0:0:0:0:1', '::1/128'],
  ['::2', '::/96'],
  ['::7f00:1', '::/96'],
  ['::ffff:0:7f00:1', '::ffff:0:0:0/96'],
  ['64:ff9b:1::1', '64:ff9b:1::/48'],
  ['100::1', '100::/64'],
  ['100::ffff:ffff:ffff:ffff', '100::/64'],
  ['2001::1', '2001::/23'], // Teredo
  ['2001:1ff:ffff::1', '2001::/23'],
  ['2001:db8::1', '2001:db8::/32'],
  ['2001:db8:ffff:ffff:ffff:ffff:ffff:ffff', '2001:db8::/32'],
  ['3fff::1', '3fff::/20'],
  ['5f00::1', '5f00::/16'],
  ['fc00::1', 'fc00::/7'],
  ['fd12:3456:789a::1', 'fc00::/7'],
  ['fdff:ffff:ffff:ffff:ffff:ffff:ffff:ffff', 'fc00::/7'],
  ['fe80::1', 'fe80::/10'],
  ['fe80::1%eth0', 'fe80::/10'],
  ['FE80::ABCD', 'fe80::/10'],
  ['febf:ffff::1', 'fe80::/10'],
  ['fec0::1', 'fec0::/10'],
  ['ff02::1', 'ff00::/8'],
  ['ff05::1:3', 'ff00::/8'],
  ['[::1]', '::1/128'],
];

/** IPv6 forms that carry an IPv4 address, judged by that IPv4 address. */
const EMBEDDED_V4: Array<[string, string | undefined, string]> = [
  ['::ffff:127.0.0.1', '127.0.0.0/8', '::ffff:0:0/96'],
  ['::ffff:7f00:1', '127.0.0.0/8', '::ffff:0:0/96'],
  ['0:0:0:0:0:ffff:a9fe:a9fe', '169.254.0.0/16', '::ffff:0:0/96'],
  ['::FFFF:10.0.0.1', '10.0.0.0/8', '::ffff:0:0/96'],
  ['::ffff:8.8.8.8', undefined, '::ffff:0:0/96'],
  ['64:ff9b::127.0.0.1', '127.0.0.0/8', '64:ff9b::/96'],
  ['64:ff9b::c0a8:101', '192.168.0.0/16', '64:ff9b::/96'],
  ['64:ff9b::8.8.8.8', undefined, '64:ff9b::/96'],
  ['2002:7f00:1::', '127.0.0.0/8', '2002::/16'],
  ['2002:a00:1::1', '10.0.0.0/8', '2002::/16'],
  ['2002:c0a8:101:1::1', '192.168.0.0/16', '2002::/16'],
  ['2002:808:808::1', undefined, '2002::/16'],
];

const ALLOWED_V6 = [
  '2606:4700:4700::1111',
  '2001:4860:4860::8888',
  '2a00:1450:4001:82b::200e',
  '2001:200::1', // just past 2001::/23
  '2001:db7:ffff::1',
  '2001:db9::1',
  '3ffe::1',
  '2003::1',
];

describe('classifyAddress', () => {
  it.each(REFUSED_V4)('refuses %s (in %s)', (ip, range) => {
    expect(classifyAddress(ip)).toMatchObject({ allowed: false, range });
  });

  it.each(ALLOWED_V4)('allows the public IPv4 address %s', (ip) => {
    expect(classifyAddress(ip)).toEqual({ allowed: true });
  });

  it.each(REFUSED_V6)('refuses %s (in %s)', (ip, range) => {
    expect(classifyAddress(ip)).toMatchObject({ allowed: false, range });
  });

  it.each(EMBEDDED_V4)('judges %s by its embedded IPv4 address', (ip, range, via) => {
    const result = classifyAddress(ip);
    if (range === undefined) expect(result).toEqual({ allowed: true });
    else expect(result).toMatchObject({ allowed: false, range, via });
  });

  it.each(ALLOWED_V6)('allows the public IPv6 address %s', (ip) => {
    expect(classifyAddress(ip)).toEqual({ allowed: true });
  });

  it('refuses IPv6 space outside global unicast 2000::/3', () => {
    for (const ip of ['4000::1', '1::1', 'e000::1', '8000::']) {
      expect(classifyAddress(ip), ip).toMatchObject({ allowed: false, name: 'not-global-unicast' });
    }
  });

  it('names the range it refused', () => {
    expect(classifyAddress('169.254.169.254')).toEqual({ allowed: false, range: '169.254.0.0/16', name: 'link-local' });
    expect(classifyAddress('100.64.0.1').name).toBe('cgnat');
    expect(classifyAddress('::ffff:127.0.0.1')).toEqual({
      allowed: false,
      range: '127.0.0.0/8',
      name: 'ipv4-mapped loopback',
      via: '::ffff:0:0/96',
    });
  });

  it.each(['', 'localhost', 'example.com', '127.1', '0x7f000001', '2130706433', '010.0.0.1', '1.2.3.4.5', '256.0.0.1', '1::2::3', ':::', '12345::', 'fe80::1%', ' [::1 '])(
    'refuses %j as not an IP address',
    (text) => {
      expect(classifyAddress(text)).toEqual({ allowed: false, name: 'invalid' });
    },
  );
});

describe('parseCidrList', () => {
  it('parses a comma list with spaces, bare hosts and IPv6', () => {
    const list = parseCidrList(' 127.0.0.0/8, ::1/128 ,10.1.2.3, fd00::/8,2001:DB8:0:0::/32,');
    expect(list.map((c) => c.text)).toEqual(['127.0.0.0/8', '::1/128', '10.1.2.3/32', 'fd00::/8', '2001:db8::/32']);
    expect(list.map((c) => c.family)).toEqual([4, 6, 4, 6, 6]);
  });

  it('gives an empty list for an empty setting', () => {
    expect(parseCidrList('')).toEqual([]);
    expect(parseCidrList(' , ')).toEqual([]);
  });

  it.each([
    ['localhost/8', /"localhost" is not an IPv4 or IPv6 address/],
    ['10.0.0.0/33', /prefix length must be an integer from 0 to 32/],
    ['::/129', /from 0 to 128/],
    ['10.0.0.0/', /prefix length/],
    ['10.0.0.0/8/8', /prefix length/],
    ['10.0.0.0/-1', /prefix length/],
    ['10.0.0.0/ 8', /prefix length/],
    ['10.1.2.3/8', /host bits are set \(did you mean 10\.0\.0\.0\/8\?\)/],
    ['fe80::1/10', /did you mean fe80::\/10\?/],
    ['fe80::%eth0/10', /not an IPv4 or IPv6 address/],
    ['[::1]/128', /not an IPv4 or IPv6 address/],
  ])('refuses %j with a clear message', (entry, message) => {
    expect(() => parseCidrList(`127.0.0.0/8,${entry}`)).toThrow(message);
    expect(() => parseCidrList(entry)).toThrow(`invalid CIDR "${entry}"`);
  });
});

describe('isAllowedAddress', () => {
  it('refuses a reserved address unless the allow list covers it', () => {
    expect(isAllowedAddress('127.0.0.1', [])).toBe(false);
    expect(isAllowedAddress('127.0.0.1', parseCidrList('127.0.0.0/8'))).toBe(true);
    expect(isAllowedAddress('127.0.0.2', parseCidrList('127.0.0.1'))).toBe(false);
    expect(isAllowedAddress('10.9.8.7', parseCidrList('127.0.0.0/8, 10.9.0.0/16'))).toBe(true);
    expect(isAllowedAddress('10.10.0.1', parseCidrList('10.9.0.0/16'))).toBe(false);
  });

  it('lets public addresses through without an allow list', () => {
    expect(isAllowedAddress('8.8.8.8', [])).toBe(true);
    expect(isAllowedAddress('2606:4700:4700::1111', [])).toBe(true);
  });

  it('matches IPv6 entries, and IPv4 entries against IPv4-mapped addresses', () => {
    expect(isAllowedAddress('::1', parseCidrList('::1/128'))).toBe(true);
    expect(isAllowedAddress('fd00::5', parseCidrList('fd00::/8'))).toBe(true);
    expect(isAllowedAddress('::ffff:127.0.0.1', parseCidrList('127.0.0.0/8'))).toBe(true);
    // NAT64 reaches a different host than the IPv4 address itself.
    expect(isAllowedAddress('64:ff9b::7f00:1', parseCidrList('127.0.0.0/8'))).toBe(false);
    expect(isAllowedAddress('::1', parseCidrList('127.0.0.0/8'))).toBe(false);
  });

  it('never allows unparseable text, even with a catch-all allow list', () => {
    expect(isAllowedAddress('localhost', parseCidrList('0.0.0.0/0, ::/0'))).toBe(false);
    expect(matchesCidrList('not-an-ip', parseCidrList('0.0.0.0/0'))).toBe(false);
  });
});
