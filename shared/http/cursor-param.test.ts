import { describe, expect, it } from 'vitest';
import { cursorCodec } from '../cursor.ts';
import { keysetPages } from './cursor-param.ts';

const SECRET = 'a-secret-of-enough-length';
const ID = '0b6f4a52-6c1e-4d59-9a4b-2f0c1d7e8a90';

describe('keysetPages', () => {
  const pages = keysetPages('evt', SECRET);

  it('reads back the position of the cursor it issued for the same list', () => {
    const rows = [{ ts: 1700000000123, id: ID }, { ts: 1700000000000, id: ID }];
    const { next_cursor } = pages.page(rows, 1, 'vid_a', (r) => r, (r) => r.ts);
    expect(pages.after(next_cursor!, 'vid_a')).toEqual({ ts: 1700000000123, id: ID });
    expect(() => pages.after(next_cursor!, 'vid_b')).toThrow(/does not belong/);
  });

  it('refuses a signed cursor whose key is not a safe integer or whose id is not the list’s', () => {
    const codec = cursorCodec('evt', SECRET);
    for (const ts of [1.5, Number.MAX_SAFE_INTEGER + 2, '1700000000000', null]) {
      expect(() => pages.after(codec.encode(['vid_a', ts, ID]), 'vid_a'), String(ts)).toThrow(/does not belong/);
    }
    expect(() => pages.after(codec.encode(['vid_a', 1, 'not-a-uuid']), 'vid_a')).toThrow(/does not belong/);
    expect(pages.after(codec.encode(['vid_a', -3, ID]), 'vid_a')).toEqual({ ts: -3, id: ID });
  });
});
