import type { Admin, KafkaMessage } from 'kafkajs';
import { DEFAULT_HIGH_INTENT_THRESHOLD, DEFAULT_OFFER_WINDOW_SEC } from '../../schemas/intent-settings.ts';
import { PlayerEventRecord, playerEventViolation } from '../../schemas/records.ts';
import type { ConfigStore } from '../../shared/config-store/config-store.ts';
import { Changelog } from '../../shared/kafka/changelog.ts';
import { CoalescingSender } from '../../shared/kafka/coalescing-sender.ts';
import type { DeadLetter } from '../../shared/kafka/dead-letters.ts';
import { playerEventKey } from '../../shared/kafka/event-keys.ts';
import { GroupConsumer } from '../../shared/kafka/group-consumer.ts';
import { groupProblems, type ConsumerServiceDeps } from '../../shared/kafka/group-member.ts';
import { createProducer } from '../../shared/kafka/kafka.ts';
import { partitionOfKey } from '../../shared/kafka/partitioner.ts';
import { fieldsDecoder, PoisonRecordError, recordDecoder, type Decoded } from '../../shared/kafka/poison.ts';
import { MAX_SEND_BYTES, sendRequests, TransactionalStage, type StageOutput } from '../../shared/kafka/transactional-stage.ts';
import { DERIVED_STAGE_NAMES, type DerivedStage } from '../../shared/config.ts';
import { applyEvent, applyTick, emptyState, eventTag, newStep, type IntentSettings, type PartitionState, type RuleOptions, type SessionState, type VisitorState, sessionKey } from './intent-rules.ts';

export interface DerivedDeps extends ConsumerServiceDeps {
  admin: Admin;
  store: ConfigStore;
  sessionIdleMs: number;
  tickMs: number;
  latenessMs: number;
  /** A visitor with no event for this long (stream time) is forgotten. */
  visitorTtlMs: number;
  /** Most visitors, and most sessions, whose state is kept per tenant (over all partitions). */
  maxVisitorsPerTenant: number;
  maxSessionsPerTenant: number;
  /** The stages this process runs (default both). */
  stages?: readonly DerivedStage[];
}

/** How long an ended session is remembered, so that its late events do not open it again. */
const ENDED_RETENTION_MS = 60 * 60 * 1000;
const TICK = 'tick';
/**
 * Header of a by-visitor record of the older one-copy format (still read):
 * where the event was read, `<partition>:<offset>`; the oldest records carry
 * `src-partition` and `src-offset`. The intent stage reads both.
 */
const SRC = 'src';
const STREAM_TIME_KEY = 't';
/** Changelog key of the by-visitor offset a partition's state was written at (the stage's checkpoint). */
const INPUT_OFFSET_KEY = 'o';

/**
 * Most bytes of copied events in one by-visitor record: well under the
 * topic's max.message.bytes (1 MiB by default), and under the intent
 * stage's fetch size per partition.
 */
const MAX_COPIES_BYTES = 256 * 1024;

/** A player event copied onto the by-visitor log and where it was read; `poison` when its bytes break the record's rules. */
type Copy = { srcPartition: number; srcOffset: number } & ({ event: PlayerEventRecord } | { poison: PoisonRecordError; bytes: Buffer });

/** A record of the by-visitor log: copied player events, or a tick of stream time. */
type ByVisitor = { kind: 'events'; copies: Copy[] } | { kind: 'tick'; at: number };

/** What the repartition reads of a player event: where it goes, and whether it is one of this service's own. */
type Route = Pick<PlayerEventRecord, 'tenant_id' | 'visitor_id' | 'source'>;

export interface DerivedService {
  consumers: { groupId: string; topics: readonly string[] }[];
  health(): Record<string, string>;
  stop(): Promise<void>;
}

/**
 * The derived-events service: reads player.events.v1 and raises the events
 * of spec 6.1 that no player sends (high_intent_lead, reached_pitch,
 * abandoned_before_pitch, abandoned_after_offer) onto the same topic, where
 * the fan-out and the projector take them like any other. Two stages:
 *
 * 1. repartition: player events, keyed by session, are copied keyed by
 *    visitor onto derived.by-visitor.v1, with where each was read, at least
 *    once (a copy written twice is counted once by the intent stage);
 * 2. intent: per partition of that log, exactly once
 *    (shared/kafka/transactional-stage.ts): the visitors' and sessions'
 *    state (services/derived/intent-rules.ts), kept in the compacted
 *    derived.state.v1 and restored from it (the projector also builds the
 *    visitor read model from its visitor records); the batches fetched
 *    together commit their derived events, state changes and input
 *    offsets in one transaction of the process.
 *
 * Sessions end by stream time: each owner writes a tick onto its partitions
 * every tickMs, so time is in the log and a replay decides the same.
 *
 * A process runs both stages, or one (`stages`): they meet only through the
 * by-visitor log, so a busy service can give each its own process (a core).
 */
export async function startDerived(deps: DerivedDeps): Promise<DerivedService> {
  const { kafka, admin, registry, store, topics, log, metrics } = deps;
  // Not a plain copy: the rules read an event and keep none of it.
  const decodeEvent = recordDecoder(deps.registry, 'player-event', PlayerEventRecord, { avroRules: playerEventViolation, plain: false });
  const decodeCopies = fieldsDecoder<{ copies: { src_partition: number; src_offset: number; event: Buffer }[] }>(registry, 'visitor-copies', ['copies']);
  const settings = (tenantId: string, videoId: string): IntentSettings => {
    const tenant = store.tenants.get(tenantId);
    const video = store.videos.get(videoId);
    const own = video?.tenant_id === tenantId ? video : undefined;
    return {
      threshold: tenant?.high_intent_threshold ?? DEFAULT_HIGH_INTENT_THRESHOLD,
      pitchAtSec: own?.pitch_at_sec ?? null,
      offerWindowSec: own?.offer_window_sec ?? DEFAULT_OFFER_WINDOW_SEC,
    };
  };
  // The bounds hold per partition of the by-visitor log, where a tenant's
  // visitors spread by hash: each partition keeps its share.
  const [byVisitor] = (await admin.fetchTopicMetadata({ topics: [topics.derivedByVisitor] })).topics;
  const partitions = Math.max(1, byVisitor?.partitions.length ?? 1);
  const rules: RuleOptions = {
    settings,
    sessionIdleMs: deps.sessionIdleMs,
    endedRetentionMs: ENDED_RETENTION_MS,
    visitorTtlMs: deps.visitorTtlMs,
    maxVisitorsPerTenant: Math.ceil(deps.maxVisitorsPerTenant / partitions),
    maxSessionsPerTenant: Math.ceil(deps.maxSessionsPerTenant / partitions),
  };
  const member = { kafka, log, metrics, deadLetters: deps.deadLetters, stallMs: deps.stallMs, sessionTimeoutMs: deps.sessionTimeoutMs };

  // The repartition only routes: it reads the three fields it needs and
  // copies the bytes. What it cannot route (not Avro of a known schema,
  // bytes Avro cannot walk) it dead-letters; an event it can route but that
  // breaks the record's rules is the intent stage's to dead-letter, which
  // decodes every event whole anyway, so no record is judged twice.
  // It copies at least once, not in transactions: a copy written again
  // (after a crash or a rebalance) carries the source partition and offset
  // of the first, which the intent stage's state has counted
  // (intent-rules.ts, applyEvent), so nothing downstream happens twice; and
  // its read_committed reader waits on no producers' open transactions.
  const startRepartition = async (): Promise<Stage> => {
    const copies = new CoalescingSender({ kafka, log, name: 'derived.by-visitor' });
    await copies.connect();
    const repartition = new GroupConsumer<Route>({
      ...member,
      groupId: `${deps.groupPrefix}derived-repartition`,
      topics: [topics.playerEvents],
      decode: fieldsDecoder<Route>(registry, 'player-event', ['tenant_id', 'visitor_id', 'source']),
      batches: {
        flushMs: 0,
        maxMessages: 5000,
        handle: async (items) => {
          // Per by-visitor partition (the one the visitor's key hashes to, as
          // a keyed record would land), the copies in the order read, many to
          // a record: the broker and the clients pay a record's cost per
          // record, and one per event would dominate this service's CPU.
          const packs = new Map<number, { copies: { src_partition: number; src_offset: number; event: Buffer }[]; bytes: number }[]>();
          for (const { record, message, partition } of items) {
            if (record.kind !== 'value' || record.value.source === 'derived' || !message.value) continue;
            const e = record.value;
            const to = partitionOfKey(`${e.tenant_id}:${e.visitor_id}`, partitions);
            const list = packs.get(to) ?? [];
            packs.set(to, list);
            let pack = list.at(-1);
            if (!pack || (pack.bytes > 0 && pack.bytes + message.value.length > MAX_COPIES_BYTES)) list.push((pack = { copies: [], bytes: 0 }));
            pack.copies.push({ src_partition: partition, src_offset: Number(message.offset), event: message.value });
            pack.bytes += message.value.length + 16;
          }
          const out: StageOutput[] = [];
          for (const [to, list] of packs) {
            for (const { copies } of list) out.push({ topic: topics.derivedByVisitor, partition: to, key: null, value: registry.encode('visitor-copies', { copies }) });
          }
          // One request after another: were a later copy to land while an
          // earlier one of its source partition failed, the intent stage would
          // take the earlier, read again, for one it has counted.
          for (const topicMessages of sendRequests(out, MAX_SEND_BYTES)) await copies.send(topicMessages);
          metrics.derivedRecords.inc({ stage: 'repartition' }, items.length);
        },
      },
    });
    await repartition.start();
    return {
      member: repartition,
      health: () => groupProblems([repartition]),
      stop: async () => {
        await repartition.stop();
        await copies.close();
      },
    };
  };

  const startIntent = async (): Promise<Stage> => {
    const changelog = new Changelog({ kafka, admin, topic: topics.derivedState, log, metrics, deadLetters: deps.deadLetters, stallMs: deps.stallMs });
    const states = new Map<number, PartitionState>();
    /** Per partition, the events of the batch in its transaction, counted once it commits. */
    const tallies = new Map<number, number>();
    const stateSize = () => {
      let visitors = 0;
      let sessions = 0;
      for (const state of states.values()) {
        visitors += state.visitors.size;
        sessions += state.sessions.size + state.ended.size;
      }
      metrics.derivedStateKeys.set({ kind: 'visitor' }, visitors);
      metrics.derivedStateKeys.set({ kind: 'session' }, sessions);
    };
    const intentGroup = `${deps.groupPrefix}derived-intent`;
    const intent = new TransactionalStage<ByVisitor>({
      ...member,
      admin,
      groupId: intentGroup,
      transactionalIdPrefix: `${deps.groupPrefix}derived-intent`,
      topics: [topics.derivedByVisitor],
      decode: (message): Decoded<ByVisitor> => {
        const tick = message.headers?.[TICK];
        if (tick !== undefined) return { kind: 'value', value: { kind: 'tick', at: Number(String(tick)) } };
        if (message.headers?.[SRC] !== undefined || message.headers?.['src-partition'] !== undefined) {
          // Records of the older format (one copy per record) are still read.
          const event = decodeEvent(message);
          if (event.kind !== 'value') return event;
          const [srcPartition, srcOffset] = sourceOf(message.headers);
          return { kind: 'value', value: { kind: 'events', copies: [{ event: event.value, srcPartition, srcOffset }] } };
        }
        const packed = decodeCopies(message);
        if (packed.kind !== 'value') return packed;
        const copies = packed.value.copies.map(({ src_partition: srcPartition, src_offset: srcOffset, event: bytes }): Copy => {
          try {
            const event = decodeEvent({ value: bytes });
            return event.kind === 'value' ? { event: event.value, srcPartition, srcOffset } : { poison: new PoisonRecordError('empty_value', 'tombstone'), bytes, srcPartition, srcOffset };
          } catch (err) {
            if (!(err instanceof PoisonRecordError)) throw err;
            return { poison: err, bytes, srcPartition, srcOffset };
          }
        });
        return { kind: 'value', value: { kind: 'events', copies } };
      },
      restore: async (partition) => {
        await changelog.caughtUp(partition, intent.member.stopSignal);
        const values = changelog.values(partition);
        states.set(partition, restoreState(values));
        stateSize();
        return values.get(INPUT_OFFSET_KEY)?.toString('utf8');
      },
      // A copied event that breaks the record's rules, as it was read and where.
      letters: (r): DeadLetter[] =>
        r.kind === 'tick'
          ? []
          : r.copies.flatMap((c) =>
              'poison' in c ? [{ topic: topics.playerEvents, partition: c.srcPartition, offset: String(c.srcOffset), key: null, value: c.bytes, reason: c.poison.reason, detail: c.poison.message, group: intentGroup }] : [],
            ),
      checkpoint: (partition, next) => ({ topic: topics.derivedState, partition, key: INPUT_OFFSET_KEY, value: Buffer.from(next) }),
      process: (partition, records) => {
        const state = states.get(partition)!;
        // One step for the batch: its changes by key (the last state of each), its events in order.
        const step = newStep();
        let copied = 0;
        for (const { record } of records) {
          if (record.kind !== 'value') continue;
          const r = record.value;
          if (r.kind === 'tick') applyTick(state, r.at, rules, step);
          else
            for (const c of r.copies) {
              copied++;
              if ('event' in c) applyEvent(state, c.event, c.srcPartition, c.srcOffset, rules, step);
            }
        }
        const { events, changed, evicted } = step;
        const out: StageOutput[] = events.map((e) => ({ topic: topics.playerEvents, key: playerEventKey(e.tenant_id, e.session_id), value: registry.encode('player-event', e) }));
        tallies.set(partition, copied);
        for (const [key, value] of changed) out.push({ topic: topics.derivedState, partition, key, value: value === null ? null : Buffer.from(JSON.stringify(value)) });
        out.push({ topic: topics.derivedState, partition, key: STREAM_TIME_KEY, value: Buffer.from(JSON.stringify(state.streamTime)) });
        for (const e of events) metrics.derivedEvents.inc({ event: e.event_name });
        if (evicted.visitors > 0) metrics.derivedStateEvicted.inc({ kind: 'visitor' }, evicted.visitors);
        if (evicted.sessions > 0) metrics.derivedStateEvicted.inc({ kind: 'session' }, evicted.sessions);
        stateSize();
        return out;
      },
      onCommitted: (partition) => {
        metrics.derivedRecords.inc({ stage: 'intent' }, tallies.get(partition) ?? 0);
        tallies.delete(partition);
      },
      onTransaction: (batches, steps) => {
        metrics.derivedTransactionBatches.observe({ stage: 'intent' }, batches);
        for (const step of ['send', 'offsets', 'commit'] as const) metrics.derivedTransactionSteps.observe({ stage: 'intent', step }, steps[step]);
      },
    });

    const ticks = createProducer(kafka);
    await ticks.connect();
    await changelog.start();
    await intent.start();
    const timer = setInterval(() => {
      const at = Date.now() - deps.latenessMs;
      const owned = intent.owned;
      if (owned.length === 0) return;
      ticks
        .send({ topic: topics.derivedByVisitor, messages: owned.map((partition) => ({ partition, key: TICK, value: Buffer.from(TICK), headers: { [TICK]: String(at) } })) })
        .catch((err: Error) => log.warn({ err: { message: err.message } }, 'derived_tick_failed'));
    }, deps.tickMs);
    timer.unref();
    return {
      member: intent,
      health: () => ({ ...groupProblems([intent]), ...(changelog.health() ? { [changelog.groupId]: changelog.health()! } : {}) }),
      stop: async () => {
        clearInterval(timer);
        await intent.stop();
        await changelog.stop();
        await ticks.disconnect();
      },
    };
  };

  const runs = deps.stages ?? DERIVED_STAGE_NAMES;
  const stages: Stage[] = [];
  if (runs.includes('repartition')) stages.push(await startRepartition());
  if (runs.includes('intent')) stages.push(await startIntent());
  log.info({ groups: stages.map((s) => s.member.groupId) }, 'derived_started');

  return {
    consumers: stages.map(({ member }) => ({ groupId: member.groupId, topics: member.topics })),
    health: () => Object.assign({}, ...stages.map((s) => s.health())) as Record<string, string>,
    stop: async () => {
      for (const s of stages) await s.stop();
    },
  };
}

/** A started stage: its consumer, its problems for /readyz, how it stops. */
interface Stage {
  member: { groupId: string; topics: readonly string[] };
  health(): Record<string, string>;
  stop(): Promise<void>;
}

/** Where a by-visitor record's event was read: [partition, offset], -1 for what its headers do not say. */
export function sourceOf(headers: KafkaMessage['headers']): [number, number] {
  const src = headers?.[SRC];
  if (src !== undefined) {
    const text = String(src);
    const at = text.indexOf(':');
    return at < 0 ? [-1, -1] : [Number(text.slice(0, at)), Number(text.slice(at + 1))];
  }
  return [Number(String(headers?.['src-partition'] ?? '-1')), Number(String(headers?.['src-offset'] ?? '-1'))];
}

/** A partition's state from its changelog values. */
export function restoreState(values: ReadonlyMap<string, Buffer>): PartitionState {
  const state = emptyState();
  const open: SessionState[] = [];
  const ended: SessionState[] = [];
  for (const [key, value] of values) {
    const parsed: unknown = JSON.parse(value.toString('utf8'));
    if (key === STREAM_TIME_KEY) state.streamTime = parsed as number;
    else if (key.startsWith('v:')) {
      // State of the older format (full ids, not tags) is still read.
      const v = parsed as VisitorState;
      v.recent = v.recent.map((id) => (id.length === 12 ? id : eventTag(id)));
      state.visitors.set(key, v);
    } else if (key.startsWith('s:')) ((parsed as SessionState).endedAt === null ? open : ended).push(parsed as SessionState);
  }
  // The rules read sessions in the order they were last seen, or ended.
  for (const s of open.sort((a, b) => a.seenAt - b.seenAt)) state.sessions.set(sessionKey(s.tenant_id, s.session_id), s);
  for (const s of ended.sort((a, b) => a.endedAt! - b.endedAt!)) state.ended.set(sessionKey(s.tenant_id, s.session_id), s);
  // The bounds' order: least recently seen first.
  for (const s of [...open, ...ended].sort((a, b) => a.seenAt - b.seenAt)) state.sessionOrder.touch(s.tenant_id, sessionKey(s.tenant_id, s.session_id));
  const seenAt = (v: VisitorState) => v.seenAt ?? v.lastSeen;
  for (const [key] of [...state.visitors].sort(([, a], [, b]) => seenAt(a) - seenAt(b))) state.visitorOrder.touch(key.split(':', 2)[1]!, key);
  return state;
}
