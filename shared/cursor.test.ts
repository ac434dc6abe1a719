import { describe, expect, it } from 'vitest';
import { CursorError, cursorCodec } from './cursor.ts';

describe('cursor codec', () => {
  const codec = cursorCodec('evt', 'a-secret-of-enough-length');

  it('round-trips a position and is opaque', () => {
    const c = codec.encode(['video', 1700000000123, '8e1f…']);
    expect(c.startsWith('evt_')).toBe(true);
    expect(c).not.toContain('video');
    expect(codec.decode(c)).toEqual(['video', 1700000000123, '8e1f…']);
  });

  it('refuses a cursor whose payload or mac was changed', () => {
    const c = codec.encode(['v', 1, 'x']);
    const [body, mac] = c.slice(4).split('.');
    const forged = Buffer.from(JSON.stringify(['v', 2, 'x'])).toString('base64url');
    expect(() => codec.decode(`evt_${forged}.${mac}`)).toThrow(CursorError);
    const flipped = mac!.startsWith('A') ? `B${mac!.slice(1)}` : `A${mac!.slice(1)}`;
    expect(() => codec.decode(`evt_${body}.${flipped}`)).toThrow(CursorError);
  });

  it('refuses cursors of another prefix, secret, or shape', () => {
    const c = codec.encode([1]);
    expect(() => cursorCodec('cur', 'a-secret-of-enough-length').decode(c)).toThrow(/must start with cur_/);
    expect(() => cursorCodec('evt', 'another-secret-entirely').decode(c)).toThrow(/not issued/);
    for (const bad of ['evt_', 'evt_abc', 'evt_a.b.c', 'xyz', '']) expect(() => codec.decode(bad)).toThrow(CursorError);
  });

  it('refuses a genuine cursor with trailing or embedded junk characters', () => {
    const c = codec.encode(['v', 1, 'x']);
    expect(codec.decode(c)).toEqual(['v', 1, 'x']);
    const [body, mac] = c.slice(4).split('.') as [string, string];
    // Each of these decodes to the same bytes with Node's lenient base64url decoder.
    for (const junk of ['A', 'x', '-', '_', '=', '==', '!', ' ', '%', '\n']) {
      expect(() => codec.decode(`evt_${body}.${mac}${junk}`), JSON.stringify(junk)).toThrow(CursorError);
      expect(() => codec.decode(`evt_${body}${junk}.${mac}`), JSON.stringify(junk)).toThrow(CursorError);
    }
    expect(() => codec.decode(`evt_${body}.${mac.slice(0, 8)}!${mac.slice(8)}`)).toThrow(CursorError);
  });
});
