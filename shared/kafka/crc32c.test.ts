import { randomBytes } from 'node:crypto';
import { createRequire } from 'node:module';
import { describe, expect, it } from 'vitest';

// kafkajs checksums every record batch it produces with this function;
// patches/kafkajs+2.2.4+007+crc32c-slicing-by-8.patch replaces its
// byte-at-a-time loop with slicing-by-8. A wrong checksum makes the broker
// refuse every batch (CORRUPT_MESSAGE), so it is held to a bit-by-bit
// reference here.
const crc32C = createRequire(import.meta.url)('kafkajs/src/protocol/recordBatch/crc32C/index.js') as (b: Buffer) => number;

function reference(buffer: Buffer): number {
  let crc = 0xffffffff;
  for (const byte of buffer) {
    crc ^= byte;
    for (let k = 0; k < 8; k++) crc = crc & 1 ? (crc >>> 1) ^ 0x82f63b78 : crc >>> 1;
  }
  return (crc ^ 0xffffffff) >>> 0;
}

describe('kafkajs CRC-32C (as patched)', () => {
  it('gives the standard check value and the RFC 3720 test vectors', () => {
    expect(crc32C(Buffer.from('123456789'))).toBe(0xe3069283);
    expect(crc32C(Buffer.alloc(32, 0))).toBe(0x8a9136aa);
    expect(crc32C(Buffer.alloc(32, 0xff))).toBe(0x62a8ab43);
    expect(crc32C(Buffer.from(Array.from({ length: 32 }, (_, i) => i)))).toBe(0x46dd794e);
    expect(crc32C(Buffer.alloc(0))).toBe(0);
  });

  it('agrees with a bit-by-bit reference on every length from 0 to 70 and on large buffers, at any offset', () => {
    const data = randomBytes(70_000);
    for (let len = 0; len <= 70; len++) {
      for (const start of [0, 1, 3, 7]) {
        const view = data.subarray(start, start + len);
        expect(crc32C(view)).toBe(reference(view));
      }
    }
    for (const len of [4096, 65_537, 69_993]) expect(crc32C(data.subarray(5, 5 + len))).toBe(reference(data.subarray(5, 5 + len)));
  });
});
