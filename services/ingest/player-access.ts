import type { TenantRecord } from '../../schemas/records.ts';
import { originAllowed } from '../../shared/http/origins.ts';

/**
 * What a player key may do at a moment: the tenant it belongs to, or why it
 * is refused. Pure; the intake's auth hook maps each refusal to its answer
 * and its `intake_refused_total` label.
 */
export type PlayerAccess =
  | { ok: true; tenant: TenantRecord }
  | { ok: false; refusal: 'unknown_player_key' | 'retired_player_key' | 'suspended' | 'origin' };

/**
 * `tenant` is the tenant the key was looked up to (its current or its
 * previous key), `origin` the request's Origin header.
 */
export function playerAccess(tenant: TenantRecord | undefined, key: string, origin: string | undefined, now: number): PlayerAccess {
  if (!tenant) return { ok: false, refusal: 'unknown_player_key' };
  if (key !== tenant.player_key) {
    const stillValid = key === tenant.previous_player_key && tenant.previous_player_key_expires_at !== null && now < tenant.previous_player_key_expires_at;
    if (!stillValid) return { ok: false, refusal: 'retired_player_key' };
  }
  if (tenant.suspended_at !== null) return { ok: false, refusal: 'suspended' };
  if (!originAllowed(origin, tenant.allowed_origins)) return { ok: false, refusal: 'origin' };
  return { ok: true, tenant };
}
