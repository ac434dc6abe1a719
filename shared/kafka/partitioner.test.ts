import { randomBytes } from 'node:crypto';
import { createRequire } from 'node:module';
import { Partitioners, type PartitionMetadata } from 'kafkajs';
import { describe, expect, it } from 'vitest';
import { JavaCompatiblePartitioner, keyHash, murmur2 } from './partitioner.ts';

const require = createRequire(import.meta.url);
const kafkajsMurmur2 = require('kafkajs/src/producer/partitioners/default/murmur2.js') as (key: Buffer | string) => number;

describe('JavaCompatiblePartitioner', () => {
  it('hashes every key exactly as kafkajs does (random bytes of every length up to 200, and strings with multi-byte characters)', () => {
    for (let len = 0; len <= 200; len++) {
      for (let n = 0; n < 20; n++) {
        const key = randomBytes(len);
        expect(murmur2(key), `bytes ${key.toString('hex')}`).toBe(kafkajsMurmur2(key));
      }
    }
    const strings = ['', 'a', 'ab', 'abc', 'abcd', 'tenant:ses_1', 'ü', 'visitor-€-𝄞', '日本語のキー', 'x'.repeat(5000), 'é'.repeat(2000)];
    for (const s of strings) expect(keyHash(s), s.slice(0, 20)).toBe(kafkajsMurmur2(s));
  });

  it('matches the Java client on its published test vectors', () => {
    // org.apache.kafka.common.utils.UtilsTest#testMurmur2
    const cases: [string, number][] = [
      ['21', -973932308],
      ['foobar', -790332482],
      ['a-little-bit-long-string', -985981536],
      ['a-little-bit-longer-string', -1486304829],
      ['lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8', -58897971],
    ];
    for (const [s, h] of cases) expect(keyHash(s), s).toBe(h);
  });

  it('chooses the same partition as kafkajs DefaultPartitioner for keyed and explicit messages', () => {
    const ours = JavaCompatiblePartitioner();
    const theirs = Partitioners.DefaultPartitioner();
    for (const partitions of [1, 3, 12, 50]) {
      const partitionMetadata: PartitionMetadata[] = Array.from({ length: partitions }, (_, i) => ({ partitionId: i, leader: 1, partitionErrorCode: 0, replicas: [1], isr: [1] }));
      for (let n = 0; n < 500; n++) {
        const message = n % 10 === 0 ? { partition: n % partitions, value: 'v' } : { key: n % 2 ? `t:ses_${n}` : randomBytes(n % 40), value: 'v' };
        expect(ours({ topic: 't', partitionMetadata, message })).toBe(theirs({ topic: 't', partitionMetadata, message }));
      }
    }
  });

  it('spreads keyless messages round robin over the partitions that have a leader', () => {
    const p = JavaCompatiblePartitioner();
    const partitionMetadata: PartitionMetadata[] = [0, 1, 2, 3].map((i) => ({ partitionId: i, leader: i === 2 ? -1 : 1, partitionErrorCode: 0, replicas: [1], isr: [1] }));
    const chosen = Array.from({ length: 30 }, () => p({ topic: 't', partitionMetadata, message: { value: 'v' } }));
    expect(new Set(chosen)).toEqual(new Set([0, 1, 3]));
    for (let i = 1; i < chosen.length; i++) expect(chosen[i]).not.toBe(chosen[i - 1]);
  });
});
