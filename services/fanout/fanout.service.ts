import { Partitioners, type Kafka, type Message, type Producer } from 'kafkajs';
import type { DeliveryRecord, DestinationRecord, PlayerEventRecord, SecurityEventRecord, WebhookAttemptRecord } from '../../schemas/records.ts';
import type { SchemaRegistry } from '../../schemas/registry.ts';
import type { ConfigStore } from '../../shared/config-store/config-store.ts';
import { RETRY_TIERS, type Topics } from '../../shared/kafka/topics.ts';
import type { Logger } from '../../shared/logger.ts';
import type { Metrics } from '../../shared/metrics.ts';
import type { SecretBox } from '../../shared/secrets.ts';
import { attemptRecord, deliveryId, hostOf, nextStep, payloadOf, selects, uuidV5 } from '../../shared/webhooks/fanout-plan.ts';
import { webhookHeaders } from '../../shared/webhooks/signing.ts';
import { TrackedConsumer } from './tracked-consumer.ts';
import { CoalescingSender } from '../../shared/kafka/coalescing-sender.ts';

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
  const producer: Producer = deps.kafka.producer({ idempotent: true, maxInFlightRequests: 1, createPartitioner: Partitioners.DefaultPartitioner });
  await producer.connect();
  const global = new Slots(deps.maxInFlight);
  const lanes = new Map<string, Slots>();
  const laneOf = (destinationId: string): Slots => {
    let lane = lanes.get(destinationId);
    if (!lane) lanes.set(destinationId, (lane = new Slots(deps.perDestinationConcurrency)));
    return lane;
  };

  const encode = (subject: Parameters<SchemaRegistry['encode']>[0], value: object) => deps.registry.encode(subject, value);
  const sender = new CoalescingSender(producer);
  const send = (topicMessages: { topic: string; messages: Message[] }[]) => sender.send(topicMessages);

  /** Retries a durable hand-off (a produce) until it succeeds or the service stops. */
  let stopping = false;
  const durably = async (fn: () => Promise<unknown>): Promise<void> => {
    for (let delay = 200; ; delay = Math.min(delay * 2, 5000)) {
      try {
        await fn();
        return;
      } catch (err) {
        if (stopping) throw err;
        log.warn({ err }, 'fanout_produce_retry');
        await new Promise((r) => setTimeout(r, delay));
      }
    }
  };

  const attemptMessage = (d: DeliveryRecord, fields: Partial<WebhookAttemptRecord> & Pick<WebhookAttemptRecord, 'state'>): Message => ({
    key: d.delivery_id,
    value: encode('webhook-attempt', attemptRecord(d, now(), fields)),
  });

  const securityEvent = (dest: DestinationRecord, eventId: string, eventName: string): { topic: string; messages: Message[] } => {
    const kind = dest.kind === 'integration' ? 'integration_missing_webhook_secret' : 'webhook_missing_secret';
    deps.metrics.securityEvents.inc({ kind });
    // Only the host: never the URL's path or query, never a secret.
    log.warn({ kind, tenant_id: dest.tenant_id, endpoint_id: dest.id, host: hostOf(dest.url) }, 'security_event');
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
      await durably(() => send([{ topic: deps.topics.webhookAttempts, messages: [attemptMessage(d, { state: 'failed', error_class: 'destination_deleted' })] }]));
      return;
    }
    const secret = secretOf(dest);
    if (!secret) {
      await durably(() =>
        send([
          securityEvent(dest, d.event_id, d.event_name),
          { topic: deps.topics.webhookAttempts, messages: [attemptMessage(d, { state: 'failed', error_class: 'missing_secret' })] },
        ]),
      );
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
    await durably(() => send(out));
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
      await durably(() =>
        send([
          {
            topic: deps.topics.retry1,
            messages: [{ key: d.delivery_id, value: encode('delivery', deferred), headers: { 'due-at': String(deferred.due_at), deferrals: String(deferrals + 1) } }],
          },
        ]),
      );
      return;
    }
    await lane.acquire();
    try {
      await global.acquire();
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
    const security: { topic: string; messages: Message[] }[] = [];
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
    if (security.length > 0) work.push(durably(() => send(security)));
    await Promise.all(work);
  };

  const maxOutstanding = deps.maxInFlight * 8;
  const events = new TrackedConsumer({
    kafka: deps.kafka,
    log,
    groupId: `${deps.groupPrefix}fanout`,
    topic: deps.topics.playerEvents,
    maxOutstanding,
    onInFlight: (n) => deps.metrics.webhookInFlight.set(n),
    handle: (message) => {
      if (!message.value) return { kind: 'work', done: Promise.resolve() };
      const e = deps.registry.decode<PlayerEventRecord>('player-event', message.value);
      return { kind: 'work', done: fanOut(e) };
    },
  });

  /** Queued deliveries (tiers, manual): attempted once due. */
  const queueConsumer = (topic: string, group: string) =>
    new TrackedConsumer({
      kafka: deps.kafka,
      log,
      groupId: `${deps.groupPrefix}${group}`,
      topic,
      maxOutstanding,
      handle: (message) => {
        if (!message.value) return { kind: 'work', done: Promise.resolve() };
        const d = deps.registry.decode<DeliveryRecord>('delivery', message.value);
        if (d.due_at > now()) return { kind: 'wait', dueAt: d.due_at };
        return { kind: 'work', done: dispatch(d, Number(message.headers?.deferrals?.toString() ?? 0)) };
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
    get healthy() {
      return consumers.every((c) => c.healthy);
    },
    async stop() {
      stopping = true;
      await Promise.all(consumers.map((c) => c.stop()));
      await producer.disconnect();
    },
  };
}
