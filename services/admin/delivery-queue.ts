import type { Producer } from 'kafkajs';
import type { DeliveryRecord } from '../../schemas/records.ts';
import type { SchemaRegistry } from '../../schemas/registry.ts';
import type { Topics } from '../../shared/kafka/topics.ts';
import { attemptRecord } from '../../shared/webhooks/fanout-plan.ts';
import type { DeliveryLogRepository } from './delivery-log.repository.ts';

/** How long a manual delivery waits to show in the log before the request answers anyway. */
const VISIBLE_WITHIN_MS = 5000;
const POLL_MS = 50;

/**
 * Queues manual deliveries (Test, reprocess) for an attempt now: a pending
 * row on the attempts topic and the delivery on webhooks.manual.v1, in one
 * batch.
 */
export class DeliveryQueue {
  readonly #deps: { registry: SchemaRegistry; producer: Producer; topics: Topics; log: DeliveryLogRepository; now: () => number };

  constructor(deps: { registry: SchemaRegistry; producer: Producer; topics: Topics; log: DeliveryLogRepository; now?: () => number }) {
    this.#deps = { ...deps, now: deps.now ?? Date.now };
  }

  /**
   * Returns once the log shows the delivery pending (or its attempt), so the
   * next read of the delivery sees it pending and a second reprocess gets 409.
   */
  async enqueue(d: DeliveryRecord): Promise<void> {
    const { registry, producer, topics, log, now } = this.#deps;
    const queuedAt = now();
    await producer.sendBatch({
      acks: -1,
      topicMessages: [
        { topic: topics.webhookAttempts, messages: [{ key: d.delivery_id, value: registry.encode('webhook-attempt', attemptRecord(d, queuedAt, { state: 'pending' })) }] },
        { topic: topics.webhooksManual, messages: [{ key: d.delivery_id, value: registry.encode('delivery', d) }] },
      ],
    });
    const deadline = Date.now() + VISIBLE_WITHIN_MS;
    while (Date.now() < deadline) {
      const found = await log.rows(d.delivery_id);
      if (found?.rows.some((r) => r.recorded_at >= queuedAt && (r.state === 'pending' || r.attempt >= d.attempt))) return;
      await new Promise((r) => setTimeout(r, POLL_MS));
    }
  }
}
