import { PlayerEventRecord, SecurityEventRecord, VideoRecord, WebhookAttemptRecord, playerEventViolation } from '../../schemas/records.ts';
import { chTime, type ClickHouseClient } from '../../shared/clickhouse/clickhouse.ts';
import { insertLines, insertRows } from '../../shared/clickhouse/insert-rows.ts';
import { GroupConsumer, type BatchItem } from '../../shared/kafka/group-consumer.ts';
import { groupProblems, type ConsumerServiceDeps } from '../../shared/kafka/group-member.ts';
import { PoisonRecordError, recordDecoder } from '../../shared/kafka/poison.ts';
import { dedupeRetriedEvents, needsLookup } from './event-dedupe.ts';
import type { VisitorSnapshot } from '../../shared/score.ts';
import { decodeVisitorState, visitorRow } from './visitor-rows.ts';
import { candidateLine, chTimeMs, EVENT_COLUMNS, eventLine, LATEST_EVENT_TIME, retryCandidate, type RetryCandidate } from './event-rows.ts';
import { InsertTouches, type InsertListener } from '../../shared/read-touches.ts';
import { isSignal } from '../../shared/event-names.ts';

export interface ProjectorDeps extends ConsumerServiceDeps {
  clickhouse: ClickHouseClient;
  flushMs: number;
  maxRows: number;
  /**
   * Told what each insert of events and visitor snapshots touched, as it is
   * sent and once it has returned or failed: the read API's cache in the
   * same process (services/api/read-cache.ts).
   */
  onInsert?: InsertListener;
}

/** A record's line with what the read cache must hear of it; only made when somebody listens (onInsert). */
class TouchingLine {
  readonly line: string;
  readonly tenant: string;
  readonly video: string;
  readonly visitor: string;
  readonly ts: number;
  readonly listed: boolean;
  constructor(line: string, tenant: string, video: string, visitor: string, ts: number, listed: boolean) {
    this.line = line;
    this.tenant = tenant;
    this.video = video;
    this.visitor = visitor;
    this.ts = ts;
    this.listed = listed;
  }
}


/**
 * Projects the event log into ClickHouse: player events into `events` (the
 * visitor projections follow by materialized view), video config into
 * `videos`, webhook attempts, security events, and each visitor's latest
 * state (derived.state.v1) into `visitors`. One insert per flush window across partitions; offsets are
 * committed only after the insert returned.
 */
export async function startProjector(deps: ProjectorDeps) {
  const log = deps.log.child({ component: 'projector' });

  const timed = async (table: string, insert: () => Promise<void>): Promise<void> => {
    const started = performance.now();
    await insert();
    deps.metrics.insertDuration.observe({ table }, (performance.now() - started) / 1000);
  };
  const insert = (table: string, values: object[]) => timed(table, () => insertRows(deps.clickhouse, table, values));

  const common = { kafka: deps.kafka, log, metrics: deps.metrics, deadLetters: deps.deadLetters, stallMs: deps.stallMs, sessionTimeoutMs: deps.sessionTimeoutMs };
  /** Handler calls of at most `maxMessages` records, gathered for up to PROJECTOR_FLUSH_MS. */
  const batches = <T>(maxMessages: number, handle: (items: BatchItem<T>[]) => Promise<void>) => ({ flushMs: deps.flushMs, maxMessages, handle });
  /** The values of a batch (a tombstone has no place on these topics and is dead-lettered by the decoder). */
  const values = <T>(items: BatchItem<T>[]): T[] => items.flatMap((i) => (i.record.kind === 'value' ? [i.record.value] : []));

  // Avro's own object, not a plain copy: the projector reads its fields into a line (or a candidate) and hands it to nothing else.
  const decodeEvent = recordDecoder(deps.registry, 'player-event', PlayerEventRecord, { avroRules: playerEventViolation, plain: false });
  /** A record's line, or, for a record the dedupe step must see, the candidate holding it. */
  const onInsert = deps.onInsert;
  /** Runs an insert, reporting what it touched before it is sent and after it returned or failed. */
  const reporting = async (touches: InsertTouches | undefined, insert: () => Promise<void>): Promise<void> => {
    if (!touches || touches.empty) return insert();
    onInsert!.inserting(touches);
    try {
      await insert();
    } finally {
      onInsert!.insertDone(touches);
    }
  };
  const events = new GroupConsumer<string | RetryCandidate | TouchingLine>({
    ...common,
    groupId: `${deps.groupPrefix}projector`,
    topics: [deps.topics.playerEvents],
    // The line is serialized as the record is decoded, on arrival: that
    // overlaps the running insert instead of delaying the next one
    // (GroupConsumer). Most records need no row object at all.
    decode: (message) => {
      const d = decodeEvent(message);
      if (d.kind !== 'value') return d;
      if (d.value.timestamp > LATEST_EVENT_TIME || d.value.received_at > LATEST_EVENT_TIME) {
        throw new PoisonRecordError('schema_violation', 'timestamp: later than the events table can hold (2299-12-31)');
      }
      const line = eventLine(d.value);
      if (needsLookup(d.value)) return { kind: 'value', value: retryCandidate(d.value, line) };
      const e = d.value;
      return { kind: 'value', value: onInsert ? new TouchingLine(line, e.tenant_id, e.video_id, e.visitor_id, e.timestamp, !isSignal(e.event_name)) : line };
    },
    onRecordAge: (stage, ageMs) => deps.metrics.recordAge.observe({ stage: stage === 'handled' ? 'readable' : stage }, ageMs / 1000),
    batches: batches(deps.maxRows, async (items) => {
      // One loop with no allocation per record beyond the array slot: this
      // runs for every record of a drain, where garbage is a real cost.
      const lines: string[] = [];
      const touches = onInsert ? new InsertTouches() : undefined;
      let candidates: RetryCandidate[] | undefined;
      for (const { record } of items) {
        if (record.kind !== 'value') continue;
        const v = record.value;
        if (typeof v === 'string') lines.push(v);
        else if (v instanceof TouchingLine) {
          lines.push(v.line);
          touches!.event(v.tenant, v.video, v.visitor, v.ts, v.listed);
        } else (candidates ??= []).push(v);
      }
      if (candidates) {
        for (const c of await dedupeRetriedEvents(deps.clickhouse, candidates, log)) {
          lines.push(candidateLine(c));
          // The dedupe step may have re-timed it: the row goes in with this timestamp.
          touches?.event(c.tenant_id, c.video_id, c.visitor_id, chTimeMs(c.timestamp), !isSignal(c.event_name));
        }
      }
      if (lines.length > 0) await reporting(touches, () => timed('events', () => insertLines(deps.clickhouse, 'events', lines, EVENT_COLUMNS)));
      deps.metrics.batchSize.observe(lines.length);
    }),
  });

  const videos = new GroupConsumer<VideoRecord>({
    ...common,
    groupId: `${deps.groupPrefix}projector-videos`,
    topics: [deps.topics.videos],
    // Compacted: a tombstone deletes a video (the config store drops it).
    decode: recordDecoder(deps.registry, 'video', VideoRecord, { tombstones: true }),
    batches: batches(1000, async (items) => {
      const rows = items.flatMap(({ message, record }) => {
        if (record.kind !== 'value') return [];
        const v = record.value;
        return [{ tenant_id: v.tenant_id, id: v.id, title: v.title, duration_sec: v.duration_sec, created_at: chTime(v.created_at), deleted: 0, version: Number(message.offset) }];
      });
      if (rows.length > 0) await insert('videos', rows);
    }),
  });

  const nullableTime = (ms: number | null) => (ms === null ? null : chTime(ms));
  const attempts = new GroupConsumer<WebhookAttemptRecord>({
    ...common,
    groupId: `${deps.groupPrefix}projector-attempts`,
    topics: [deps.topics.webhookAttempts],
    decode: recordDecoder(deps.registry, 'webhook-attempt', WebhookAttemptRecord),
    batches: batches(deps.maxRows, async (items) => {
      const rows = values(items).map((a) => ({
        ...a,
        recorded_at: chTime(a.recorded_at),
        started_at: nullableTime(a.started_at),
        next_attempt_at: nullableTime(a.next_attempt_at),
        delivery_created_at: chTime(a.delivery_created_at),
      }));
      if (rows.length > 0) await insert('webhook_attempts', rows);
    }),
  });

  const security = new GroupConsumer<SecurityEventRecord>({
    ...common,
    groupId: `${deps.groupPrefix}projector-security`,
    topics: [deps.topics.securityEvents],
    decode: recordDecoder(deps.registry, 'security-event', SecurityEventRecord),
    batches: batches(1000, async (items) => {
      const rows = values(items).map((e) => ({ ...e, occurred_at: chTime(e.occurred_at) }));
      if (rows.length > 0) await insert('security_events', rows);
    }),
  });

  // Each visitor's latest state, for the visitor read model (FINAL keeps the
  // highest offset: a visitor's state records share a partition).
  const visitors = new GroupConsumer<VisitorSnapshot>({
    ...common,
    groupId: `${deps.groupPrefix}projector-visitors`,
    topics: [deps.topics.derivedState],
    decode: decodeVisitorState,
    batches: batches(deps.maxRows, async (items) => {
      const rows = items.flatMap(({ message, record }) => (record.kind === 'value' ? [visitorRow(record.value, message.offset)] : []));
      const touches = onInsert ? new InsertTouches() : undefined;
      for (const { record } of items) if (record.kind === 'value') touches?.visitorSnapshot(record.value.tenant_id);
      if (rows.length > 0) await reporting(touches, () => insert('visitors', rows));
    }),
  });

  const consumers = [events, videos, attempts, security, visitors];
  await Promise.all(consumers.map((c) => c.start()));
  log.info('projector_started');
  return {
    consumers,
    /** Each consumer's problem, by group; empty when all are healthy. */
    health(): Record<string, string> {
      return groupProblems(consumers);
    },
    async stop(budgetMs?: number) {
      await Promise.all(consumers.map((c) => c.stop(budgetMs)));
    },
  };
}
