/**
 * A runnable webhook receiver: verifies each delivery with
 * shared/webhooks/verify.ts before anything else, ignores repeated
 * `X-Player-Delivery-Id`s (kept in memory and in a JSON file so they survive
 * a restart), answers 2xx at once and processes the event afterwards.
 *
 *   WEBHOOK_SECRET=whsec_… RECEIVER_PORT=8787 node examples/webhook-receiver.ts
 *
 * Environment: WEBHOOK_SECRET (required), RECEIVER_PORT (default 8787),
 * RECEIVER_HOST (default 127.0.0.1), SEEN_IDS_FILE (default
 * ./webhook-seen-ids.json), TLS_CERT and TLS_KEY (PEM file paths; both set
 * means HTTPS).
 */
import { mkdir, readFile, rename, writeFile } from 'node:fs/promises';
import { createServer as createHttpServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { createServer as createHttpsServer } from 'node:https';
import type { AddressInfo } from 'node:net';
import { dirname } from 'node:path';
import { pathToFileURL } from 'node:url';
import { verifyWebhook } from '../shared/webhooks/verify.ts';

/** A verified, first-seen delivery, handed to the application. */
export interface ReceivedDelivery {
  deliveryId: string;
  /** Verified signing time, Unix seconds. */
  timestamp: number;
  /** The parsed body (spec 2.7). Fields like tenant_id still deserve a check against your own data. */
  payload: Record<string, unknown>;
}

/** Options of {@link SeenDeliveryStore.open}. */
export interface SeenDeliveryStoreOptions {
  /** How long an id is remembered; default 7 days (retries span 36 minutes, manual reprocessing any time later). */
  retentionMs?: number;
  /** Oldest ids are forgotten beyond this many; default 100 000. */
  maxEntries?: number;
}

/**
 * Delivery ids already accepted, in memory for the check and in a JSON file
 * for restarts. `claim` is synchronous, so two concurrent copies of the same
 * delivery cannot both pass.
 */
export class SeenDeliveryStore {
  readonly #file: string;
  readonly #ids: Map<string, number>;
  readonly #retentionMs: number;
  readonly #maxEntries: number;
  #writing: Promise<void> = Promise.resolve();

  private constructor(file: string, ids: Map<string, number>, options: SeenDeliveryStoreOptions) {
    this.#file = file;
    this.#ids = ids;
    this.#retentionMs = options.retentionMs ?? 7 * 24 * 3600 * 1000;
    this.#maxEntries = options.maxEntries ?? 100_000;
  }

  /** Loads the ids kept in `file` (a missing file is an empty store). */
  static async open(file: string, options: SeenDeliveryStoreOptions = {}): Promise<SeenDeliveryStore> {
    let ids = new Map<string, number>();
    try {
      const saved = JSON.parse(await readFile(file, 'utf8')) as { ids?: Record<string, number> };
      ids = new Map(Object.entries(saved.ids ?? {}).sort((a, b) => a[1] - b[1]));
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err;
    }
    return new SeenDeliveryStore(file, ids, options);
  }

  /** Whether `id` was already accepted. */
  has(id: string): boolean {
    return this.#ids.has(id);
  }

  /** Marks `id` as seen; false when it already was (a repeat). Call {@link persist} before acknowledging. */
  claim(id: string, nowMs = Date.now()): boolean {
    if (this.#ids.has(id)) return false;
    this.#ids.set(id, nowMs);
    this.#prune(nowMs);
    return true;
  }

  /** Forgets a claim whose delivery could not be acknowledged, so the sender's retry is processed. */
  release(id: string): void {
    this.#ids.delete(id);
  }

  /** Resolves once every write started so far has finished, successfully or not. */
  settled(): Promise<void> {
    return this.#writing.catch(() => {});
  }

  /** Writes the ids to the file (temp file and rename, so a crash never leaves half a file). */
  persist(): Promise<void> {
    const write = async (): Promise<void> => {
      const temp = `${this.#file}.${process.pid}.tmp`;
      await mkdir(dirname(this.#file), { recursive: true });
      await writeFile(temp, JSON.stringify({ version: 1, ids: Object.fromEntries(this.#ids) }));
      await rename(temp, this.#file);
    };
    // Writes are chained so an older snapshot can never land after a newer one.
    this.#writing = this.#writing.catch(() => {}).then(write);
    return this.#writing;
  }

  #prune(nowMs: number): void {
    // Insertion order is acceptance order, so the oldest ids come first.
    for (const [id, seenAt] of this.#ids) {
      if (this.#ids.size <= this.#maxEntries && nowMs - seenAt <= this.#retentionMs) break;
      this.#ids.delete(id);
    }
  }
}

/** Options of {@link createReceiverHandler}. */
export interface ReceiverOptions {
  secret: string | undefined;
  seen: SeenDeliveryStore;
  /** Runs after the 2xx was sent; errors are logged, the sender is not asked to retry. */
  onDelivery: (delivery: ReceivedDelivery) => void | Promise<void>;
  maxBodyBytes?: number;
  log?: (line: string) => void;
}

const UUID_RE = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

/**
 * The request handler: raw body → signature check → delivery-id check →
 * acknowledge → process. Nothing is parsed, stored or run for a request
 * whose signature does not verify.
 */
export function createReceiverHandler(options: ReceiverOptions): (req: IncomingMessage, res: ServerResponse) => void {
  const { secret, seen, onDelivery, maxBodyBytes = 1024 * 1024, log = console.log } = options;

  return (req, res) => {
    if (req.method !== 'POST') {
      reply(res, 405, { error: 'method_not_allowed' }, { allow: 'POST' });
      return;
    }
    readRawBody(req, maxBodyBytes).then(
      async (rawBody) => {
        if (rawBody === undefined) {
          reply(res, 413, { error: 'body_too_large' }, { connection: 'close' });
          return;
        }
        const verified = verifyWebhook({ secret, headers: req.headers, rawBody });
        if (!verified.ok) {
          log(`webhook refused: ${verified.reason}`);
          reply(res, 401, { error: 'invalid_signature', reason: verified.reason });
          return;
        }

        const deliveryId = header(req, 'x-player-delivery-id');
        if (deliveryId === undefined || !UUID_RE.test(deliveryId)) {
          reply(res, 400, { error: 'missing_delivery_id' });
          return;
        }
        let payload: Record<string, unknown>;
        try {
          const parsed: unknown = JSON.parse(rawBody.toString('utf8'));
          if (parsed === null || typeof parsed !== 'object' || Array.isArray(parsed)) throw new Error('not an object');
          payload = parsed as Record<string, unknown>;
        } catch {
          reply(res, 400, { error: 'invalid_json' });
          return;
        }
        // X-Player-Event is not covered by the signature; the body's event_name is.
        if (payload['event_name'] !== header(req, 'x-player-event')) {
          reply(res, 400, { error: 'event_name_mismatch' });
          return;
        }

        if (!seen.claim(deliveryId)) {
          // The first copy may still be being recorded: answer the repeat
          // only once that settled, or a failed first copy would be lost.
          await seen.settled();
          if (seen.has(deliveryId)) reply(res, 200, { status: 'duplicate' });
          else reply(res, 503, { error: 'retry_later' });
          return;
        }
        try {
          await seen.persist();
        } catch (err) {
          seen.release(deliveryId);
          log(`webhook ${deliveryId}: could not record the delivery id: ${(err as Error).message}`);
          reply(res, 500, { error: 'storage_unavailable' });
          return;
        }
        reply(res, 200, { status: 'accepted' });
        setImmediate(() => {
          Promise.resolve()
            .then(() => onDelivery({ deliveryId, timestamp: verified.timestamp, payload }))
            .catch((err: unknown) => log(`webhook ${deliveryId}: processing failed: ${(err as Error).message}`));
        });
      },
      () => reply(res, 400, { error: 'unreadable_body' }),
    );
  };
}

/** A started receiver. */
export interface RunningReceiver {
  server: Server;
  url: string;
  close: () => Promise<void>;
}

/**
 * Starts the receiver from environment variables (see the file header).
 * `onDelivery` defaults to logging one line per delivery.
 */
export async function startReceiver(
  env: Record<string, string | undefined> = process.env,
  onDelivery?: (delivery: ReceivedDelivery) => void | Promise<void>,
  log: (line: string) => void = console.log,
): Promise<RunningReceiver> {
  const secret = env['WEBHOOK_SECRET'];
  if (!secret) throw new Error('WEBHOOK_SECRET is required: without it every delivery would be refused');
  const port = Number(env['RECEIVER_PORT'] ?? 8787);
  if (!Number.isInteger(port) || port < 0 || port > 65535) throw new Error('RECEIVER_PORT must be a port number');
  const host = env['RECEIVER_HOST'] ?? '127.0.0.1';
  const seen = await SeenDeliveryStore.open(env['SEEN_IDS_FILE'] ?? 'webhook-seen-ids.json');
  const handler = createReceiverHandler({
    secret,
    seen,
    log,
    onDelivery:
      onDelivery ?? ((d) => log(`webhook ${d.deliveryId}: ${String(d.payload['event_name'])} for ${String(d.payload['visitor_id'])}`)),
  });

  const certFile = env['TLS_CERT'];
  const keyFile = env['TLS_KEY'];
  if (Boolean(certFile) !== Boolean(keyFile)) throw new Error('set both TLS_CERT and TLS_KEY, or neither');
  const server: Server =
    certFile && keyFile
      ? createHttpsServer({ cert: await readFile(certFile), key: await readFile(keyFile) }, handler)
      : createHttpServer(handler);
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, host, () => resolve());
  });
  const address = server.address() as AddressInfo;
  const hostPart = address.family === 'IPv6' ? `[${address.address}]` : address.address;
  return {
    server,
    url: `${certFile ? 'https' : 'http'}://${hostPart}:${address.port}/`,
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeIdleConnections();
      }),
  };
}

function header(req: IncomingMessage, name: string): string | undefined {
  const value = req.headers[name];
  return Array.isArray(value) ? value.join(', ') : value;
}

function reply(res: ServerResponse, status: number, body: unknown, headers: Record<string, string> = {}): void {
  res.writeHead(status, { 'content-type': 'application/json', ...headers }).end(JSON.stringify(body));
}

/** The body bytes exactly as received; undefined once it exceeds `limit`. */
function readRawBody(req: IncomingMessage, limit: number): Promise<Buffer | undefined> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    req.on('data', (chunk: Buffer) => {
      size += chunk.length;
      if (size > limit) {
        req.removeAllListeners('data');
        req.resume();
        resolve(undefined);
        return;
      }
      chunks.push(chunk);
    });
    req.on('end', () => resolve(Buffer.concat(chunks)));
    req.on('error', reject);
  });
}

if (process.argv[1] !== undefined && import.meta.url === pathToFileURL(process.argv[1]).href) {
  startReceiver().then(
    (receiver) => {
      console.log(`webhook receiver listening on ${receiver.url}`);
      const stop = (): void => void receiver.close().then(() => process.exit(0));
      process.once('SIGINT', stop);
      process.once('SIGTERM', stop);
    },
    (err: unknown) => {
      console.error((err as Error).message);
      process.exit(1);
    },
  );
}
