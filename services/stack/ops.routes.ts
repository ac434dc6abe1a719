import type { FastifyInstance } from 'fastify';
import type { Logger } from '../../shared/logger.ts';
import type { Metrics } from '../../shared/metrics.ts';
import { withTimeout } from '../../shared/timeout.ts';
import { publicReadiness, readiness, type HealthSource } from './readiness.ts';

/** A reachability check of a dependency (Kafka, ClickHouse) for /readyz. */
export interface Probe {
  name: string;
  /** Resolves `ok`, or `error: …`; never rejects. */
  check(): Promise<string>;
}

/** How long /readyz waits for one probe. */
const PROBE_TIMEOUT_MS = 2000;

/**
 * A probe from a call that resolves to `ok` or to `error: …`. One call at a
 * time: a /readyz that comes while a call is pending waits on that call, so
 * polling never queues checks behind a busy dependency. With no answer
 * within `timeoutMs`, the probe repeats the last answer if it came less
 * than `graceMs` ago, and otherwise says `error: <why>`.
 */
export function probe(name: string, call: () => Promise<string>, { timeoutMs = PROBE_TIMEOUT_MS, graceMs = 0 } = {}): Probe {
  let pending: Promise<string> | undefined;
  let last: { answer: string; at: number } | undefined;
  return {
    name,
    check: async () => {
      pending ??= call()
        .catch((e: Error) => `error: ${e.message}`)
        .then((answer) => {
          last = { answer, at: Date.now() };
          pending = undefined;
          return answer;
        });
      try {
        return await withTimeout(pending, timeoutMs);
      } catch (e) {
        return last && Date.now() - last.at < graceMs ? last.answer : `error: ${(e as Error).message}`;
      }
    },
  };
}

export interface OpsRoutesOptions {
  /** Run one after another, in this order, on every /readyz. */
  probes: readonly Probe[];
  /** Asked on every /readyz, in this order, after the probes. */
  components: readonly HealthSource[];
  metrics: Metrics;
  /** Where the failing checks' text goes, once each time it changes. */
  log: Logger;
}

/**
 * GET /healthz (the process answers), GET /readyz (200 ready, 503 naming
 * every failing check, by name and state only: what is wrong is logged) and
 * GET /metrics (Prometheus); none in the OpenAPI document, none behind a
 * credential.
 */
export async function opsRoutes(app: FastifyInstance, opts: OpsRoutesOptions): Promise<void> {
  app.get('/healthz', { schema: { hide: true } }, async () => ({ status: 'ok' }));
  let lastFailing = '{}';
  app.get('/readyz', { schema: { hide: true } }, async (_req, reply) => {
    const results: Record<string, string> = {};
    for (const p of opts.probes) results[p.name] = await p.check();
    const { ready, body } = readiness(
      results,
      opts.components.map((c) => ({ name: c.name, problems: c.problems() })),
    );
    // Logged when the failing checks change, not at every poll of a health checker.
    const failing = Object.fromEntries(Object.entries(body.checks).filter(([, check]) => check !== 'ok'));
    const text = JSON.stringify(failing);
    if (text !== lastFailing) {
      if (ready) opts.log.info('readiness_ok');
      else opts.log.warn({ checks: failing }, 'readiness_failed');
      lastFailing = text;
    }
    return reply.code(ready ? 200 : 503).send(publicReadiness(body));
  });
  app.get('/metrics', { schema: { hide: true } }, async (_req, reply) => {
    return reply.header('Content-Type', opts.metrics.registry.contentType).send(await opts.metrics.registry.metrics());
  });
}
