/** Shapes of the management API (/admin/v1, reached through /dashboard/api). */

export interface Page<T> {
  data: T[];
  next_cursor: string | null;
}

export interface Tenant {
  id: string;
  name: string;
  player_key: string;
  created_at: string;
}

export interface ApiKey {
  id: string;
  name: string;
  prefix: string;
  created_at: string;
  last_used_at: string | null;
  revoked_at: string | null;
}

export interface ApiKeyCreated {
  id: string;
  name: string;
  key: string;
  prefix: string;
  created_at: string;
}

export type DestinationKind = 'webhook' | 'integration';

export interface Destination {
  id: string;
  kind: DestinationKind;
  name: string;
  url: string;
  events: string[];
  secret_masked: string | null;
  created_at: string;
  updated_at: string;
}

export interface DestinationWithSecret extends Destination {
  secret: string;
}

export type DeliveryStatus = 'pending' | 'retrying' | 'succeeded' | 'failed';
export const DELIVERY_STATUSES: DeliveryStatus[] = ['pending', 'retrying', 'succeeded', 'failed'];

export interface Delivery {
  id: string;
  destination_id: string;
  event_name: string;
  status: DeliveryStatus;
  attempt_count: number;
  next_attempt_at: string | null;
  created_at: string;
}

export interface Attempt {
  attempt: number;
  started_at: string | null;
  duration_ms: number | null;
  status_code: number | null;
  error_class: string | null;
  outcome: 'retrying' | 'succeeded' | 'failed';
  next_attempt_at: string | null;
}

export interface DeliveryDetail extends Delivery {
  attempts: Attempt[];
}

export interface SecurityEvent {
  id: string;
  kind: string;
  tenant_id: string;
  endpoint_id: string;
  host: string;
  event_name: string | null;
  occurred_at: string;
}

export interface Video {
  id: string;
  title: string;
  duration_sec: number;
  created_at: string;
}

export interface VideoStats {
  video_id: string;
  totals: {
    loads: number;
    views: number;
    plays: number;
    cta_shown: number;
    cta_clicked: number;
    completions: number;
    unique_visitors: number;
  };
  daily: { date: string; loads: number; views: number; plays: number }[];
}

export interface Retention {
  video_id: string;
  duration_sec: number;
  viewers: number;
  points: { position_pct: number; viewers_pct: number }[];
}

export interface TopVisitor {
  visitor_id: string;
  score: number;
  factors: { watched_percent: number; focus_time_ratio: number; cta_clicks: number; rewinds: number };
  computed_at: string;
}
