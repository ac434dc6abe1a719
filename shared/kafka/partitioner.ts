import { randomInt } from 'node:crypto';
import type { ICustomPartitioner, PartitionerArgs } from 'kafkajs';

/**
 * Kafka's murmur2 (the Java client's `Utils.murmur2`) in 32-bit integer
 * arithmetic. kafkajs's DefaultPartitioner computes the same hash with its
 * slow 64-bit `Long` emulation, on the path of every keyed record
 * (docs/performance.md). The low 32 bits of every step are the same, so
 * the result is identical (partitioner.test.ts checks it against kafkajs's
 * own function).
 */
export function murmur2(data: Uint8Array, length = data.length): number {
  const m = 0x5bd1e995;
  let h = 0x9747b28c ^ length;
  const whole = length & ~3;
  for (let i = 0; i < whole; i += 4) {
    let k = data[i]! | (data[i + 1]! << 8) | (data[i + 2]! << 16) | (data[i + 3]! << 24);
    k = Math.imul(k, m);
    k ^= k >>> 24;
    k = Math.imul(k, m);
    h = Math.imul(h, m) ^ k;
  }
  const rest = length & 3;
  if (rest === 3) h ^= data[whole + 2]! << 16;
  if (rest >= 2) h ^= data[whole + 1]! << 8;
  if (rest >= 1) h = Math.imul(h ^ data[whole]!, m);
  h ^= h >>> 13;
  h = Math.imul(h, m);
  h ^= h >>> 15;
  return h | 0;
}

// Keys are UTF-8 encoded into one reused buffer instead of a new Buffer each.
const scratch = Buffer.allocUnsafe(4096);

/** murmur2 of a key as kafkajs hashes it: a Buffer as is, anything else as the UTF-8 of String(key). */
export function keyHash(key: Buffer | string): number {
  if (Buffer.isBuffer(key)) return murmur2(key);
  const s = String(key);
  // A UTF-8 character is at most 3 bytes per UTF-16 unit.
  if (s.length * 3 <= scratch.length) return murmur2(scratch, scratch.write(s, 0, 'utf8'));
  return murmur2(Buffer.from(s, 'utf8'));
}

const toPositive = (x: number) => x & 0x7fffffff;

/** The partition of `key` among `numPartitions`, as JavaCompatiblePartitioner picks it. */
export function partitionOfKey(key: Buffer | string, numPartitions: number): number {
  return toPositive(keyHash(key)) % numPartitions;
}

/**
 * kafkajs's DefaultPartitioner (the Java client's pre-2.4 default: the
 * message's partition, else murmur2 of the key, else round robin over the
 * partitions that have a leader) with the 32-bit murmur2 above: the same
 * partition for every message, computed more cheaply. Every producer of
 * the service uses it, so a key maps to one partition whoever writes it.
 */
export const JavaCompatiblePartitioner: ICustomPartitioner = () => {
  const counters = new Map<string, number>();
  return ({ topic, partitionMetadata, message }: PartitionerArgs) => {
    if (message.partition !== null && message.partition !== undefined) return message.partition;
    const numPartitions = partitionMetadata.length;
    if (message.key !== null && message.key !== undefined) return partitionOfKey(message.key, numPartitions);
    const next = (counters.get(topic) ?? randomInt(2 ** 31)) + 1;
    counters.set(topic, next);
    const available = partitionMetadata.filter((p) => p.leader >= 0);
    if (available.length > 0) return available[toPositive(next) % available.length]!.partitionId;
    return toPositive(next) % numPartitions;
  };
};
