import { randomUUID } from 'node:crypto';
import fc from 'fast-check';
import { Kafka, logLevel, type Admin, type Producer } from 'kafkajs';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import type { PlayerEventRecord } from '../schemas/records.ts';
import { SchemaRegistry } from '../schemas/registry.ts';
import { MAX_ATTRIBUTION_LENGTH, MAX_EVENTS_PER_REQUEST, MAX_OCCURRED_AT_AGE_MS, MAX_PERCENT, MAX_POSITION_SEC, MAX_SIGNAL_MS } from '../services/ingest/collect.schema.ts';
import { createClickHouse, type ClickHouseClient } from '../shared/clickhouse/clickhouse.ts';
import { COLLECTABLE_EVENT_NAMES } from '../shared/event-names.ts';
import { parseVideoId } from '../shared/ids.ts';
import { playerEventKey } from '../shared/kafka/event-keys.ts';
import { topicNames } from '../shared/kafka/topics.ts';
import { iso } from './helpers/contract.ts';
import { groupLags, readTopicToEnd } from './helpers/kafka-inspect.ts';
import { TestStack, eventually, type TestTenant } from './helpers/stack.ts';
import { PLAYER_EVENT } from './helpers/player-event.ts';

/**
 * Every setting of the stack under test. A short stall alarm: a consumer
 * stuck on a record shows on /readyz within seconds of the drain. The intake's own
 * limits (body size, events per request, rate limits) stay the defaults.
 */
const STACK_ENV = {
  CONSUMER_STALL_TIMEOUT_MS: '8000',
  PROJECTOR_FLUSH_MS: '300',
};
const STALL_MS = Number(STACK_ENV.CONSUMER_STALL_TIMEOUT_MS);
/** The intake's default body limit (COLLECT_MAX_BODY_BYTES): a generated body stays under it. */
const BODY_LIMIT = 1024 * 1024;
const MONTH_MS = 31 * 86_400_000;

const registry = SchemaRegistry.fromManifest();

/**
 * Input a client may send, however hostile, never stops the pipeline: what
 * the intake accepts is stored or dead-lettered with a reason, never retried
 * forever, and other tenants' events keep flowing.
 */
describe('hostile but well-formed input', () => {
  let s: TestStack;
  let A: TestTenant;
  let B: TestTenant;
  let kafka: Kafka;
  let admin: Admin;
  let producer: Producer;
  let ch: ClickHouseClient;
  const names = () => topicNames(s.topicPrefix);

  beforeAll(async () => {
    s = await TestStack.start(STACK_ENV);
    [A, B] = await Promise.all([s.createTenant('hostile'), s.createTenant('bystander')]);
    kafka = new Kafka({ clientId: 'hostile-test', brokers: inject('kafkaBrokers'), logLevel: logLevel.NOTHING });
    admin = kafka.admin();
    producer = kafka.producer();
    await Promise.all([admin.connect(), producer.connect()]);
    const url = inject('clickhouseUrl');
    ch = (await createClickHouse({ url, database: url ? s.topicPrefix.replace('.', '') : undefined, dataDir: s.dataDir })).client;
  }, 120_000);
  afterAll(async () => {
    await producer?.disconnect();
    await admin?.disconnect();
    await s?.stop();
  });

  const readyz = async () => (await s.request('GET', '/readyz')).status;

  /** Resolves once the projector and the fan-out committed to the end of the player events; /readyz is sampled meanwhile. */
  const drained = async (timeoutMs = 90_000): Promise<void> => {
    let last = '200';
    const topic = names().playerEvents;
    const groups = { [`${s.topicPrefix}projector`]: [topic], [`${s.topicPrefix}fanout`]: [topic] };
    await eventually(
      async () => {
        const r = await s.request('GET', '/readyz');
        last = r.status === 200 ? '200' : `${r.status} ${r.text}`;
        return (await groupLags(admin, groups)).every((p) => p.lag === 0) ? true : undefined;
      },
      timeoutMs,
      250,
    ).catch((err: Error) => {
      throw new Error(`${err.message}; last /readyz: ${last}`);
    });
  };

  /**
   * The /readyz answers that were not 200 over the stall alarm's time and a
   * second, once drained: a consumer retrying a refused record, or stuck on
   * one, shows as stalled by then. (While a large insert runs on a loaded
   * machine, not-ready is an honest answer, so that time is not judged.)
   */
  const notReadyAfterDrain = async (): Promise<string[]> => {
    const notReady: string[] = [];
    const until = Date.now() + STALL_MS + 1000;
    while (Date.now() < until) {
      const r = await s.request('GET', '/readyz');
      if (r.status !== 200) notReady.push(`${r.status} ${r.text}`);
      await new Promise((resolve) => setTimeout(resolve, 250));
    }
    return notReady;
  };

  /** Event ids of a tenant stored in `events`. */
  const storedIds = async (tenantId: string): Promise<Set<string>> => {
    const rows = await (
      await ch.query({ query: 'SELECT toString(event_id) AS id FROM events WHERE tenant_id = {t:UUID}', query_params: { t: tenantId }, format: 'JSONEachRow' })
    ).json<{ id: string }>();
    return new Set(rows.map((r) => r.id));
  };

  /** The dead letters of player events, by the event id their value holds, with their reason and detail. */
  const deadLettered = async (): Promise<Map<string, { reason: string; detail: string; group: string }>> => {
    const out = new Map<string, { reason: string; detail: string; group: string }>();
    for (const r of await readTopicToEnd(kafka, admin, names().deadLetters)) {
      if (r.headers['dlq-source-topic'] !== names().playerEvents || !r.value) continue;
      const e = registry.decode<PlayerEventRecord>('player-event', r.value);
      out.set(e.event_id, { reason: r.headers['dlq-reason'] ?? '', detail: r.headers['dlq-detail'] ?? '', group: r.headers['dlq-group'] ?? '' });
    }
    return out;
  };

  /** A player-event record of `t` as the intake writes it. */
  const record = (t: TestTenant, timestamp: number, over: Partial<PlayerEventRecord> = {}): PlayerEventRecord => ({
    ...PLAYER_EVENT,
    event_id: randomUUID(),
    event_id_from_client: false,
    tenant_id: t.id,
    video_id: parseVideoId(t.videoId)!,
    session_id: 'ses_replay',
    visitor_id: 'vis_replay',
    event_name: 'video_play',
    timestamp,
    received_at: timestamp,
    play_ms: null,
    focus_ms: null,
    utm_source: null,
    external_lead_id: null,
    ...over,
  });

  it('refuses a request spread over 150 months; a replayed log spanning 150 months is stored or dead-lettered, and nothing stalls', async () => {
    // The intake: one request of 150 events, one per month.
    const now = Date.now();
    const monthly = Array.from({ length: 150 }, (_, i) => ({ event_name: 'video_play', video_id: A.videoId, visitor_id: 'vis_monthly', occurred_at: iso(now - 60_000 - i * MONTH_MS) }));
    const refused = await s.collect(A.player_key, monthly);
    expect(refused.status, refused.text).toBe(422);
    expect(refused.body.errors).toEqual([{ path: 'body.events.1.occurred_at', message: 'more than 30 days in the past' }]);

    // A log written before the window existed: 150 months of tenant A's
    // events produced straight onto the topic, one more with a time no
    // DateTime64(3) holds, beside tenant B's ordinary traffic.
    const replay = Array.from({ length: 150 }, (_, i) => record(A, Date.UTC(2005, i, 15, 12), { session_id: `ses_replay_${i % 3}` }));
    const beyond = record(A, 9e15, { session_id: 'ses_replay_0' });
    const bSent: Promise<{ status: number }>[] = [];
    for (let i = 0; i < 5; i++) bSent.push(s.collect(B.player_key, Array.from({ length: 10 }, () => ({ event_name: 'video_view', video_id: B.videoId, visitor_id: `vis_b_${i}` }))));
    await producer.send({
      topic: names().playerEvents,
      messages: [...replay, beyond].map((r) => ({ key: playerEventKey(r.tenant_id, r.session_id), value: registry.encode('player-event', r) })),
    });
    for (const r of await Promise.all(bSent)) expect(r.status).toBe(202);

    await drained();
    expect(await notReadyAfterDrain()).toEqual([]);

    const stored = await storedIds(A.id);
    const letters = await deadLettered();
    for (const r of replay) expect(stored.has(r.event_id) || letters.has(r.event_id), `${iso(r.timestamp)} stored or dead-lettered`).toBe(true);
    // The month grouping stores all of them; the record past 2299 is dead-lettered with its reason.
    expect(replay.filter((r) => stored.has(r.event_id))).toHaveLength(150);
    expect(letters.get(beyond.event_id)).toMatchObject({ reason: 'schema_violation', group: `${s.topicPrefix}projector` });
    expect(stored.has(beyond.event_id)).toBe(false);
    expect(await s.allEvents(B.videoId, B.apiKey)).toHaveLength(50);
  }, 180_000);

  it('isolates a record only ClickHouse refuses: the rest of its batch is stored', async () => {
    // A rule only the table knows: the intake has no way to see it coming.
    await ch.command({ query: "ALTER TABLE events ADD CONSTRAINT hostile_visitor CHECK visitor_id != 'vis_refused_by_sink'" });
    try {
      const events = Array.from({ length: 40 }, (_, i) => ({
        event_id: randomUUID(),
        event_name: 'video_view',
        video_id: B.videoId,
        session_id: 'ses_isolated',
        visitor_id: i === 17 ? 'vis_refused_by_sink' : `vis_iso_${i}`,
      }));
      const res = await s.collect(B.player_key, events);
      expect(res.status, res.text).toBe(202);
      await drained();
      expect(await notReadyAfterDrain()).toEqual([]);

      const stored = await storedIds(B.id);
      const letters = await deadLettered();
      const refused = events[17]!.event_id;
      expect(events.filter((e) => e.event_id !== refused && stored.has(e.event_id))).toHaveLength(39);
      expect(stored.has(refused)).toBe(false);
      expect(letters.get(refused)).toEqual({ reason: 'rejected_by_sink', detail: 'clickhouse 469: violates a constraint of the table', group: `${s.topicPrefix}projector` });
      expect(await readyz()).toBe(200);
    } finally {
      await ch.command({ query: 'ALTER TABLE events DROP CONSTRAINT hostile_visitor' });
    }
  }, 180_000);

  it('extreme bodies the intake accepts are each stored or dead-lettered, and another tenant is unaffected (property)', async () => {
    const unicode = fc.constantFrom('a', 'é', '語', '😀', '\u0000', '"', '\\', '\u202e', '\ufeff', ' ', '\n', '𝔘');
    /** An attribution value of exactly the maximum length in UTF-16 units (a pair cut in half at the end included), of any characters. */
    const longest = fc.string({ unit: unicode, minLength: MAX_ATTRIBUTION_LENGTH, maxLength: MAX_ATTRIBUTION_LENGTH }).map((v) => v.slice(0, MAX_ATTRIBUTION_LENGTH));
    const short = fc.option(fc.string({ unit: unicode, maxLength: 8 }), { nil: undefined });
    const idTail = fc.stringMatching(/^[A-Za-z0-9_-]{64}$/);
    // Across the whole window, a minute inside either end (the time of receipt comes after generation).
    const occurredAt = fc.option(
      fc.integer({ min: -MAX_OCCURRED_AT_AGE_MS + 60_000, max: 4 * 60_000 }).map((d) => iso(Date.now() + d)),
      { nil: undefined, freq: 8 },
    );
    const bound = (max: number) => fc.oneof(fc.constantFrom(0, max), fc.double({ min: 0, max, noNaN: true }));
    /** One event of any collectable name, every field at or inside its bounds; `wide`: all four attributions at their longest. */
    const event = (wide: boolean) =>
      fc
        .record({
          event_name: fc.constantFrom(...COLLECTABLE_EVENT_NAMES),
          session_id: idTail.map((t) => `ses_${t}`),
          visitor_id: idTail.map((t) => `vis_${t}`),
          current_time: bound(MAX_POSITION_SEC),
          duration: bound(MAX_POSITION_SEC),
          watched_percentage: bound(MAX_PERCENT),
          occurred_at: occurredAt,
          play_ms: fc.integer({ min: 0, max: MAX_SIGNAL_MS }),
          from: bound(MAX_POSITION_SEC),
          to: bound(MAX_POSITION_SEC),
          utm_source: wide ? longest : short,
          utm_campaign: wide ? longest : short,
          ctwa_clid: wide ? longest : short,
          external_lead_id: wide ? longest : short,
        })
        .map(({ play_ms, from, to, ...e }) => {
          const out: Record<string, unknown> = { event_id: randomUUID(), video_id: A.videoId, ...e };
          if (e.event_name === 'heartbeat') Object.assign(out, { play_ms, focus_ms: play_ms });
          if (e.event_name === 'seek') Object.assign(out, { from, to });
          return Object.fromEntries(Object.entries(out).filter(([, v]) => v !== undefined));
        });
    /**
     * The most events a request may hold: some at their widest, the rest
     * narrow, as many as the body limit lets through (500 of the widest
     * would not fit it).
     */
    const body = fc
      .tuple(fc.array(event(true), { minLength: 1, maxLength: 60 }), fc.array(event(false), { minLength: MAX_EVENTS_PER_REQUEST, maxLength: MAX_EVENTS_PER_REQUEST }))
      .map(([wide, narrow]) => {
        let size = 20;
        const fit: Record<string, unknown>[] = [];
        for (const e of [...wide, ...narrow].slice(0, MAX_EVENTS_PER_REQUEST)) {
          size += Buffer.byteLength(JSON.stringify(e)) + 1;
          if (size > BODY_LIMIT - 1024) break;
          fit.push(e);
        }
        return fit;
      });

    const accepted: string[] = [];
    let bSent = 0;
    let run = 0;
    let most = 0;
    await fc.assert(
      fc.asyncProperty(body, async (events) => {
        run++;
        const [a, b] = await Promise.all([
          s.request('POST', '/v1/collect', { body: { events }, headers: { 'x-player-key': A.player_key } }),
          s.collect(B.player_key, Array.from({ length: 20 }, (_, i) => ({ event_name: 'video_play', video_id: B.videoId, visitor_id: `vis_prop_${run}_${i}`, session_id: `ses_prop_${run}` }))),
        ]);
        // Everything in A's body is within the intake's rules: refusing it would be a bug of the generator or the intake.
        expect(a.status, a.text.slice(0, 300)).toBe(202);
        expect(b.status, b.text).toBe(202);
        for (const e of events) accepted.push(String(e.event_id).toLowerCase());
        most = Math.max(most, events.length);
        bSent += 20;
      }),
      { numRuns: 6, endOnFailure: true },
    );

    await drained(120_000);
    expect(await notReadyAfterDrain()).toEqual([]);
    const stored = await storedIds(A.id);
    const letters = await deadLettered();
    const lost = accepted.filter((id) => !stored.has(id) && !letters.get(id)?.reason);
    expect(lost).toEqual([]);
    expect(most).toBe(MAX_EVENTS_PER_REQUEST);
    const bListed = (await s.allEvents(B.videoId, B.apiKey)).filter((e) => e.visitor_id.startsWith('vis_prop_'));
    expect(bListed).toHaveLength(bSent);
  }, 300_000);
});
