import { randomUUID } from 'node:crypto';
import type { SchemaRegistry } from '../schemas/registry.ts';
import { parseVideoId, toVideoId } from '../shared/ids.ts';
import { retryStartup } from '../shared/kafka/kafka.ts';
import { JavaCompatiblePartitioner } from '../shared/kafka/partitioner.ts';
import { ensureTopics, topicDefinitions, topicNames, type Topics } from '../shared/kafka/topics.ts';
import type { BenchContext } from './context.ts';
import { kafkaMessages, playerEvent, recordOf } from './workload.ts';

/** Every topic of a stack under `prefix`, created and served (ListOffsets answers on each player-events partition). */
export async function freshTopics(ctx: BenchContext, prefix: string): Promise<Topics> {
  const topics = topicNames(prefix);
  const admin = ctx.kafka.admin();
  await admin.connect();
  try {
    await ensureTopics(admin, topicDefinitions(topics, ctx.partitions));
    // A topic created a moment ago can still answer NOT_LEADER on a loaded
    // broker; ListOffsets succeeding on every partition means it is served.
    await retryStartup(() => admin.fetchTopicOffsets(topics.playerEvents), 20_000);
  } finally {
    await admin.disconnect();
  }
  return topics;
}

/**
 * `events` player-event records of one new tenant (8 videos) produced to
 * `topic` as the intake would (Avro, Java-compatible partitioning, acks=-1):
 * a backlog for a service started afterwards. Returns the produce rate.
 */
export async function preloadEvents(ctx: BenchContext, registry: SchemaRegistry, topic: string, events: number): Promise<{ perSec: number; tenantId: string }> {
  const tenantId = randomUUID();
  const videoIds = Array.from({ length: 8 }, () => toVideoId(randomUUID()));
  const base = Date.now() - events;
  const producer = ctx.kafka.producer({ createPartitioner: JavaCompatiblePartitioner });
  await producer.connect();
  const chunk = 500;
  let next = 0;
  const t0 = performance.now();
  try {
    await Promise.all(
      Array.from({ length: 8 }, async () => {
        while (next < events) {
          const from = next;
          next = Math.min(events, next + chunk);
          const records = [];
          for (let i = from; i < next; i++) records.push(recordOf(playerEvent(i, videoIds), tenantId, (v) => parseVideoId(v)!, base + i));
          const messages = kafkaMessages(registry, records);
          await retryStartup(() => producer.send({ topic, acks: -1, messages }), 3000);
        }
      }),
    );
  } finally {
    await producer.disconnect();
  }
  return { perSec: events / ((performance.now() - t0) / 1000), tenantId };
}

