import type { FastifyInstance, FastifyReply, FastifyRequest, FastifySchemaCompiler } from 'fastify';
import { validatorCompiler, type ZodTypeProvider } from 'fastify-type-provider-zod';
import type { ConfigStore } from '../../shared/config-store/config-store.ts';
import { ApiError } from '../../shared/http/errors.ts';
import { Problem } from '../../shared/http/schemas.ts';
import { isPlainlyValidCollectBody } from './collect-fast-check.ts';
import { Accepted, CollectBody, CollectQuery, ConversionAccepted, ConversionBody } from './collect.schema.ts';
import { collectRecords, conversionRecord, type RecordContext } from './event-record.ts';
import type { PlayerEventsWriter } from './player-events.writer.ts';

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
  /** Valid intake requests this process commits at once (INGEST_MAX_IN_FLIGHT_REQUESTS). */
  maxInFlight: number;
}

/**
 * The intake: player events (POST /v1/collect, public player key) and
 * server-side conversions (POST /api/public/conversion, API key), each in a
 * context of its own with its own auth hook. The hooks run at preValidation,
 * after the body is read, so an oversized or malformed body is answered
 * 413/400 whatever the credential. A request is answered 202 only after
 * Kafka acknowledged every one of its events.
 */
export async function intakePlugin(app: FastifyInstance, opts: IntakePluginOptions): Promise<void> {
  // Load shedding. While the producer's queue is over its bounds a request
  // is answered 503 (Retry-After: 1) at once, before its body is read, at the
  // cost of an accept and a header parse.
  app.addHook('onRequest', async () => {
    opts.writer.refuseIfOverloaded();
  });
  // The in-flight slot is taken only once the body is in, the key is valid
  // and the events passed validation (preHandler): a client that sends its
  // headers and then stalls its body, or sends an unknown key, holds none,
  // so slow or hostile clients cannot take every slot of the process from
  // the other tenants. Over `maxInFlight` a request is answered 503.
  // NOTE: the bound is what holds when the CPU, not Kafka, is the limit:
  // requests then queue on the way to their transaction, the producer's
  // queue stays short, and without a bound their latency grows with the
  // number of clients until they time out.
  let inFlight = 0;
  app.addHook('preHandler', async (_req, reply) => {
    if (inFlight >= opts.maxInFlight) throw opts.writer.overloaded(`${opts.maxInFlight} intake requests in flight`);
    inFlight++;
    // 'close' comes once whether the answer was sent or the client went away.
    reply.raw.once('close', () => inFlight--);
  });
  await app.register(playerIntake, opts);
  await app.register(conversionIntake, opts);
}

/** X-Player-Key (or ?key= for sendBeacon) → the tenant; 401 when missing or unknown. */
export function playerKeyAuth(store: Pick<ConfigStore, 'tenantByPlayerKey'>) {
  return async function authenticatePlayer(req: FastifyRequest): Promise<void> {
    const header = req.headers['x-player-key'];
    const fromQuery = (req.query as { key?: unknown } | undefined)?.key;
    const key = typeof header === 'string' ? header : typeof fromQuery === 'string' ? fromQuery : undefined;
    if (!key) throw new ApiError('unauthorized', 'send the player key in X-Player-Key (or ?key= for sendBeacon)');
    const tenant = store.tenantByPlayerKey(key);
    if (!tenant) throw new ApiError('unauthorized', 'unknown player key');
    req.playerTenantId = tenant.id;
  };
}

const contextOf = (opts: IntakePluginOptions, tenantId: string): RecordContext => ({
  tenantId,
  received: opts.now(),
  videoById: (id) => opts.store.videos.get(id),
});

/**
 * The app's zod validatorCompiler (shared/http/app.ts), with a fast path for
 * the body: one that collect-fast-check.ts finds plainly valid is taken as it
 * is, without zod's parse and its output objects; any other goes through zod,
 * so every refusal is worded as before. The querystring is zod's alone.
 */
export const collectValidatorCompiler: FastifySchemaCompiler<unknown> = (routeSchema) => {
  // NOTE: the cast: Fastify's route option types the compiler with the whole
  // route schema, but calls it with one part's schema, here a zod schema.
  const zodValidate = validatorCompiler(routeSchema as Parameters<typeof validatorCompiler>[0]);
  if (routeSchema.httpPart !== 'body') return zodValidate;
  return (data: unknown) => (isPlainlyValidCollectBody(data) ? { value: data } : zodValidate(data));
};

async function playerIntake(root: FastifyInstance, opts: IntakePluginOptions): Promise<void> {
  const app = root.withTypeProvider<ZodTypeProvider>();
  app.decorateRequest('playerTenantId', null);
  app.addHook('preValidation', playerKeyAuth(opts.store));
  app.post(
    '/v1/collect',
    {
      schema: {
        tags: ['intake'],
        summary: 'Player event intake',
        description:
          'Takes 1–500 player events. Answers 202 once Kafka acknowledged all of them, 503 (nothing accepted) when it cannot, or at once with Retry-After: 1 while the intake sheds load. Accepts application/json, or text/plain with ?key= for navigator.sendBeacon. Events that carry their own event_id are idempotent: resend the same request after a 503, a 5xx or a timeout and each event is still recorded once.',
        security: [{ playerKey: [] }],
        querystring: CollectQuery,
        body: CollectBody,
        response: { 202: Accepted, 401: Problem, 403: Problem, 413: Problem, 422: Problem, 503: Problem },
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

async function conversionIntake(root: FastifyInstance, opts: IntakePluginOptions): Promise<void> {
  const app = root.withTypeProvider<ZodTypeProvider>();
  app.decorateRequest('principal', null);
  // NOTE: preValidation, not onRequest: the per-key rate limit
  // (shared/http/rate-limit.ts) runs at preValidation after this hook and
  // counts the key it sets.
  app.addHook('preValidation', opts.apiKeyAuth);
  app.post(
    '/api/public/conversion',
    {
      schema: {
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
