import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Kafka, logLevel } from 'kafkajs';
import { inject, vi } from 'vitest';
import { topicNames } from '../../shared/kafka/topics.ts';
import { groupLags } from './kafka-inspect.ts';
import { loadConfig } from '../../shared/config.ts';
import { createLogger } from '../../shared/logger.ts';
import { startStack, type Stack } from '../../services/stack.ts';

export interface TestTenant {
  id: string;
  name: string;
  player_key: string;
  apiKey: string;
  apiKeyId: string;
  videoId: string;
}

export interface CollectEventInput {
  event_name: string;
  video_id: string;
  session_id?: string;
  visitor_id?: string;
  current_time?: number;
  duration?: number;
  watched_percentage?: number;
  [extra: string]: unknown;
}

/**
 * What every stack under test is started with, in this process or as a
 * service process: the run's Kafka, topics under a prefix of its own (3
 * partitions), its data directory, a fresh admin token and, with a ClickHouse
 * server shared by the run, a database of its own named for the prefix.
 */
export function stackEnv(dataDir: string, topicPrefix = `t${randomBytes(4).toString('hex')}.`) {
  const clickhouseUrl = inject('clickhouseUrl');
  return {
    KAFKA_BROKERS: inject('kafkaBrokers').join(','),
    KAFKA_TOPIC_PREFIX: topicPrefix,
    KAFKA_TOPIC_PARTITIONS: '3',
    DATA_DIR: dataDir,
    ADMIN_TOKEN: `adm_${randomBytes(16).toString('hex')}`,
    ...(clickhouseUrl ? { CLICKHOUSE_URL: clickhouseUrl, CLICKHOUSE_DATABASE: topicPrefix.replace('.', '') } : {}),
  };
}

/**
 * The whole stack in this test file's process against the run's Kafka, with
 * a topic prefix of its own and a fresh embedded ClickHouse, plus helpers to
 * talk to it over real HTTP.
 */
export class TestStack {
  readonly stack: Stack;
  readonly dataDir: string;
  readonly topicPrefix: string;

  private constructor(stack: Stack, dataDir: string, topicPrefix: string) {
    this.stack = stack;
    this.dataDir = dataDir;
    this.topicPrefix = topicPrefix;
  }

  /** Starts a stack; `reuse` restarts one on the data directory and topics of a stopped one. */
  static async start(env: Record<string, string> = {}, reuse?: { dataDir: string; topicPrefix: string }): Promise<TestStack> {
    const base = stackEnv(reuse?.dataDir ?? mkdtempSync(join(tmpdir(), 'va-test-')), reuse?.topicPrefix);
    const config = loadConfig({
      ...base,
      PORT: '0',
      LOG_LEVEL: process.env.TEST_LOG_LEVEL ?? 'error',
      // Tests send from one address with a few player keys, far faster than
      // players do: the intake's own limits are off unless a test sets them.
      PLAYER_KEY_EVENTS_PER_MINUTE: '0',
      CLIENT_ADDRESS_REQUESTS_PER_MINUTE: '0',
      ...env,
    });
    const stack = await startStack(config, createLogger({ level: config.LOG_LEVEL }));
    return new TestStack(stack, base.DATA_DIR, base.KAFKA_TOPIC_PREFIX);
  }

  get url(): string {
    return this.stack.url;
  }

  /**
   * Resolves once every fan-out group (player events, manual, each retry
   * tier) has committed to the end of its topic: every delivery those
   * records asked for has been attempted and handed on. A test that checks
   * that something was NOT delivered waits for this instead of sleeping.
   */
  async fanoutIdle(timeoutMs = 30_000): Promise<void> {
    const topics = topicNames(this.topicPrefix);
    const groups: [string, string][] = [
      ['fanout', topics.playerEvents],
      ['fanout-manual', topics.webhooksManual],
      ['fanout-retry-1m', topics.retry1],
      ['fanout-retry-5m', topics.retry2],
      ['fanout-retry-30m', topics.retry3],
    ];
    const admin = new Kafka({ clientId: 'test-lag', brokers: this.stack.kafkaBrokers, logLevel: logLevel.NOTHING }).admin();
    await admin.connect();
    try {
      const byGroup = Object.fromEntries(groups.map(([group, topic]) => [`${this.topicPrefix}${group}`, [topic]]));
      await eventually(async () => ((await groupLags(admin, byGroup)).every((p) => p.lag === 0) ? true : undefined), timeoutMs, 100);
    } finally {
      await admin.disconnect();
    }
  }

  async stop(opts: { keepData?: boolean } = {}): Promise<void> {
    await this.stack.stop();
    if (!opts.keepData) rmSync(this.dataDir, { recursive: true, force: true });
  }

  /** fetch against the stack; JSON bodies are serialised, responses parsed when JSON. */
  async request(
    method: string,
    path: string,
    opts: { body?: unknown; rawBody?: string; headers?: Record<string, string>; token?: string } = {},
  ): Promise<{ status: number; headers: Headers; body: any; text: string }> {
    const headers: Record<string, string> = { ...opts.headers };
    if (opts.token) headers.authorization = `Bearer ${opts.token}`;
    let body: string | undefined = opts.rawBody;
    if (opts.body !== undefined) {
      body = JSON.stringify(opts.body);
      headers['content-type'] ??= 'application/json';
    }
    const res = await fetch(`${this.url}${path}`, { method, headers, body });
    const text = await res.text();
    let parsed: unknown = undefined;
    if ((res.headers.get('content-type') ?? '').includes('json') && text) parsed = JSON.parse(text);
    return { status: res.status, headers: res.headers, body: parsed, text };
  }

  admin(method: string, path: string, body?: unknown) {
    return this.request(method, `/admin/v1${path}`, { body, token: this.stack.adminToken });
  }

  /** A tenant with one API key and one video. */
  async createTenant(name = `tenant-${randomBytes(3).toString('hex')}`): Promise<TestTenant> {
    const t = await this.admin('POST', '/tenants', { name });
    if (t.status !== 201) throw new Error(`create tenant: ${t.status} ${t.text}`);
    const k = await this.admin('POST', `/tenants/${t.body.id}/api-keys`, { name: 'test key' });
    if (k.status !== 201) throw new Error(`create key: ${k.status} ${k.text}`);
    const v = await this.createVideo(t.body.id);
    return { ...t.body, apiKey: k.body.key, apiKeyId: k.body.id, videoId: v };
  }

  async createVideo(tenantId: string, title = 'A video', durationSec = 120): Promise<string> {
    const v = await this.admin('POST', `/tenants/${tenantId}/videos`, { title, duration_sec: durationSec });
    if (v.status !== 201) throw new Error(`create video: ${v.status} ${v.text}`);
    return v.body.id as string;
  }

  /** POST /v1/collect with defaults filled in for the fields a test does not care about. */
  collect(playerKey: string, events: CollectEventInput[]) {
    return this.request('POST', '/v1/collect', {
      headers: { 'x-player-key': playerKey },
      body: {
        events: events.map((e) => ({
          session_id: 'ses_test',
          visitor_id: 'vis_test',
          current_time: 0,
          duration: 120,
          watched_percentage: 0,
          ...e,
        })),
      },
    });
  }

  api(path: string, apiKey: string) {
    return this.request('GET', `/v1${path}`, { token: apiKey });
  }

  /** Every event of a video, following next_cursor to the end. */
  async allEvents(videoId: string, apiKey: string, query = ''): Promise<{ event: string; visitor_id: string; timestamp: string }[]> {
    const out = [];
    let cursor: string | null = null;
    do {
      const qs = new URLSearchParams(query);
      qs.set('limit', '1000');
      if (cursor) qs.set('cursor', cursor);
      const res = await this.api(`/videos/${videoId}/events?${qs}`, apiKey);
      if (res.status !== 200) throw new Error(`events page: ${res.status} ${res.text}`);
      out.push(...res.body.data);
      cursor = res.body.next_cursor;
    } while (cursor);
    return out;
  }
}

/**
 * Polls `check` until it returns a value other than undefined (a throw counts
 * as not yet), and answers that value; fails after `timeoutMs`. For a
 * condition that is an assertion, `expect.poll(fn).toBe(...)` reads better;
 * this is for waits whose value the test goes on to use, and for hooks.
 */
export function eventually<T>(check: () => Promise<T | undefined>, timeoutMs = 10_000, intervalMs = 50): Promise<T> {
  return vi.waitFor(
    async () => {
      const value = await check();
      if (value === undefined) throw new Error(`condition not met within ${timeoutMs} ms`);
      return value;
    },
    { timeout: timeoutMs, interval: intervalMs },
  );
}
