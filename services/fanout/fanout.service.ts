import type { Message } from 'kafkajs';
import { DeliveryRecord, PlayerEventRecord, playerEventViolation } from '../../schemas/records.ts';
import type { ConfigStore } from '../../shared/config-store/config-store.ts';
import type { Logger } from '../../shared/logger.ts';
import type { SecretBox } from '../../shared/secrets.ts';
import { GroupConsumer } from '../../shared/kafka/group-consumer.ts';
import { classifyFailure, RecordTooLargeError } from '../../shared/failure-class.ts';
import { CoalescingSender, isSizeError, type TopicMessages } from '../../shared/kafka/coalescing-sender.ts';
import type { DeadLetter } from '../../shared/kafka/dead-letters.ts';
import { groupProblems, type ConsumerServiceDeps } from '../../shared/kafka/group-member.ts';
import { DURABLE_HANDOFF, retry } from '../../shared/retry.ts';
import { fieldsDecoder, recordDecoder, type Decoded } from '../../shared/kafka/poison.ts';
import { tenantOfPlayerEventKey } from '../../shared/kafka/event-keys.ts';
import { deferral, deferralsOf, LogThrottle, planAttempt, planFanOut, settlement, type AttemptResult, type Outgoing, type SecurityOut } from './delivery-steps.ts';
import { FairSlots } from './fair-slots.ts';
import { Lanes } from './lanes.ts';
import { hostOf } from '../../shared/webhooks/fanout-plan.ts';
import type { HttpsDeliveryClient } from '../../shared/webhooks/https-delivery.ts';

export interface FanoutDeps extends ConsumerServiceDeps {
  store: ConfigStore;
  secrets: SecretBox;
  /** Posts with the destination id as `pool`, so each destination keeps its own connections. */
  client: Pick<HttpsDeliveryClient, 'post'>;
  /** Delays of the three retry tiers, in ms. */
  delaysMs: readonly number[];
  maxInFlight: number;
  perDestinationConcurrency: number;
  perDestinationQueue: number;
  /** A queued delivery is attempted up to this long after it falls due, with the others due by then (WEBHOOK_DUE_BATCH_MS). */
  dueBatchMs: number;
  /** Consecutive failed produce requests after which a producer counts as unhealthy. */
  producerFailuresUnhealthy: number;
  now?: () => number;
}

/**
 * Fans player events out to webhook destinations and drives each delivery
 * through its attempts: attempt 1 at once, then the retry tiers
 * (webhooks.retry.1m → .5m → .30m, each its own consumer group that waits
 * until a message is due), then webhooks.failed.v1. Every attempt is logged
 * on webhooks.attempts.v1. A slow or dead destination only fills its own
 * lane (bounded concurrency and queue per destination); past its queue bound
 * a delivery is deferred to the first tier without using up an attempt.
 *
 * The decisions are values from delivery-steps.ts and lanes.ts; this file
 * encodes, produces, posts, counts and logs what they say.
 */
export async function startFanout(deps: FanoutDeps) {
  const log = deps.log.child({ component: 'fanout' });
  const senderOpts = { kafka: deps.kafka, log, onFailure: (topic: string) => deps.metrics.produceFailures.inc({ producer: 'fanout', topic }) };
  // Deliveries' hand-offs and security events go through producers of their
  // own: a tenant whose every event makes hundreds of security events cannot
  // queue them ahead of another tenant's attempt records.
  const deliveries = new CoalescingSender({ ...senderOpts, name: 'fanout.deliveries' });
  const alerts = new CoalescingSender({ ...senderOpts, name: 'fanout.security' });
  await Promise.all([deliveries.connect(), alerts.connect()]);
  const fanout = new Fanout(deps, log, deliveries, alerts);
  const consumers = fanoutConsumers(deps, log, fanout);
  await Promise.all(consumers.map((c) => c.start()));
  log.info({ delays_ms: deps.delaysMs }, 'fanout_started');

  return {
    consumers,
    /** Each unhealthy consumer or producer and why; empty when all are healthy. */
    health(): Record<string, string> {
      const out = groupProblems(consumers);
      for (const p of [deliveries, alerts]) {
        const problem = p.problem(deps.producerFailuresUnhealthy);
        if (problem) out[p.name] = problem;
      }
      return out;
    },
    /** Stops fetching, lets attempts in flight finish within `budgetMs` (the rest are read again), commits, closes. */
    async stop(budgetMs = 10_000) {
      fanout.stopping.abort();
      await Promise.all(consumers.map((c) => c.stop(budgetMs)));
      await Promise.all([deliveries.close(), alerts.close()]);
    },
  };
}

/** The consumer of player events and the four of queued deliveries (manual, then the tiers). */
function fanoutConsumers(deps: FanoutDeps, log: Logger, fanout: Fanout): (GroupConsumer<PlayerEventRecord | null> | GroupConsumer<DeliveryRecord>)[] {
  const now = deps.now ?? Date.now;
  const maxOutstanding = deps.maxInFlight * 8;
  const common = { kafka: deps.kafka, log, metrics: deps.metrics, deadLetters: deps.deadLetters, stallMs: deps.stallMs, sessionTimeoutMs: deps.sessionTimeoutMs, maxOutstanding };
  const decodeEvent = recordDecoder(deps.registry, 'player-event', PlayerEventRecord, { avroRules: playerEventViolation });
  // An event no destination of its tenant selects (a tenant without
  // destinations; a heartbeat or a seek, which are never delivered) is not
  // decoded whole: the tenant comes from its key, the name from a read of
  // that one field, as a whole decode would be wasted on it. NOTE: so the
  // fan-out does not judge such a record against the rules; the projector,
  // which decodes every event, dead-letters it. A key of another form, or of
  // a tenant this process does not know yet, is decoded whole.
  const skip: Decoded<PlayerEventRecord | null> = { kind: 'value', value: null };
  const nameOf = fieldsDecoder<Pick<PlayerEventRecord, 'event_name'>>(deps.registry, 'player-event', ['event_name']);
  const events = new GroupConsumer<PlayerEventRecord | null>({
    ...common,
    groupId: `${deps.groupPrefix}fanout`,
    topics: [deps.topics.playerEvents],
    decode: (message) => {
      const tenant = tenantOfPlayerEventKey(message.key);
      if (tenant !== undefined && deps.store.tenants.has(tenant)) {
        if (!deps.store.hasDestinations(tenant)) return skip;
        const named = nameOf(message);
        if (named.kind === 'value' && !deps.store.selectedByAny(tenant, named.value.event_name)) return skip;
      }
      return decodeEvent(message);
    },
    onInFlight: (n) => deps.metrics.webhookInFlight.set(n),
    handle: (record) => ({ kind: 'work', done: record.kind === 'value' && record.value !== null ? fanout.fanOut(record.value) : Promise.resolve() }),
  });

  // Queued deliveries (tiers, manual) are attempted once due.
  const decodeDelivery = recordDecoder(deps.registry, 'delivery', DeliveryRecord);
  const queueConsumer = (topic: string, group: string) =>
    new GroupConsumer<DeliveryRecord>({
      ...common,
      groupId: `${deps.groupPrefix}${group}`,
      topics: [topic],
      decode: decodeDelivery,
      // NOTE: a tier is read in due order and waits at its first record not
      // yet due; a dead destination's deferrals fill it with records due a
      // few ms apart. Each wait ends with a fetch of up to
      // maxBytesPerPartition, of which only the records due by then are
      // handled: the slack makes one fetch take dueBatchMs of them, and the
      // smaller fetch bounds what is fetched and dropped again.
      dueSlackMs: deps.dueBatchMs,
      consumer: { maxBytesPerPartition: 256 * 1024 },
      handle: (record, message) => {
        if (record.kind !== 'value') return { kind: 'work', done: Promise.resolve() };
        const d = record.value;
        if (d.due_at > now()) return { kind: 'wait', dueAt: d.due_at };
        return { kind: 'work', done: fanout.dispatch(d, deferralsOf(message.headers?.deferrals)) };
      },
    });
  return [
    events,
    queueConsumer(deps.topics.webhooksManual, 'fanout-manual'),
    queueConsumer(deps.topics.retry1, 'fanout-retry-1m'),
    queueConsumer(deps.topics.retry2, 'fanout-retry-5m'),
    queueConsumer(deps.topics.retry3, 'fanout-retry-30m'),
  ];
}

/** The fan-out's effects: lanes and request slots, posts, durable produces, metrics and logs. */
class Fanout {
  /** Aborted by stop(): hand-offs stop retrying, so their records stay uncommitted and are read again. */
  readonly stopping = new AbortController();
  readonly #deps: FanoutDeps;
  readonly #log: Logger;
  readonly #now: () => number;
  readonly #deliveries: CoalescingSender;
  readonly #alerts: CoalescingSender;
  readonly #slots: FairSlots;
  readonly #lanes: Lanes;
  readonly #securityLog = new LogThrottle(60_000);

  constructor(deps: FanoutDeps, log: Logger, deliveries: CoalescingSender, alerts: CoalescingSender) {
    this.#deps = deps;
    this.#log = log;
    this.#now = deps.now ?? Date.now;
    this.#deliveries = deliveries;
    this.#alerts = alerts;
    // Twice a lane per host: a dead destination's lane cannot take all of its host's slots.
    this.#slots = new FairSlots(deps.maxInFlight, 2 * deps.perDestinationConcurrency);
    // A healthy destination's deferred deliveries come back a first tier's
    // delay later; it still counts as answering then (at least 30 s).
    this.#lanes = new Lanes({
      concurrency: deps.perDestinationConcurrency,
      queueBound: deps.perDestinationQueue,
      progressWindowMs: Math.max(30_000, 2 * deps.delaysMs[0]!),
    });
  }

  /** A player event → one delivery per selecting destination (or a security event). */
  async fanOut(e: PlayerEventRecord): Promise<void> {
    const plan = planFanOut(e, this.#deps.store.destinationsOf(e.tenant_id), this.#now());
    await Promise.all([...plan.deliveries.map((d) => this.dispatch(d)), this.#recordSecurity(plan.security)]);
  }

  /**
   * Runs `d` in its destination's lane, or, when the lane is full, defers it
   * to the first tier or counts a `destination_backlogged` attempt (lanes.ts).
   */
  async dispatch(d: DeliveryRecord, deferrals = 0): Promise<void> {
    const entry = this.#lanes.enter(d.destination_id, deferrals, () => this.#attemptInSlot(d), this.#now());
    switch (entry.kind) {
      case 'run': {
        // The hand-off runs after the lane slot and the request slot are
        // free: they bound requests to a destination, and a produce slowed by
        // other destinations' records (a dead one's deferrals and retries)
        // must not hold them and so slow this destination's next attempts.
        const handOff = await entry.done;
        return handOff();
      }
      case 'defer':
        return this.#produce(this.#deliveries, [deferral(d, entry.deferrals, this.#now(), this.#deps.delaysMs)]);
      case 'backlogged':
        return this.#settle(d, { ok: false, errorClass: 'destination_backlogged', durationMs: 0 }, this.#now());
    }
  }

  /** Attempts `d` once one of the request slots the tenants share in turn is free; returns its hand-off. */
  async #attemptInSlot(d: DeliveryRecord): Promise<() => Promise<void>> {
    const url = this.#deps.store.destinations.get(d.destination_id)?.url;
    const host = url === undefined ? '' : hostOf(url);
    await this.#slots.acquire(d.tenant_id, host);
    try {
      return await this.#attempt(d);
    } finally {
      this.#slots.release(host);
    }
  }

  /** One attempt of `d`; returns the durable hand-off of what follows it, for the caller to run. */
  async #attempt(d: DeliveryRecord): Promise<() => Promise<void>> {
    const dest = this.#deps.store.destinations.get(d.destination_id);
    const secret = dest?.secret_enc ? this.#deps.secrets.open(dest.secret_enc, dest.id) : '';
    const plan = planAttempt(d, dest, secret, this.#now());
    if (plan.kind === 'settled') {
      return async () => void (await Promise.all([this.#recordSecurity(plan.security), this.#produce(this.#deliveries, plan.out)]));
    }
    const result = await this.#deps.client.post(plan.url, plan.headers, plan.body, d.destination_id);
    return () => this.#settle(d, result, plan.startedAt, plan.host);
  }

  /** Counts the outcome of attempt `d.attempt` and hands the delivery durably to what follows. */
  async #settle(d: DeliveryRecord, result: AttemptResult, startedAt: number, host?: string): Promise<void> {
    const s = settlement(d, result, { startedAt, now: this.#now(), delaysMs: this.#deps.delaysMs, host });
    if (result.ok) this.#lanes.noteSuccess(d.destination_id, this.#now());
    this.#deps.metrics.webhookAttempts.inc(s.labels);
    this.#deps.metrics.webhookAttemptDuration.observe(s.durationSec);
    await this.#produce(this.#deliveries, s.out);
    if (s.failureLog) this.#log.info(s.failureLog, 'webhook_attempt_failed');
  }

  /**
   * Counts security events and records them through their own producer. Only
   * the host is logged, never the URL's path or query or a secret, and once a
   * minute per destination: every skipped event is a record on the security
   * topic and a count in /metrics, not a log line.
   */
  async #recordSecurity(events: SecurityOut[]): Promise<void> {
    if (events.length === 0) return;
    for (const { record } of events) {
      this.#deps.metrics.securityEvents.inc({ kind: record.kind });
      if (this.#securityLog.due(record.endpoint_id, this.#now())) {
        this.#log.warn({ kind: record.kind, tenant_id: record.tenant_id, endpoint_id: record.endpoint_id, host: record.host }, 'security_event');
      }
    }
    await this.#produce(this.#alerts, events);
  }

  /** Encodes `out` and produces it through `sender`, durably. */
  async #produce(sender: CoalescingSender, out: readonly Outgoing[]): Promise<void> {
    const batch: TopicMessages = out.map((o) => ({ topic: this.#deps.topics[o.topic], messages: [this.#message(o)] }));
    return this.#durably(() => sender.send(batch), batch);
  }

  #message(o: Outgoing): Message {
    const value = this.#deps.registry.encode(o.subject, o.record);
    return o.subject === 'delivery' && o.headers ? { key: o.key, value, headers: o.headers } : { key: o.key, value };
  }

  /**
   * Retries a durable hand-off (a produce) until it succeeds or the service
   * stops (then the source record stays uncommitted and is read again). A
   * hand-off the broker refuses for good (its size, a record it calls
   * invalid: shared/failure-class.ts) can never succeed: it becomes a dead
   * letter instead of a retry loop.
   */
  async #durably(fn: () => Promise<unknown>, batch: TopicMessages): Promise<void> {
    try {
      await retry(fn, {
        schedule: DURABLE_HANDOFF,
        signal: this.stopping.signal,
        isRetryable: (err) => classifyFailure(err).kind !== 'permanent',
        onRetry: (err) => this.#log.warn({ err: { message: (err as Error).message } }, 'fanout_produce_retry'),
      });
    } catch (err) {
      const failure = classifyFailure(err);
      if (failure.kind !== 'permanent') throw err;
      const letters = refusedLetters(batch, err instanceof RecordTooLargeError ? err.message : failure.detail, isSizeError(err), `${this.#deps.groupPrefix}fanout`);
      await this.#durably(() => this.#deps.deadLetters.send(letters), []);
    }
  }
}

/** Dead letters for the messages of a batch the broker refused for good: `record_too_large` for its size, else `rejected_by_sink`. */
function refusedLetters(batch: TopicMessages, detail: string, tooLarge: boolean, group: string): DeadLetter[] {
  return batch.flatMap(({ topic, messages }) =>
    messages.map((m) => ({
      topic,
      partition: -1,
      offset: '-1',
      key: m.key ?? null,
      value: m.value === null || m.value === undefined ? null : Buffer.from(m.value),
      reason: tooLarge ? ('record_too_large' as const) : ('rejected_by_sink' as const),
      detail,
      group,
    })),
  );
}
