import type { FastifyInstance } from 'fastify';
import type { Producer } from 'kafkajs';
import type { SchemaRegistry } from '../../schemas/registry.ts';
import type { ConfigStore, ConfigWriter } from '../../shared/config-store/config-store.ts';
import type { Topics } from '../../shared/kafka/topics.ts';
import type { SecretBox } from '../../shared/secrets.ts';
import { deliveryRoutes } from './deliveries.routes.ts';
import type { DeliveryLogRepository } from './delivery-log.repository.ts';
import { DeliveryQueue } from './delivery-queue.ts';
import { destinationRoutes } from './destinations.routes.ts';
import { securityEventRoutes } from './security-events.routes.ts';

/** What the webhook routes need beyond the config store. */
export interface WebhookAdminOptions {
  registry: SchemaRegistry;
  producer: Producer;
  topics: Topics;
  secrets: SecretBox;
  log: DeliveryLogRepository;
  cursorSecret: string;
  MAX_DESTINATIONS_PER_TENANT: number;
}

/**
 * Webhook destinations, the delivery log, reprocessing and security events
 * under …/tenants/:tenant_id, relative to the management mount point; auth
 * belongs to the plugin that mounts them.
 */
export async function webhookAdminRoutes(
  app: FastifyInstance,
  deps: WebhookAdminOptions & { store: ConfigStore; writer: ConfigWriter; now?: () => number },
): Promise<void> {
  const queue = new DeliveryQueue({ registry: deps.registry, producer: deps.producer, topics: deps.topics, log: deps.log, now: deps.now });
  await app.register(destinationRoutes, {
    store: deps.store,
    writer: deps.writer,
    secrets: deps.secrets,
    queue,
    MAX_DESTINATIONS_PER_TENANT: deps.MAX_DESTINATIONS_PER_TENANT,
    now: deps.now,
  });
  await app.register(deliveryRoutes, { store: deps.store, log: deps.log, queue, cursorSecret: deps.cursorSecret, now: deps.now });
  await app.register(securityEventRoutes, { store: deps.store, log: deps.log, cursorSecret: deps.cursorSecret });
}
