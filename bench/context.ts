import type { Kafka } from 'kafkajs';
import type { Logger } from '../shared/logger.ts';
import type { HttpClient } from './http-client.ts';
import type { StackWorker } from './worker-client.ts';

/** What every phase of the benchmark shares. */
export interface BenchContext {
  brokers: string[];
  brokerPid: number | undefined;
  kafka: Kafka;
  log: Logger;
  /** Scratch directory of this run (removed at the end). */
  tmp: string;
  runId: string;
  partitions: number;
  lingerMs: number;
  produceTimeoutMs: number;
  progress(msg: string): void;
  /** kafkajs retries of CONCURRENT_TRANSACTIONS seen by this process's clients so far. */
  concurrentTxRetries(): number;
  /** Starts a stack worker with its own topic prefix and data directory. */
  startWorker(name: string, services: string, extraEnv?: Record<string, string>): Promise<{ worker: StackWorker; prefix: string }>;
}

export interface Tenant {
  id: string;
  player_key: string;
}

/** A tenant with `videos` videos (and an API key when asked) through the admin API. */
export async function setupTenant(
  client: HttpClient,
  adminToken: string,
  name: string,
  videos: number,
  withKey: boolean,
): Promise<{ tenant: Tenant; videoIds: string[]; apiKey?: string }> {
  const tenant = await client.json<Tenant>('POST', '/admin/v1/tenants', { token: adminToken, body: { name } });
  const videoIds: string[] = [];
  for (let i = 0; i < videos; i++) {
    const v = await client.json<{ id: string }>('POST', `/admin/v1/tenants/${tenant.id}/videos`, {
      token: adminToken,
      body: { title: `${name} video ${i}`, duration_sec: 600 },
    });
    videoIds.push(v.id);
  }
  if (!withKey) return { tenant, videoIds };
  const k = await client.json<{ key: string }>('POST', `/admin/v1/tenants/${tenant.id}/api-keys`, { token: adminToken, body: { name: 'bench' } });
  return { tenant, videoIds, apiKey: k.key };
}

export const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));
