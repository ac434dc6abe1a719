/**
 * Child process of bench/webhooks.ts: the raw baseline of webhook delivery.
 * A plain POST loop through one HttpsDeliveryClient, built exactly as the
 * stack builds the fan-out's (same timeout, same extra CA, same allow-list,
 * default pool settings), `concurrency` posts in flight at a time (one
 * connection pool per emulated destination, see `pools`) within the
 * fan-out's request slots at their defaults, each signed afresh with the
 * same header set the fan-out sends. It runs in a
 * process of its own because the fan-out's client runs in the stack's
 * process, apart from the receiver in the parent; both sides then pay the
 * same process boundary.
 *
 * Configured by RAW_CA_FILE and RAW_TIMEOUT_MS; driven over IPC (runs, and
 * the V8 profiler for the bench's profiled rounds).
 */
import { randomBytes, randomUUID } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { FairSlots } from '../services/fanout/fair-slots.ts';
import { parseCidrList } from '../shared/webhooks/address-policy.ts';
import { HttpsDeliveryClient } from '../shared/webhooks/https-delivery.ts';
import { webhookHeaders } from '../shared/webhooks/signing.ts';
import { answerProfileRequests } from './inspector-profiler.ts';

export interface RawRunRequest {
  type: 'run';
  id: number;
  url: string;
  body: string;
  count: number;
  concurrency: number;
  /**
   * Destinations emulated (default 1): post i of a lane uses pool key
   * `dest-<lane mod pools>`, as the fan-out keys its posts by destination.
   */
  pools?: number;
  /** Stop taking new posts after this long. */
  maxMs: number;
}

export interface RawRunResult {
  type: 'result';
  id: number;
  ok: number;
  failed: number;
  /** Failure classes (error class or HTTP status) and how often. */
  errors: Record<string, number>;
  /** From the first post's start to the last post's settlement, as the client saw it. */
  wallMs: number;
  /** Mean of the client's own durationMs (the figure the fan-out records per attempt). */
  meanMs: number;
}

const caFile = process.env.RAW_CA_FILE;
const timeoutMs = Number(process.env.RAW_TIMEOUT_MS ?? 10_000);
if (!caFile) throw new Error('RAW_CA_FILE is not set');

const client = new HttpsDeliveryClient({ timeoutMs, extraCaPem: readFileSync(caFile, 'utf8'), allowList: parseCidrList('127.0.0.0/8') });
// FANOUT_MAX_IN_FLIGHT, and twice FANOUT_PER_DESTINATION_CONCURRENCY per host, as the fan-out bounds its posts.
const slots = new FairSlots(256, 16);
const secret = `whsec_${randomBytes(24).toString('base64url').slice(0, 32)}`;

async function run(req: RawRunRequest): Promise<RawRunResult> {
  let next = 0;
  let ok = 0;
  let failed = 0;
  let durationSum = 0;
  const errors: Record<string, number> = {};
  const started = performance.now();
  const deadline = started + req.maxMs;
  const pools = Math.max(1, req.pools ?? 1);
  const host = new URL(req.url).host;
  const lane = async (index: number): Promise<void> => {
    const pool = pools > 1 ? `dest-${index % pools}` : undefined;
    while (next < req.count && performance.now() < deadline) {
      next++;
      const startedAt = Date.now();
      const headers = webhookHeaders({ eventName: 'video_play', deliveryId: randomUUID(), secret, rawBody: req.body, nowSec: Math.floor(startedAt / 1000) });
      await slots.acquire('bench', host);
      const r = await client.post(req.url, { ...headers }, req.body, pool).finally(() => slots.release(host));
      durationSum += r.durationMs;
      if (r.ok) ok++;
      else {
        failed++;
        const k = r.errorClass === 'http_status' ? `http_${r.status}` : (r.errorClass ?? 'unknown');
        errors[k] = (errors[k] ?? 0) + 1;
      }
    }
  };
  await Promise.all(Array.from({ length: req.concurrency }, (_, i) => lane(i)));
  const wallMs = performance.now() - started;
  return { type: 'result', id: req.id, ok, failed, errors, wallMs, meanMs: durationSum / Math.max(1, ok + failed) };
}

process.on('message', (raw: unknown) => {
  const req = raw as RawRunRequest;
  if (req.type !== 'run') return;
  run(req).then(
    (result) => process.send?.(result),
    (err: unknown) => process.send?.({ type: 'result', id: req.id, ok: 0, failed: req.count, errors: { [String(err)]: 1 }, wallMs: 0, meanMs: 0 }),
  );
});
// Orphaned by a dying parent: leave at once.
process.on('disconnect', () => {
  client.close();
  process.exit(0);
});
answerProfileRequests();
process.send?.({ type: 'ready' });
