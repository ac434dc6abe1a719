import { createHash, timingSafeEqual } from 'node:crypto';
import type { FastifyRequest } from 'fastify';
import type { ZodTypeProvider } from 'fastify-type-provider-zod';
import { z } from 'zod';
import type { ApiKeyRecord, TenantRecord, VideoRecord } from '../../schemas/records.ts';
import type { ConfigStore, ConfigWriter } from '../../shared/config-store/config-store.ts';
import type { App } from '../../shared/http/app.ts';
import { Problem, isoTime, isoTimeOrNull } from '../../shared/http/schemas.ts';
import { ApiError } from '../../shared/http/errors.ts';
import { hashApiKey, keyPrefix, newApiKey, newId, newPlayerKey, parseVideoId, toVideoId } from '../../shared/ids.ts';
import { registerWebhookAdmin, type WebhookAdminDeps } from './webhooks.routes.ts';
import type { AnalyticsRepository } from '../api/analytics.repository.ts';
import { registerAnalyticsRoutes } from '../api/analytics.routes.ts';

export interface AdminDeps {
  app: App;
  store: ConfigStore;
  writer: ConfigWriter;
  adminToken: string;
  /** Destinations, delivery log, reprocessing, security events. */
  webhooks: Omit<WebhookAdminDeps, 'app' | 'store' | 'writer' | 'authenticate' | 'tenantOr404' | 'now'>;
  analytics: AnalyticsRepository;
  now?: () => number;
}

const errors = { 401: Problem, 404: Problem, 422: Problem };

const Name = z.string().trim().min(1).max(200);
const TenantParams = z.object({ tenant_id: z.uuid() });
const KeyParams = z.object({ tenant_id: z.uuid(), key_id: z.uuid() });

const Tenant = z.object({ id: z.uuid(), name: z.string(), player_key: z.string(), created_at: z.string() }).meta({ id: 'Tenant' });
const ApiKeyCreated = z
  .object({ id: z.uuid(), name: z.string(), key: z.string().meta({ description: 'Shown only in this response' }), prefix: z.string(), created_at: z.string() })
  .meta({ id: 'ApiKeyCreated' });
const ApiKey = z
  .object({
    id: z.uuid(),
    name: z.string(),
    prefix: z.string(),
    created_at: z.string(),
    last_used_at: z.string().nullable(),
    revoked_at: z.string().nullable(),
  })
  .meta({ id: 'ApiKey' });
const AdminVideo = z
  .object({ id: z.string(), title: z.string(), duration_sec: z.number().int(), created_at: z.string() })
  .meta({ id: 'AdminVideo' });
const list = <T extends z.ZodType>(item: T) => z.object({ data: z.array(item), next_cursor: z.null() });

/**
 * The management API (the dashboard's back end) under /admin/v1, guarded by
 * ADMIN_TOKEN. Every change is a record on a compacted config topic; a call
 * returns once this process's config store has applied it.
 */
export function startAdmin(deps: AdminDeps): { stop(): Promise<void> } {
  const app = deps.app.withTypeProvider<ZodTypeProvider>();
  const now = deps.now ?? Date.now;
  const expected = createHash('sha256').update(deps.adminToken).digest();

  const authenticate = async (req: FastifyRequest): Promise<void> => {
    const m = /^Bearer\s+(\S+)\s*$/i.exec(req.headers.authorization ?? '');
    const given = createHash('sha256').update(m?.[1] ?? '').digest();
    if (!m || !timingSafeEqual(given, expected)) {
      throw new ApiError('unauthorized', 'send the admin token as Authorization: Bearer <ADMIN_TOKEN>', {
        headers: { 'WWW-Authenticate': 'Bearer' },
      });
    }
  };
  const tenantOr404 = (id: string): TenantRecord => {
    const t = deps.store.tenants.get(id);
    if (!t) throw new ApiError('not_found', 'no such tenant');
    return t;
  };
  const tenantView = (t: TenantRecord) => ({ id: t.id, name: t.name, player_key: t.player_key, created_at: isoTime(t.created_at) });
  const keyView = (k: ApiKeyRecord) => ({
    id: k.id,
    name: k.name,
    prefix: k.prefix,
    created_at: isoTime(k.created_at),
    last_used_at: isoTimeOrNull(deps.store.usage.get(k.id) ?? null),
    revoked_at: isoTimeOrNull(k.revoked_at),
  });
  const videoView = (v: VideoRecord) => ({ id: toVideoId(v.id), title: v.title, duration_sec: v.duration_sec, created_at: isoTime(v.created_at) });
  const route = (summary: string) => ({ tags: ['management'], summary, security: [{ adminToken: [] }] });

  app.post(
    '/admin/v1/tenants',
    { schema: { ...route('Create a tenant'), body: z.object({ name: Name }), response: { 201: Tenant, ...errors } }, preValidation: authenticate },
    async (req, reply) => {
      const tenant: TenantRecord = { id: newId(), name: req.body.name, player_key: newPlayerKey(), created_at: now() };
      await deps.writer.put('tenants', tenant.id, tenant);
      return reply.code(201).send(tenantView(tenant));
    },
  );

  app.get(
    '/admin/v1/tenants',
    { schema: { ...route('List tenants'), response: { 200: list(Tenant), ...errors } }, preValidation: authenticate },
    async () => ({
      data: [...deps.store.tenants.values()].sort((a, b) => a.created_at - b.created_at).map(tenantView),
      next_cursor: null,
    }),
  );

  app.get(
    '/admin/v1/tenants/:tenant_id',
    { schema: { ...route('Get a tenant'), params: TenantParams, response: { 200: Tenant, ...errors } }, preValidation: authenticate },
    async (req) => tenantView(tenantOr404(req.params.tenant_id)),
  );

  app.post(
    '/admin/v1/tenants/:tenant_id/api-keys',
    {
      schema: { ...route('Create an API key (the key is shown only here)'), params: TenantParams, body: z.object({ name: Name }), response: { 201: ApiKeyCreated, ...errors } },
      preValidation: authenticate,
    },
    async (req, reply) => {
      const tenant = tenantOr404(req.params.tenant_id);
      const key = newApiKey();
      const record: ApiKeyRecord = {
        id: newId(),
        tenant_id: tenant.id,
        name: req.body.name,
        prefix: keyPrefix(key),
        key_hash: hashApiKey(key),
        created_at: now(),
        revoked_at: null,
      };
      await deps.writer.put('apiKeys', record.id, record);
      return reply.code(201).send({ id: record.id, name: record.name, key, prefix: record.prefix, created_at: isoTime(record.created_at) });
    },
  );

  app.get(
    '/admin/v1/tenants/:tenant_id/api-keys',
    { schema: { ...route('List API keys'), params: TenantParams, response: { 200: list(ApiKey), ...errors } }, preValidation: authenticate },
    async (req) => {
      const tenant = tenantOr404(req.params.tenant_id);
      const keys = [...deps.store.apiKeys.values()].filter((k) => k.tenant_id === tenant.id).sort((a, b) => a.created_at - b.created_at);
      return { data: keys.map(keyView), next_cursor: null };
    },
  );

  app.delete(
    '/admin/v1/tenants/:tenant_id/api-keys/:key_id',
    { schema: { ...route('Revoke an API key (at once)'), params: KeyParams, response: { 200: ApiKey, ...errors } }, preValidation: authenticate },
    async (req) => {
      const tenant = tenantOr404(req.params.tenant_id);
      const key = deps.store.apiKeys.get(req.params.key_id);
      if (!key || key.tenant_id !== tenant.id) throw new ApiError('not_found', 'no such API key');
      if (key.revoked_at !== null) return keyView(key);
      const revoked = { ...key, revoked_at: now() };
      await deps.writer.put('apiKeys', key.id, revoked);
      return keyView(revoked);
    },
  );

  app.post(
    '/admin/v1/tenants/:tenant_id/videos',
    {
      schema: {
        ...route('Register a video'),
        params: TenantParams,
        body: z.object({ title: Name, duration_sec: z.number().int().min(0).max(1_000_000) }),
        response: { 201: AdminVideo, ...errors },
      },
      preValidation: authenticate,
    },
    async (req, reply) => {
      const tenant = tenantOr404(req.params.tenant_id);
      const video: VideoRecord = { id: newId(), tenant_id: tenant.id, title: req.body.title, duration_sec: req.body.duration_sec, created_at: now() };
      await deps.writer.put('videos', video.id, video);
      return reply.code(201).send(videoView(video));
    },
  );

  app.get(
    '/admin/v1/tenants/:tenant_id/videos',
    { schema: { ...route('List videos'), params: TenantParams, response: { 200: list(AdminVideo), ...errors } }, preValidation: authenticate },
    async (req) => {
      const tenant = tenantOr404(req.params.tenant_id);
      const videos = deps.store.videosOf(tenant.id).sort((a, b) => a.created_at - b.created_at || a.id.localeCompare(b.id));
      return { data: videos.map(videoView), next_cursor: null };
    },
  );

  registerAnalyticsRoutes(deps.app, {
    base: '/admin/v1/tenants/:tenant_id/videos/:video_id',
    params: z.object({ tenant_id: z.uuid(), video_id: z.string().refine((v) => parseVideoId(v) !== undefined, 'must be vid_<32 hex> or a UUID') }),
    tags: ['management'],
    security: [{ adminToken: [] }],
    preValidation: authenticate,
    videoOf: (req) => {
      const p = req.params as { tenant_id: string; video_id: string };
      tenantOr404(p.tenant_id);
      const video = deps.store.videos.get(parseVideoId(p.video_id)!);
      if (!video || video.tenant_id !== p.tenant_id) throw new ApiError('not_found', 'no such video');
      return video;
    },
    analytics: deps.analytics,
  });

  registerWebhookAdmin({ ...deps.webhooks, app: deps.app, store: deps.store, writer: deps.writer, authenticate, tenantOr404, now: deps.now });

  return { async stop() {} };
}
