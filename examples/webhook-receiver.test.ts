// The example receiver on 127.0.0.1 only, driven by fetch and by the real
// HTTPS delivery client.
import { execFileSync } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { parseCidrList } from '../shared/webhooks/address-policy.ts';
import { HttpsDeliveryClient } from '../shared/webhooks/https-delivery.ts';
import { webhookHeaders } from '../shared/webhooks/signing.ts';
import { startReceiver, type ReceivedDelivery, type RunningReceiver } from './webhook-receiver.ts';

const SECRET = 'whsec_example_receiver_secret_0123456789';

let dir: string;
let seenFile: string;
let deliveries: ReceivedDelivery[];
let logs: string[];
const running: RunningReceiver[] = [];

beforeEach(() => {
  dir = mkdtempSync(join(tmpdir(), 'webhook-receiver-'));
  seenFile = join(dir, 'state', 'seen.json');
  deliveries = [];
  logs = [];
});

afterEach(async () => {
  for (const receiver of running.splice(0)) await receiver.close();
  rmSync(dir, { recursive: true, force: true });
});

async function start(env: Record<string, string> = {}): Promise<RunningReceiver> {
  const receiver = await startReceiver(
    { WEBHOOK_SECRET: SECRET, RECEIVER_PORT: '0', RECEIVER_HOST: '127.0.0.1', SEEN_IDS_FILE: seenFile, ...env },
    (d) => {
      deliveries.push(d);
    },
    (line) => logs.push(line),
  );
  running.push(receiver);
  return receiver;
}

function payload(eventName = 'video_play', visitorId = 'vis_1'): string {
  return JSON.stringify({
    tenant_id: '8f0e4a2c-1b3d-4e5f-8a9b-0c1d2e3f4a5b',
    video_id: '1c9d7f4e-2a3b-4c5d-8e6f-7a8b9c0d1e2f',
    session_id: 'ses_1',
    visitor_id: visitorId,
    event_name: eventName,
    current_time: 12.5,
    duration: 120,
    watched_percentage: 10.4,
    created_at: '2024-01-01T00:00:00.000Z',
  });
}

async function deliver(
  receiver: RunningReceiver,
  body: string,
  deliveryId: string,
  override: (headers: Record<string, string>) => Record<string, string> = (h) => h,
): Promise<{ status: number; json: Record<string, unknown> }> {
  const headers = webhookHeaders({ eventName: 'video_play', deliveryId, secret: SECRET, rawBody: body });
  const res = await fetch(receiver.url, { method: 'POST', headers: override({ ...headers }), body });
  return { status: res.status, json: (await res.json()) as Record<string, unknown> };
}

/** Waits until the receiver has processed (after acknowledging) the delivery `id`. */
const processed = (id: string) => vi.waitFor(() => expect(deliveries.map((d) => d.deliveryId)).toContain(id));

/**
 * Sends a genuine delivery of a fresh id and waits until it is processed;
 * returns the id. The receiver processes deliveries in the order it
 * acknowledged them (one `setImmediate` each), so by then anything an earlier
 * request could have set off has run: what is not in `deliveries` at that
 * point was never going to be.
 */
async function sentinel(receiver: RunningReceiver): Promise<string> {
  const id = randomUUID();
  expect(await deliver(receiver, payload(), id)).toEqual({ status: 200, json: { status: 'accepted' } });
  await processed(id);
  return id;
}

describe('example webhook receiver', () => {
  it('accepts a signed delivery, records its id, then processes it', async () => {
    const receiver = await start();
    const id = randomUUID();
    const body = payload();
    expect(await deliver(receiver, body, id)).toEqual({ status: 200, json: { status: 'accepted' } });
    await processed(id);
    expect(deliveries).toHaveLength(1);
    expect(deliveries[0]).toMatchObject({ deliveryId: id, payload: JSON.parse(body) });
    expect(Object.keys(JSON.parse(readFileSync(seenFile, 'utf8')).ids)).toEqual([id]);
  });

  it('ignores repeats of a delivery id, including after a restart', async () => {
    const first = await start();
    const id = randomUUID();
    expect((await deliver(first, payload(), id)).json).toEqual({ status: 'accepted' });
    // A retry is signed again at its own time; only the delivery id stays the same.
    expect(await deliver(first, payload(), id)).toEqual({ status: 200, json: { status: 'duplicate' } });
    await first.close();

    const second = await start();
    expect(await deliver(second, payload(), id)).toEqual({ status: 200, json: { status: 'duplicate' } });
    const fresh = await sentinel(second);
    expect(deliveries.map((d) => d.deliveryId)).toEqual([id, fresh]);
  });

  it('accepts only one of several concurrent copies', async () => {
    const receiver = await start();
    const id = randomUUID();
    const results = await Promise.all(Array.from({ length: 5 }, () => deliver(receiver, payload(), id)));
    expect(results.map((r) => r.json['status']).sort()).toEqual(['accepted', 'duplicate', 'duplicate', 'duplicate', 'duplicate']);
    const after = await sentinel(receiver);
    expect(deliveries.map((d) => d.deliveryId)).toEqual([id, after]);
  });

  it.each([
    ['a wrong signature', (h: Record<string, string>) => ({ ...h, 'X-Player-Signature': '0'.repeat(64) }), 'signature_mismatch'],
    ['no signature', ({ 'X-Player-Signature': _, ...h }: Record<string, string>) => h, 'missing_signature'],
    ['no timestamp', ({ 'X-Player-Timestamp': _, ...h }: Record<string, string>) => h, 'missing_timestamp'],
    ['a stale timestamp', (h: Record<string, string>) => ({ ...h, 'X-Player-Timestamp': String(Number(h['X-Player-Timestamp']) - 301) }), 'timestamp_out_of_tolerance'],
    ['a truncated signature', (h: Record<string, string>) => ({ ...h, 'X-Player-Signature': h['X-Player-Signature']!.slice(0, 63) }), 'signature_length_mismatch'],
  ])('answers 401 to %s before any side effect', async (_label, override, reason) => {
    const receiver = await start();
    const id = randomUUID();
    expect(await deliver(receiver, payload(), id, override)).toEqual({ status: 401, json: { error: 'invalid_signature', reason } });
    expect(existsSync(seenFile)).toBe(false);
    const after = await sentinel(receiver);
    expect(deliveries.map((d) => d.deliveryId)).toEqual([after]);
    expect(Object.keys(JSON.parse(readFileSync(seenFile, 'utf8')).ids)).toEqual([after]);

    // The refused copy did not burn the id: the genuine delivery still goes through.
    expect((await deliver(receiver, payload(), id)).json).toEqual({ status: 'accepted' });
    await processed(id);
  });

  it('refuses a body altered after signing, even by whitespace only', async () => {
    const receiver = await start();
    const body = payload();
    const headers = webhookHeaders({ eventName: 'video_play', deliveryId: randomUUID(), secret: SECRET, rawBody: body });
    const res = await fetch(receiver.url, { method: 'POST', headers: { ...headers }, body: JSON.stringify(JSON.parse(body), null, 1) });
    expect(res.status).toBe(401);
    const after = await sentinel(receiver);
    expect(deliveries.map((d) => d.deliveryId)).toEqual([after]);
  });

  it('answers 500 without processing when the delivery id cannot be recorded, so the sender retries', async () => {
    const receiver = await start();
    // The state directory's place is taken by a plain file: the id cannot be written.
    writeFileSync(join(dir, 'state'), '');
    const id = randomUUID();
    expect(await deliver(receiver, payload(), id)).toEqual({ status: 500, json: { error: 'storage_unavailable' } });
    expect(logs.some((line) => line.includes('could not record the delivery id'))).toBe(true);

    // Once the id can be stored again, the sender's retry (its body marked to
    // tell it from the refused copy) is accepted and is the only processing.
    rmSync(join(dir, 'state'));
    expect(await deliver(receiver, payload('video_play', 'vis_retry'), id)).toEqual({ status: 200, json: { status: 'accepted' } });
    await processed(id);
    expect(deliveries.map((d) => d.payload['visitor_id'])).toEqual(['vis_retry']);
  });

  it('refuses a missing delivery id, a body whose event_name differs from the header, and non-POST', async () => {
    const receiver = await start();
    expect((await deliver(receiver, payload(), 'not-a-uuid')).status).toBe(400);
    expect((await deliver(receiver, payload('video_pause'), randomUUID())).json).toEqual({ error: 'event_name_mismatch' });
    expect((await fetch(receiver.url)).status).toBe(405);
    const after = await sentinel(receiver);
    expect(deliveries.map((d) => d.deliveryId)).toEqual([after]);
  });

  it('refuses to start without a secret', async () => {
    await expect(startReceiver({ RECEIVER_PORT: '0', SEEN_IDS_FILE: seenFile })).rejects.toThrow(/WEBHOOK_SECRET is required/);
  });

  it('serves HTTPS with TLS_CERT/TLS_KEY and takes a delivery from the HTTPS delivery client end to end', async () => {
    execFileSync(
      'openssl',
      ['req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-days', '1', '-subj', '/CN=localhost',
        '-addext', 'subjectAltName=DNS:localhost,IP:127.0.0.1', '-keyout', join(dir, 'key.pem'), '-out', join(dir, 'cert.pem')],
      { stdio: 'pipe' },
    );
    const receiver = await start({ TLS_CERT: join(dir, 'cert.pem'), TLS_KEY: join(dir, 'key.pem') });
    expect(receiver.url).toMatch(/^https:\/\/127\.0\.0\.1:\d+\/$/);

    const client = new HttpsDeliveryClient({
      timeoutMs: 2000,
      extraCaPem: readFileSync(join(dir, 'cert.pem'), 'utf8'),
      allowList: parseCidrList('127.0.0.0/8'),
      resolve: async () => [{ address: '127.0.0.1', family: 4 }],
    });
    try {
      const url = receiver.url.replace('127.0.0.1', 'localhost');
      const body = payload();
      const id = randomUUID();
      const send = () => client.post(url, { ...webhookHeaders({ eventName: 'video_play', deliveryId: id, secret: SECRET, rawBody: body }) }, body);
      expect(await send()).toMatchObject({ ok: true, status: 200 });
      expect(await send()).toMatchObject({ ok: true, status: 200 });
      // A delivery of another id, processed after anything the repeat could have set off.
      const next = randomUUID();
      expect(await client.post(url, { ...webhookHeaders({ eventName: 'video_play', deliveryId: next, secret: SECRET, rawBody: body }) }, body)).toMatchObject({ ok: true, status: 200 });
      await processed(next);
      expect(deliveries.map((d) => d.deliveryId)).toEqual([id, next]);
    } finally {
      client.close();
    }
  });
});
