import { describe, expect, it } from 'vitest';
import { sourceOf } from './derived.service.ts';

describe('sourceOf (where a by-visitor record was read)', () => {
  it('reads the one src header the repartition writes', () => {
    expect(sourceOf({ src: Buffer.from('7:123456789012') })).toEqual([7, 123456789012]);
  });
  it('reads the src-partition and src-offset headers of records written before it', () => {
    expect(sourceOf({ 'src-partition': Buffer.from('3'), 'src-offset': Buffer.from('42') })).toEqual([3, 42]);
  });
  it('answers -1 for what the headers do not say', () => {
    expect(sourceOf(undefined)).toEqual([-1, -1]);
    expect(sourceOf({ src: Buffer.from('garbled') })).toEqual([-1, -1]);
  });
});
