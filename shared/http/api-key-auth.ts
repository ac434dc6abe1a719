import type { FastifyRequest } from 'fastify';
import type { ConfigStore, ConfigWriter } from '../config-store/config-store.ts';
import { hashApiKey } from '../ids.ts';
import type { Logger } from '../logger.ts';
import { ApiError } from './errors.ts';

/** Who a request under API-key auth acts for. */
export interface ApiPrincipal {
  tenantId: string;
  keyId: string;
}

declare module 'fastify' {
  interface FastifyRequest {
    /** Set by API-key auth; the per-key rate limit (rate-limit.ts) is keyed by it. */
    principal?: ApiPrincipal | null;
  }
}

const USAGE_INTERVAL_MS = 60_000;

/** The credential of `Authorization: Bearer <credential>`, if the request sends one. */
export function bearerToken(req: FastifyRequest): string | undefined {
  const header = req.headers.authorization;
  return typeof header === 'string' ? /^Bearer\s+(\S+)\s*$/i.exec(header)?.[1] : undefined;
}

/**
 * Bearer API key → tenant (401 when missing, unknown or revoked; 403 while
 * the tenant is suspended), then the
 * key's last use (written at most once a minute per key, off the request
 * path). The per-key rate limit runs after it (shared/http/plugins/rate-limit.ts).
 */
export function apiKeyAuth(deps: { store: ConfigStore; writer: ConfigWriter; log: Logger; now?: () => number }) {
  const lastWritten = new Map<string, number>();
  const now = deps.now ?? Date.now;
  return async function authenticate(req: FastifyRequest): Promise<void> {
    const token = bearerToken(req);
    if (token === undefined) {
      throw new ApiError('unauthorized', 'send the API key as Authorization: Bearer <key>', {
        headers: { 'WWW-Authenticate': 'Bearer' },
      });
    }
    const key = deps.store.apiKeyByHash(hashApiKey(token));
    if (!key || key.revoked_at !== null || !deps.store.tenants.has(key.tenant_id)) {
      throw new ApiError('unauthorized', key?.revoked_at ? 'the API key was revoked' : 'unknown API key', {
        headers: { 'WWW-Authenticate': 'Bearer error="invalid_token"' },
      });
    }
    // Checked after the key is known good: a refused key learns nothing of its tenant.
    if (deps.store.tenants.get(key.tenant_id)!.suspended_at !== null) throw new ApiError('tenant_suspended', 'the tenant of this API key is suspended');
    req.principal = { tenantId: key.tenant_id, keyId: key.id };
    const t = now();
    if (t - (lastWritten.get(key.id) ?? 0) >= USAGE_INTERVAL_MS) {
      lastWritten.set(key.id, t);
      deps.writer
        .put('apiKeyUsage', key.id, { key_id: key.id, tenant_id: key.tenant_id, last_used_at: t }, { waitApplied: false })
        .catch((err: unknown) => {
          lastWritten.delete(key.id);
          deps.log.warn({ err, key_id: key.id }, 'api_key_usage_not_recorded');
        });
    }
  };
}

export type ApiKeyAuth = ReturnType<typeof apiKeyAuth>;
