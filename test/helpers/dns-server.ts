/**
 * A tiny authoritative DNS server over UDP on 127.0.0.1, for tests of the
 * webhook resolver: it answers A and AAAA questions as the test's `answer`
 * function says (records, NXDOMAIN, SERVFAIL, or never), and records every
 * question with how many were unanswered at once.
 */
import { createSocket, type RemoteInfo } from 'node:dgram';
import type { AddressInfo } from 'node:net';

export type QueryType = 'A' | 'AAAA' | 'other';

export interface DnsQuestion {
  name: string;
  type: QueryType;
}

/** What the server does with one question. */
export type DnsAnswer =
  | { addresses: readonly string[]; delayMs?: number }
  | { rcode: 'NXDOMAIN' | 'SERVFAIL' | 'REFUSED'; delayMs?: number }
  /** Never answers: the client's own timeout has to end the question. */
  | 'never';

export interface DnsServer {
  /** `127.0.0.1:<port>`, for `Resolver.setServers`. */
  address: string;
  /** Every question received, in order (c-ares retransmissions included). */
  questions: DnsQuestion[];
  /** Questions received and not (yet) answered. */
  pending(): number;
  /** The most questions unanswered at the same moment. */
  peakPending(): number;
  /** The most distinct names that had an unanswered question at the same moment. */
  peakPendingNames(): number;
  close(): Promise<void>;
}

const RCODES = { NXDOMAIN: 3, SERVFAIL: 2, REFUSED: 5 } as const;
const TYPE_A = 1;
const TYPE_AAAA = 28;

export async function startDnsServer(answer: (q: DnsQuestion) => DnsAnswer): Promise<DnsServer> {
  const socket = createSocket('udp4');
  const questions: DnsQuestion[] = [];
  const pendingByName = new Map<string, number>();
  let pending = 0;
  let peakNames = 0;
  let peak = 0;
  const timers = new Set<NodeJS.Timeout>();

  socket.on('message', (msg: Buffer, from: RemoteInfo) => {
    const parsed = parseQuery(msg);
    if (parsed === undefined) return;
    const { question, end } = parsed;
    questions.push(question);
    pending++;
    peak = Math.max(peak, pending);
    pendingByName.set(question.name, (pendingByName.get(question.name) ?? 0) + 1);
    peakNames = Math.max(peakNames, pendingByName.size);
    const decision = answer(question);
    if (decision === 'never') return;
    const reply = (): void => {
      pending--;
      const left = (pendingByName.get(question.name) ?? 1) - 1;
      if (left === 0) pendingByName.delete(question.name);
      else pendingByName.set(question.name, left);
      socket.send(buildResponse(msg, end, question, decision), from.port, from.address);
    };
    if (decision.delayMs) {
      const timer = setTimeout(() => {
        timers.delete(timer);
        reply();
      }, decision.delayMs);
      timers.add(timer);
    } else {
      reply();
    }
  });

  await new Promise<void>((resolve) => socket.bind(0, '127.0.0.1', resolve));
  const { port } = socket.address() as AddressInfo;
  return {
    address: `127.0.0.1:${port}`,
    questions,
    pending: () => pending,
    peakPending: () => peak,
    peakPendingNames: () => peakNames,
    close: () =>
      new Promise<void>((resolve) => {
        for (const timer of timers) clearTimeout(timer);
        socket.close(() => resolve());
      }),
  };
}

/** The first question of a query, and where it ends. */
function parseQuery(msg: Buffer): { question: DnsQuestion; end: number } | undefined {
  if (msg.length < 12 || (msg[2]! & 0x80) !== 0 || msg.readUInt16BE(4) < 1) return undefined;
  const labels: string[] = [];
  let at = 12;
  for (;;) {
    const length = msg[at];
    if (length === undefined || length > 63) return undefined;
    at++;
    if (length === 0) break;
    labels.push(msg.toString('latin1', at, at + length));
    at += length;
  }
  if (at + 4 > msg.length) return undefined;
  const qtype = msg.readUInt16BE(at);
  const type: QueryType = qtype === TYPE_A ? 'A' : qtype === TYPE_AAAA ? 'AAAA' : 'other';
  return { question: { name: labels.join('.').toLowerCase(), type }, end: at + 4 };
}

function buildResponse(query: Buffer, questionEnd: number, q: DnsQuestion, decision: Exclude<DnsAnswer, 'never'>): Buffer {
  const header = Buffer.alloc(12);
  query.copy(header, 0, 0, 2); // id
  const rd = query[2]! & 0x01;
  const rcode = 'rcode' in decision ? RCODES[decision.rcode] : 0;
  // QR, AA, and the client's RD; RA set; the rcode.
  header[2] = 0x84 | rd;
  header[3] = 0x80 | rcode;
  header.writeUInt16BE(1, 4);
  const records: Buffer[] = [];
  if ('addresses' in decision) {
    for (const address of decision.addresses) {
      const isV6 = address.includes(':');
      if ((q.type === 'AAAA') !== isV6 || q.type === 'other') continue;
      const rdata = isV6 ? ipv6Bytes(address) : Buffer.from(address.split('.').map(Number));
      const rr = Buffer.alloc(12);
      rr.writeUInt16BE(0xc00c, 0); // the name: a pointer to the question's
      rr.writeUInt16BE(isV6 ? TYPE_AAAA : TYPE_A, 2);
      rr.writeUInt16BE(1, 4); // IN
      rr.writeUInt32BE(60, 6); // TTL
      rr.writeUInt16BE(rdata.length, 10);
      records.push(rr, rdata);
    }
  }
  header.writeUInt16BE(records.length / 2, 6);
  return Buffer.concat([header, query.subarray(12, questionEnd), ...records]);
}

function ipv6Bytes(address: string): Buffer {
  const [head = '', tail] = address.split('::');
  const groups = (part: string | undefined): string[] => (part ? part.split(':') : []);
  const h = groups(head);
  const t = groups(tail);
  const all = [...h, ...new Array<string>(8 - h.length - t.length).fill('0'), ...t];
  const out = Buffer.alloc(16);
  all.forEach((g, i) => out.writeUInt16BE(Number.parseInt(g, 16), i * 2));
  return out;
}
