/**
 * SSRF policy for webhook delivery: which resolved IP addresses a delivery
 * may connect to. Customer-supplied URLs must not reach the service's own
 * network (loopback, private, link-local, cloud metadata at 169.254.169.254,
 * CGNAT) or any reserved range. Pure: parses text, never resolves names.
 */
import { isIPv4, isIPv6 } from 'node:net';
import ipaddr from 'ipaddr.js';

type Address = ipaddr.IPv4 | ipaddr.IPv6;

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
  /** Network address (ipaddr.js). */
  readonly network: Address;
  readonly prefix: number;
  /** Canonical text form (RFC 5952 for IPv6), for messages. */
  readonly text: string;
}

/** A parsed `WEBHOOK_ALLOWED_CIDRS` value. */
export type CidrList = readonly Cidr[];

interface Range {
  readonly cidr: Cidr;
  readonly name: string;
}

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

/** IPv6 prefixes that carry an IPv4 address reached through them, and the byte it starts at: the low 32 bits, or for 6to4 bits 16–48. */
const EMBEDDING_V6: readonly (Range & { at: number })[] = [
  { ...range('::ffff:0:0/96', 'ipv4-mapped'), at: 12 },
  { ...range('64:ff9b::/96', 'nat64'), at: 12 },
  { ...range('2002::/16', '6to4'), at: 2 },
];

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
  if (parsed.kind() === 'ipv4') return classifyV4(parsed as ipaddr.IPv4);

  const v6 = parsed as ipaddr.IPv6;
  const embedding = EMBEDDING_V6.find((r) => contains(r.cidr, v6));
  if (embedding) {
    const v4 = new ipaddr.IPv4(v6.toByteArray().slice(embedding.at, embedding.at + 4));
    return withVia(classifyV4(v4), embedding.cidr.text, embedding.name);
  }
  const refused = REFUSED_V6.find((r) => contains(r.cidr, v6));
  if (refused) return { allowed: false, range: refused.cidr.text, name: refused.name };
  if (!contains(GLOBAL_UNICAST_V6, v6)) return { allowed: false, range: '::/0', name: 'not-global-unicast' };
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
  const candidates: Address[] = [parsed];
  if (parsed.kind() === 'ipv6' && (parsed as ipaddr.IPv6).isIPv4MappedAddress()) candidates.push((parsed as ipaddr.IPv6).toIPv4Address());
  return list.some((cidr) => candidates.some((c) => contains(cidr, c)));
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
  const family = parsed.kind() === 'ipv4' ? 4 : 6;
  const bits = family === 4 ? 32 : 128;
  let prefix = bits;
  if (prefixText !== undefined) {
    if (!/^[0-9]{1,3}$/.test(prefixText) || Number(prefixText) > bits) {
      throw new Error(`invalid CIDR "${entry}": prefix length must be an integer from 0 to ${bits}`);
    }
    prefix = Number(prefixText);
  }
  const network = (family === 4 ? ipaddr.IPv4 : ipaddr.IPv6).networkAddressFromCIDR(`${parsed.toString()}/${prefix}`);
  if (network.toString() !== parsed.toString()) {
    throw new Error(`invalid CIDR "${entry}": host bits are set (did you mean ${network.toString()}/${prefix}?)`);
  }
  return { family, network, prefix, text: `${network.toString()}/${prefix}` };
}

function classifyV4(value: ipaddr.IPv4): AddressClassification {
  const refused = REFUSED_V4.find((r) => contains(r.cidr, value));
  return refused ? { allowed: false, range: refused.cidr.text, name: refused.name } : { allowed: true };
}

function withVia(result: AddressClassification, via: string, viaName: string): AddressClassification {
  return result.allowed ? result : { ...result, name: `${viaName} ${result.name ?? ''}`.trim(), via };
}

function contains(cidr: Cidr, address: Address): boolean {
  return address.kind() === cidr.network.kind() && address.match(cidr.network, cidr.prefix);
}

/**
 * Parses an IPv4 dotted quad or any RFC 4291 IPv6 text form. node:net is
 * the validator (strict: no `127.1`, `0x7f000001` or `010.0.0.1`, which
 * ipaddr.parse would read as IPv4); ipaddr.js does the rest.
 */
function parseIp(text: string): Address | undefined {
  let ip = text.trim();
  if (ip.startsWith('[') && ip.endsWith(']')) ip = ip.slice(1, -1);
  if (isIPv4(ip)) return ipaddr.IPv4.parse(ip);
  if (!isIPv6(ip)) return undefined;
  const zone = ip.indexOf('%');
  return ipaddr.IPv6.parse(zone === -1 ? ip : ip.slice(0, zone));
}
