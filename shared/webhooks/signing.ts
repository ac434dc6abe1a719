/**
 * Sender side of webhook signing (spec 5.2, 6.2): an HMAC-SHA256 over
 * `<timestamp>.<rawBody>`, sent as lowercase hex without prefix.
 */
import { createHmac, createSecretKey, type KeyObject } from 'node:crypto';

/** Header names of a delivery request (spec 6.2), in the case the sender writes them. */
export const WEBHOOK_HEADERS = {
  contentType: 'Content-Type',
  event: 'X-Player-Event',
  signature: 'X-Player-Signature',
  timestamp: 'X-Player-Timestamp',
  deliveryId: 'X-Player-Delivery-Id',
} as const;

/** The exact headers of one delivery request (spec 6.2). */
export type WebhookRequestHeaders = Record<(typeof WEBHOOK_HEADERS)[keyof typeof WEBHOOK_HEADERS], string>;

/**
 * Signs one delivery: lowercase hex HMAC-SHA256 over `${timestampSec}.${rawBody}`.
 *
 * The key is the UTF-8 bytes of the whole secret string, `whsec_` prefix
 * included: the prefix is not stripped or base64-decoded (unlike Svix), so a
 * receiver keys its HMAC with the secret exactly as the dashboard shows it.
 *
 * A Buffer body is hashed byte for byte (never round-tripped through a string),
 * so what is signed is exactly what goes on the wire.
 *
 * @throws RangeError when the secret is empty or the timestamp is not a
 *   non-negative integer number of seconds: both are programming faults, and
 *   the spec forbids a default secret (5.2.4).
 */
export function signPayload(secret: string, timestampSec: number, rawBody: string | Buffer): string {
  if (typeof secret !== 'string' || secret.length === 0) {
    throw new RangeError('webhook secret is empty: a destination without a secret receives nothing');
  }
  if (!Number.isSafeInteger(timestampSec) || timestampSec < 0) {
    throw new RangeError('webhook timestamp must be a non-negative integer number of Unix seconds');
  }
  return createHmac('sha256', hmacKey(secret))
    .update(`${timestampSec}.`, 'utf8')
    .update(rawBody)
    .digest('hex');
}

/**
 * HMAC keys by secret, the most recent HMAC_KEYS_KEPT. Given the secret's
 * bytes instead, every createHmac builds a key object first, and every
 * attempt is signed afresh. A key kept here is no more exposed than the
 * secret box's own key, which this process holds anyway and which opens
 * every secret.
 */
const hmacKeys = new Map<string, KeyObject>();
const HMAC_KEYS_KEPT = 1024;

function hmacKey(secret: string): KeyObject {
  let key = hmacKeys.get(secret);
  if (key) {
    // Most recently used last: the first entry is the one to drop.
    hmacKeys.delete(secret);
  } else {
    key = createSecretKey(Buffer.from(secret, 'utf8'));
    if (hmacKeys.size >= HMAC_KEYS_KEPT) hmacKeys.delete(hmacKeys.keys().next().value!);
  }
  hmacKeys.set(secret, key);
  return key;
}

/** Inputs of {@link webhookHeaders}. */
export interface WebhookHeadersInput {
  /** Webhook event name (spec 6.1); must equal the body's `event_name`. */
  eventName: string;
  /** Delivery UUID, the same on every retry of the delivery (spec 3, rule 1). */
  deliveryId: string;
  /** Destination secret or integration `webhook_secret`. */
  secret: string;
  /** The exact bytes that will be sent as the body. */
  rawBody: string | Buffer;
  /** Signing time in Unix seconds; defaults to now, rounded down. */
  nowSec?: number;
}

/**
 * Builds the full header set of a delivery request (spec 6.2), signing
 * `rawBody` at `nowSec`. Sign at each attempt, not once per delivery: a
 * retry 30 minutes later with the first attempt's timestamp would be outside
 * the receiver's 300 s tolerance.
 */
export function webhookHeaders(input: WebhookHeadersInput): WebhookRequestHeaders {
  const timestampSec = input.nowSec ?? Math.floor(Date.now() / 1000);
  return {
    'Content-Type': 'application/json',
    'X-Player-Event': input.eventName,
    'X-Player-Signature': signPayload(input.secret, timestampSec, input.rawBody),
    'X-Player-Timestamp': String(timestampSec),
    'X-Player-Delivery-Id': input.deliveryId,
  };
}
