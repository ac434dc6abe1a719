import { mkdtempSync, rmSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';
import { kafkajsWithout, seededRandom } from '../../test/helpers/kafkajs-copy.ts';

/**
 * kafkajs's encoder as patched by patches/kafkajs+2.2.4+011+presized-encoder.patch
 * (buffers not zero-filled and sized ahead, varints written in place) must
 * put the same bytes on the wire as kafkajs without that patch: the
 * reference is node_modules/kafkajs copied with every patch but that one.
 */
const require = createRequire(import.meta.url);
const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const PATCH = 'kafkajs+2.2.4+011+presized-encoder.patch';
const dir = mkdtempSync(join(tmpdir(), 'va-kafkajs-encoder-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

// kafkajs's internals have no types.
// eslint-disable-next-line @typescript-eslint/no-explicit-any
type Any = any;
const load = (root: string) => ({
  produce: require(join(root, 'src/protocol/requests/produce/v3/request.js')) as (o: object) => Any,
  frame: require(join(root, 'src/protocol/request.js')) as (o: object) => Promise<Any>,
  topicData: require(join(root, 'src/producer/createTopicData.js')) as (o: object) => Any[],
  Encoder: require(join(root, 'src/protocol/encoder.js')) as Any,
});

describe('kafkajs encoder (patched)', () => {
  const patched = load(join(ROOT, 'node_modules/kafkajs'));
  const upstream = load(kafkajsWithout(dir, PATCH));

  it('encodes produce requests, framed as the connection sends them, byte for byte as kafkajs 2.2.4 did: keys, values and headers of every size, null ones, old and new timestamps', async () => {
    const now = 1_790_000_000_000;
    for (let seed = 1; seed <= 120; seed++) {
      const next = seededRandom(seed);
      const bytes = (n: number) => Buffer.from(Array.from({ length: n }, () => Math.floor(next() * 256)));
      const count = 1 + Math.floor(next() * (seed % 10 === 0 ? 2000 : 60));
      const messages = Array.from({ length: count }, (_, i) => ({
        key: next() < 0.2 ? null : next() < 0.5 ? `v:ten_${i}:vis_${Math.floor(next() * 1e9)}` : bytes(Math.floor(next() * 40)),
        value: next() < 0.1 ? null : bytes(Math.floor(next() * (next() < 0.05 ? 70_000 : 1500))),
        headers: next() < 0.3 ? { tick: String(now + i), src: ['1:2', 'ü'], empty: Buffer.alloc(0) } : undefined,
        timestamp: next() < 0.25 ? undefined : String(now - Math.floor(next() * (next() < 0.1 ? 4e9 : 1e6))),
      }));
      const encode = async (k: ReturnType<typeof load>) => {
        const messagesPerPartition: Record<number, typeof messages> = {};
        messages.forEach((m, i) => (messagesPerPartition[i % 12] ??= []).push(m));
        const topicData = k.topicData([{ topic: 'events', partitions: Object.keys(messagesPerPartition).map(Number), messagesPerPartition }]);
        for (const t of topicData) for (const p of t.partitions) p.firstSequence = seed;
        const request = k.produce({ acks: -1, timeout: 30_000, transactionalId: seed % 2 ? 'tx-1' : undefined, producerId: 42, producerEpoch: 3, topicData });
        // As the connection sends it: size, header, body.
        return (await k.frame({ correlationId: seed, clientId: seed % 3 ? 'video-analytics' : null, request })).buffer as Buffer;
      };
      // Records without a timestamp take the time of the encoding: the same for both.
      const realNow = Date.now;
      Date.now = () => now;
      try {
        const [got, want] = [await encode(patched), await encode(upstream)];
        expect(got.equals(want), `seed ${seed}: ${got.length} bytes against ${want.length}`).toBe(true);
      } finally {
        Date.now = realNow;
      }
    }
  });

  it('writes varints and varlongs as kafkajs 2.2.4 did, on both sides of the 32-bit fast path', () => {
    const values = [0, 1, -1, 63, 64, -64, -65, 300, -300, 2 ** 30 - 1, -(2 ** 30), 2 ** 30, -(2 ** 30) - 1, 2 ** 31 - 1, -(2 ** 31), 2 ** 40, -(2 ** 40), 2 ** 53 - 1, -(2 ** 53 - 1)];
    for (const v of values) {
      expect(new patched.Encoder().writeVarLong(v).buffer, `varlong ${v}`).toEqual(new upstream.Encoder().writeVarLong(v).buffer);
      if (v >= -(2 ** 31) && v < 2 ** 31) expect(new patched.Encoder().writeVarInt(v).buffer, `varint ${v}`).toEqual(new upstream.Encoder().writeVarInt(v).buffer);
    }
  });
});
