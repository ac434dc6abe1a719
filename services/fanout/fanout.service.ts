import type { Kafka, Message } from 'kafkajs';
import { DeliveryRecord, PlayerEventRecord, type DestinationRecord, type SecurityEventRecord, type WebhookAttemptRecord } from '../../schemas/records.ts';
import type { SchemaRegistry } from '../../schemas/registry.ts';
import type { ConfigStore } from '../../shared/config-store/config-store.ts';
import { RETRY_TIERS, type Topics } from '../../shared/kafka/topics.ts';
import type { Logger } from '../../shared/logger.ts';
import type { Metrics } from '../../shared/metrics.ts';
import type { SecretBox } from '../../shared/secrets.ts';
import { attemptRecord, deliveryId, hostOf, nextStep, payloadOf, selects, uuidV5 } from '../../shared/webhooks/fanout-plan.ts';
import { webhookHeaders } from '../../shared/webhooks/signing.ts';
import { TrackedConsumer } from '../../shared/kafka/tracked-consumer.ts';
import { CoalescingSender, RecordTooLargeError, type TopicMessages } from '../../shared/kafka/coalescing-sender.ts';
import type { DeadLetterSink } from '../../shared/kafka/dead-letters.ts';
import { backoff, groupProblems } from '../../shared/kafka/group-member.ts';
import { recordDecoder } from '../../shared/kafka/poison.ts';
import { FairSlots } from './fair-slots.ts';

/** The HTTPS client the fan-out posts through (shared/webhooks/https-delivery.ts). */
export interface DeliveryClient {
  post(url: string, headers: Record<string, string>, body: string): Promise<{ ok: boolean; status?: number; errorClass?: string; durationMs: number }>;
}

export interface FanoutDeps {
  kafka: Kafka;
  registry: SchemaRegistry;
  store: ConfigStore;
  topics: Topics;
  groupPrefix: string;
  secrets: SecretBox;
  client: DeliveryClient;
  /** Delays of the three retry tiers, in ms. */
  delaysMs: readonly number[];
  log: Logger;
  metrics: Metrics;
  maxInFlight: number;
  perDestinationConcurrency: number;
  perDestinationQueue: number;
  deadLetters: DeadLetterSink;
  /** Work pending with no progress for this long makes a consumer unhealthy. */
  stallMs: number;
  /** Group session timeout of every consumer (KAFKA_SESSION_TIMEOUT_MS). */
  sessionTimeoutMs?: number;
  /** Consecutive failed produce requests after which a producer counts as unhealthy. */
  producerFailuresUnhealthy: number;
  now?: () => number;
}

/** How often a full lane may push a delivery back before that counts as a failed attempt. */
const MAX_DEFERRALS = 3;

/** A FIFO semaphore. */
class Slots {
  #free: number;
  readonly #waiting: (() => void)[] = [];
  constructor(n: number) {
    this.#free = n;
  }
  get queued(): number {
    return this.#waiting.length;
  }
  get busy(): boolean {
    return this.#free === 0;
  }
  async acquire(): Promise<void> {
    if (this.#free > 0) {
      this.#free--;
      return;
    }
    await new Promise<void>((r) => this.#waiting.push(r));
  }
  release(): void {
    const next = this.#waiting.shift();
    if (next) next();
    else this.#free++;
  }
}

/**
 * Fans player events out to webhook destinations and drives each delivery
 * through its attempts: attempt 1 at once, then the retry tiers
 * (webhooks.retry.1m → .5m → .30m, each its own consumer group that waits
 * until a message is due), then webhooks.failed.v1. Every attempt is logged
 * on webhooks.attempts.v1. A slow or dead destination only fills its own
 * lane (bounded concurrency and queue per destination); past its queue bound
 * a delivery is deferred to the first tier without using up an attempt.
 */
export async function startFanout(deps: FanoutDeps) {
  const log = deps.log.child({ component: 'fanout' });
  const now = deps.now ?? Date.now;
  const senderOpts = { kafka: deps.kafka, log, onFailure: (topic: string) => deps.metrics.produceFailures.inc({ producer: 'fanout', topic }) };
  // Deliveries' hand-offs and security events go through producers of their
  // own: a tenant whose every event makes hundreds of security events cannot
  // queue them ahead of another tenant's attempt records.
  const deliveries = new CoalescingSender({ ...senderOpts, name: 'fanout.deliveries' });
  const alerts = new CoalescingSender({ ...senderOpts, name: 'fanout.security' });
  await Promise.all([deliveries.connect(), alerts.connect()]);
  const global = new FairSlots(deps.maxInFlight);
  const lanes = new Map<string, Slots>();
  const laneOf = (destinationId: string): Slots => {
    let lane = lanes.get(destinationId);
    if (!lane) lanes.set(destinationId, (lane = new Slots(deps.perDestinationConcurrency)));
    return lane;
  };

  const encode = (subject: Parameters<SchemaRegistry['encode']>[0], value: object) => deps.registry.encode(subject, value);
  const send = (topicMessages: TopicMessages) => deliveries.send(topicMessages);

  /**
   * Retries a durable hand-off (a produce) until it succeeds or the service
   * stops (then the source record stays uncommitted and is read again). A
   * hand-off the broker refuses for its size can never succeed: it becomes a
   * dead letter instead of a retry loop.
   */
  let stopping = false;
  const durably = async (fn: () => Promise<unknown>, what: () => TopicMessages): Promise<void> => {
    for (let delay = 200; ; delay = Math.min(delay * 2, 5000)) {
      try {
        await fn();
        return;
      } catch (err) {
        if (err instanceof RecordTooLargeError) {
          await durably(
            () =>
              deps.deadLetters.send(
                what().flatMap(({ topic, messages }) =>
                  messages.map((m) => ({
                    topic,
                    partition: -1,
                    offset: '-1',
                    key: m.key ?? null,
                    value: m.value === null || m.value === undefined ? null : Buffer.from(m.value),
                    reason: 'record_too_large' as const,
                    detail: err.message,
                    group: `${deps.groupPrefix}fanout`,
                  })),
                ),
              ),
            () => [],
          );
          return;
        }
        if (stopping) throw err;
        log.warn({ err: { message: (err as Error).message } }, 'fanout_produce_retry');
        await backoff(delay, () => stopping);
      }
    }
  };

  const attemptMessage = (d: DeliveryRecord, fields: Partial<WebhookAttemptRecord> & Pick<WebhookAttemptRecord, 'state'>): Message => ({
    key: d.delivery_id,
    value: encode('webhook-attempt', attemptRecord(d, now(), fields)),
  });

  const securityLogged = new Map<string, number>();
  const securityEvent = (dest: DestinationRecord, eventId: string, eventName: string): { topic: string; messages: Message[] } => {
    const kind = dest.kind === 'integration' ? 'integration_missing_webhook_secret' : 'webhook_missing_secret';
    deps.metrics.securityEvents.inc({ kind });
    // Only the host: never the URL's path or query, never a secret. Once a
    // minute per destination: every skipped event is a record on the
    // security topic and a count in /metrics, not a log line.
    const t = now();
    if ((securityLogged.get(dest.id) ?? 0) + 60_000 <= t) {
      securityLogged.set(dest.id, t);
      log.warn({ kind, tenant_id: dest.tenant_id, endpoint_id: dest.id, host: hostOf(dest.url) }, 'security_event');
    }
    const record: SecurityEventRecord = {
      id: uuidV5(`security:${dest.id}`, eventId),
      kind,
      tenant_id: dest.tenant_id,
      endpoint_id: dest.id,
      host: hostOf(dest.url),
      event_id: eventId,
      event_name: eventName,
      occurred_at: now(),
    };
    return { topic: deps.topics.securityEvents, messages: [{ key: dest.tenant_id, value: encode('security-event', record) }] };
  };

  const secretOf = (dest: DestinationRecord): string => (dest.secret_enc ? deps.secrets.open(dest.secret_enc, dest.id) : '');

  /** One attempt of `d`, and the durable hand-off of what follows it. */
  const attempt = async (d: DeliveryRecord): Promise<void> => {
    const dest = deps.store.destinations.get(d.destination_id);
    if (!dest) {
      const out = [{ topic: deps.topics.webhookAttempts, messages: [attemptMessage(d, { state: 'failed', error_class: 'destination_deleted' })] }];
      await durably(() => send(out), () => out);
      return;
    }
    const secret = secretOf(dest);
    if (!secret) {
      const alert = [securityEvent(dest, d.event_id, d.event_name)];
      const out = [{ topic: deps.topics.webhookAttempts, messages: [attemptMessage(d, { state: 'failed', error_class: 'missing_secret' })] }];
      await Promise.all([durably(() => alerts.send(alert), () => alert), durably(() => send(out), () => out)]);
      return;
    }
    const startedAt = now();
    const headers = webhookHeaders({ eventName: d.event_name, deliveryId: d.delivery_id, secret, rawBody: d.body, nowSec: Math.floor(startedAt / 1000) });
    const result = await deps.client.post(dest.url, { ...headers }, d.body);
    await settle(d, result, startedAt, hostOf(dest.url));
  };

  /** Logs the outcome of attempt `d.attempt` and hands the delivery durably to what follows. */
  const settle = async (d: DeliveryRecord, result: { ok: boolean; status?: number; errorClass?: string; durationMs: number }, startedAt: number, host?: string): Promise<void> => {
    const step = nextStep({ attempt: d.attempt, ok: result.ok, origin: d.origin, now: now(), delaysMs: deps.delaysMs });
    const outcome = step.kind === 'retry' ? 'retrying' : step.kind;
    deps.metrics.webhookAttempts.inc({ outcome, error_class: result.errorClass ?? (result.ok ? 'none' : 'http_status') });
    deps.metrics.webhookAttemptDuration.observe(result.durationMs / 1000);
    const record = attemptMessage(d, {
      state: outcome,
      started_at: startedAt,
      duration_ms: Math.round(result.durationMs),
      status_code: result.status ?? null,
      error_class: result.ok ? null : (result.errorClass ?? 'http_status'),
      next_attempt_at: step.kind === 'retry' ? step.dueAt : null,
    });
    const out: { topic: string; messages: Message[] }[] = [{ topic: deps.topics.webhookAttempts, messages: [record] }];
    if (step.kind === 'retry') {
      const next: DeliveryRecord = { ...d, attempt: step.nextAttempt, due_at: step.dueAt };
      out.push({ topic: deps.topics[RETRY_TIERS[step.tier]], messages: [{ key: d.delivery_id, value: encode('delivery', next), headers: { 'due-at': String(step.dueAt) } }] });
    } else if (step.kind === 'failed') {
      out.push({ topic: deps.topics.webhooksFailed, messages: [{ key: d.delivery_id, value: encode('delivery', d) }] });
    }
    await durably(() => send(out), () => out);
    if (!result.ok) log.info({ delivery_id: d.delivery_id, destination_id: d.destination_id, host, attempt: d.attempt, status: result.status, error_class: result.errorClass, outcome }, 'webhook_attempt_failed');
  };

  /**
   * Runs `d` in its destination's lane. A full lane defers it to the first
   * tier, due when a first retry would be (so the tier stays in due order and
   * nothing queues behind it), without using an attempt, at most
   * MAX_DEFERRALS times; after that the full lane counts as a failed attempt
   * (`destination_backlogged`) and the delivery moves on through the tiers.
   */
  const dispatch = async (d: DeliveryRecord, deferrals = 0): Promise<void> => {
    const lane = laneOf(d.destination_id);
    if (lane.busy && lane.queued >= deps.perDestinationQueue) {
      if (deferrals >= MAX_DEFERRALS) {
        await settle(d, { ok: false, errorClass: 'destination_backlogged', durationMs: 0 }, now());
        return;
      }
      const deferred: DeliveryRecord = { ...d, due_at: now() + deps.delaysMs[0]! };
      const out = [
        {
          topic: deps.topics.retry1,
          messages: [{ key: d.delivery_id, value: encode('delivery', deferred), headers: { 'due-at': String(deferred.due_at), deferrals: String(deferrals + 1) } }],
        },
      ];
      await durably(() => send(out), () => out);
      return;
    }
    await lane.acquire();
    try {
      await global.acquire(d.tenant_id);
      try {
        await attempt(d);
      } finally {
        global.release();
      }
    } finally {
      lane.release();
    }
  };

  /** Player events → one delivery per selecting destination (or a security event). */
  const fanOut = async (e: PlayerEventRecord): Promise<void> => {
    const work: Promise<void>[] = [];
    const security: TopicMessages = [];
    for (const dest of deps.store.destinationsOf(e.tenant_id)) {
      if (!selects(dest, e.event_name)) continue;
      if (!dest.secret_enc) {
        security.push(securityEvent(dest, e.event_id, e.event_name));
        continue;
      }
      const t = now();
      work.push(
        dispatch({
          delivery_id: deliveryId(e.event_id, dest.id),
          tenant_id: e.tenant_id,
          destination_id: dest.id,
          event_id: e.event_id,
          event_name: e.event_name,
          body: payloadOf(e),
          attempt: 1,
          due_at: t,
          created_at: t,
          origin: 'event',
        }),
      );
    }
    if (security.length > 0) work.push(durably(() => alerts.send(security), () => security));
    await Promise.all(work);
  };

  const maxOutstanding = deps.maxInFlight * 8;
  const common = { kafka: deps.kafka, log, metrics: deps.metrics, deadLetters: deps.deadLetters, stallMs: deps.stallMs, sessionTimeoutMs: deps.sessionTimeoutMs, maxOutstanding };
  const events = new TrackedConsumer<PlayerEventRecord>({
    ...common,
    groupId: `${deps.groupPrefix}fanout`,
    topics: [deps.topics.playerEvents],
    decode: recordDecoder(deps.registry, 'player-event', PlayerEventRecord),
    onInFlight: (n) => deps.metrics.webhookInFlight.set(n),
    handle: (record) => ({ kind: 'work', done: record.kind === 'value' ? fanOut(record.value) : Promise.resolve() }),
  });

  /** Queued deliveries (tiers, manual): attempted once due. */
  const decodeDelivery = recordDecoder(deps.registry, 'delivery', DeliveryRecord);
  const queueConsumer = (topic: string, group: string) =>
    new TrackedConsumer<DeliveryRecord>({
      ...common,
      groupId: `${deps.groupPrefix}${group}`,
      topics: [topic],
      decode: decodeDelivery,
      handle: (record, message) => {
        if (record.kind !== 'value') return { kind: 'work', done: Promise.resolve() };
        const d = record.value;
        if (d.due_at > now()) return { kind: 'wait', dueAt: d.due_at };
        const deferrals = Number(message.headers?.deferrals?.toString() ?? 0);
        return { kind: 'work', done: dispatch(d, Number.isFinite(deferrals) ? deferrals : 0) };
      },
    });
  const queues = [
    queueConsumer(deps.topics.webhooksManual, 'fanout-manual'),
    queueConsumer(deps.topics.retry1, 'fanout-retry-1m'),
    queueConsumer(deps.topics.retry2, 'fanout-retry-5m'),
    queueConsumer(deps.topics.retry3, 'fanout-retry-30m'),
  ];
  const consumers = [events, ...queues];
  await Promise.all(consumers.map((c) => c.start()));
  log.info({ delays_ms: deps.delaysMs }, 'fanout_started');

  return {
    consumers,
    /** Each unhealthy consumer or producer and why; empty when all are healthy. */
    health(): Record<string, string> {
      const out = groupProblems(consumers);
      for (const p of [deliveries, alerts]) {
        if (p.consecutiveFailures >= deps.producerFailuresUnhealthy) out[p.name] = `producer failing: ${p.consecutiveFailures} requests in a row`;
      }
      return out;
    },
    /** Stops fetching, lets attempts in flight finish within `budgetMs` (the rest are read again), commits, closes. */
    async stop(budgetMs = 10_000) {
      stopping = true;
      await Promise.all(consumers.map((c) => c.stop(budgetMs)));
      await Promise.all([deliveries.close(), alerts.close()]);
    },
  };
}
