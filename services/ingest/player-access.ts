import type { TenantRecord } from '../../schemas/records.ts';

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

/**
 * NOTE: a request without Origin passes: browsers send it on every
 * cross-origin fetch and on sendBeacon, so its absence means a script or a
 * server, which can send any Origin it likes anyway. The allow-list keeps
 * other sites from embedding the key, not scripts from using it.
 */
export function originAllowed(origin: string | undefined, allowed: readonly string[]): boolean {
  if (allowed.length === 0 || origin === undefined) return true;
  const normalised = normaliseOrigin(origin);
  return normalised !== undefined && allowed.includes(normalised);
}

/**
 * `scheme://host[:port]` in the form browsers send in Origin (lower case,
 * default port left out), or undefined for anything that is not an http(s)
 * origin: a path, a query, credentials, or the opaque origin `null`.
 */
export function normaliseOrigin(text: string): string | undefined {
  let url: URL;
  try {
    url = new URL(text.trim());
  } catch {
    return undefined;
  }
  if (url.protocol !== 'https:' && url.protocol !== 'http:') return undefined;
  if (url.username || url.password || url.search || url.hash || (url.pathname !== '/' && url.pathname !== '')) return undefined;
  if (!/^[a-z]+:\/\/[^/]+\/?$/i.test(text.trim())) return undefined;
  return url.origin;
}
