/**
 * SSRF policy for webhook delivery: which resolved IP addresses a delivery
 * may connect to. Customer-supplied URLs must not reach the service's own
 * network (loopback, private, link-local, cloud metadata at 169.254.169.254,
 * CGNAT) or any reserved range. Pure: parses text, never resolves names.
 */
import { isIPv4, isIPv6 } from 'node:net';

/** Result of {@link classifyAddress}. */
export interface AddressClassification {
  allowed: boolean;
  /** The refused range in CIDR form; for an IPv6 form of an IPv4 address, the IPv4 range. */
  range?: string;
  /** What the refused range is for, e.g. `loopback`, `private`, `invalid`. */
  name?: string;
  /** The IPv6 translation prefix the IPv4 address was found in (mapped, NAT64, 6to4). */
  via?: string;
}

/** One parsed CIDR block of an allow list. */
export interface Cidr {
  readonly family: 4 | 6;
  /** Network address as an integer (32 or 128 bits). */
  readonly network: bigint;
  readonly prefix: number;
  /** Canonical text form, for messages. */
  readonly text: string;
}

/** A parsed `WEBHOOK_ALLOWED_CIDRS` value. */
export type CidrList = readonly Cidr[];

interface Range {
  readonly cidr: Cidr;
  readonly name: string;
}

const V4_BITS = 32;
const V6_BITS = 128;

function range(text: string, name: string): Range {
  return { cidr: parseCidr(text), name };
}

// Order matters only for naming: the more specific range is listed first.
const REFUSED_V4: readonly Range[] = [
  range('0.0.0.0/8', 'this-network'),
  range('10.0.0.0/8', 'private'),
  range('100.64.0.0/10', 'cgnat'),
  range('127.0.0.0/8', 'loopback'),
  range('169.254.0.0/16', 'link-local'),
  range('172.16.0.0/12', 'private'),
  range('192.0.0.0/24', 'ietf-protocol-assignments'),
  range('192.0.2.0/24', 'documentation'),
  range('192.88.99.0/24', '6to4-relay-anycast'),
  range('192.168.0.0/16', 'private'),
  range('198.18.0.0/15', 'benchmarking'),
  range('198.51.100.0/24', 'documentation'),
  range('203.0.113.0/24', 'documentation'),
  range('224.0.0.0/4', 'multicast'),
  range('255.255.255.255/32', 'broadcast'),
  range('240.0.0.0/4', 'reserved'),
];

/** IPv6 prefixes whose low 32 bits (or, for 6to4, bits 16–48) are an IPv4 address reached through them. */
const MAPPED_V6 = range('::ffff:0:0/96', 'ipv4-mapped');
const NAT64_V6 = range('64:ff9b::/96', 'nat64');
const SIX_TO_FOUR_V6 = range('2002::/16', '6to4');

const REFUSED_V6: readonly Range[] = [
  range('::/128', 'unspecified'),
  range('::1/128', 'loopback'),
  // Deprecated IPv4-compatible form: nothing legitimate uses it, and some stacks still route it to IPv4.
  range('::/96', 'ipv4-compatible'),
  range('::ffff:0:0:0/96', 'ipv4-translated'),
  range('64:ff9b:1::/48', 'nat64-local'),
  range('100::/64', 'discard-only'),
  range('2001:db8::/32', 'documentation'),
  range('2001::/23', 'ietf-protocol-assignments'),
  range('3fff::/20', 'documentation'),
  range('5f00::/16', 'srv6-sid'),
  range('fc00::/7', 'unique-local'),
  range('fe80::/10', 'link-local'),
  range('fec0::/10', 'site-local'),
  range('ff00::/8', 'multicast'),
];

/** Only 2000::/3 is allocated as global unicast; the rest of the space is reserved. */
const GLOBAL_UNICAST_V6 = parseCidr('2000::/3');

/**
 * Classifies one IP address (no DNS): refused when it is in a private,
 * loopback, link-local, CGNAT, documentation, multicast or otherwise
 * reserved range, IPv4 or IPv6. IPv6 forms that carry an IPv4 address
 * (IPv4-mapped `::ffff:a.b.c.d`, NAT64 `64:ff9b::/96`, 6to4 `2002::/16`) are
 * judged by the embedded IPv4 address. Any IPv6 address outside 2000::/3 is
 * refused. Zone ids (`fe80::1%eth0`) and URL brackets (`[::1]`) are
 * accepted; text that is not an IP address is refused with name `invalid`.
 */
export function classifyAddress(ip: string): AddressClassification {
  const parsed = parseIp(ip);
  if (parsed === undefined) return { allowed: false, name: 'invalid' };
  if (parsed.family === 4) return classifyV4(parsed.value);

  const v6 = parsed.value;
  for (const { cidr, name } of [MAPPED_V6, NAT64_V6]) {
    if (contains(cidr, 6, v6)) return withVia(classifyV4(v6 & 0xffff_ffffn), cidr.text, name);
  }
  if (contains(SIX_TO_FOUR_V6.cidr, 6, v6)) {
    return withVia(classifyV4((v6 >> 80n) & 0xffff_ffffn), SIX_TO_FOUR_V6.cidr.text, SIX_TO_FOUR_V6.name);
  }
  const refused = REFUSED_V6.find((r) => contains(r.cidr, 6, v6));
  if (refused) return { allowed: false, range: refused.cidr.text, name: refused.name };
  if (!contains(GLOBAL_UNICAST_V6, 6, v6)) return { allowed: false, range: '::/0', name: 'not-global-unicast' };
  return { allowed: true };
}

/**
 * Whether a delivery may connect to `ip`: it matches an operator-configured
 * allow-list entry, or {@link classifyAddress} allows it. An IPv4-mapped
 * IPv6 address also matches IPv4 entries, since it is the same host.
 */
export function isAllowedAddress(ip: string, allowList: CidrList): boolean {
  return matchesCidrList(ip, allowList) || classifyAddress(ip).allowed;
}

/** Whether `ip` falls inside any block of `list`. Unparseable input never matches. */
export function matchesCidrList(ip: string, list: CidrList): boolean {
  const parsed = parseIp(ip);
  if (parsed === undefined || list.length === 0) return false;
  const candidates: Array<{ family: 4 | 6; value: bigint }> = [parsed];
  if (parsed.family === 6 && contains(MAPPED_V6.cidr, 6, parsed.value)) {
    candidates.push({ family: 4, value: parsed.value & 0xffff_ffffn });
  }
  return list.some((cidr) => candidates.some((c) => contains(cidr, c.family, c.value)));
}

/**
 * Parses the comma-separated `WEBHOOK_ALLOWED_CIDRS` setting, e.g.
 * `127.0.0.0/8, ::1/128, 10.1.2.3`. A bare address means a single host.
 * Empty input gives an empty list; empty items (a trailing comma) are skipped.
 *
 * @throws Error naming the offending entry when an entry is not an address,
 *   has a prefix out of range, or has host bits set (`10.1.2.3/8`: a typo
 *   for `10.0.0.0/8` or for `/32` is refused rather than guessed).
 */
export function parseCidrList(s: string): CidrList {
  return s
    .split(',')
    .map((item) => item.trim())
    .filter((item) => item !== '')
    .map((item) => parseCidr(item));
}

function parseCidr(entry: string): Cidr {
  const slash = entry.indexOf('/');
  const addressText = slash === -1 ? entry : entry.slice(0, slash);
  const prefixText = slash === -1 ? undefined : entry.slice(slash + 1);
  // Zone ids and brackets belong to a single interface or a URL, not to a block.
  const parsed = /[%[\]]/.test(addressText) ? undefined : parseIp(addressText);
  if (parsed === undefined) throw new Error(`invalid CIDR "${entry}": "${addressText}" is not an IPv4 or IPv6 address`);
  const bits = parsed.family === 4 ? V4_BITS : V6_BITS;
  let prefix = bits;
  if (prefixText !== undefined) {
    if (!/^[0-9]{1,3}$/.test(prefixText) || Number(prefixText) > bits) {
      throw new Error(`invalid CIDR "${entry}": prefix length must be an integer from 0 to ${bits}`);
    }
    prefix = Number(prefixText);
  }
  const hostMask = (1n << BigInt(bits - prefix)) - 1n;
  if ((parsed.value & hostMask) !== 0n) {
    const network = formatIp(parsed.family, parsed.value & ~hostMask);
    throw new Error(`invalid CIDR "${entry}": host bits are set (did you mean ${network}/${prefix}?)`);
  }
  return { family: parsed.family, network: parsed.value, prefix, text: `${formatIp(parsed.family, parsed.value)}/${prefix}` };
}

function classifyV4(value: bigint): AddressClassification {
  const refused = REFUSED_V4.find((r) => contains(r.cidr, 4, value));
  return refused ? { allowed: false, range: refused.cidr.text, name: refused.name } : { allowed: true };
}

function withVia(result: AddressClassification, via: string, viaName: string): AddressClassification {
  return result.allowed ? result : { ...result, name: `${viaName} ${result.name ?? ''}`.trim(), via };
}

function contains(cidr: Cidr, family: 4 | 6, value: bigint): boolean {
  if (cidr.family !== family) return false;
  const shift = BigInt((family === 4 ? V4_BITS : V6_BITS) - cidr.prefix);
  return value >> shift === cidr.network >> shift;
}

/** Parses an IPv4 dotted quad or any RFC 4291 IPv6 text form to an integer. */
function parseIp(text: string): { family: 4 | 6; value: bigint } | undefined {
  let ip = text.trim();
  if (ip.startsWith('[') && ip.endsWith(']')) ip = ip.slice(1, -1);
  if (isIPv4(ip)) return { family: 4, value: parseV4(ip) };
  // isIPv6 is the validator (zone id included); the arithmetic below only has to handle valid text.
  if (!isIPv6(ip)) return undefined;
  const zone = ip.indexOf('%');
  return { family: 6, value: parseV6(zone === -1 ? ip : ip.slice(0, zone)) };
}

function parseV4(ip: string): bigint {
  return ip.split('.').reduce((acc, octet) => (acc << 8n) | BigInt(Number(octet)), 0n);
}

function parseV6(ip: string): bigint {
  const toGroups = (part: string): number[] => {
    if (part === '') return [];
    const groups: number[] = [];
    for (const piece of part.split(':')) {
      if (piece.includes('.')) {
        const v4 = Number(parseV4(piece));
        groups.push(v4 >>> 16, v4 & 0xffff);
      } else {
        groups.push(Number.parseInt(piece, 16));
      }
    }
    return groups;
  };
  const gap = ip.indexOf('::');
  const head = toGroups(gap === -1 ? ip : ip.slice(0, gap));
  const tail = gap === -1 ? [] : toGroups(ip.slice(gap + 2));
  const groups = [...head, ...new Array<number>(8 - head.length - tail.length).fill(0), ...tail];
  return groups.reduce((acc, g) => (acc << 16n) | BigInt(g), 0n);
}

function formatIp(family: 4 | 6, value: bigint): string {
  if (family === 4) return [24n, 16n, 8n, 0n].map((s) => String((value >> s) & 0xffn)).join('.');
  const groups = [112n, 96n, 80n, 64n, 48n, 32n, 16n, 0n].map((s) => Number((value >> s) & 0xffffn));
  // RFC 5952: compress the longest run of two or more zero groups, the first one on a tie.
  let bestStart = -1;
  let bestLength = 1;
  for (let i = 0; i < 8; ) {
    if (groups[i] !== 0) {
      i++;
      continue;
    }
    let j = i;
    while (j < 8 && groups[j] === 0) j++;
    if (j - i > bestLength) {
      bestStart = i;
      bestLength = j - i;
    }
    i = j;
  }
  const hex = groups.map((g) => g.toString(16));
  if (bestStart === -1) return hex.join(':');
  return `${hex.slice(0, bestStart).join(':')}::${hex.slice(bestStart + bestLength).join(':')}`;
}
