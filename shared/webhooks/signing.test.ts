import { createHmac } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { signPayload, webhookHeaders } from './signing.ts';

const SECRET = 'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw';
const BODY = '{"event_name":"video_play","visitor_id":"vis_1"}';

describe('signPayload', () => {
  it('matches a vector computed with `openssl dgst -sha256 -hmac` (secret keyed whole, whsec_ prefix included)', () => {
    // printf '%s' '1700000000.<BODY>' | openssl dgst -sha256 -hmac '<SECRET>' -hex
    expect(signPayload(SECRET, 1_700_000_000, BODY)).toBe('7c81c846e5bfd654b787e589232c8eb71d0f6b9f1492a127a6a89fc567e455ec');
  });

  it('equals an independent node:crypto HMAC over `${ts}.${body}`, as 64 lowercase hex characters', () => {
    const expected = createHmac('sha256', SECRET).update(`1712345678.${BODY}`).digest('hex');
    const actual = signPayload(SECRET, 1_712_345_678, BODY);
    expect(actual).toBe(expected);
    expect(actual).toMatch(/^[0-9a-f]{64}$/);
  });

  it('stays right for every secret past the keys it keeps (1024), an evicted one included', () => {
    const reference = (secret: string) => createHmac('sha256', Buffer.from(secret, 'utf8')).update('7.body').digest('hex');
    const secrets = Array.from({ length: 1100 }, (_, i) => `whsec_key${i}`);
    for (const secret of secrets) expect(signPayload(secret, 7, 'body')).toBe(reference(secret));
    // The first ones were dropped to make room; signed again, they are rebuilt.
    for (const secret of secrets.slice(0, 5)) expect(signPayload(secret, 7, 'body')).toBe(reference(secret));
    expect(signPayload('whsec_key1099', 7, 'body')).not.toBe(signPayload('whsec_key1098', 7, 'body'));
  });

  it('does not strip the whsec_ prefix', () => {
    const withoutPrefix = createHmac('sha256', SECRET.slice('whsec_'.length)).update(`1.${BODY}`).digest('hex');
    expect(signPayload(SECRET, 1, BODY)).not.toBe(withoutPrefix);
  });

  it('keys with the UTF-8 bytes of a non-ASCII secret', () => {
    const secret = 'whsec_clé-ünïcødé';
    const expected = createHmac('sha256', Buffer.from(secret, 'utf8')).update(`5.${BODY}`).digest('hex');
    expect(signPayload(secret, 5, BODY)).toBe(expected);
  });

  it('hashes a Buffer body byte for byte, including bytes that are not valid UTF-8', () => {
    const raw = Buffer.from([0x7b, 0xff, 0xfe, 0x7d]);
    const expected = createHmac('sha256', SECRET).update('9.').update(raw).digest('hex');
    expect(signPayload(SECRET, 9, raw)).toBe(expected);
    expect(signPayload(SECRET, 9, Buffer.from(BODY))).toBe(signPayload(SECRET, 9, BODY));
  });

  it('refuses an empty secret and a timestamp that is not non-negative integer seconds', () => {
    expect(() => signPayload('', 1, BODY)).toThrow(/secret is empty/);
    for (const ts of [Number.NaN, Number.POSITIVE_INFINITY, -1, 1.5, 2 ** 60]) {
      expect(() => signPayload(SECRET, ts, BODY), String(ts)).toThrow(RangeError);
    }
  });
});

describe('webhookHeaders', () => {
  it('returns exactly the five headers of spec 6.2', () => {
    const headers = webhookHeaders({
      eventName: 'video_play',
      deliveryId: '3f2504e0-4f89-41d3-9a0c-0305e82c3301',
      secret: SECRET,
      rawBody: BODY,
      nowSec: 1_700_000_000,
    });
    expect(headers).toStrictEqual({
      'Content-Type': 'application/json',
      'X-Player-Event': 'video_play',
      'X-Player-Signature': '7c81c846e5bfd654b787e589232c8eb71d0f6b9f1492a127a6a89fc567e455ec',
      'X-Player-Timestamp': '1700000000',
      'X-Player-Delivery-Id': '3f2504e0-4f89-41d3-9a0c-0305e82c3301',
    });
  });

  it('signs at the current time, in whole seconds, when nowSec is omitted', () => {
    const before = Math.floor(Date.now() / 1000);
    const headers = webhookHeaders({ eventName: 'player_loaded', deliveryId: 'd', secret: SECRET, rawBody: BODY });
    const after = Math.floor(Date.now() / 1000);
    const ts = Number(headers['X-Player-Timestamp']);
    expect(headers['X-Player-Timestamp']).toMatch(/^[0-9]+$/);
    expect(ts).toBeGreaterThanOrEqual(before);
    expect(ts).toBeLessThanOrEqual(after);
    expect(headers['X-Player-Signature']).toBe(signPayload(SECRET, ts, BODY));
  });
});
