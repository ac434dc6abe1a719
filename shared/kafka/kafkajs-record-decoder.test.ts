import { createRequire } from 'node:module';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';

/**
 * kafkajs's record decoder (src/protocol/recordBatch/record/v0/decoder.js)
 * as patched by patches/kafkajs+2.2.4+008+record-decoder-numbers.patch:
 * offsets and timestamps worked out as Numbers when they are safe integers. Every record must decode to
 * what kafkajs' Long arithmetic gives, inside and outside the safe range.
 */
const require = createRequire(import.meta.url);
const Decoder = require('kafkajs/src/protocol/decoder.js') as new (buffer: Buffer) => { readVarInt(): number };
const Long = require('kafkajs/src/utils/long.js') as { fromValue(v: unknown): { add(v: unknown): { toString(): string } } };
const encodeRecord = require('kafkajs/src/protocol/recordBatch/record/v0/index.js') as (r: object) => { buffer: Buffer };
const decodeRecord = require('kafkajs/src/protocol/recordBatch/record/v0/decoder.js') as (
  decoder: unknown,
  context: object,
) => { offset: string; timestamp: string; key: Buffer; value: Buffer; headers: Record<string, Buffer> };

const I64_MAX = 2n ** 63n - 1n;

describe('kafkajs record decoder (patched)', () => {
  it('decodes offsets and timestamps as the Long arithmetic does, safe integers or not, deltas of any length', () => {
    const firstOffset = fc.oneof(fc.bigInt({ min: 0n, max: 2n ** 40n }), fc.bigInt({ min: 2n ** 53n - 100n, max: I64_MAX - 2n ** 31n }));
    const firstTimestamp = fc.oneof(fc.bigInt({ min: 0n, max: 2n ** 45n }), fc.bigInt({ min: 2n ** 53n - 2n ** 20n, max: 2n ** 62n }), fc.constant(-1n));
    const timestampDelta = fc.oneof(fc.integer({ min: -1000, max: 100_000 }), fc.bigInt({ min: -(2n ** 60n), max: 2n ** 60n }));
    fc.assert(
      fc.property(firstOffset, firstTimestamp, fc.integer({ min: 0, max: 2 ** 31 - 1 }), timestampDelta, (first, firstTs, offsetDelta, tsDelta) => {
        const delta = typeof tsDelta === 'bigint' ? tsDelta : BigInt(tsDelta);
        const { buffer } = encodeRecord({ offsetDelta, timestampDelta: Long.fromValue(delta), key: Buffer.from('k'), value: Buffer.from('v'), headers: { h: 'x' } });
        const decoder = new Decoder(buffer);
        decoder.readVarInt(); // the record's length
        const record = decodeRecord(decoder, { firstOffset: String(first), firstTimestamp: String(firstTs), magicByte: 2 });
        expect(record.offset).toBe(Long.fromValue(String(first)).add(offsetDelta).toString());
        expect(record.offset).toBe(String(first + BigInt(offsetDelta)));
        expect(record.timestamp).toBe(String(firstTs + delta));
        expect([record.key.toString(), record.value.toString(), record.headers.h?.toString()]).toEqual(['k', 'v', 'x']);
      }),
      { numRuns: 2000 },
    );
  });
});
