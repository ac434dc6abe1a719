import { createHash, randomInt, randomUUID } from 'node:crypto';

const UUID_RE = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;
export const VID_RE = /^vid_[0-9a-f]{32}$/;
/** What parseVideoId accepts: `vid_<32 hex>` or a UUID of either case. */
export const VIDEO_ID_RE = /^(?:vid_[0-9a-f]{32}|[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12})$/;

export const VISITOR_ID_RE = /^vis_[A-Za-z0-9_-]{1,64}$/;
export const SESSION_ID_RE = /^ses_[A-Za-z0-9_-]{1,64}$/;

export function isUuid(value: string): boolean {
  return UUID_RE.test(value);
}

/** The REST form of a video id: `vid_` and the UUID without dashes. */
export function toVideoId(uuid: string): string {
  return `vid_${uuid.replaceAll('-', '').toLowerCase()}`;
}

/** Accepts `vid_<32 hex>` or a UUID; returns the UUID, or undefined when malformed. */
export function parseVideoId(value: string): string | undefined {
  if (VID_RE.test(value)) {
    const h = value.slice(4);
    return `${h.slice(0, 8)}-${h.slice(8, 12)}-${h.slice(12, 16)}-${h.slice(16, 20)}-${h.slice(20)}`;
  }
  return UUID_RE.test(value) ? value.toLowerCase() : undefined;
}

const BASE62 = '0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz';

/** `length` characters of CSPRNG output in base62 (crypto.randomInt is unbiased). */
export function randomToken(length: number): string {
  let out = '';
  for (let i = 0; i < length; i++) out += BASE62[randomInt(62)];
  return out;
}

export const newId = (): string => randomUUID();
export const newPlayerKey = (): string => `pk_${randomToken(32)}`;
export const newApiKey = (): string => `sk_${randomToken(40)}`;

/**
 * API keys are 238-bit random strings, so a fast unsalted SHA-256 is the
 * right lookup hash (as for GitHub tokens); a slow KDF would only add latency.
 */
export function hashApiKey(key: string): string {
  return createHash('sha256').update(key).digest('hex');
}

/** The part of a key the dashboard shows: `sk_` and the next 6 characters. */
export function keyPrefix(key: string): string {
  return key.slice(0, 9);
}
