import { randomBytes } from 'node:crypto';
import { Kafka, logLevel, type Admin, type Producer } from 'kafkajs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { inject } from 'vitest';
import { SchemaRegistry } from '../schemas/registry.ts';
import { topicNames, type TopicKey } from '../shared/kafka/topics.ts';
import { startHttpsReceiver, type HttpsReceiver } from './helpers/https-receiver.ts';
import { groupLags, poisonValues, readTopicToEnd, writePoison, type PoisonKind, type WrittenPoison, READ_TOPIC_SUBJECTS } from './helpers/kafka-inspect.ts';
import { metricSample, metricSum } from './helpers/prometheus-text.ts';
import { TestStack, eventually, type TestTenant } from './helpers/stack.ts';
import { PLAYER_EVENT } from './helpers/player-event.ts';

/** Every topic the service reads, and the consumer groups (or the config store) that read it. */
const READERS: Partial<Record<TopicKey, string[]>> = {
  playerEvents: ['projector', 'fanout', 'derived-repartition'],
  videos: ['projector-videos', 'config-store'],
  tenants: ['config-store'],
  apiKeys: ['config-store'],
  apiKeyUsage: ['config-store'],
  destinations: ['config-store'],
  webhookAttempts: ['projector-attempts'],
  securityEvents: ['projector-security'],
  webhooksManual: ['fanout-manual'],
  retry1: ['fanout-retry-1m'],
  retry2: ['fanout-retry-5m'],
  retry3: ['fanout-retry-30m'],
};

const SUBJECT = READ_TOPIC_SUBJECTS;

const registry = SchemaRegistry.fromManifest();

/** The reason each kind of poison is dead-lettered for. */
const REASON: Record<PoisonKind, string> = { garbage: 'not_wire_format', unknown_schema: 'unknown_schema', truncated: 'undecodable', empty: 'empty_value' };

interface Letter {
  source: string;
  group: string;
  reason: string;
}

const SECRET_ENV = {
  ADMIN_TOKEN: `adm_${randomBytes(16).toString('hex')}`,
  CURSOR_SECRET: randomBytes(24).toString('hex'),
  SECRETS_KEY: randomBytes(32).toString('hex'),
};

describe('poison records on every topic the service reads', () => {
  let s: TestStack;
  let rx: HttpsReceiver;
  let t: TestTenant;
  let kafka: Kafka;
  let producer: Producer;
  let admin: Admin;
  let env: Record<string, string>;
  const poisoned: (WrittenPoison & { reason: string })[] = [];

  const names = () => topicNames(s.topicPrefix);
  const groupsOf = (key: TopicKey) => (READERS[key] ?? []).map((g) => (g === 'config-store' ? g : `${s.topicPrefix}${g}`));

  /** Every record of the dead-letter topic, read from the start. */
  const deadLetters = async (): Promise<Letter[]> =>
    (await readTopicToEnd(kafka, admin, names().deadLetters, 20_000)).map(({ headers: h }) => ({
      source: `${h['dlq-source-topic'] ?? ''}/${h['dlq-source-partition'] ?? ''}/${h['dlq-source-offset'] ?? ''}`,
      group: h['dlq-group'] ?? '',
      reason: h['dlq-reason'] ?? '',
    }));

  /** Lag of a group on a topic from the broker: committed offset vs high watermark. */
  const lagOf = async (groupId: string, topic: string): Promise<number> =>
    (await groupLags(admin, { [groupId]: [topic] })).reduce((n, p) => n + p.lag, 0);

  /** Lag of every group on every topic it reads. */
  const lags = async () => {
    const out: Record<string, number> = {};
    for (const key of Object.keys(READERS) as TopicKey[]) {
      for (const g of groupsOf(key).filter((x) => x !== 'config-store')) out[g] = await lagOf(g, names()[key]);
    }
    return out;
  };
  /**
   * Waits until every group has committed to the end of every topic it reads.
   * A group commits past a poison record only once its dead letter is
   * written, so from then on no group can add a dead letter: a check that
   * something was not dead-lettered waits for this, not for time to pass.
   */
  const noLag = () =>
    eventually(async () => (Object.values(await lags()).every((n) => n === 0) ? true : undefined), 20_000, 250).catch(async () => {
      expect(await lags()).toEqual({});
    });

  const flakyAttempts = new Map<string, number>();

  beforeAll(async () => {
    rx = await startHttpsReceiver();
    // '/flaky' fails each delivery's first three attempts, so it crosses every retry tier.
    rx.setBehaviour((req) => {
      if (req.path !== '/flaky') return { status: 200 };
      const id = String(req.headers['x-player-delivery-id']);
      const n = (flakyAttempts.get(id) ?? 0) + 1;
      flakyAttempts.set(id, n);
      return { status: n <= 3 ? 503 : 200 };
    });
    env = {
      ...SECRET_ENV,
      WEBHOOK_RETRY_DELAYS_S: '0.3,0.3,0.3',
      ...rx.env,
      CONSUMER_STALL_TIMEOUT_MS: '5000',
    };
    s = await TestStack.start(env);
    t = await s.createTenant();
    kafka = new Kafka({ clientId: 'poison-writer', brokers: inject('kafkaBrokers'), logLevel: logLevel.NOTHING });
    producer = kafka.producer();
    admin = kafka.admin();
    await Promise.all([producer.connect(), admin.connect()]);
  });
  afterAll(async () => {
    await producer?.disconnect();
    await admin?.disconnect();
    await s?.stop();
    await rx?.close();
  });

  const makeDestinations = async () => {
    const mk = async (path: string, extra: Record<string, unknown> = {}) => {
      const res = await s.admin('POST', `/tenants/${t.id}/destinations`, { name: path, url: rx.url(path), events: ['video_play'], ...extra });
      expect(res.status).toBe(201);
      return res.body.id as string;
    };
    const integration = await mk('/no-secret', { kind: 'integration', name: 'no secret', config: { webhook_secret: '' } });
    return { ok: await mk('/ok'), flaky: await mk('/flaky'), integration };
  };

  /**
   * Valid records through every topic: an event (player events → projector,
   * fan-out, attempts, security events, every retry tier via '/flaky'),
   * a Test delivery (manual), new config records (tenants, keys, videos,
   * destinations, key usage).
   */
  const validRecordsFlow = async (label: string) => {
    const tenant = await s.createTenant(`after-poison-${label}`);
    const dests = await makeDestinations();
    const visitor = `vis_${label}_${randomBytes(3).toString('hex')}`;
    // A 503 means nothing was accepted (a loaded machine may time a transaction out): send again, as a player does.
    const res = await eventually(async () => {
      const r = await s.collect(t.player_key, [{ event_name: 'video_play', video_id: t.videoId, session_id: `ses_${label}`, visitor_id: visitor }]);
      return r.status === 503 ? undefined : r;
    }, 30_000, 500);
    expect(res.status).toBe(202);
    // Player events → projector → read API (and the API key's usage record).
    await expect.poll(async () => (await s.allEvents(t.videoId, t.apiKey)).some((e) => e.visitor_id === visitor), { timeout: 30_000, interval: 200 }).toBe(true);
    const second = await s.api(`/videos/${tenant.videoId}/events`, tenant.apiKey);
    expect(second.status).toBe(200);
    // Player events → fan-out → attempts → projector-attempts: succeeded on '/ok'; '/flaky' crosses retry1..3.
    for (const [dest, attempts] of [
      [dests.ok, 1],
      [dests.flaky, 4],
    ] as const) {
      const row = await eventually(async () => {
        const list = await s.admin('GET', `/tenants/${t.id}/deliveries?destination_id=${dest}`);
        const d = list.body?.data?.[0];
        return d?.status === 'succeeded' ? d : undefined;
      }, 60_000, 250);
      expect(row.attempt_count).toBe(attempts);
    }
    // Security events → projector-security.
    await eventually(async () => {
      const list = await s.admin('GET', `/tenants/${t.id}/security-events`);
      return list.body?.data?.some((e: { endpoint_id: string }) => e.endpoint_id === dests.integration) ? true : undefined;
    }, 30_000, 250);
    // Manual queue: a Test delivery.
    const test = await s.admin('POST', `/tenants/${t.id}/destinations/${dests.ok}/test`);
    expect(test.status).toBe(202);
    await eventually(async () => {
      const d = await s.admin('GET', `/tenants/${t.id}/deliveries/${test.body.delivery_id}`);
      return d.body?.status === 'succeeded' ? true : undefined;
    }, 30_000, 250);
  };

  it('dead-letters each poison record once per reader, with its coordinates and reason, and keeps every consumer flowing', async () => {
    const topics = names();
    for (const key of Object.keys(READERS) as TopicKey[]) {
      for (const p of await writePoison(producer, topics[key], poisonValues(registry.writerId(SUBJECT[key]!)))) poisoned.push({ ...p, reason: REASON[p.kind] });
    }
    expect(poisoned).toHaveLength(48);

    await validRecordsFlow('before');
    // No lag left on any group: every group has read past everything, poison included.
    await noLag();

    // Every reader dead-lettered every poison record on its topics, and nothing else.
    const expected = new Set<string>();
    for (const key of Object.keys(READERS) as TopicKey[]) {
      for (const p of poisoned.filter((x) => x.topic === topics[key])) {
        for (const g of groupsOf(key)) expected.add(`${p.topic}/${p.partition}/${p.offset} ${g}`);
      }
    }
    const letters = await eventually(async () => {
      const all = await deadLetters();
      const seen = new Set(all.map((l) => `${l.source} ${l.group}`));
      return [...expected].every((e) => seen.has(e)) ? all : undefined;
    }, 30_000, 500);
    const sources = new Set(letters.map((l) => l.source));
    const poisonSources = new Set(poisoned.map((p) => `${p.topic}/${p.partition}/${p.offset}`));
    expect([...sources].filter((x) => !poisonSources.has(x))).toEqual([]);
    expect([...poisonSources].filter((x) => !sources.has(x))).toEqual([]);
    for (const p of poisoned) {
      const found = letters.filter((l) => l.source === `${p.topic}/${p.partition}/${p.offset}`).map((l) => l.reason);
      expect(new Set(found), `${p.kind} on ${p.topic}`).toEqual(new Set([p.reason]));
    }
    // Group consumers dead-letter a record exactly once (the config store once per process start).
    const perGroup = new Map<string, number>();
    for (const l of letters) perGroup.set(`${l.source} ${l.group}`, (perGroup.get(`${l.source} ${l.group}`) ?? 0) + 1);
    expect([...perGroup.values()].every((n) => n === 1)).toBe(true);

    // Counted in /metrics by topic and reason.
    const metrics = await s.request('GET', '/metrics');
    expect(metricSum(metrics.text, 'dead_lettered_records_total')).toBe(letters.length);
    // One player-event poison of that kind, dead-lettered by each of its three readers.
    expect(metricSample(metrics.text, 'dead_lettered_records_total', { topic: topics.playerEvents, reason: 'unknown_schema' })).toBe(3);

    // The service says it is ready.
    const ready = await s.request('GET', '/readyz');
    expect(ready.status).toBe(200);
  });

  it('after a restart the poison stays behind: nothing re-read by a group, valid records still flow', async () => {
    const before = await deadLetters();
    await s.stop({ keepData: true });
    s = await TestStack.start(env, { dataDir: s.dataDir, topicPrefix: s.topicPrefix });
    await validRecordsFlow('after');
    await noLag();
    const after = await deadLetters();
    const fresh = after.slice(before.length);
    // Only the config store, which reads its topics whole at every start, meets config poison again.
    expect(fresh.filter((l) => l.group !== 'config-store')).toEqual([]);
    const poisonSources = new Set(poisoned.map((p) => `${p.topic}/${p.partition}/${p.offset}`));
    expect(fresh.filter((l) => !poisonSources.has(l.source))).toEqual([]);
    const ready = await s.request('GET', '/readyz');
    expect(ready.status).toBe(200);
  });
  it("leaves the events of a tenant without destinations undecoded by the fan-out; the projector still dead-letters their poison", async () => {
    const quiet = await s.createTenant('no-destinations');
    const topic = names().playerEvents;
    const truncated = poisonValues(registry.writerId(SUBJECT.playerEvents!)).find((p) => p.kind === 'truncated')!.value;
    // Keyed as the intake keys them: one for the tenant without destinations, one for `t`, which has some.
    const write = async (tenantId: string) => {
      const [meta] = await producer.send({ topic, acks: -1, messages: [{ key: `${tenantId}:ses_poison`, value: truncated }] });
      return `${topic}/${meta!.partition}/${meta!.baseOffset}`;
    };
    // The quiet tenant's events are still projected. Accepted by the intake
    // first: the process knows the tenant before its poison is written (an
    // unknown tenant's records are decoded, whatever their key).
    const visitor = `vis_quiet_${randomBytes(3).toString('hex')}`;
    const res = await eventually(async () => {
      const r = await s.collect(quiet.player_key, [{ event_name: 'video_play', video_id: quiet.videoId, session_id: 'ses_quiet', visitor_id: visitor }]);
      return r.status === 503 ? undefined : r;
    }, 30_000, 500);
    expect(res.status).toBe(202);
    await expect.poll(async () => (await s.allEvents(quiet.videoId, quiet.apiKey)).some((e) => e.visitor_id === visitor), { timeout: 30_000, interval: 200 }).toBe(true);
    const quietPoison = await write(quiet.id);
    const keptPoison = await write(t.id);
    await validRecordsFlow('skip');
    await noLag();
    const groupsFor = async (source: string) =>
      new Set((await deadLetters()).filter((l) => l.source === source).map((l) => l.group));
    expect(await groupsFor(keptPoison)).toEqual(new Set([`${s.topicPrefix}projector`, `${s.topicPrefix}fanout`, `${s.topicPrefix}derived-repartition`]));
    // The fan-out read past it (no lag above) without decoding it.
    expect(await groupsFor(quietPoison)).toEqual(new Set([`${s.topicPrefix}projector`, `${s.topicPrefix}derived-repartition`]));
  });

  it('the fan-out reads past, unjudged, an event that breaks the rules and that no destination selects; one a destination selects it dead-letters', async () => {
    // `t` has destinations; they select video_play. A heartbeat is a signal, never delivered.
    await makeDestinations();
    const topic = names().playerEvents;
    const write = async (event_name: string) => {
      const broken = { ...PLAYER_EVENT, tenant_id: t.id, event_id: 'not-a-uuid', event_name, session_id: 'ses_unselected', visitor_id: `vis_unselected_${randomBytes(3).toString('hex')}` };
      const [meta] = await producer.send({ topic, acks: -1, messages: [{ key: `${t.id}:ses_unselected`, value: registry.encode('player-event', broken) }] });
      return `${topic}/${meta!.partition}/${meta!.baseOffset}`;
    };
    const heartbeat = await write('heartbeat');
    const play = await write('video_play');
    await validRecordsFlow('unselected');
    // Every group that reads player.events has committed past both (so the
    // fan-out will write no letter now), and the intent stage, which
    // noLag does not watch, has dead-lettered both.
    await noLag();
    const intent = `${s.topicPrefix}derived-intent`;
    const groupsFor = async (source: string) => new Set((await deadLetters()).filter((l) => l.source === source).map((l) => l.group));
    await expect.poll(async () => (await groupsFor(heartbeat)).has(intent) && (await groupsFor(play)).has(intent), { timeout: 30_000, interval: 250 }).toBe(true);
    expect(await groupsFor(heartbeat)).toEqual(new Set([`${s.topicPrefix}projector`, intent]));
    expect(await groupsFor(play)).toEqual(new Set([`${s.topicPrefix}projector`, `${s.topicPrefix}fanout`, intent]));
  });

  it('an event the repartition routes but that breaks the record rules: dead-lettered once by the intent stage, at its place on player.events', async () => {
    // Avro writes it (a string where a UUID belongs), so the repartition,
    // which reads three fields, copies it; the intent stage reads it whole.
    const topic = names().playerEvents;
    const broken = { ...PLAYER_EVENT, tenant_id: t.id, event_id: 'not-a-uuid', session_id: 'ses_rules', visitor_id: `vis_rules_${randomBytes(3).toString('hex')}` };
    const [meta] = await producer.send({ topic, acks: -1, messages: [{ key: `${t.id}:ses_rules`, value: registry.encode('player-event', broken) }] });
    const source = `${topic}/${meta!.partition}/${meta!.baseOffset}`;
    const intent = `${s.topicPrefix}derived-intent`;
    const letters = await eventually(async () => {
      const found = (await deadLetters()).filter((l) => l.source === source && l.group === intent);
      return found.length > 0 ? found : undefined;
    }, 30_000, 500);
    expect(letters).toEqual([{ source, group: intent, reason: 'schema_violation' }]);
    // Valid events still flow, and the intent stage commits past the batch that held it.
    await validRecordsFlow('rules');
    await expect.poll(() => lagOf(intent, names().derivedByVisitor), { timeout: 30_000, interval: 250 }).toBe(0);
    expect((await deadLetters()).filter((l) => l.source === source && l.group === intent)).toHaveLength(1);
  });
});
