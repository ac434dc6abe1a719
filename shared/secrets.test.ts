import { randomBytes } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { SecretBox, secretHint, shownHint } from './secrets.ts';

describe('SecretBox', () => {
  const box = new SecretBox(Buffer.alloc(32, 7));

  it('opens what it sealed, for the record it was sealed for only', () => {
    const sealed = box.seal('whsec_0123456789abcdef', 'dest-1');
    expect(sealed).toMatch(/^v1\.[\w-]+\.[\w-]+\.[\w-]+$/);
    expect(box.open(sealed, 'dest-1')).toBe('whsec_0123456789abcdef');
    // Bound to its record: copied onto another destination it does not open.
    expect(() => box.open(sealed, 'dest-2')).toThrow();
    // Two seals of one secret differ (fresh IV), and both open.
    const again = box.seal('whsec_0123456789abcdef', 'dest-1');
    expect(again).not.toBe(sealed);
    expect(box.open(again, 'dest-1')).toBe('whsec_0123456789abcdef');
  });

  it('refuses a tampered ciphertext, another key, and what is not a sealed secret', () => {
    const sealed = box.seal('whsec_secret', 'd');
    const [v, iv, tag, ct] = sealed.split('.');
    const flipped = Buffer.from(ct!, 'base64url');
    flipped[0] = flipped[0]! ^ 1;
    expect(() => box.open([v, iv, tag, flipped.toString('base64url')].join('.'), 'd')).toThrow();
    expect(() => new SecretBox(Buffer.alloc(32, 8)).open(sealed, 'd')).toThrow();
    expect(() => box.open('plain', 'd')).toThrow('not a sealed secret');
    expect(() => new SecretBox(Buffer.alloc(16))).toThrow('32 bytes');
  });

  it('takes its key as hex or base64url', () => {
    const key = randomBytes(32).toString('base64url');
    const a = SecretBox.fromString(key);
    const b = SecretBox.fromString(Buffer.from(key, 'base64url').toString('hex'));
    expect(b.open(a.seal('x', 'r'), 'r')).toBe('x');
  });

  it('shows a secret\'s whsec_ label and at most an eighth of the rest, from its end', () => {
    const generated = `whsec_${'a'.repeat(28)}WXYZ`;
    expect(secretHint(generated)).toBe('whsec_…WXYZ');
    // A typed 16-character secret: 2 characters of it, none from its start.
    expect(secretHint('s3cretIntegrat10')).toBe('…10');
    expect(secretHint('whsec_abcdefghijklmnop')).toBe('whsec_…op');
    expect(secretHint('short12')).toBe('…');
    for (const secret of ['s3cretIntegrat10', generated, 'x'.repeat(8), `${'k'.repeat(40)}`, 'abcdefghijklm']) {
      const revealed = secretHint(secret).replace(/^whsec_/, '').replace('…', '').length;
      expect(revealed / secret.replace(/^whsec_/, '').length, secret).toBeLessThanOrEqual(1 / 8);
    }
  });

  it('cuts hints stored by the earlier rule, which began with the secret\'s first characters', () => {
    expect(shownHint('s3c…at10')).toBe('…0');
    expect(shownHint('ab…')).toBe('…');
    expect(shownHint('whsec_…WXYZ')).toBe('whsec_…WXYZ');
    expect(shownHint('…10')).toBe('…10');
    expect(shownHint(null)).toBeNull();
  });
});
