import { randomBytes, randomUUID } from 'node:crypto';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { type Admin, Kafka, logLevel } from 'kafkajs';
import { afterAll, beforeAll, describe, expect, inject, it, vi } from 'vitest';
import { startLocalCluster, type LocalCluster } from '../infra/kafka/local-broker.ts';
import type { PlayerEventRecord } from '../schemas/records.ts';
import { SchemaRegistry } from '../schemas/registry.ts';
import { topicNames } from '../shared/kafka/topics.ts';
import { startHttpsReceiver, type HttpsReceiver } from './helpers/https-receiver.ts';
import { groupLags, readTopicToEnd } from './helpers/kafka-inspect.ts';
import { ServiceProcess } from './helpers/service-process.ts';

const VISITORS = 2000;
const ROUNDS = 20;
const PARTITIONS = 3;
const log = (msg: string) => console.log(`[derived-exactly-once] ${msg}`);

/**
 * The derived-events service, exactly once: three brokers, the services as
 * separate processes, 2,000 visitors crossing the threshold while the
 * derived-events process is killed with SIGKILL twice and a broker once;
 * then a replay of the whole log from the start.
 */
describe('derived events exactly once: three brokers, separate processes, kill -9', () => {
  const runId = randomBytes(3).toString('hex');
  const prefix = `eo${runId}.`;
  const topics = topicNames(prefix);
  const registry = SchemaRegistry.fromManifest();
  const secrets = { ADMIN_TOKEN: `adm_${randomBytes(16).toString('hex')}`, CURSOR_SECRET: randomBytes(24).toString('hex'), SECRETS_KEY: randomBytes(32).toString('hex') };
  const dirs: string[] = [];
  const tempDir = (name: string) => {
    const d = mkdtempSync(join(tmpdir(), `va-eo-${name}-`));
    dirs.push(d);
    return d;
  };
  let cluster: LocalCluster;
  let rx: HttpsReceiver;
  let kafka: Kafka;
  let admin: Admin;
  let main: ServiceProcess; // ingest, projector, api, admin
  let fanout: ServiceProcess;
  let derived: ServiceProcess;
  /** Delivery ids the receiver saw per visitor. */
  const idsByVisitor = new Map<string, Set<string>>();

  beforeAll(async () => {
    rx = await startHttpsReceiver();
    rx.setBehaviour((req) => {
      const visitor = String((JSON.parse(req.rawBody.toString()) as { visitor_id?: unknown }).visitor_id);
      const ids = idsByVisitor.get(visitor) ?? new Set<string>();
      ids.add(String(req.headers['x-player-delivery-id']));
      idsByVisitor.set(visitor, ids);
      return { status: 200 };
    });
    cluster = await startLocalCluster({ dataDir: tempDir('kafka'), nodes: 3, partitions: PARTITIONS, heapMb: 512, log });
    kafka = new Kafka({ clientId: 'derived-eo', brokers: cluster.brokers, logLevel: logLevel.NOTHING, retry: { retries: 10, initialRetryTime: 200, maxRetryTime: 2000 } });
    admin = kafka.admin();
    await admin.connect();
    const clickhouseUrl = inject('clickhouseUrl');
    const common = {
      ...secrets,
      ...rx.env,
      KAFKA_BROKERS: cluster.brokers.join(','),
      KAFKA_TOPIC_PREFIX: prefix,
      KAFKA_TOPIC_PARTITIONS: String(PARTITIONS),
      KAFKA_SESSION_TIMEOUT_MS: '10000',
      RATE_LIMIT_PER_MINUTE: '1000000',
      PLAYER_KEY_EVENTS_PER_MINUTE: '0',
      CLIENT_ADDRESS_REQUESTS_PER_MINUTE: '0',
      LOG_LEVEL: process.env.TEST_LOG_LEVEL ?? 'warn',
      ...(clickhouseUrl ? { CLICKHOUSE_URL: clickhouseUrl, CLICKHOUSE_DATABASE: `eo_${runId}` } : {}),
    };
    main = await ServiceProcess.start('main', { ...common, SERVICES: 'ingest,projector,api,admin', DATA_DIR: tempDir('main') });
    [fanout, derived] = await Promise.all([
      ServiceProcess.start('fanout', { ...common, SERVICES: 'fanout', DATA_DIR: tempDir('fanout') }),
      ServiceProcess.start('derived', { ...common, SERVICES: 'derived', DATA_DIR: tempDir('derived') }),
    ]);
  }, 300_000);

  afterAll(async () => {
    const outDir = join(import.meta.dirname, '..', 'test-output', 'derived-exactly-once');
    mkdirSync(outDir, { recursive: true });
    for (const p of [main, fanout, derived]) if (p) writeFileSync(join(outDir, `${p.name}.log`), p.output());
    for (const p of [main, fanout, derived]) if (p?.pid !== undefined) process.kill(p.pid, 'SIGKILL');
    await admin?.disconnect().catch(() => undefined);
    await cluster?.stop();
    await rx?.close();
    for (const d of dirs) rmSync(d, { recursive: true, force: true });
  }, 90_000);

  const call = async (method: string, path: string, token: string, body?: unknown, headers: Record<string, string> = {}) => {
    const res = await fetch(`${main.url}${path}`, {
      method,
      headers: { authorization: `Bearer ${token}`, ...headers, ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
      body: body === undefined ? undefined : JSON.stringify(body),
      signal: AbortSignal.timeout(30_000),
    });
    const text = await res.text();
    return { status: res.status, body: text ? JSON.parse(text) : undefined };
  };

  /** The high_intent_lead records of the player-event topic, read read_committed, by visitor. */
  const leadsByVisitor = async (): Promise<Map<string, string[]>> => {
    const out = new Map<string, string[]>();
    for (const r of await readTopicToEnd(kafka, admin, topics.playerEvents, 60_000)) {
      if (!r.value) continue;
      const e = registry.decode<PlayerEventRecord>('player-event', r.value);
      if (e.event_name === 'high_intent_lead') out.set(e.visitor_id, [...(out.get(e.visitor_id) ?? []), e.event_id]);
    }
    return out;
  };

  /**
   * Each visitor's score inputs as the intent stage's changelog last holds
   * them: an event counted twice (a by-visitor copy written again after a
   * kill) or never shows as a sum other than what was sent.
   */
  const inputsByVisitor = async (): Promise<Map<string, { play_ms: number; focus_ms: number; cta_clicks: number }>> => {
    const out = new Map<string, { play_ms: number; focus_ms: number; cta_clicks: number }>();
    for (const r of await readTopicToEnd(kafka, admin, topics.derivedState, 60_000)) {
      const key = r.key?.toString('utf8') ?? '';
      if (!key.startsWith('v:')) continue;
      const visitor = key.slice(key.lastIndexOf(':') + 1);
      if (r.value) out.set(visitor, JSON.parse(r.value.toString('utf8')).inputs);
      else out.delete(visitor);
    }
    return out;
  };
  /** The visitors whose inputs are not each event sent counted once. */
  const miscounted = (inputs: Map<string, { play_ms: number; focus_ms: number; cta_clicks: number }>) =>
    [...inputs].filter(([, i]) => i.play_ms !== 4000 || i.focus_ms !== 4000 || i.cta_clicks !== 1);

  /** Resolves once both derived-events groups have committed to the end of their input. */
  const derivedIdle = async (timeoutMs: number) => {
    const groups = { [`${prefix}derived-repartition`]: [topics.playerEvents], [`${prefix}derived-intent`]: [topics.derivedByVisitor] };
    await expect.poll(async () => (await groupLags(admin, groups)).reduce((n, p) => n + p.lag, 0), { timeout: timeoutMs, interval: 500 }).toBe(0);
  };

  it(
    'raises exactly one high_intent_lead per visitor through two kill -9 of the derived-events process and a broker kill, and the receiver sees one delivery id per visitor; a replay from the start raises nothing',
    async () => {
      const tenant = (await call('POST', '/admin/v1/tenants', secrets.ADMIN_TOKEN, { name: `eo-${runId}` })).body;
      const video = (await call('POST', `/admin/v1/tenants/${tenant.id}/videos`, secrets.ADMIN_TOKEN, { title: 'eo', duration_sec: 120 })).body;
      const dest = await call('POST', `/admin/v1/tenants/${tenant.id}/destinations`, secrets.ADMIN_TOKEN, { name: 'leads', url: rx.url('/leads'), events: ['high_intent_lead'] });
      expect(dest.status).toBe(201);
      const collect = async (events: Record<string, unknown>[]) => {
        // Refused while a broker is down (503) or not answered: sent again, as a player would.
        const res = await vi.waitFor(
          async () => {
            const r = await fetch(`${main.url}/v1/collect`, {
              method: 'POST',
              headers: { 'x-player-key': tenant.player_key, 'content-type': 'application/json' },
              body: JSON.stringify({ events }),
              signal: AbortSignal.timeout(30_000),
            }).catch(() => undefined);
            if (!r) throw new Error('not answered');
            if (r.status === 503) throw new Error('HTTP 503');
            return r;
          },
          { timeout: 180_000, interval: 200, message: 'collect: not accepted within 180 s' },
        );
        if (res.status !== 202) throw new Error(`collect: HTTP ${res.status} ${await res.text()}`);
      };

      // Each visitor: watched 100 % (40) and focused play (20), then a CTA
      // click (+12.5 → 73 ≥ 70) in a later round, so crossings go on throughout.
      // Each event has its id, so a request sent again is the same events.
      const visitorsPerRound = VISITORS / ROUNDS;
      const faults = (async () => {
        await sleep(4000);
        log('SIGKILL derived (1)');
        await derived.kill();
        await sleep(2000);
        await derived.restart();
        await sleep(3000);
        const { topics: meta } = await admin.fetchTopicMetadata({ topics: [topics.derivedByVisitor] });
        const victim = meta[0]!.partitions[0]!.leader;
        log(`SIGKILL broker ${victim}`);
        await cluster.kill(victim);
        await sleep(2000);
        await cluster.restart(victim);
        await sleep(3000);
        log('SIGKILL derived (2)');
        await derived.kill();
        await sleep(1000);
        await derived.restart();
      })();
      for (let round = 0; round <= ROUNDS; round++) {
        const events: Record<string, unknown>[] = [];
        if (round < ROUNDS) {
          for (let i = 0; i < visitorsPerRound; i++) {
            const v = round * visitorsPerRound + i;
            const base = { video_id: video.id, visitor_id: `vis_${v}`, session_id: `ses_${v}`, duration: 120 };
            events.push(
              { ...base, event_id: randomUUID(), event_name: 'watched_90_percent', watched_percentage: 100, current_time: 110 },
              { ...base, event_id: randomUUID(), event_name: 'heartbeat', play_ms: 4000, focus_ms: 4000, current_time: 110, watched_percentage: 100 },
            );
          }
        }
        if (round > 0) {
          for (let i = 0; i < visitorsPerRound; i++) {
            const v = (round - 1) * visitorsPerRound + i;
            events.push({ video_id: video.id, visitor_id: `vis_${v}`, session_id: `ses_${v}`, event_id: randomUUID(), event_name: 'cta_clicked', current_time: 112, watched_percentage: 100, duration: 120 });
          }
        }
        await collect(events);
        await sleep(800);
      }
      await faults;
      log('load sent; waiting for the derived-events groups and the deliveries');

      await derivedIdle(180_000);
      // The leads on the log first, then their deliveries: a shortfall says which side it is on.
      const leads = await leadsByVisitor();
      expect(leads.size).toBe(VISITORS);
      await expect.poll(() => idsByVisitor.size, { timeout: 180_000, interval: 500 }).toBe(VISITORS);
      const repeated = [...leads].filter(([, ids]) => ids.length !== 1);
      expect(repeated, `visitors with more than one high_intent_lead: ${repeated.length}`).toEqual([]);
      const manyIds = [...idsByVisitor].filter(([, ids]) => ids.size !== 1);
      expect(manyIds).toEqual([]);
      const counted = await inputsByVisitor();
      expect(counted.size).toBe(VISITORS);
      const wrong = miscounted(counted);
      expect(wrong.slice(0, 5), `visitors whose events were not each counted once: ${wrong.length}`).toEqual([]);

      // Replay: the derived-events service re-reads the whole log from the start.
      await derived.stop();
      for (const [groupId, topic] of [
        [`${prefix}derived-repartition`, topics.playerEvents],
        [`${prefix}derived-intent`, topics.derivedByVisitor],
      ] as const) {
        await admin.resetOffsets({ groupId, topic, earliest: true });
      }
      await derived.restart();
      await derivedIdle(180_000);
      const replayed = await leadsByVisitor();
      expect([...replayed].filter(([, ids]) => ids.length !== 1)).toEqual([]);
      expect(replayed.size).toBe(VISITORS);
      expect(idsByVisitor.size).toBe(VISITORS);
      expect([...idsByVisitor].filter(([, ids]) => ids.size !== 1)).toEqual([]);
      expect(miscounted(await inputsByVisitor())).toEqual([]);
    },
    900_000,
  );
});
