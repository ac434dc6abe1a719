/**
 * Shapes of the management API (/admin/v1, mounted under /dashboard/api),
 * inferred from the zod schemas the server validates and documents its
 * answers with: a change there is a type error here. Type-only imports, so
 * nothing of zod reaches the bundle.
 */
import type { z } from 'zod';
import type * as admin from '../../admin/admin.schema.ts';
import type * as analytics from '../../api/analytics.schema.ts';

export interface Page<T> {
  data: T[];
  next_cursor: string | null;
}

export type Tenant = z.infer<typeof admin.Tenant>;
export type ApiKey = z.infer<typeof admin.ApiKey>;
export type ApiKeyCreated = z.infer<typeof admin.ApiKeyCreated>;
export type DestinationKind = z.infer<typeof admin.DestinationKind>;
export type Destination = z.infer<typeof admin.Destination>;
export type DestinationWithSecret = z.infer<typeof admin.DestinationWithSecret>;
export type DeliveryStatus = z.infer<typeof admin.DeliveryStatus>;
export type Delivery = z.infer<typeof admin.Delivery>;
export type Attempt = z.infer<typeof admin.Attempt>;
export type DeliveryDetail = z.infer<typeof admin.DeliveryDetail>;
export type SecurityEvent = z.infer<typeof admin.SecurityEvent>;
export type Video = z.infer<typeof admin.AdminVideo>;
export type VideoStats = z.infer<typeof analytics.Stats>;
export type Retention = z.infer<typeof analytics.RetentionCurve>;
export type TopVisitor = z.infer<typeof analytics.TopVisitors>['data'][number];

export { DELIVERY_STATUSES } from '../../../schemas/delivery-status.ts';
export type Lead = z.infer<typeof admin.Lead>;
