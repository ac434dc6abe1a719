import { describe, expect, it } from 'vitest';
import { SecretBox, secretHint } from './secrets.ts';

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
    const key = SecretBox.generateKey();
    const a = SecretBox.fromString(key);
    const b = SecretBox.fromString(Buffer.from(key, 'base64url').toString('hex'));
    expect(b.open(a.seal('x', 'r'), 'r')).toBe('x');
    expect(secretHint('whsec_abcdefghijklmnop')).toBe('whsec_…mnop');
  });
});
