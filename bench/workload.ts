import type { Message } from 'kafkajs';
import type { z } from 'zod';
import type { PlayerEventRecord, VideoRecord } from '../schemas/records.ts';
import type { SchemaRegistry } from '../schemas/registry.ts';
import type { CollectEvent } from '../services/ingest/collect.schema.ts';
import { collectRecords } from '../services/ingest/event-record.ts';

/**
 * The synthetic player traffic every phase uses, so that the intake, the raw
 * producer and the projector all see the same shape of event: mostly
 * heartbeats (as real players send), some lifecycle events and seeks. An
 * event is what a player sends to /v1/collect.
 */
export type PlayerEvent = z.input<typeof CollectEvent>;

const MIX = [
  'heartbeat',
  'heartbeat',
  'heartbeat',
  'heartbeat',
  'video_play',
  'video_pause',
  'video_resume',
  'seek',
  'watched_25_percent',
  'watched_50_percent',
  'cta_shown',
  'cta_clicked',
] as const;

/** The i-th event of the synthetic stream; `videoIds` are in the REST form (vid_…). */
export function playerEvent(i: number, videoIds: string[]): PlayerEvent {
  const name = MIX[i % MIX.length]!;
  const session = Math.floor(i / 40) % 5000;
  const e: PlayerEvent = {
    event_name: name,
    video_id: videoIds[session % videoIds.length]!,
    session_id: `ses_bench_${session}`,
    visitor_id: `vis_bench_${session % 2000}`,
    current_time: (i % 600) + 0.25,
    duration: 600,
    watched_percentage: Math.min(100, ((i % 600) / 600) * 100),
  };
  if (name === 'heartbeat') {
    e.play_ms = 5000;
    e.focus_ms = 4000 + (i % 1000);
  }
  if (name === 'seek') {
    e.from = 120;
    e.to = i % 2 === 0 ? 60 : 180;
  }
  if (i % 7 === 0) e.utm_source = 'newsletter';
  return e;
}

/** `count` JSON bodies for POST /v1/collect, `batch` events each, serialised once up front. */
export function collectBodies(videoIds: string[], count: number, batch: number): Buffer[] {
  const bodies: Buffer[] = [];
  for (let b = 0; b < count; b++) {
    const events = Array.from({ length: batch }, (_, j) => playerEvent(b * batch + j, videoIds));
    bodies.push(Buffer.from(JSON.stringify({ events })));
  }
  return bodies;
}

/** The record the intake puts on the topic for `e`: its own collectRecords, with `e`'s video taken as the tenant's. */
export function recordOf(e: PlayerEvent, tenantId: string, videoUuid: (vid: string) => string, received: number): PlayerEventRecord {
  const video = { id: videoUuid(e.video_id), tenant_id: tenantId } as VideoRecord;
  return collectRecords([e as CollectEvent], { tenantId, received, videoById: () => video })[0]!;
}

/** Kafka messages exactly as the intake produces them: key tenant:session, Confluent-framed Avro value. */
export function kafkaMessages(registry: SchemaRegistry, records: PlayerEventRecord[]): Message[] {
  return records.map((r) => ({ key: `${r.tenant_id}:${r.session_id}`, value: registry.encode('player-event', r) }));
}
