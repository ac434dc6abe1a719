import type { Producer } from 'kafkajs';
import { z } from 'zod';
import type { DestinationRecord, TenantRecord } from '../../schemas/records.ts';
import type { SchemaRegistry } from '../../schemas/registry.ts';
import type { ConfigStore, ConfigWriter } from '../../shared/config-store/config-store.ts';
import { ApiError } from '../../shared/http/errors.ts';
import type { Topics } from '../../shared/kafka/topics.ts';
import type { SecretBox } from '../../shared/secrets.ts';
import type { DeliveryLogRepository } from './delivery-log.repository.ts';
import type { DeliveryQueue } from './delivery-queue.ts';

/** What the management routes share: their path parameters, their OpenAPI entry, the records of a path, the webhook routes' deps. */

/** What the webhook routes (destinations, the delivery log, reprocessing, security events) need beyond the config store. */
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

export const TenantParams = z.object({ tenant_id: z.uuid() });

/** The OpenAPI entry of a management route (under the admin token). */
export const adminRoute = (tag: 'management' | 'webhooks', operationId: string, summary: string, description?: string) => ({
  operationId,
  tags: [tag],
  summary,
  ...(description ? { description } : {}),
  security: [{ adminToken: [] }],
});

/** The tenant of a path, or 404. */
export function tenantOr404(store: ConfigStore, id: string): TenantRecord {
  const t = store.tenants.get(id);
  if (!t) throw new ApiError('not_found', 'no such tenant');
  return t;
}

/** A record of the path's tenant (looked up by the caller), or 404: also for another tenant's, whose existence is not told. */
export function ownedOr404<T extends { tenant_id: string }>(store: ConfigStore, tenantId: string, found: T | undefined, what: string): T {
  tenantOr404(store, tenantId);
  if (!found || found.tenant_id !== tenantId) throw new ApiError('not_found', `no such ${what}`);
  return found;
}

/** The tenant's destination of a path, or 404 (also for another tenant's). */
export const destinationOr404 = (store: ConfigStore, tenantId: string, id: string): DestinationRecord =>
  ownedOr404(store, tenantId, store.destinations.get(id), 'destination');
