import { createHmac, createSecretKey, timingSafeEqual } from 'node:crypto';

/**
 * Opaque, tamper-evident keyset cursors: `<prefix>_` + base64url(payload) +
 * `.` + truncated HMAC-SHA256. The payload names the position and the scope
 * (e.g. the video) the cursor belongs to, so a cursor cannot be moved to
 * another list.
 */
const MAC_BYTES = 12;

export class CursorError extends Error {
  override name = 'CursorError';
}

export interface CursorCodec {
  encode(payload: unknown[]): string;
  decode(cursor: string): unknown[];
}

export function cursorCodec(prefix: string, secret: string): CursorCodec {
  // One key object for the codec's life: given the secret itself, Node 24
  // builds one per HMAC (see shared/webhooks/signing.ts).
  const key = createSecretKey(Buffer.from(secret, 'utf8'));
  const mac = (body: string): Buffer =>
    createHmac('sha256', key).update(`${prefix}.${body}`).digest().subarray(0, MAC_BYTES);
  const head = `${prefix}_`;
  return {
    encode(payload) {
      const body = Buffer.from(JSON.stringify(payload)).toString('base64url');
      return `${head}${body}.${mac(body).toString('base64url')}`;
    },
    decode(cursor) {
      if (!cursor.startsWith(head)) throw new CursorError(`cursor must start with ${head}`);
      const [body, sig, extra] = cursor.slice(head.length).split('.');
      if (!body || !sig || extra !== undefined) throw new CursorError('malformed cursor');
      // NOTE: Node's base64 decoder skips characters outside the alphabet and
      // a dangling last character, so `sig + "x"` would decode to the same
      // MAC: only the canonical text of the bytes is accepted.
      if (!isCanonicalBase64url(body) || !isCanonicalBase64url(sig)) throw new CursorError('malformed cursor');
      const given = Buffer.from(sig, 'base64url');
      const expected = mac(body);
      if (given.length !== expected.length || !timingSafeEqual(given, expected)) {
        throw new CursorError('cursor was not issued by this service');
      }
      try {
        const payload: unknown = JSON.parse(Buffer.from(body, 'base64url').toString('utf8'));
        if (!Array.isArray(payload)) throw new Error('not an array');
        return payload;
      } catch {
        throw new CursorError('malformed cursor');
      }
    },
  };
}

/** Unpadded base64url that is exactly the encoding of the bytes it decodes to. */
function isCanonicalBase64url(text: string): boolean {
  return /^[A-Za-z0-9_-]+$/.test(text) && Buffer.from(text, 'base64url').toString('base64url') === text;
}
