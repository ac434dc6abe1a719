import { AjvCompiler } from '@fastify/ajv-compiler';
import type { FastifyInstance, FastifyReply, FastifyRequest, FastifySchemaCompiler } from 'fastify';
import { z } from 'zod';
import { validatorCompiler, type ZodTypeProvider } from 'fastify-type-provider-zod';
import type { SchemaRegistry } from '../../schemas/registry.ts';
import type { IntakeConfig } from '../../shared/config.ts';
import type { ConfigStore } from '../../shared/config-store/config-store.ts';
import type { App } from '../../shared/http/app.ts';
import { ApiError, type ErrorCode } from '../../shared/http/errors.ts';
import { Problem } from '../../shared/http/schemas.ts';
import type { GroupCommitProducer } from '../../shared/kafka/group-commit-producer.ts';
import { Accepted, CollectBody, CollectQuery, ConversionAccepted, ConversionBody, meetsCollectRules } from './collect.schema.ts';
import { collectRecords, conversionRecord, type RecordContext } from './event-record.ts';
import type { IntakeLimit, Metrics } from '../../shared/metrics.ts';
import { retryAfterSeconds } from '../../shared/http/plugins/rate-limit.ts';
import { WindowCounter, clientAddressKey } from './intake-limits.ts';
import { playerAccess, type PlayerAccess } from './player-access.ts';
import { PlayerEventsWriter } from './player-events.writer.ts';

declare module 'fastify' {
  interface FastifyRequest {
    /** The tenant of the player key; set by the auth hook of /v1/collect. */
    playerTenantId?: string | null;
  }
}

export interface IntakePluginOptions {
  store: ConfigStore;
  writer: PlayerEventsWriter;
  /** API-key auth (shared/http/api-key-auth.ts) for the conversion intake. */
  apiKeyAuth: (req: FastifyRequest, reply: FastifyReply) => Promise<void>;
  now: () => number;
  config: IntakeConfig;
  /** Called once per request a player-key guard refuses (intake_refused_total). */
  onRefused?: (limit: IntakeLimit) => void;
}

/** What the intake is mounted with: its options but the writer, which it builds on `producer`. */
export type IngestDeps = Pick<IntakePluginOptions, 'store' | 'apiKeyAuth' | 'config'> & {
  app: App;
  registry: SchemaRegistry;
  producer: GroupCommitProducer;
  /** The player events topic. */
  topic: string;
  metrics: Metrics;
  now?: () => number;
};

/**
 * Mounts the intake plugin on `app` with a writer to the player events
 * topic; after stop() every request is 503.
 */
export function startIngest(deps: IngestDeps): { stop(): Promise<void> } {
  const writer = new PlayerEventsWriter(deps);
  void deps.app.register(intakePlugin, {
    store: deps.store,
    writer,
    apiKeyAuth: deps.apiKeyAuth,
    now: deps.now ?? Date.now,
    config: deps.config,
    onRefused: (limit) => deps.metrics.intakeRefused.inc({ limit }),
  });
  return {
    async stop() {
      writer.close();
    },
  };
}

/**
 * The intake: player events (POST /v1/collect, public player key) and
 * server-side conversions (POST /api/public/conversion, API key), each in a
 * context of its own with its own auth hook. Only the cheap refusals run
 * before the body is read (load shedding, the per-address limit); the auth
 * hooks run at preValidation, after it, so an oversized or malformed body is
 * answered 413/400 whatever the credential. A request is answered 202 only
 * after Kafka acknowledged every one of its events.
 */
export async function intakePlugin(app: FastifyInstance, opts: IntakePluginOptions): Promise<void> {
  // Load shedding. While the producer's queue is over its bounds a request
  // is answered 503 (Retry-After: 1) at once, before its body is read, at the
  // cost of an accept and a header parse.
  app.addHook('onRequest', async () => {
    opts.writer.refuseIfOverloaded();
  });
  const slot = inFlightSlot(opts);
  await app.register(playerIntake, { ...opts, slot });
  await app.register(conversionIntake, { ...opts, slot });
}

/**
 * The in-flight slot, added last among each route's preHandler hooks: it is
 * taken only once the body is in, the key is valid, the events passed
 * validation and the key's own limit, so a client that stalls its body,
 * sends an unknown key or is over its limit holds none, and slow or hostile
 * clients cannot take every slot of the process from the other tenants.
 * Over INGEST_MAX_IN_FLIGHT_REQUESTS a request is answered 503. NOTE: the bound is what
 * holds when the CPU, not Kafka, is the limit: requests then queue on the
 * way to their transaction, the producer's queue stays short, and without a
 * bound their latency grows with the number of clients until they time out.
 */
function inFlightSlot(opts: IntakePluginOptions) {
  let inFlight = 0;
  const max = opts.config.INGEST_MAX_IN_FLIGHT_REQUESTS;
  return async function takeSlot(_req: FastifyRequest, reply: FastifyReply): Promise<void> {
    if (inFlight >= max) throw opts.writer.overloaded(`${max} intake requests in flight`);
    inFlight++;
    // 'close' comes once whether the answer was sent or the client went away.
    reply.raw.once('close', () => inFlight--);
  };
}

type RouteOptions = IntakePluginOptions & { slot: ReturnType<typeof inFlightSlot> };

/**
 * X-Player-Key (or ?key= for sendBeacon) → the tenant. 401 when missing,
 * unknown, or a previous key past its overlap; 403 when the tenant is
 * suspended or the browser's Origin is not on the tenant's allow-list.
 */
export function playerKeyAuth(deps: { store: Pick<ConfigStore, 'tenantByPlayerKey'>; now: () => number; onRefused?: (limit: IntakeLimit) => void }) {
  return async function authenticatePlayer(req: FastifyRequest): Promise<void> {
    const header = req.headers['x-player-key'];
    const fromQuery = (req.query as { key?: unknown } | undefined)?.key;
    const key = typeof header === 'string' ? header : typeof fromQuery === 'string' ? fromQuery : undefined;
    if (!key) throw new ApiError('unauthorized', 'send the player key in X-Player-Key (or ?key= for sendBeacon)');
    const origin = typeof req.headers.origin === 'string' ? req.headers.origin : undefined;
    const access = playerAccess(deps.store.tenantByPlayerKey(key), key, origin, deps.now());
    if (access.ok) {
      req.playerTenantId = access.tenant.id;
      return;
    }
    // intake_refused_total counts the refusals of a known key only (INTAKE_LIMITS).
    if (access.refusal !== 'unknown_player_key') deps.onRefused?.(access.refusal);
    throw new ApiError(...PLAYER_KEY_REFUSALS[access.refusal]);
  };
}

/** The answer to each refusal of playerAccess. */
const PLAYER_KEY_REFUSALS: Record<Extract<PlayerAccess, { ok: false }>['refusal'], [ErrorCode, string]> = {
  unknown_player_key: ['unauthorized', 'unknown player key'],
  retired_player_key: ['unauthorized', 'this player key was replaced and its overlap has ended; use the current player key'],
  suspended: ['tenant_suspended', 'the tenant of this player key is suspended'],
  origin: ['origin_not_allowed', 'this page\'s origin is not on the allowed origins of this player key'],
};

const contextOf = (opts: IntakePluginOptions, tenantId: string): RecordContext => ({
  tenantId,
  received: opts.now(),
  videoById: (id) => opts.store.videos.get(id),
});

/**
 * Validates the body of /v1/collect with the JSON Schema of CollectBody
 * (z.toJSONSchema), compiled once by Fastify's ajv compiler, then with
 * `meetsCollectRules` for what JSON Schema cannot state. A body both pass is
 * taken as it is, without zod's parse and its output objects: zod would only
 * strip unknown keys, which `collectRecords` never reads. Any other body goes
 * through the app's zod validatorCompiler (shared/http/app.ts), so every
 * refusal keeps zod's paths and wording. The querystring is zod's alone.
 */
export const collectValidatorCompiler: FastifySchemaCompiler<unknown> = (routeSchema) => {
  // NOTE: the cast: Fastify's route option types the compiler with the whole
  // route schema, but calls it with one part's schema, here a zod schema.
  const zodValidate = validatorCompiler(routeSchema as Parameters<typeof validatorCompiler>[0]);
  if (routeSchema.httpPart !== 'body') return zodValidate;
  const accepts = collectBodyCheck(routeSchema.schema as z.ZodType);
  return (data: unknown) => (accepts(data) ? { value: data } : zodValidate(data));
};

/** Whether a body passes the JSON Schema of `schema` (CollectBody) and `meetsCollectRules`. */
export function collectBodyCheck(schema: z.ZodType): (data: unknown) => boolean {
  const jsonSchema = z.toJSONSchema(schema, {
    io: 'input',
    target: 'draft-7',
    // A string format zod states with a pattern (uuid, date-time) is checked
    // by that pattern alone: ajv-formats' own check of it would be a second,
    // differently written rule, and cost as much again.
    override: ({ jsonSchema: s }) => {
      if (s.pattern !== undefined) delete s.format;
    },
  });
  const jsonValidate = compileJsonSchema(jsonSchema);
  return (data) => jsonValidate(data) && meetsCollectRules(data as z.infer<typeof CollectBody>);
}

/**
 * Fastify's ajv compiler, with options that make ajv refuse what zod refuses:
 * no type coercion ("5" is not a number to zod), no defaults, and string
 * lengths in UTF-16 code units as z.string().max() counts them. zod's
 * `example` metadata is a keyword ajv is told to ignore. NOTE: ajv calls `unicode: false` deprecated (and says so
 * once, on start-up), but it is its only way to count as zod does;
 * collect-validation.test.ts holds the two to the same lengths.
 */
let jsonSchemaCompiler: ReturnType<ReturnType<typeof AjvCompiler>> | undefined;
function compileJsonSchema(schema: object): (data: unknown) => boolean {
  jsonSchemaCompiler ??= AjvCompiler()({}, { customOptions: { coerceTypes: false, useDefaults: false, removeAdditional: false, unicode: false, keywords: ['example'] } });
  // NOTE: the cast: the package's types declare ajv's compile signature, but
  // the function it returns takes the route's part ({ schema }), as Fastify calls it.
  return (jsonSchemaCompiler as unknown as (part: { schema: object }) => (data: unknown) => boolean)({ schema });
}

/** Takes `units` of `counter` for `key`, or counts the refusal under `limit` and throws 429 with Retry-After. */
function take(opts: RouteOptions, counter: WindowCounter, key: string, units: number, limit: IntakeLimit, what: string): void {
  const took = counter.take(key, units, opts.now());
  if (took.ok) return;
  opts.onRefused?.(limit);
  throw new ApiError('rate_limited', `more than ${counter.max} ${what}`, { headers: { 'Retry-After': retryAfterSeconds(took.retryAfterMs) } });
}

async function playerIntake(root: FastifyInstance, opts: RouteOptions): Promise<void> {
  const app = root.withTypeProvider<ZodTypeProvider>();
  app.decorateRequest('playerTenantId', null);
  const byAddress = new WindowCounter({ max: opts.config.CLIENT_ADDRESS_REQUESTS_PER_MINUTE });
  const byKey = new WindowCounter({ max: opts.config.PLAYER_KEY_EVENTS_PER_MINUTE });
  // Per address first, before the body is read: a flood from one address
  // costs a header parse per request. req.ip follows TRUST_PROXY.
  app.addHook('onRequest', async (req) => {
    take(opts, byAddress, clientAddressKey(req.ip), 1, 'client_address_rate', 'requests this minute from this client address');
  });
  app.addHook('preValidation', playerKeyAuth({ store: opts.store, now: opts.now, onRefused: opts.onRefused }));
  // Per player key in events, once the body is valid: events, not requests,
  // are what each webhook destination multiplies. Keyed by tenant, so a
  // rotated key's overlap shares one budget with the new key.
  app.addHook('preHandler', async (req) => {
    take(opts, byKey, req.playerTenantId!, (req.body as { events: unknown[] }).events.length, 'player_key_rate', 'events this minute for this player key');
  });
  app.addHook('preHandler', opts.slot);
  app.post(
    '/v1/collect',
    {
      schema: {
        operationId: 'collectEvents',
        tags: ['intake'],
        summary: 'Player event intake',
        description:
          'Takes 1–500 player events. Answers 202 once Kafka acknowledged all of them, 503 (nothing accepted) when it cannot, or at once with Retry-After: 1 while the intake sheds load. Refuses with 429 and Retry-After a player key over its events a minute (PLAYER_KEY_EVENTS_PER_MINUTE) or a client address over its requests a minute (CLIENT_ADDRESS_REQUESTS_PER_MINUTE); with 403 a suspended tenant (tenant_suspended) or a browser whose Origin is not on the tenant\'s allowed origins (origin_not_allowed); with 401 a previous player key once its rotation overlap has ended. Accepts application/json, or text/plain with ?key= for navigator.sendBeacon. Events that carry their own event_id are idempotent: resend the same request after a 503, a 5xx or a timeout and each event is still recorded once.',
        security: [{ playerKey: [] }],
        querystring: CollectQuery,
        body: CollectBody,
        response: { 202: Accepted, 401: Problem, 403: Problem, 413: Problem, 422: Problem, 429: Problem, 503: Problem },
      },
      // NOTE: schema.body stays CollectBody: it types req.body and documents
      // the route in the OpenAPI document; this compiler only validates.
      validatorCompiler: collectValidatorCompiler,
    },
    async (req, reply) => {
      const records = collectRecords(req.body.events, contextOf(opts, req.playerTenantId!));
      await opts.writer.write(records, 'collect');
      return reply.code(202).send({ accepted: records.length });
    },
  );
}

async function conversionIntake(root: FastifyInstance, opts: RouteOptions): Promise<void> {
  const app = root.withTypeProvider<ZodTypeProvider>();
  app.decorateRequest('principal', null);
  // NOTE: preValidation, not onRequest: the per-key rate limit
  // (shared/http/plugins/rate-limit.ts) runs at preValidation after this hook and
  // counts the key it sets.
  app.addHook('preValidation', opts.apiKeyAuth);
  app.addHook('preHandler', opts.slot);
  app.post(
    '/api/public/conversion',
    {
      schema: {
        operationId: 'recordConversion',
        tags: ['intake'],
        summary: 'Server-side conversion intake',
        description:
          'Records a confirmed conversion of a visitor as a `conversion` event on the event log. Answers 202 once Kafka acknowledged it.',
        security: [{ apiKey: [] }],
        body: ConversionBody,
        response: { 202: ConversionAccepted, 401: Problem, 403: Problem, 422: Problem, 429: Problem, 503: Problem },
      },
    },
    async (req, reply) => {
      const record = conversionRecord(req.body, contextOf(opts, req.principal!.tenantId));
      await opts.writer.write([record], 'conversion');
      return reply.code(202).send({ accepted: 1 as const, event_id: record.event_id });
    },
  );
}
