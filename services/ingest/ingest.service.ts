import type { FastifyReply, FastifyRequest } from 'fastify';
import type { SchemaRegistry } from '../../schemas/registry.ts';
import type { IntakeConfig } from '../../shared/config.ts';
import type { ConfigStore } from '../../shared/config-store/config-store.ts';
import type { App } from '../../shared/http/app.ts';
import type { GroupCommitProducer } from '../../shared/kafka/group-commit-producer.ts';
import type { Metrics } from '../../shared/metrics.ts';
import { intakePlugin } from './intake.plugin.ts';
import { PlayerEventsWriter } from './player-events.writer.ts';

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
  config: IntakeConfig;
}

/**
 * The intake: player events (POST /v1/collect, public player key) and
 * server-side conversions (POST /api/public/conversion, API key), mounted as
 * one plugin (intake.plugin.ts). A request is answered 202 only after Kafka
 * acknowledged every one of its events; after stop() every request is 503.
 */
export function startIngest(deps: IngestDeps): { stop(): Promise<void> } {
  const writer = new PlayerEventsWriter({ registry: deps.registry, producer: deps.producer, topic: deps.topic, metrics: deps.metrics });
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
