import * as crypto from 'node:crypto';
import { beforeEach, describe, expect, it, vi } from 'vitest';
import { verifyWebhook, type VerifyWebhookInput, type WebhookFailureReason } from './verify.ts';

// Wraps the real timingSafeEqual so the tests can see whether the
// constant-time comparison ran; everything else in node:crypto is untouched.
vi.mock('node:crypto', async (importOriginal) => {
  const actual = await importOriginal<typeof import('node:crypto')>();
  return { ...actual, timingSafeEqual: vi.fn(actual.timingSafeEqual) };
});

const SECRET = 'whsec_4c8e0b1f2a3d4e5f60718293a4b5c6d7';
const NOW = 1_700_000_000;
const BODY = '{"tenant_id":"8f0e4a2c-1b3d-4e5f-8a9b-0c1d2e3f4a5b","event_name":"video_play","current_time":12.5}';

/** Signs independently of the code under test: plain node:crypto, spec 5.2.1. */
function sign(secret: string, timestamp: string, body: string | Buffer): string {
  return crypto.createHmac('sha256', secret).update(`${timestamp}.`).update(body).digest('hex');
}

function validHeaders(timestamp = NOW, body: string | Buffer = BODY): Record<string, string> {
  return {
    'Content-Type': 'application/json',
    'X-Player-Event': 'video_play',
    'X-Player-Signature': sign(SECRET, String(timestamp), body),
    'X-Player-Timestamp': String(timestamp),
    'X-Player-Delivery-Id': '3f2504e0-4f89-41d3-9a0c-0305e82c3301',
  };
}

function input(overrides: Partial<VerifyWebhookInput> = {}): VerifyWebhookInput {
  return { secret: SECRET, headers: validHeaders(), rawBody: BODY, nowSec: NOW, ...overrides };
}

function reasonOf(overrides: Partial<VerifyWebhookInput>): WebhookFailureReason | 'ok' {
  const result = verifyWebhook(input(overrides));
  return result.ok ? 'ok' : result.reason;
}

function withHeader(name: string, value: string | string[] | undefined): Record<string, string | string[]> {
  const headers: Record<string, string | string[]> = validHeaders();
  if (value === undefined) delete headers[name];
  else headers[name] = value;
  return headers;
}

const timingSafeEqual = vi.mocked(crypto.timingSafeEqual);
beforeEach(() => {
  timingSafeEqual.mockClear();
});

describe('verifyWebhook: a correctly signed request', () => {
  it('is accepted and returns the timestamp', () => {
    expect(verifyWebhook(input())).toEqual({ ok: true, timestamp: NOW });
    expect(timingSafeEqual).toHaveBeenCalledTimes(1);
  });

  it('is accepted whatever the header-name case or container', () => {
    const canonical = validHeaders();
    const lower = Object.fromEntries(Object.entries(canonical).map(([k, v]) => [k.toLowerCase(), v]));
    const upper = Object.fromEntries(Object.entries(canonical).map(([k, v]) => [k.toUpperCase(), v]));
    const arrays = Object.fromEntries(Object.entries(canonical).map(([k, v]) => [k, [v]]));
    for (const headers of [canonical, lower, upper, arrays, new Headers(canonical)]) {
      expect(verifyWebhook(input({ headers }))).toEqual({ ok: true, timestamp: NOW });
    }
  });

  it('is accepted with a Buffer body, hashed as the bytes received', () => {
    const raw = Buffer.from([0x7b, 0xff, 0x00, 0x7d]);
    expect(verifyWebhook(input({ rawBody: raw, headers: validHeaders(NOW, raw) })).ok).toBe(true);
    expect(verifyWebhook(input({ rawBody: new Uint8Array(Buffer.from(BODY)) })).ok).toBe(true);
  });

  it('is accepted with an uppercase hex signature (decoded bytes are compared, not text)', () => {
    const headers = withHeader('X-Player-Signature', validHeaders()['X-Player-Signature']!.toUpperCase());
    expect(reasonOf({ headers })).toBe('ok');
  });

  it('hashes the timestamp header text as sent (a leading zero is part of what was signed)', () => {
    const headers = { ...validHeaders(), 'X-Player-Timestamp': `0${NOW}`, 'X-Player-Signature': sign(SECRET, `0${NOW}`, BODY) };
    expect(verifyWebhook(input({ headers }))).toEqual({ ok: true, timestamp: NOW });
  });

  it('uses the system clock when nowSec is omitted', () => {
    const now = Math.floor(Date.now() / 1000);
    expect(verifyWebhook({ secret: SECRET, headers: validHeaders(now), rawBody: BODY }).ok).toBe(true);
    expect(reasonOf({ nowSec: undefined })).toBe('timestamp_out_of_tolerance');
  });
});

describe('verifyWebhook: one broken input at a time', () => {
  it('refuses when no secret is configured', () => {
    expect(reasonOf({ secret: undefined })).toBe('missing_secret');
    expect(reasonOf({ secret: '' })).toBe('missing_secret');
  });

  it('refuses when either header is absent', () => {
    expect(reasonOf({ headers: withHeader('X-Player-Signature', undefined) })).toBe('missing_signature');
    expect(reasonOf({ headers: withHeader('X-Player-Timestamp', undefined) })).toBe('missing_timestamp');
    expect(reasonOf({ headers: {} })).toBe('missing_signature');
    expect(reasonOf({ headers: { 'x-player-signature': undefined, 'x-player-timestamp': String(NOW) } })).toBe('missing_signature');
    expect(reasonOf({ headers: new Headers({ 'X-Player-Signature': 'ab' }) })).toBe('missing_timestamp');
  });

  it.each(['NaN', 'Infinity', '-Infinity', '', '12abc', '1e9', '0x6553f100', ' 1700000000', '1700000000.0', '-1', '+1700000000', '99999999999999999999'])(
    'refuses the timestamp %j as not a finite number of seconds',
    (timestamp) => {
      const headers = { ...validHeaders(), 'X-Player-Timestamp': timestamp, 'X-Player-Signature': sign(SECRET, timestamp, BODY) };
      expect(reasonOf({ headers })).toBe('invalid_timestamp');
    },
  );

  it('refuses a clock difference over 300 s in either direction and accepts up to 300 s', () => {
    for (const skew of [-301, 301, -1000, 86_400]) {
      expect(reasonOf({ headers: validHeaders(NOW + skew) }), `skew ${skew}`).toBe('timestamp_out_of_tolerance');
    }
    for (const skew of [-300, -299, 0, 299, 300]) {
      expect(reasonOf({ headers: validHeaders(NOW + skew) }), `skew ${skew}`).toBe('ok');
    }
  });

  it('says whether the timestamp is too old or too new', () => {
    expect(verifyWebhook(input({ headers: validHeaders(NOW - 301) }))).toMatchObject({ message: expect.stringMatching(/^Message timestamp too old/) });
    expect(verifyWebhook(input({ headers: validHeaders(NOW + 301) }))).toMatchObject({ message: expect.stringMatching(/^Message timestamp too new/) });
  });

  it('honours a custom tolerance', () => {
    expect(reasonOf({ headers: validHeaders(NOW - 61), toleranceSec: 60 })).toBe('timestamp_out_of_tolerance');
    expect(reasonOf({ headers: validHeaders(NOW - 60), toleranceSec: 60 })).toBe('ok');
  });

  it('refuses a signature made with another secret, or with the whsec_ prefix stripped', () => {
    for (const secret of ['whsec_another', SECRET.slice('whsec_'.length)]) {
      const headers = withHeader('X-Player-Signature', sign(secret, String(NOW), BODY));
      expect(reasonOf({ headers })).toBe('signature_mismatch');
    }
    expect(reasonOf({ secret: 'whsec_another' })).toBe('signature_mismatch');
  });

  it('refuses a body re-serialised after parsing (different whitespace, same JSON)', () => {
    const reserialised = JSON.stringify(JSON.parse(BODY), null, 2);
    expect(JSON.parse(reserialised)).toEqual(JSON.parse(BODY));
    expect(reasonOf({ rawBody: reserialised })).toBe('signature_mismatch');
    expect(reasonOf({ rawBody: `${BODY}\n` })).toBe('signature_mismatch');
    expect(reasonOf({ rawBody: JSON.stringify(JSON.parse(BODY)).replace(':', ': ') })).toBe('signature_mismatch');
  });

  it('refuses a signature bound to another timestamp', () => {
    const headers = { ...validHeaders(), 'X-Player-Signature': sign(SECRET, String(NOW - 1), BODY) };
    expect(reasonOf({ headers })).toBe('signature_mismatch');
  });

  it.each([
    ['truncated by one byte', (s: string) => s.slice(0, 62)],
    ['of odd length', (s: string) => s.slice(0, 63)],
    ['one byte too long', (s: string) => `${s}00`],
    ['empty', () => ''],
    ['with a non-hex character', (s: string) => `${s.slice(0, 62)}zz`],
    ['with a sha256= prefix', (s: string) => `sha256=${s}`],
    ['with surrounding spaces', (s: string) => ` ${s} `],
    ['in base64', (s: string) => Buffer.from(s, 'hex').toString('base64')],
  ])('refuses a signature %s as a length mismatch, without comparing', (_label, mangle) => {
    const headers = withHeader('X-Player-Signature', mangle(validHeaders()['X-Player-Signature']!));
    expect(reasonOf({ headers })).toBe('signature_length_mismatch');
    expect(timingSafeEqual).not.toHaveBeenCalled();
  });

  it('compares equal-length signatures in constant time, whichever byte differs', () => {
    const good = validHeaders()['X-Player-Signature']!;
    const flip = (hex: string, index: number) => `${hex.slice(0, index)}${hex[index] === '0' ? '1' : '0'}${hex.slice(index + 1)}`;
    for (const index of [0, 31, 63]) {
      timingSafeEqual.mockClear();
      expect(reasonOf({ headers: withHeader('X-Player-Signature', flip(good, index)) })).toBe('signature_mismatch');
      expect(timingSafeEqual).toHaveBeenCalledTimes(1);
      const [a, b] = timingSafeEqual.mock.calls[0]!;
      expect([a.byteLength, b.byteLength]).toEqual([32, 32]);
    }
  });

  it('refuses a header sent twice, even with identical values (ambiguous)', () => {
    const sig = validHeaders()['X-Player-Signature']!;
    expect(reasonOf({ headers: withHeader('X-Player-Signature', [sig, sig]) })).toBe('signature_length_mismatch');
    expect(reasonOf({ headers: withHeader('X-Player-Timestamp', [String(NOW), String(NOW)]) })).toBe('invalid_timestamp');
    expect(reasonOf({ headers: { ...validHeaders(), 'x-player-timestamp': String(NOW) } })).toBe('invalid_timestamp');
  });

  it('treats an empty header array as absent', () => {
    expect(reasonOf({ headers: withHeader('X-Player-Signature', []) })).toBe('missing_signature');
  });

  it('checks the rules in the order of the spec', () => {
    expect(reasonOf({ secret: '', headers: {} })).toBe('missing_secret');
    expect(reasonOf({ headers: { 'X-Player-Timestamp': 'garbage', 'X-Player-Signature': 'zz' } })).toBe('invalid_timestamp');
    expect(reasonOf({ headers: { 'X-Player-Timestamp': String(NOW - 999), 'X-Player-Signature': 'zz' } })).toBe('timestamp_out_of_tolerance');
  });

  it('never puts the secret, the signature or the body into a message', () => {
    const sig = validHeaders()['X-Player-Signature']!;
    for (const overrides of [{ secret: 'whsec_other' }, { rawBody: `${BODY} ` }, { headers: withHeader('X-Player-Signature', sig.slice(1)) }]) {
      const result = verifyWebhook(input(overrides));
      expect(result.ok).toBe(false);
      const message = result.ok ? '' : result.message;
      for (const secretish of [SECRET, 'whsec_other', sig, sig.slice(1), BODY]) expect(message).not.toContain(secretish);
    }
  });

  it('rejects a nonsensical clock or tolerance as a programming error', () => {
    expect(() => verifyWebhook(input({ nowSec: Number.NaN }))).toThrow(RangeError);
    expect(() => verifyWebhook(input({ toleranceSec: -1 }))).toThrow(RangeError);
  });
});

describe('verifyWebhook messages', () => {
  it('names the refused rule with a precise message', () => {
    const cases: Array<[Partial<VerifyWebhookInput>, WebhookFailureReason, RegExp]> = [
      [{ secret: undefined }, 'missing_secret', /secret is not configured/],
      [{ headers: withHeader('X-Player-Signature', undefined) }, 'missing_signature', /^Missing required header X-Player-Signature$/],
      [{ headers: withHeader('X-Player-Timestamp', undefined) }, 'missing_timestamp', /^Missing required header X-Player-Timestamp$/],
      [{ headers: withHeader('X-Player-Timestamp', 'soon') }, 'invalid_timestamp', /^Invalid X-Player-Timestamp/],
      [{ nowSec: NOW + 301 }, 'timestamp_out_of_tolerance', /too old/],
      [{ headers: withHeader('X-Player-Signature', 'abc') }, 'signature_length_mismatch', /expected 64 hex characters/],
      [{ rawBody: '{}' }, 'signature_mismatch', /^No matching signature/],
    ];
    for (const [overrides, reason, message] of cases) {
      expect(verifyWebhook(input(overrides)), reason).toMatchObject({ ok: false, reason, message: expect.stringMatching(message) });
    }
  });
});
