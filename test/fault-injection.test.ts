/**
 * Fault injection with figures. Steady player traffic through /v1/collect
 * into a three-broker Kafka cluster, with the services as separate processes
 * (ingest; projector + read API + admin; fan-out) and a real HTTPS receiver
 * with three destinations, one of which fails each delivery's first two
 * attempts. During the load, one after the other: a broker is killed with
 * SIGKILL and restarted; the fan-out process is killed while deliveries wait
 * in retry tiers, and restarted; the projector process is killed and
 * restarted; poison records are written onto every topic the service reads.
 *
 * Then, within a bound: every event answered 202 is listed exactly once;
 * every active event reached every destination that selects it (the
 * receiver got it answered 2xx, always under one delivery id, and the
 * delivery log says succeeded); no consumer group has lag; the dead-letter
 * topic holds exactly the poison records. The figures are printed per fault.
 *
 * Knobs: FAULT_LOAD_RPS (default 40 requests/s of 2 events each: on a
 * shared 2-core machine the fan-out then drains the backlog of its own
 * 30-second outage while the load goes on; at 60-100 requests/s it fell
 * minutes behind there), FAULT_LOAD_SECONDS (default 40; the load goes on
 * until 10 s after the last fault, 180 s at most).
 */
import { randomBytes } from 'node:crypto';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { type Admin, Kafka, logLevel, type Producer } from 'kafkajs';
import { afterAll, beforeAll, beforeEach, describe, expect, inject, it, vi } from 'vitest';
import { startLocalCluster, type LocalCluster } from '../infra/kafka/local-broker.ts';
import { SchemaRegistry, type Subject } from '../schemas/registry.ts';
import { topicNames, type TopicKey, type Topics } from '../shared/kafka/topics.ts';
import { startHttpsReceiver, type HttpsReceiver } from './helpers/https-receiver.ts';
import { startIntakeLoad, type IntakeLoad, type LoadRequest } from './helpers/intake-load.ts';
import { groupLags, poisonValues, readTopicToEnd, writePoison, type PartitionLag, type ReadRecord, type WrittenPoison, READ_TOPIC_SUBJECTS } from './helpers/kafka-inspect.ts';
import { metricSum, parsePrometheusText } from './helpers/prometheus-text.ts';
import { ServiceProcess } from './helpers/service-process.ts';
import { deliveryId } from '../shared/webhooks/fanout-plan.ts';

const RPS = Number(process.env.FAULT_LOAD_RPS ?? 40);
const LOAD_SECONDS = Number(process.env.FAULT_LOAD_SECONDS ?? 40);
/** Bound on the load, whatever the faults take. */
const MAX_LOAD_SECONDS = 180;
const EVENTS_PER_REQUEST = 2;
const PARTITIONS = 3;
const FLAKY_FAILURES = 2;
/** Time between one fault's recovery and the next fault. */
const SETTLE_MS = 3_000;
const SETUP_TIMEOUT_MS = 300_000;
const TEST_TIMEOUT_MS = 420_000;
/** Kept free at the end of the test for the diagnosis, the figures and the stops. */
const REPORT_RESERVE_MS = 60_000;

/** Event names cycled by the load: active events only (signals are neither listed nor delivered). */
const MIX = ['video_view', 'video_play', 'video_pause', 'cta_clicked', 'video_view', 'watched_25_percent', 'video_resume', 'video_view', 'video_play', 'session_ended'];

const DESTINATIONS = {
  plays: { path: '/plays', events: ['video_play'] },
  clicks: { path: '/clicks', events: ['cta_clicked'] },
  flaky: { path: '/flaky', events: ['cta_clicked'] },
} as const;
type DestinationKey = keyof typeof DESTINATIONS;
const selecting = (eventName: string): DestinationKey[] =>
  (Object.keys(DESTINATIONS) as DestinationKey[]).filter((k) => (DESTINATIONS[k].events as readonly string[]).includes(eventName));

/** Consumer groups (without the prefix) and the topics each reads. */
const GROUPS: Record<string, TopicKey[]> = {
  projector: ['playerEvents'],
  'projector-videos': ['videos'],
  'projector-attempts': ['webhookAttempts'],
  'projector-security': ['securityEvents'],
  fanout: ['playerEvents'],
  'fanout-manual': ['webhooksManual'],
  'fanout-retry-1m': ['retry1'],
  'fanout-retry-5m': ['retry2'],
  'fanout-retry-30m': ['retry3'],
};

const READ_TOPICS = READ_TOPIC_SUBJECTS;

type FaultName = 'broker' | 'fanout' | 'projector' | 'poison';
const FAULTS: FaultName[] = ['broker', 'fanout', 'projector', 'poison'];

interface Probe {
  visitor: string;
  request: LoadRequest;
  acceptedMs?: number;
  listedMs?: number;
  deliveredMs?: number;
  flakyDeliveredMs?: number;
}

interface FaultRecord {
  name: FaultName;
  at: number;
  /** When the next phase began (or the load ended). */
  until?: number;
  detail: Record<string, number | string>;
  probe?: Probe;
}

const log = (msg: string) => console.log(`[fault-injection] ${msg}`);
const secs = (ms: number | undefined) => (ms === undefined ? 'never' : `${(ms / 1000).toFixed(1)} s`);

describe('fault injection: three brokers, separate processes, steady load', () => {
  const runId = randomBytes(3).toString('hex');
  const prefix = `fi${runId}.`;
  const topics: Topics = topicNames(prefix);
  const secrets = {
    ADMIN_TOKEN: `adm_${randomBytes(16).toString('hex')}`,
    CURSOR_SECRET: randomBytes(24).toString('hex'),
    SECRETS_KEY: randomBytes(32).toString('hex'),
  };
  const dirs: string[] = [];
  const tempDir = (name: string) => {
    const d = mkdtempSync(join(tmpdir(), `va-fi-${name}-`));
    dirs.push(d);
    return d;
  };

  let cluster: LocalCluster;
  let rx: HttpsReceiver;
  let read: ServiceProcess; // projector, api, admin
  let ingest: ServiceProcess;
  let fanout: ServiceProcess;
  let kafka: Kafka;
  let admin: Admin;
  let producer: Producer;
  const flakyTries = new Map<string, number>();
  /** Receiver requests by `<path> <visitor>`: delivery ids seen, and when one was first answered 2xx. */
  const byPair = new Map<string, { ids: Set<string>; okAt?: number }>();
  /** When each request answered 2xx arrived. */
  const okTimes: number[] = [];

  const processes = () => [read, ingest, fanout].filter((p): p is ServiceProcess => p !== undefined);

  beforeAll(async () => {
    const setupStarted = performance.now();
    rx = await startHttpsReceiver();
    rx.setBehaviour((req) => {
      let status = 200;
      if (req.path === DESTINATIONS.flaky.path) {
        const id = String(req.headers['x-player-delivery-id']);
        const n = (flakyTries.get(id) ?? 0) + 1;
        flakyTries.set(id, n);
        status = n <= FLAKY_FAILURES ? 503 : 200;
      }
      // Indexed once here: scanning every request body on each poll would
      // cost the test process (and so the receiver and the load) its CPU.
      const visitor = String((JSON.parse(req.rawBody.toString()) as { visitor_id?: unknown }).visitor_id);
      const k = `${req.path} ${visitor}`;
      const entry = byPair.get(k) ?? { ids: new Set<string>() };
      entry.ids.add(String(req.headers['x-player-delivery-id']));
      if (status === 200) {
        entry.okAt ??= req.receivedAt;
        okTimes.push(req.receivedAt);
      }
      byPair.set(k, entry);
      return { status };
    });
    cluster = await startLocalCluster({ dataDir: tempDir('kafka'), nodes: 3, partitions: PARTITIONS, heapMb: 512, log });
    kafka = new Kafka({ clientId: 'fault-injection', brokers: cluster.brokers, logLevel: logLevel.NOTHING, retry: { retries: 10, initialRetryTime: 200, maxRetryTime: 2_000 } });
    admin = kafka.admin();
    producer = kafka.producer();
    await Promise.all([admin.connect(), producer.connect()]);

    const clickhouseUrl = inject('clickhouseUrl');
    const common = {
      ...secrets,
      KAFKA_BROKERS: cluster.brokers.join(','),
      KAFKA_TOPIC_PREFIX: prefix,
      KAFKA_TOPIC_PARTITIONS: String(PARTITIONS),
      WEBHOOK_RETRY_DELAYS_S: '1,2,3',
      WEBHOOK_ALLOWED_CIDRS: '127.0.0.0/8',
      WEBHOOK_CA_FILE: rx.caFile,
      RATE_LIMIT_PER_MINUTE: '1000000',
      // NOTE: a lane past its queue bound defers deliveries to the first tier
      // and, after three deferrals (sixty while the destination answers),
      // counts the full lane as a failed attempt. Here a broker outage can
      // leave the receiver without a success for longer than the progress
      // window (30 s), and with tiers of 1, 2 and 3 s (instead of 1, 5 and
      // 30 min) the backlog would then use up all four attempts within
      // seconds; the bound is about slow destinations
      // (webhooks-backlog.test.ts, webhooks-burst.test.ts), and the receiver
      // here is never slow, so it is set above this run's deliveries.
      FANOUT_PER_DESTINATION_QUEUE: '100000',
      // A killed process's partitions stand still for the group session
      // timeout (30 s by default); 10 s, as an operator wanting quick
      // recovery would set it, shows that the recovery follows it.
      KAFKA_SESSION_TIMEOUT_MS: '10000',
      LOG_LEVEL: process.env.TEST_LOG_LEVEL ?? 'warn',
      ...(clickhouseUrl ? { CLICKHOUSE_URL: clickhouseUrl, CLICKHOUSE_DATABASE: `fi_${runId}` } : {}),
    };
    // All at once: creating the topics is race-free.
    [read, ingest, fanout] = await Promise.all([
      ServiceProcess.start('projector+api+admin', { ...common, SERVICES: 'projector,api,admin', DATA_DIR: tempDir('read') }),
      ServiceProcess.start('ingest', { ...common, SERVICES: 'ingest', DATA_DIR: tempDir('ingest') }),
      ServiceProcess.start('fanout', { ...common, SERVICES: 'fanout', DATA_DIR: tempDir('fanout') }),
    ]);
    log(`cluster and three service processes up in ${secs(performance.now() - setupStarted)}`);
  }, SETUP_TIMEOUT_MS);

  beforeEach(({ onTestFailed }) => {
    onTestFailed(() => {
      for (const p of processes()) console.error(`--- ${p.name} (last output) ---\n${p.output().slice(-3000)}`);
    });
  });

  afterAll(async () => {
    // Each process's output, for whoever reads a failure (test-output/ is not committed).
    const outDir = join(import.meta.dirname, '..', 'test-output', 'fault-injection');
    mkdirSync(outDir, { recursive: true });
    for (const p of processes()) writeFileSync(join(outDir, `${p.name.replaceAll('+', '-')}.log`), p.output());
    for (const p of processes()) if (p.pid !== undefined) process.kill(p.pid, 'SIGKILL');
    await producer?.disconnect().catch(() => undefined);
    await admin?.disconnect().catch(() => undefined);
    await cluster?.stop();
    await rx?.close();
    for (const d of dirs) rmSync(d, { recursive: true, force: true });
  }, 90_000);

  /** fetch against the read process; JSON in and out. */
  const call = async (method: string, path: string, token: string, body?: unknown): Promise<{ status: number; body: any }> => {
    const res = await fetch(`${read.url}${path}`, {
      method,
      headers: { authorization: `Bearer ${token}`, ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
      body: body === undefined ? undefined : JSON.stringify(body),
      signal: AbortSignal.timeout(30_000),
    });
    const text = await res.text();
    return { status: res.status, body: text ? JSON.parse(text) : undefined };
  };
  const adminCall = (method: string, path: string, body?: unknown) => call(method, `/admin/v1${path}`, secrets.ADMIN_TOKEN, body);

  /**
   * Polls `check` until it returns a value; undefined when `timeoutMs` passes
   * first: a figure ("never"), not a failure. A check that throws is tried again.
   */
  const poll = <T>(check: () => Promise<T | undefined>, timeoutMs: number, everyMs = 250): Promise<T | undefined> =>
    vi
      .waitFor(
        async () => {
          const value = await check();
          if (value === undefined) throw new Error('not yet');
          return value;
        },
        { timeout: timeoutMs, interval: everyMs },
      )
      .catch(() => undefined);

  /** Partitions of player events and of the internal topics whose ISR lacks a node. */
  const underReplicated = async (): Promise<number> => {
    const { topics: meta } = await admin.fetchTopicMetadata({ topics: [topics.playerEvents, '__consumer_offsets', '__transaction_state'] });
    return meta.flatMap((t) => t.partitions).filter((p) => p.isr.length < 3).length;
  };

  it(
    'loses no accepted event and no delivery, duplicates nothing, leaves no lag and dead-letters exactly the poison, through broker, fan-out, projector kills and poison',
    async () => {
      // Every wait below ends by this deadline, so the figures are printed whatever happens.
      const deadline = Date.now() + TEST_TIMEOUT_MS - REPORT_RESERVE_MS;
      const until = (ms: number) => Math.max(0, Math.min(ms, deadline - Date.now()));
      // --- A tenant, its API key, two videos (load and probes), three destinations.
      const tenant = (await adminCall('POST', '/tenants', { name: `fault-injection-${runId}` })).body;
      const key = (await adminCall('POST', `/tenants/${tenant.id}/api-keys`, { name: 'reader' })).body;
      const loadVideo = (await adminCall('POST', `/tenants/${tenant.id}/videos`, { title: 'load', duration_sec: 120 })).body.id as string;
      const probeVideo = (await adminCall('POST', `/tenants/${tenant.id}/videos`, { title: 'probes', duration_sec: 120 })).body.id as string;
      const destinationIds = {} as Record<DestinationKey, string>;
      for (const k of Object.keys(DESTINATIONS) as DestinationKey[]) {
        const res = await adminCall('POST', `/tenants/${tenant.id}/destinations`, { name: k, url: rx.url(DESTINATIONS[k].path), events: DESTINATIONS[k].events });
        expect(res.status, JSON.stringify(res.body)).toBe(201);
        destinationIds[k] = res.body.id;
      }
      const pathOf = new Map<string, DestinationKey>((Object.keys(DESTINATIONS) as DestinationKey[]).map((k) => [DESTINATIONS[k].path, k]));

      const listEvents = async (videoId: string): Promise<{ visitor_id: string }[]> => {
        const out: { visitor_id: string }[] = [];
        let cursor: string | null = null;
        do {
          const qs = new URLSearchParams({ limit: '1000', ...(cursor ? { cursor } : {}) });
          const res = await call('GET', `/v1/videos/${videoId}/events?${qs}`, key.key);
          if (res.status !== 200) throw new Error(`events page: ${res.status} ${JSON.stringify(res.body)}`);
          out.push(...res.body.data);
          cursor = res.body.next_cursor;
        } while (cursor);
        return out;
      };
      const deliveryLog = async (): Promise<Map<string, string>> => {
        const out = new Map<string, string>();
        let cursor: string | null = null;
        do {
          const qs = new URLSearchParams({ limit: '1000', ...(cursor ? { cursor } : {}) });
          const res = await adminCall('GET', `/tenants/${tenant.id}/deliveries?${qs}`);
          if (res.status !== 200) throw new Error(`deliveries page: ${res.status} ${JSON.stringify(res.body)}`);
          for (const d of res.body.data) out.set(d.id, d.status);
          cursor = res.body.next_cursor;
        } while (cursor);
        return out;
      };

      // --- The load (not started yet) and probes: one cta_clicked on the probe video, timed end to end.
      let load: IntakeLoad | undefined;
      const probeLoad = startIntakeLoad({
        url: () => ingest.url,
        playerKey: tenant.player_key,
        videoId: probeVideo,
        rps: 0,
        seconds: 0,
        maxRequests: 0,
        concurrency: 1,
        eventsPerRequest: 1,
        eventName: () => 'cta_clicked',
        retryForMs: 90_000,
        tag: `p${runId}`,
      });
      const receivedOk = async (path: string, visitor: string): Promise<number | undefined> => byPair.get(`${path} ${visitor}`)?.okAt;
      const probe = (label: string): { probe: Probe; settled: Promise<void> } => {
        const visitor = `vis_probe_${label}_${runId}`;
        const { request, done } = probeLoad.sendOne([{ visitor, name: 'cta_clicked', videoId: probeVideo }]);
        const p: Probe = { visitor, request };
        const t0 = request.firstSentAt;
        const settled = Promise.all([
          done.then(() => {
            if (request.acceptedAt) p.acceptedMs = request.acceptedAt - t0;
          }),
          poll(async () => ((await listEvents(probeVideo)).some((e) => e.visitor_id === visitor) ? Date.now() : undefined), until(150_000), 500).then((at) => {
            if (at) p.listedMs = at - t0;
          }),
          poll(() => receivedOk(DESTINATIONS.clicks.path, visitor), until(150_000), 100).then((at) => {
            if (at) p.deliveredMs = at - t0;
          }),
          poll(() => receivedOk(DESTINATIONS.flaky.path, visitor), until(150_000), 100).then((at) => {
            if (at) p.flakyDeliveredMs = at - t0;
          }),
        ]).then(() => undefined);
        return { probe: p, settled };
      };

      // --- Warm-up: every process knows the tenant, the videos and the destinations end to end.
      const warm = probe('warm-up');
      await warm.settled;
      expect(warm.probe, 'warm-up probe went through intake, projection and every destination').toMatchObject({
        acceptedMs: expect.any(Number),
        listedMs: expect.any(Number),
        deliveredMs: expect.any(Number),
        flakyDeliveredMs: expect.any(Number),
      });
      log(`warm-up probe: accepted ${secs(warm.probe.acceptedMs)}, listed ${secs(warm.probe.listedMs)}, delivered ${secs(warm.probe.deliveredMs)} (flaky ${secs(warm.probe.flakyDeliveredMs)})`);

      // --- Load, and the faults one after the other while it runs.
      load = startIntakeLoad({
        url: () => ingest.url,
        playerKey: tenant.player_key,
        videoId: loadVideo,
        rps: RPS,
        seconds: MAX_LOAD_SECONDS,
        maxRequests: RPS * MAX_LOAD_SECONDS,
        concurrency: 64,
        eventsPerRequest: EVENTS_PER_REQUEST,
        eventName: (n) => MIX[n % MIX.length]!,
        retryForMs: 90_000,
        tag: `l${runId}`,
      });
      const loadStart = load.startedAt;
      const faults: FaultRecord[] = [];
      const probes: Promise<void>[] = [];
      const since = (t: number) => Date.now() - t;
      const begin = (name: FaultName): FaultRecord => {
        const f: FaultRecord = { name, at: Date.now(), detail: {} };
        const last = faults.at(-1);
        if (last) last.until = f.at;
        faults.push(f);
        return f;
      };
      const startProbe = (f: FaultRecord) => {
        const p = probe(f.name);
        f.probe = p.probe;
        probes.push(p.settled);
      };
      const waitUntil = async (t: number) => {
        while (Date.now() < t) await sleep(100);
      };

      await waitUntil(loadStart + 8_000);

      // 1. A broker: the node leading most player-event partitions, SIGKILL, down 3 s, restarted.
      {
        const { topics: meta } = await admin.fetchTopicMetadata({ topics: [topics.playerEvents] });
        const led = new Map<number, number>();
        for (const p of meta[0]!.partitions) led.set(p.leader, (led.get(p.leader) ?? 0) + 1);
        const victim = [...led].sort((a, b) => b[1] - a[1])[0]![0];
        const f = begin('broker');
        await cluster.kill(victim);
        startProbe(f);
        await sleep(1_000);
        const restartAt = Date.now();
        await cluster.restart(victim);
        f.detail.node = victim;
        f.detail.restart_ms = since(restartAt);
        const inIsr = await poll(async () => ((await underReplicated()) === 0 ? Date.now() : undefined), 90_000, 250);
        f.detail.back_in_every_isr_ms = inIsr === undefined ? 'never' : inIsr - restartAt;
        log(`broker fault: node ${victim} killed, restarted in ${secs(Number(f.detail.restart_ms))}, back in every ISR ${inIsr === undefined ? 'never' : `${secs(inIsr - restartAt)} after the restart began`}`);
        await sleep(SETTLE_MS);
      }

      // 2. The fan-out process, while deliveries wait in the retry tiers.
      {
        const waiting = () => [...flakyTries].filter(([, n]) => n <= FLAKY_FAILURES).length;
        await poll(async () => (waiting() > 0 ? true : undefined), 15_000, 50);
        const f = begin('fanout');
        f.detail.waiting_in_tiers_at_kill = waiting();
        await fanout.kill();
        startProbe(f);
        await sleep(1_000);
        f.detail.restart_ms = Math.round(await fanout.restart());
        log(`fan-out fault: killed with ${f.detail.waiting_in_tiers_at_kill} flaky deliveries between attempts, ready again in ${secs(Number(f.detail.restart_ms))}`);
        await sleep(SETTLE_MS);
      }

      // 3. The projector process (with the read and admin APIs).
      {
        const f = begin('projector');
        await read.kill();
        startProbe(f);
        await sleep(1_000);
        f.detail.restart_ms = Math.round(await read.restart());
        log(`projector fault: killed, ready again in ${secs(Number(f.detail.restart_ms))}`);
        await sleep(SETTLE_MS);
      }

      // 4. Poison on every topic the service reads.
      const registry = SchemaRegistry.fromManifest();
      const poison: WrittenPoison[] = [];
      let poisonFault: FaultRecord;
      {
        const f = begin('poison');
        poisonFault = f;
        for (const [k, subject] of Object.entries(READ_TOPICS) as [TopicKey, Subject][]) {
          poison.push(...(await writePoison(producer, topics[k], poisonValues(registry.writerId(subject)))));
        }
        f.detail.records = poison.length;
        f.detail.topics = Object.keys(READ_TOPICS).length;
        startProbe(f);
        log(`poison: ${poison.length} records on ${f.detail.topics} topics`);
      }
      const sourceOf = (r: { topic: string; partition: number; offset: string }) => `${r.topic}/${r.partition}/${r.offset}`;
      const poisonSources = new Set(poison.map(sourceOf));
      const dlqSources = (records: ReadRecord[]) =>
        new Set(records.map((r) => `${r.headers['dlq-source-topic']}/${r.headers['dlq-source-partition']}/${r.headers['dlq-source-offset']}`));
      const dlqComplete = poll(
        async () => {
          const found = dlqSources(await readTopicToEnd(kafka, admin, topics.deadLetters, 20_000));
          return [...poisonSources].every((s) => found.has(s)) ? Date.now() : undefined;
        },
        until(90_000),
        1_000,
      ).then((at) => {
        poisonFault.detail.all_dead_lettered_ms = at === undefined ? 'never' : at - poisonFault.at;
      });

      // The load runs its minimum, and 10 s past the last fault.
      await waitUntil(Math.max(loadStart + LOAD_SECONDS * 1000, Date.now() + 10_000));
      const loadEnd = Date.now();
      await load.stop(until(100_000));
      faults.at(-1)!.until = loadEnd;
      // The probes keep timing (within the deadline) while the state converges.
      const probesSettled = Promise.all([...probes, dlqComplete]);

      // --- Converge: wait (bounded) until nothing is missing, then take the final state.
      const requests = [...load.requests, ...probeLoad.requests];
      const events = requests.flatMap((r) => r.events.map((e) => ({ ...e, request: r })));
      const groups = Object.fromEntries(Object.entries(GROUPS).map(([g, ks]) => [`${prefix}${g}`, ks.map((k) => topics[k])]));
      type State = {
        listed: Map<string, number>;
        log: Map<string, string>;
        lags: PartitionLag[];
        dlq: ReadRecord[];
        metricLag: number;
        deadLetteredMetric: number;
      };
      const snapshot = async (): Promise<State> => {
        const listed = new Map<string, number>();
        for (const v of [loadVideo, probeVideo]) for (const e of await listEvents(v)) listed.set(e.visitor_id, (listed.get(e.visitor_id) ?? 0) + 1);
        const texts = await Promise.all(processes().map((p) => p.metrics()));
        return {
          listed,
          log: await deliveryLog(),
          lags: await groupLags(admin, groups),
          dlq: await readTopicToEnd(kafka, admin, topics.deadLetters, 30_000),
          metricLag: texts.reduce((sum, t) => sum + metricSum(t, 'kafka_consumer_lag'), 0),
          deadLetteredMetric: texts.reduce((sum, t) => sum + metricSum(t, 'dead_lettered_records_total'), 0),
        };
      };

      const received = () => new Map([...byPair].map(([k, v]) => [k, { ids: v.ids, ok: v.okAt !== undefined }]));

      const phaseOf = (t: number): string => {
        let name = 'baseline';
        for (const f of faults) if (t >= f.at) name = f.name;
        return name;
      };
      const tally = (s: State) => {
        const rec = received();
        const phases = ['baseline', ...FAULTS, 'total'];
        const row = () => ({ sent: 0, accepted: 0, listed: 0, missing: 0, duplicated: 0, notAcceptedButListed: 0, expected: 0, delivered: 0, undelivered: 0, notSucceeded: 0, manyIds: 0 });
        const rows = new Map(phases.map((p) => [p, row()]));
        const problems = { missing: [] as string[], duplicated: [] as string[], undelivered: [] as string[], notSucceeded: [] as string[], manyIds: [] as string[] };
        const samples = { undelivered: [] as { dest: string; visitor: string; id: string }[], notSucceeded: [] as { dest: string; visitor: string; id: string }[] };
        for (const e of events) {
          const targets = [rows.get(phaseOf(e.request.firstSentAt))!, rows.get('total')!];
          const n = s.listed.get(e.visitor) ?? 0;
          const ok = e.request.outcome === 'accepted';
          for (const r of targets) {
            r.sent++;
            if (ok) r.accepted++;
            if (ok && n >= 1) r.listed++;
            if (ok && n === 0) r.missing++;
            if (n > 1) r.duplicated++;
            if (!ok && n > 0) r.notAcceptedButListed++;
          }
          if (ok && n === 0) problems.missing.push(e.visitor);
          if (n > 1) problems.duplicated.push(`${e.visitor}×${n}`);
          if (!ok) continue;
          for (const d of selecting(e.name)) {
            const got = rec.get(`${DESTINATIONS[d].path} ${e.visitor}`);
            const status = got && got.ids.size === 1 ? s.log.get([...got.ids][0]!) : undefined;
            for (const r of targets) {
              r.expected++;
              if (got?.ok) r.delivered++;
              else r.undelivered++;
              if (got?.ok && status !== 'succeeded') r.notSucceeded++;
              if (got && got.ids.size > 1) r.manyIds++;
            }
            if (!got?.ok) {
              problems.undelivered.push(`${d}:${e.visitor}`);
              samples.undelivered.push({ dest: d, visitor: e.visitor, id: deliveryId(e.eventId, destinationIds[d]) });
            } else if (status !== 'succeeded') {
              problems.notSucceeded.push(`${d}:${e.visitor}:${status ?? 'not in the log'}`);
              samples.notSucceeded.push({ dest: d, visitor: e.visitor, id: [...got.ids][0]! });
            }
            if (got && got.ids.size > 1) problems.manyIds.push(`${d}:${e.visitor}:${[...got.ids].join(',')}`);
          }
        }
        // Deliveries to a destination that does not select the event, or of an event this test never sent.
        const sentNames = new Map(events.map((e) => [e.visitor, e.name]));
        let stray = 0;
        for (const k of rec.keys()) {
          const [path, visitor] = k.split(' ') as [string, string];
          const name = sentNames.get(visitor);
          const dest = pathOf.get(path);
          if (!name || !dest || !selecting(name).includes(dest)) stray++;
        }
        let unknownListed = 0;
        for (const v of s.listed.keys()) if (!sentNames.has(v)) unknownListed++;
        const lag = s.lags.reduce((sum, l) => sum + l.lag, 0);
        const found = dlqSources(s.dlq);
        const dead = {
          expected: poisonSources.size,
          found: [...poisonSources].filter((x) => found.has(x)).length,
          missing: [...poisonSources].filter((x) => !found.has(x)),
          unexpected: [...found].filter((x) => !poisonSources.has(x)),
          letters: s.dlq.length,
        };
        return { rows, problems, samples, stray, unknownListed, lag, dead };
      };

      const convergeStarted = Date.now();
      let last: { state: State; t: ReturnType<typeof tally> } | undefined;
      let snapshotError: unknown;
      const converged = (x: ReturnType<typeof tally>, st: State) =>
        x.rows.get('total')!.missing === 0 &&
        x.rows.get('total')!.undelivered === 0 &&
        x.rows.get('total')!.notSucceeded === 0 &&
        x.lag === 0 &&
        x.dead.missing.length === 0 &&
        st.metricLag === 0;
      // A snapshot every 3 s until one has converged, or until one ends past
      // `deadline - 15 s`: the last one read is the final state, converged or
      // not (the figures and checks below say what is missing).
      await vi
        .waitFor(
          async () => {
            try {
              const st = await snapshot();
              last = { state: st, t: tally(st) };
              snapshotError = undefined;
            } catch (err) {
              // A process may be restarting; the bound still holds.
              snapshotError = err;
            }
            if (!(last && converged(last.t, last.state)) && Date.now() <= deadline - 15_000) throw new Error('not converged yet');
          },
          { timeout: until(TEST_TIMEOUT_MS), interval: 3_000 },
        )
        .catch(() => undefined);
      const { state, t } = last ?? {};
      await Promise.race([probesSettled, sleep(until(60_000))]);
      const exits = processes().flatMap((p) => p.unexpectedExits);
      if (!state || !t) {
        throw new Error(`no state could be read after the load (${String(snapshotError)}); unexpected exits: ${exits.map((e) => `${e.name} ${e.signal ?? e.code}`).join(', ') || 'none'}`);
      }
      const convergedAfterMs = Date.now() - convergeStarted;

      // --- Diagnosis of what is missing: the delivery log's view and the processes' own words.
      const diagnosis: string[] = [];
      const attemptsText = await fanout.metrics();
      const byClass = parsePrometheusText(attemptsText, 'webhook_attempts_total').map((x) => `${x.labels.outcome}, ${x.labels.error_class} ${x.value}`);
      diagnosis.push(`fan-out attempts since its restart (outcome, error_class): ${byClass.join('; ') || 'none'}`);
      const logStatus = new Map<string, number>();
      for (const x of [...t.samples.undelivered, ...t.samples.notSucceeded]) {
        const st = state.log.get(x.id) ?? 'not in the log';
        logStatus.set(st, (logStatus.get(st) ?? 0) + 1);
      }
      if (logStatus.size > 0) diagnosis.push(`delivery log status of the undelivered or not succeeded: ${[...logStatus].map(([k, v]) => `${k} ${v}`).join(', ')}`);
      // Where each sample delivery went on Kafka: the retry tiers, the failed topic, the attempt log.
      const trail = new Map<string, string[]>();
      const sampled = [...t.samples.undelivered.slice(0, 6), ...t.samples.notSucceeded.slice(0, 6)];
      if (sampled.length > 0) {
        const wanted = new Set(sampled.map((x) => x.id));
        for (const k of ['retry1', 'retry2', 'retry3', 'webhooksFailed', 'webhookAttempts'] as const) {
          const subject = k === 'webhookAttempts' ? 'webhook-attempt' : 'delivery';
          for (const r of await readTopicToEnd(kafka, admin, topics[k], 15_000).catch(() => [] as ReadRecord[])) {
            let rec: { delivery_id: string; attempt: number; state?: string };
            try {
              rec = registry.decode(subject, r.value ?? Buffer.alloc(0));
            } catch {
              continue;
            }
            if (!wanted.has(rec.delivery_id)) continue;
            const list = trail.get(rec.delivery_id) ?? [];
            list.push(`${k}/${r.partition}@${r.offset}#${rec.attempt}${rec.state ? ` ${rec.state}` : ''}`);
            trail.set(rec.delivery_id, list);
          }
        }
      }
      for (const x of sampled) {
        const d = await adminCall('GET', `/tenants/${tenant.id}/deliveries/${x.id}`).catch(() => undefined);
        const attempts = (d?.body?.attempts ?? []).map((a: { attempt: number; outcome: string; error_class: string | null; status_code: number | null }) => `#${a.attempt} ${a.outcome} ${a.error_class ?? a.status_code}`);
        const seen = rx.requests.filter((r) => r.rawBody.includes(`"${x.visitor}"`)).map((r) => `${r.path}@${r.receivedAt - loadStart}ms`);
        diagnosis.push(
          `  ${x.dest} ${x.visitor} delivery ${x.id}: ${d?.status === 200 ? `${d.body.status}, attempts ${attempts.join(', ') || 'none'}` : `log ${d?.status}`}; ` +
            `receiver saw ${seen.join(' ') || 'nothing'}; on Kafka: ${trail.get(x.id)?.join(' ') ?? 'nothing'}`,
        );
      }
      // Whether an accepted event that is not listed ever reached the event log.
      if (t.problems.missing.length > 0) {
        const wanted = new Set(t.problems.missing.slice(0, 20));
        const found = new Map<string, string>();
        for (const r of await readTopicToEnd(kafka, admin, topics.playerEvents, 20_000).catch(() => [] as ReadRecord[])) {
          try {
            const e = registry.decode<{ visitor_id: string }>('player-event', r.value ?? Buffer.alloc(0));
            if (wanted.has(e.visitor_id)) found.set(e.visitor_id, `${r.partition}@${r.offset}`);
          } catch {
            // poison
          }
        }
        const byVisitor = new Map(events.map((e) => [e.visitor, e]));
        for (const v of wanted) {
          const e = byVisitor.get(v)!;
          const tries = e.request.tries.map((x) => `${x.status}@${x.at - loadStart}ms`).join(' ');
          diagnosis.push(`  missing ${v} (${e.name}, request sent @${e.request.firstSentAt - loadStart}ms, tries ${tries}): on player.events ${found.get(v) ?? 'NOWHERE (committed read)'}`);
        }
      }
      // What sits at a lagging group's committed offset.
      for (const l of state.lags.filter((x) => x.lag > 0).slice(0, 2)) {
        const records = await readTopicToEnd(kafka, admin, l.topic, 15_000).catch(() => [] as ReadRecord[]);
        const at = records.filter((r) => r.partition === l.partition && BigInt(r.offset) >= BigInt(l.committed)).slice(0, 3);
        const describe = (r: ReadRecord) => {
          const isPoison = poison.find((p) => p.topic === l.topic && p.partition === r.partition && p.offset === r.offset);
          if (isPoison) return `@${r.offset} poison ${isPoison.kind}`;
          try {
            const e = registry.decode<{ visitor_id?: string; event_name?: string }>(l.topic === topics.playerEvents ? 'player-event' : 'delivery', r.value ?? Buffer.alloc(0));
            return `@${r.offset} ${e.event_name ?? ''} ${e.visitor_id ?? ''}`;
          } catch (err) {
            return `@${r.offset} undecodable (${(err as Error).message})`;
          }
        };
        diagnosis.push(`lag ${l.group.slice(prefix.length)} ${l.topic.slice(prefix.length)}/${l.partition}: committed ${l.committed}, high ${l.high}; first records from there: ${at.map(describe).join(', ') || 'none (markers only)'}`);
      }
      for (const p of processes()) {
        const counts = new Map<string, number>();
        for (const line of p.output().split('\n')) {
          const m = /"msg":"([^"]+)"/.exec(line);
          if (m) counts.set(m[1]!, (counts.get(m[1]!) ?? 0) + 1);
        }
        diagnosis.push(`${p.name} logged: ${[...counts].sort((a, b) => b[1] - a[1]).slice(0, 12).map(([k, v]) => `${k}×${v}`).join(', ') || 'nothing'}`);
      }

      // --- Figures.
      const windowOf = (f: FaultRecord) => ({ from: f.at, to: Math.min(f.until ?? loadEnd, f.at + 30_000) });
      const longestGap = (times: number[], from: number, to: number) => {
        let last = from;
        let gap = 0;
        for (const x of times.filter((x) => x >= from && x <= to).sort((a, b) => a - b)) {
          gap = Math.max(gap, x - last);
          last = x;
        }
        return Math.max(gap, to - last);
      };
      const acceptedTimes = load.requests.flatMap((r) => r.tries.filter((x) => x.status === 202).map((x) => x.at));
      const deliveredTimes = okTimes;
      const lines: string[] = [];
      const achieved = load.requests.length / ((loadEnd - loadStart) / 1000);
      lines.push(
        `load: ${load.requests.length} requests of ${EVENTS_PER_REQUEST} events in ${secs(loadEnd - loadStart)} (${achieved.toFixed(0)} requests/s, target ${RPS}); ` +
          `tries answered 202: ${acceptedTimes.length}, other tries: ${load.requests.reduce((n, r) => n + r.tries.filter((x) => x.status !== 202).length, 0)}; ` +
          `webhook requests: ${rx.requests.length}`,
      );
      for (const f of faults) {
        const w = windowOf(f);
        const rejected = load.requests.flatMap((r) => r.tries).filter((x) => x.status !== 202 && x.at >= f.at && x.at <= (f.until ?? loadEnd)).length;
        const p = f.probe;
        lines.push(
          `fault ${f.name.padEnd(9)} at +${secs(f.at - loadStart)}: ${Object.entries(f.detail)
            .map(([k, v]) => `${k}=${typeof v === 'number' && k.endsWith('_ms') ? secs(v) : v}`)
            .join(' ')}; intake: longest gap without a 202 ${secs(longestGap(acceptedTimes, w.from, w.to))}, ${rejected} tries not 202; ` +
            `deliveries: longest gap without a 2xx ${secs(longestGap(deliveredTimes, w.from, w.to))}; ` +
            `probe sent at the fault: accepted ${secs(p?.acceptedMs)}, listed ${secs(p?.listedMs)}, delivered ${secs(p?.deliveredMs)} (flaky destination ${secs(p?.flakyDeliveredMs)})`,
        );
      }
      const header = ['phase', 'sent', 'accepted', 'listed', 'missing', 'duplicated', 'listed, not 202', 'deliveries expected', 'seen', 'missing', 'not succeeded', 'several ids'];
      const table = [header, ...[...t.rows].map(([name, r]) => [name, r.sent, r.accepted, r.listed, r.missing, r.duplicated, r.notAcceptedButListed, r.expected, r.delivered, r.undelivered, r.notSucceeded, r.manyIds].map(String))];
      const widths = header.map((_, i) => Math.max(...table.map((row) => row[i]!.length)));
      for (const row of table) lines.push(row.map((c, i) => (i === 0 ? c.padEnd(widths[i]!) : c.padStart(widths[i]!))).join('  '));
      lines.push('(an event counts in the phase its request was first sent in: a request in flight when a fault hits counts in the phase before)');
      const laggards = state.lags.filter((l) => l.lag > 0).map((l) => `${l.group.slice(prefix.length)} ${l.topic.slice(prefix.length)}/${l.partition}: ${l.lag}`);
      lines.push(`consumer lag (broker, ${Object.keys(groups).length} groups): ${t.lag}${laggards.length ? ` (${laggards.join('; ')})` : ''}; kafka_consumer_lag in /metrics: ${state.metricLag}`);
      lines.push(
        `dead letters: poison written ${t.dead.expected}, found ${t.dead.found}, missing ${t.dead.missing.length}, unexpected ${t.dead.unexpected.length} ` +
          `(${t.dead.letters} dead-letter records, one per reader; dead_lettered_records_total ${state.deadLetteredMetric})`,
      );
      lines.push(`stray deliveries: ${t.stray}; listed events never sent: ${t.unknownListed}; requests refused (4xx): ${requests.filter((r) => r.outcome === 'refused').length}, given up: ${requests.filter((r) => r.outcome === 'gave_up').length}`);
      lines.push(`final state ${converged(t, state) ? 'reached' : 'NOT reached'} ${secs(convergedAfterMs)} after the load stopped${snapshotError ? ` (last read failed: ${String(snapshotError)})` : ''}`);
      lines.push(`processes that exited on their own: ${exits.map((e) => `${e.name} (${e.signal ?? `code ${e.code}`}) at +${secs(e.at - loadStart)}`).join(', ') || 'none'}`);
      console.log(`\n[fault-injection] figures\n${lines.join('\n')}\n\n[fault-injection] diagnosis\n${diagnosis.join('\n')}\n`);

      // --- Processes: none died on its own; each stops cleanly on SIGTERM.
      const stops = [];
      for (const p of processes()) stops.push({ name: p.name, ...(await p.stop(30_000)) });
      log(`graceful stops: ${stops.map((s) => `${s.name} exit ${s.code} in ${secs(s.ms)}`).join(', ')}`);
      expect(processes().flatMap((p) => p.unexpectedExits).map((e) => `${e.name}: ${e.signal ?? e.code}\n${e.output}`)).toEqual([]);

      // --- Assertions: zeros wherever loss or duplication would show.
      const total = t.rows.get('total')!;
      expect(requests.filter((r) => r.outcome === 'refused').map((r) => r.tries.at(-1))).toEqual([]);
      expect(requests.filter((r) => r.outcome !== 'accepted').length, 'requests never answered 202').toBe(0);
      expect(total.accepted, 'the load ran').toBeGreaterThanOrEqual(1_000);
      for (const f of faults) expect(f.probe, `probe of the ${f.name} fault`).toMatchObject({ acceptedMs: expect.any(Number), listedMs: expect.any(Number), deliveredMs: expect.any(Number), flakyDeliveredMs: expect.any(Number) });
      expect(Number(faults.find((f) => f.name === 'fanout')!.detail.waiting_in_tiers_at_kill)).toBeGreaterThan(0);
      expect(t.problems.missing.slice(0, 20), `${total.missing} accepted events not listed`).toEqual([]);
      expect(t.problems.duplicated.slice(0, 20), `${total.duplicated} events listed more than once`).toEqual([]);
      expect(t.unknownListed).toBe(0);
      // NOTE: unpatched, kafkajs 2.2.4 fails these now and then: a sendBatch
      // whose partitions span the killed leader and a broker that already
      // answered sends nothing more to that broker when the partitions move
      // there, and resolves as if all were written (tulios/kafkajs#1303;
      // patches/README.md). The diagnosis then shows an attempt logged
      // 'retrying' with no record on the next tier, or a 2xx answer with no
      // attempt record.
      expect(t.problems.undelivered.slice(0, 20), `${total.undelivered} deliveries never answered 2xx`).toEqual([]);
      expect(t.problems.manyIds.slice(0, 20), `${total.manyIds} deliveries seen under several ids`).toEqual([]);
      expect(t.problems.notSucceeded.slice(0, 20), `${total.notSucceeded} deliveries not succeeded in the delivery log`).toEqual([]);
      expect(t.stray).toBe(0);
      expect(laggards).toEqual([]);
      expect(state.metricLag).toBe(0);
      expect(t.dead.missing).toEqual([]);
      expect(t.dead.unexpected).toEqual([]);
      // Each dead letter carries the poison record's own key and value bytes.
      const written = new Map(poison.map((p) => [sourceOf(p), p]));
      for (const letter of state.dlq) {
        const p = written.get(`${letter.headers['dlq-source-topic']}/${letter.headers['dlq-source-partition']}/${letter.headers['dlq-source-offset']}`);
        expect(letter.key?.toString(), 'dead letter key').toBe(p?.key);
        expect(Buffer.compare(letter.value ?? Buffer.alloc(0), p?.value ?? Buffer.from('?')), `dead letter value of ${p?.kind} on ${p?.topic}`).toBe(0);
        expect(letter.headers['dlq-group'], 'dead letter group').toBeTruthy();
        expect(letter.headers['dlq-reason'], 'dead letter reason').toBeTruthy();
      }
      expect(state.deadLetteredMetric).toBeGreaterThanOrEqual(poisonSources.size);
    },
    TEST_TIMEOUT_MS,
  );
});
