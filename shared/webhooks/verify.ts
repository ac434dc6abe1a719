/**
 * Receiver side of webhook signing: every verification rule of spec 5.2.3,
 * in the order the spec gives them. Pure: no I/O, the clock is injectable.
 */
import { createHmac, timingSafeEqual } from 'node:crypto';
import type { IncomingHttpHeaders } from 'node:http';
import { WEBHOOK_HEADERS } from './signing.ts';

/** Replay window of spec 5.2.3 / 8: five minutes either side of the receiver's clock. */
export const DEFAULT_TOLERANCE_SEC = 300;

/** SHA-256 digest length in bytes; the decoded signature must have exactly this length. */
const DIGEST_BYTES = 32;

/** Why a request was refused; one value per rule of spec 5.2.3. */
export type WebhookFailureReason =
  | 'missing_secret'
  | 'missing_signature'
  | 'missing_timestamp'
  | 'invalid_timestamp'
  | 'timestamp_out_of_tolerance'
  | 'signature_length_mismatch'
  | 'signature_mismatch';

/**
 * Outcome of {@link verifyWebhook}. `message` is safe to log: it never
 * contains the secret, the signature or the body.
 */
export type WebhookVerifyResult =
  | { ok: true; timestamp: number }
  | { ok: false; reason: WebhookFailureReason; message: string };

/**
 * Request headers as the common Node and fetch APIs expose them: a WHATWG
 * `Headers`, Node's `IncomingHttpHeaders`, or any plain object (any case).
 */
export type WebhookHeaderSource =
  | Headers
  | IncomingHttpHeaders
  | Readonly<Record<string, string | readonly string[] | number | undefined>>;

/** Inputs of {@link verifyWebhook}. */
export interface VerifyWebhookInput {
  /** The destination secret, whole (`whsec_…`); undefined or empty is refused. */
  secret: string | undefined;
  headers: WebhookHeaderSource;
  /** The body exactly as received, before any JSON parsing. */
  rawBody: string | Uint8Array;
  /** Receiver's current Unix time in seconds; defaults to the system clock. */
  nowSec?: number;
  /** Allowed clock difference in seconds, either direction; default 300. */
  toleranceSec?: number;
}

/**
 * Verifies a delivery request against spec 5.2.3. Call it on the raw body
 * before any side effect (parsing into business objects, writes, enqueueing).
 *
 * Rules, in order:
 * 1. no secret configured → `missing_secret` (there is no default secret);
 * 2. `X-Player-Signature` absent → `missing_signature`;
 * 3. `X-Player-Timestamp` absent → `missing_timestamp`;
 * 4. timestamp not a plain decimal integer of seconds (NaN, Infinity, '',
 *    '12abc', '1e9', '-5', '1.5') → `invalid_timestamp`;
 * 5. |now − timestamp| > toleranceSec → `timestamp_out_of_tolerance`;
 * 6. signature not hex of exactly 32 bytes (odd length, non-hex characters,
 *    truncated, a `sha256=` prefix) → `signature_length_mismatch`;
 * 7. decoded signature ≠ HMAC over `<timestamp header>.<raw body bytes>`,
 *    compared with `timingSafeEqual` → `signature_mismatch`.
 *
 * Hex is decoded case-insensitively, so an uppercase signature of the right
 * digest is accepted: the spec compares decoded bytes, not strings.
 * A header repeated with several values is joined with ", " (as `Headers`
 * and Node do), which then fails rule 4 or 6: a request that carries two
 * signatures or two timestamps is ambiguous and is refused.
 */
export function verifyWebhook(input: VerifyWebhookInput): WebhookVerifyResult {
  const tolerance = input.toleranceSec ?? DEFAULT_TOLERANCE_SEC;
  if (!Number.isFinite(tolerance) || tolerance < 0) throw new RangeError('toleranceSec must be a finite number ≥ 0');
  const nowSec = input.nowSec ?? Math.floor(Date.now() / 1000);
  if (!Number.isFinite(nowSec)) throw new RangeError('nowSec must be a finite number');

  const { secret } = input;
  if (typeof secret !== 'string' || secret.length === 0) return fail('missing_secret', MESSAGES.missing_secret);

  const signature = headerValue(input.headers, WEBHOOK_HEADERS.signature);
  if (signature === undefined) return fail('missing_signature', MESSAGES.missing_signature);
  const timestampText = headerValue(input.headers, WEBHOOK_HEADERS.timestamp);
  if (timestampText === undefined) return fail('missing_timestamp', MESSAGES.missing_timestamp);

  const timestamp = parseTimestamp(timestampText);
  if (timestamp === undefined) return fail('invalid_timestamp', MESSAGES.invalid_timestamp);
  if (nowSec - timestamp > tolerance) {
    return fail('timestamp_out_of_tolerance', `Message timestamp too old: more than ${tolerance} s before the receiver's clock`);
  }
  if (timestamp - nowSec > tolerance) {
    return fail('timestamp_out_of_tolerance', `Message timestamp too new: more than ${tolerance} s after the receiver's clock`);
  }

  const received = decodeHex(signature);
  if (received === undefined || received.length !== DIGEST_BYTES) {
    return fail('signature_length_mismatch', MESSAGES.signature_length_mismatch);
  }
  // NOTE: the timestamp is hashed as the header text, not as the parsed
  // number: that text is what the sender signed (leading zeros included).
  const expected = createHmac('sha256', Buffer.from(secret, 'utf8'))
    .update(`${timestampText}.`, 'utf8')
    .update(input.rawBody)
    .digest();
  if (!timingSafeEqual(received, expected)) return fail('signature_mismatch', MESSAGES.signature_mismatch);
  return { ok: true, timestamp };
}

const MESSAGES = {
  missing_secret: 'Webhook secret is not configured: refusing every request (there is no default secret)',
  missing_signature: `Missing required header ${WEBHOOK_HEADERS.signature}`,
  missing_timestamp: `Missing required header ${WEBHOOK_HEADERS.timestamp}`,
  invalid_timestamp: `Invalid ${WEBHOOK_HEADERS.timestamp}: expected Unix time as decimal integer seconds`,
  signature_length_mismatch: `Invalid ${WEBHOOK_HEADERS.signature}: expected ${DIGEST_BYTES * 2} hex characters (HMAC-SHA256, no prefix)`,
  signature_mismatch: 'No matching signature: wrong secret, or the body was altered or re-serialised after signing',
} as const satisfies Partial<Record<WebhookFailureReason, string>>;

function fail(reason: WebhookFailureReason, message: string): WebhookVerifyResult {
  return { ok: false, reason, message };
}

/**
 * Case-insensitive lookup over every header shape accepted. Several values
 * are joined with ", ", the HTTP field-combination rule.
 */
function headerValue(headers: WebhookHeaderSource, name: string): string | undefined {
  if (isFetchHeaders(headers)) return headers.get(name) ?? undefined;
  const wanted = name.toLowerCase();
  const values: string[] = [];
  // Object.keys, not for…in: a header named like an Object.prototype member must not match inherited state.
  for (const key of Object.keys(headers)) {
    if (key.toLowerCase() !== wanted) continue;
    const value = (headers as Record<string, unknown>)[key];
    if (Array.isArray(value)) values.push(...value.map(String));
    else if (value !== undefined && value !== null) values.push(String(value));
  }
  return values.length === 0 ? undefined : values.join(', ');
}

function isFetchHeaders(headers: WebhookHeaderSource): headers is Headers {
  return typeof (headers as { get?: unknown }).get === 'function';
}

// NOTE: deliberately stricter than Number(): '1e9', '0x10', ' 12', '1.5' are
// all finite to Number() but are not what the sender writes, and one
// canonical form leaves no gap between the text that is hashed and the
// number whose age is checked.
const TIMESTAMP_RE = /^[0-9]{1,16}$/;

function parseTimestamp(text: string): number | undefined {
  if (!TIMESTAMP_RE.test(text)) return undefined;
  const value = Number(text);
  return Number.isSafeInteger(value) ? value : undefined;
}

const HEX_RE = /^(?:[0-9a-fA-F]{2})*$/;

/** Strict hex decoding: Buffer.from(s, 'hex') silently stops at the first bad character. */
function decodeHex(text: string): Buffer | undefined {
  return HEX_RE.test(text) ? Buffer.from(text, 'hex') : undefined;
}
