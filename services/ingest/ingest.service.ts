import type { FastifyReply, FastifyRequest } from 'fastify';
import type { Message } from 'kafkajs';
import type { ZodTypeProvider } from 'fastify-type-provider-zod';
import { z } from 'zod';
import type { PlayerEventRecord } from '../../schemas/records.ts';
import type { SchemaRegistry } from '../../schemas/registry.ts';
import type { ConfigStore } from '../../shared/config-store/config-store.ts';
import { ApiError } from '../../shared/http/errors.ts';
import { Problem } from '../../shared/http/schemas.ts';
import type { App } from '../../shared/http/app.ts';
import { newId, parseVideoId } from '../../shared/ids.ts';
import { KafkaUnavailableError, type GroupCommitProducer } from '../../shared/kafka/group-commit-producer.ts';
import type { Metrics } from '../../shared/metrics.ts';
import {
  Accepted,
  CollectBody,
  CollectQuery,
  ConversionAccepted,
  ConversionBody,
  EARLIEST_OCCURRED_AT,
  MAX_FUTURE_SKEW_MS,
  type CollectEvent,
} from './collect.schema.ts';

export interface IngestDeps {
  app: App;
  store: ConfigStore;
  registry: SchemaRegistry;
  producer: GroupCommitProducer;
  /** The player events topic. */
  topic: string;
  metrics: Metrics;
  apiKeyAuth: (req: FastifyRequest, reply: FastifyReply) => Promise<void>;
  now?: () => number;
}


declare module 'fastify' {
  interface FastifyRequest {
    playerTenantId?: string;
  }
}

/**
 * The intake: player events (POST /v1/collect, public player key) and
 * server-side conversions (POST /api/public/conversion, API key). A request
 * is answered 202 only after Kafka acknowledged every one of its events.
 */
export function startIngest(deps: IngestDeps): { stop(): Promise<void> } {
  const app = deps.app.withTypeProvider<ZodTypeProvider>();
  const now = deps.now ?? Date.now;
  let accepting = true;

  const produce = async (records: PlayerEventRecord[], path: string): Promise<void> => {
    if (!accepting) throw new ApiError('unavailable', 'the service is shutting down; retry', { headers: { 'Retry-After': '1' } });
    const messages: Message[] = records.map((r) => ({
      key: `${r.tenant_id}:${r.session_id}`,
      value: deps.registry.encode('player-event', r),
    }));
    try {
      await deps.producer.send(deps.topic, messages);
    } catch (err) {
      if (err instanceof KafkaUnavailableError) {
        deps.metrics.ingestRejected.inc({ reason: 'kafka_unavailable' });
        throw new ApiError('unavailable', 'the event log is unavailable; nothing was accepted, retry later', {
          headers: { 'Retry-After': '5' },
        });
      }
      throw err;
    }
    deps.metrics.ingestEvents.inc({ path }, records.length);
  };

  const authenticatePlayer = async (req: FastifyRequest): Promise<void> => {
    const header = req.headers['x-player-key'];
    const fromQuery = (req.query as { key?: unknown } | undefined)?.key;
    const key = typeof header === 'string' ? header : typeof fromQuery === 'string' ? fromQuery : undefined;
    if (!key) throw new ApiError('unauthorized', 'send the player key in X-Player-Key (or ?key= for sendBeacon)');
    const tenant = deps.store.tenantByPlayerKey(key);
    if (!tenant) throw new ApiError('unauthorized', 'unknown player key');
    req.playerTenantId = tenant.id;
  };

  /** Resolves a video id against the tenant: 422 when unknown, 403 when another tenant's. */
  const videoOf = (tenantId: string, raw: string, path: string) => {
    const id = parseVideoId(raw);
    const video = id ? deps.store.videos.get(id) : undefined;
    if (!video) {
      throw new ApiError('validation_failed', `${path}: unknown video`, { errors: [{ path, message: 'unknown video' }] });
    }
    if (video.tenant_id !== tenantId) throw new ApiError('forbidden', `${path}: the video belongs to another tenant`);
    return video;
  };

  const eventTime = (occurredAt: string | undefined, received: number, path: string): number => {
    if (occurredAt === undefined) return received;
    const t = Date.parse(occurredAt);
    if (t < EARLIEST_OCCURRED_AT) {
      throw new ApiError('validation_failed', `${path}: before 2000-01-01`, { errors: [{ path, message: 'before 2000-01-01' }] });
    }
    if (t > received + MAX_FUTURE_SKEW_MS) {
      throw new ApiError('validation_failed', `${path}: more than 5 minutes in the future`, {
        errors: [{ path, message: 'more than 5 minutes in the future' }],
      });
    }
    return t;
  };

  app.post(
    '/v1/collect',
    {
      schema: {
        tags: ['intake'],
        summary: 'Player event intake',
        description:
          'Takes 1–500 player events. Answers 202 once Kafka acknowledged all of them, 503 (nothing accepted) when it cannot. Accepts application/json, or text/plain with ?key= for navigator.sendBeacon. Events that carry their own event_id are idempotent: resend the same request after a 503, a 5xx or a timeout and each event is still recorded once.',
        security: [{ playerKey: [] }],
        querystring: CollectQuery,
        body: CollectBody,
        response: { 202: Accepted, 401: Problem, 403: Problem, 413: Problem, 422: Problem, 503: Problem },
      },
      preValidation: authenticatePlayer,
    },
    async (req, reply) => {
      const tenantId = req.playerTenantId!;
      const received = now();
      const records = req.body.events.map((e, i) => toRecord(e, tenantId, received, i));
      await produce(records, 'collect');
      return reply.code(202).send({ accepted: records.length });
    },
  );

  function toRecord(e: CollectEvent, tenantId: string, received: number, i: number): PlayerEventRecord {
    const video = videoOf(tenantId, e.video_id, `body.events.${i}.video_id`);
    return {
      // A retried request carries the player's ids again; the projector keeps
      // one event per (tenant, id): services/projector/event-dedupe.ts.
      event_id: e.event_id?.toLowerCase() ?? newId(),
      event_id_from_client: e.event_id !== undefined,
      tenant_id: tenantId,
      video_id: video.id,
      session_id: e.session_id,
      visitor_id: e.visitor_id,
      event_name: e.event_name,
      timestamp: eventTime(e.occurred_at, received, `body.events.${i}.occurred_at`),
      received_at: received,
      current_time: e.current_time,
      duration: e.duration,
      watched_percentage: e.watched_percentage,
      play_ms: e.event_name === 'heartbeat' ? (e.play_ms ?? 0) : null,
      focus_ms: e.event_name === 'heartbeat' ? (e.focus_ms ?? 0) : null,
      seek_from: e.event_name === 'seek' ? (e.from ?? null) : null,
      seek_to: e.event_name === 'seek' ? (e.to ?? null) : null,
      utm_source: e.utm_source ?? null,
      utm_campaign: e.utm_campaign ?? null,
      ctwa_clid: e.ctwa_clid ?? null,
      external_lead_id: e.external_lead_id ?? null,
      source: 'player',
      conversion_value: null,
      conversion_currency: null,
    };
  }

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
      preValidation: deps.apiKeyAuth,
    },
    async (req, reply) => {
      const tenantId = req.principal!.tenantId;
      const received = now();
      const b = req.body;
      const video = videoOf(tenantId, b.video_id, 'body.video_id');
      const record: PlayerEventRecord = {
        event_id: newId(),
        event_id_from_client: false,
        tenant_id: tenantId,
        video_id: video.id,
        // NOTE: a conversion without a session is keyed to one synthetic
        // server session so its partition (and order) is stable per tenant.
        session_id: b.session_id ?? 'ses_server',
        visitor_id: b.visitor_id,
        event_name: 'conversion',
        timestamp: eventTime(b.occurred_at, received, 'body.occurred_at'),
        received_at: received,
        current_time: 0,
        duration: video.duration_sec,
        watched_percentage: 0,
        play_ms: null,
        focus_ms: null,
        seek_from: null,
        seek_to: null,
        utm_source: null,
        utm_campaign: null,
        ctwa_clid: null,
        external_lead_id: b.external_lead_id ?? null,
        source: 'server',
        conversion_value: b.value ?? null,
        conversion_currency: b.currency ?? null,
      };
      await produce([record], 'conversion');
      return reply.code(202).send({ accepted: 1 as const, event_id: record.event_id });
    },
  );

  return {
    async stop() {
      accepting = false;
    },
  };
}
