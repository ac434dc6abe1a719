import type { Kafka } from 'kafkajs';
import type { PlayerEventRecord, SecurityEventRecord, VideoRecord, WebhookAttemptRecord } from '../../schemas/records.ts';
import type { SchemaRegistry } from '../../schemas/registry.ts';
import { chTime, type ClickHouseClient } from '../../shared/clickhouse/clickhouse.ts';
import { BatchConsumer, type ConsumedMessage } from '../../shared/kafka/batch-consumer.ts';
import type { Topics } from '../../shared/kafka/topics.ts';
import type { Logger } from '../../shared/logger.ts';
import type { Metrics } from '../../shared/metrics.ts';
import { eventRow } from './event-rows.ts';

export interface ProjectorDeps {
  kafka: Kafka;
  clickhouse: ClickHouseClient;
  registry: SchemaRegistry;
  log: Logger;
  metrics: Metrics;
  flushMs: number;
  maxRows: number;
  topics: Topics;
  /** Prefix of consumer group ids (the topic prefix). */
  groupPrefix: string;
}


/**
 * Projects the event log into ClickHouse: player events into `events` (the
 * visitor projection follows by materialized view) and video config into
 * `videos`. One insert per flush window across partitions; offsets are
 * committed only after the insert returned.
 */
export async function startProjector(deps: ProjectorDeps) {
  const log = deps.log.child({ component: 'projector' });
  const PROJECTOR_GROUP = `${deps.groupPrefix}projector`;
  const VIDEOS_GROUP = `${deps.groupPrefix}projector-videos`;

  const insert = async (table: string, values: object[]): Promise<void> => {
    const started = performance.now();
    await deps.clickhouse.insert({ table, values, format: 'JSONEachRow' });
    deps.metrics.insertDuration.observe({ table }, (performance.now() - started) / 1000);
  };

  const events = new BatchConsumer({
    kafka: deps.kafka,
    log,
    groupId: PROJECTOR_GROUP,
    topics: [deps.topics.playerEvents],
    flushMs: deps.flushMs,
    maxMessages: deps.maxRows,
    handle: async (messages: ConsumedMessage[]) => {
      const rows = [];
      for (const { message, partition } of messages) {
        if (!message.value) continue;
        try {
          rows.push(eventRow(deps.registry.decode<PlayerEventRecord>('player-event', message.value)));
        } catch (err) {
          // NOTE: an unreadable record is logged and skipped rather than
          // blocking the partition forever; it stays on the topic for replay.
          log.error({ err, partition, offset: message.offset }, 'player_event_unreadable');
        }
      }
      if (rows.length > 0) await insert('events', rows);
      deps.metrics.batchSize.observe(rows.length);
    },
    onLag: (topic, partition, lag) => deps.metrics.consumerLag.set({ group: PROJECTOR_GROUP, topic, partition: String(partition) }, lag),
  });

  const videos = new BatchConsumer({
    kafka: deps.kafka,
    log,
    groupId: VIDEOS_GROUP,
    topics: [deps.topics.videos],
    flushMs: deps.flushMs,
    maxMessages: 1000,
    handle: async (messages) => {
      const rows = messages.flatMap(({ message }) => {
        const version = Number(message.offset);
        if (!message.value) return [];
        const v = deps.registry.decode<VideoRecord>('video', message.value);
        return [{ tenant_id: v.tenant_id, id: v.id, title: v.title, duration_sec: v.duration_sec, created_at: chTime(v.created_at), deleted: 0, version }];
      });
      if (rows.length > 0) await insert('videos', rows);
    },
    onLag: (topic, partition, lag) => deps.metrics.consumerLag.set({ group: VIDEOS_GROUP, topic, partition: String(partition) }, lag),
  });

  const nullableTime = (ms: number | null) => (ms === null ? null : chTime(ms));
  const attempts = new BatchConsumer({
    kafka: deps.kafka,
    log,
    groupId: `${deps.groupPrefix}projector-attempts`,
    topics: [deps.topics.webhookAttempts],
    flushMs: deps.flushMs,
    maxMessages: deps.maxRows,
    handle: async (messages) => {
      const rows = messages.flatMap(({ message }) => {
        if (!message.value) return [];
        const a = deps.registry.decode<WebhookAttemptRecord>('webhook-attempt', message.value);
        return [
          {
            ...a,
            recorded_at: chTime(a.recorded_at),
            started_at: nullableTime(a.started_at),
            next_attempt_at: nullableTime(a.next_attempt_at),
            delivery_created_at: chTime(a.delivery_created_at),
          },
        ];
      });
      if (rows.length > 0) await insert('webhook_attempts', rows);
    },
  });

  const security = new BatchConsumer({
    kafka: deps.kafka,
    log,
    groupId: `${deps.groupPrefix}projector-security`,
    topics: [deps.topics.securityEvents],
    flushMs: deps.flushMs,
    maxMessages: 1000,
    handle: async (messages) => {
      const rows = messages.flatMap(({ message }) => {
        if (!message.value) return [];
        const e = deps.registry.decode<SecurityEventRecord>('security-event', message.value);
        return [{ ...e, occurred_at: chTime(e.occurred_at) }];
      });
      if (rows.length > 0) await insert('security_events', rows);
    },
  });

  const consumers = [events, videos, attempts, security];
  await Promise.all(consumers.map((c) => c.start()));
  log.info('projector_started');
  return {
    get healthy() {
      return consumers.every((c) => c.healthy);
    },
    async stop() {
      await Promise.all(consumers.map((c) => c.stop()));
    },
  };
}
