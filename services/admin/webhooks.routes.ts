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

/** What each webhook route plugin is given: the options above, the config store and the manual-delivery queue. */
export type WebhookRouteDeps = WebhookAdminOptions & { store: ConfigStore; writer: ConfigWriter; now?: () => number; queue: DeliveryQueue };

/**
 * Webhook destinations, the delivery log, reprocessing and security events
 * under …/tenants/:tenant_id, relative to the management mount point; auth
 * belongs to the plugin that mounts them.
 */
export async function webhookAdminRoutes(app: FastifyInstance, deps: Omit<WebhookRouteDeps, 'queue'>): Promise<void> {
  const queue = new DeliveryQueue(deps);
  await app.register(destinationRoutes, { ...deps, queue });
  await app.register(deliveryRoutes, { ...deps, queue });
  await app.register(securityEventRoutes, { ...deps, queue });
}
