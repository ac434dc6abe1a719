import net from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { TestStack, eventually, type TestTenant } from './helpers/stack.ts';

/**
 * Clients that send a request's headers and then stall its body cost the
 * other tenants nothing: they hold no intake slot, and the server answers or
 * drops them once their body has been silent for HTTP_BODY_IDLE_TIMEOUT_MS.
 */

interface HeldRequest {
  socket: net.Socket;
  /** Everything the server sent on the socket so far. */
  received(): string;
  /** Resolves once the server closed the socket. */
  closed: Promise<void>;
}

/**
 * A raw POST /v1/collect that announces the length of a real body and sends
 * its first byte only. `Expect: 100-continue` makes the server answer
 * "100 Continue" once it has read the headers and started the request, so
 * the caller knows when the request has reached the service.
 */
async function holdCollect(url: string, playerKey: string, body: string): Promise<HeldRequest> {
  const { hostname, port } = new URL(url);
  const socket = net.connect({ host: hostname, port: Number(port) });
  let text = '';
  socket.setEncoding('latin1');
  socket.on('data', (chunk: string) => (text += chunk));
  socket.on('error', () => undefined); // a reset by the server is one way of being closed
  const closed = new Promise<void>((r) => socket.once('close', () => r()));
  socket.write(
    `POST /v1/collect HTTP/1.1\r\nHost: ${hostname}:${port}\r\nContent-Type: application/json\r\nX-Player-Key: ${playerKey}\r\n` +
      `Content-Length: ${Buffer.byteLength(body)}\r\nExpect: 100-continue\r\n\r\n${body.slice(0, 1)}`,
  );
  const held = { socket, received: () => text, closed };
  await expect.poll(() => text.startsWith('HTTP/1.1 100 Continue'), { timeout: 20_000, interval: 20 }).toBe(true);
  return held;
}

const collectBody = (videoId: string, visitor: string) =>
  JSON.stringify({ events: [{ event_name: 'video_play', video_id: videoId, session_id: 'ses_slow', visitor_id: visitor, current_time: 0, duration: 120, watched_percentage: 0 }] });

describe('slow clients hold no intake slot', () => {
  const HELD = 300;
  let s: TestStack;
  let attacker: TestTenant;
  let victim: TestTenant;
  const held: HeldRequest[] = [];

  beforeAll(async () => {
    s = await TestStack.start({
      SERVICES: 'ingest,projector,api,admin',
      // The default in-flight bound (256) is below HELD: on the slot alone, not on a timeout, the victim's request depends.
      INGEST_MAX_IN_FLIGHT_REQUESTS: '256',
      HTTP_BODY_IDLE_TIMEOUT_MS: '120000',
      HTTP_REQUEST_TIMEOUT_MS: '120000',
    });
    attacker = await s.createTenant('slow-attacker');
    victim = await s.createTenant('slow-victim');
  });
  afterAll(async () => {
    for (const h of held) h.socket.destroy();
    await s?.stop();
  });

  it(`answers another tenant's /v1/collect 202 while ${HELD} requests with a valid key hold their body back`, async () => {
    const body = collectBody(attacker.videoId, 'vis_attacker');
    for (let i = 0; i < HELD; i += 50) {
      held.push(...(await Promise.all(Array.from({ length: Math.min(50, HELD - i) }, () => holdCollect(s.url, attacker.player_key, body)))));
    }
    const res = await s.collect(victim.player_key, [{ event_name: 'video_play', video_id: victim.videoId, visitor_id: 'vis_victim' }]);
    expect(res.status, res.text).toBe(202);
    // Every held request is still open and unanswered beyond its 100 Continue.
    expect(held.filter((h) => h.socket.destroyed || h.received() !== 'HTTP/1.1 100 Continue\r\n\r\n')).toHaveLength(0);
    const events = await eventually(async () => {
      const all = await s.allEvents(victim.videoId, victim.apiKey);
      return all.length > 0 ? all : undefined;
    }, 30_000, 200);
    expect(events).toMatchObject([{ event: 'play', visitor_id: 'vis_victim' }]);
  });
});

describe('a stalled body is answered within the body-idle timeout', () => {
  const IDLE_MS = 1000;
  let s: TestStack;
  let t: TestTenant;

  beforeAll(async () => {
    s = await TestStack.start({
      SERVICES: 'ingest,admin',
      HTTP_BODY_IDLE_TIMEOUT_MS: String(IDLE_MS),
      // Far beyond the idle timeout, so that only the idle timeout can end the request here.
      HTTP_REQUEST_TIMEOUT_MS: '60000',
      // Each intake request waits this long for its transaction: longer than the idle timeout.
      INGEST_LINGER_MS: String(IDLE_MS * 1.5),
      INGEST_MAX_QUEUE_DELAY_MS: '60000',
    });
    t = await s.createTenant('slow-idle');
  });
  afterAll(async () => {
    await s?.stop();
  });

  it('answers 408 problem+json with Connection: close and closes the socket', { timeout: 15_000 }, async () => {
    const h = await holdCollect(s.url, t.player_key, collectBody(t.videoId, 'vis_idle'));
    const since = performance.now();
    await h.closed;
    const waited = performance.now() - since;
    expect(waited).toBeGreaterThan(IDLE_MS * 0.8);
    expect(waited).toBeLessThan(IDLE_MS * 5);
    const answer = h.received().replace('HTTP/1.1 100 Continue\r\n\r\n', '');
    expect(answer).toMatch(/^HTTP\/1\.1 408 /);
    expect(answer).toMatch(/\r\nconnection: close\r\n/i);
    expect(answer).toMatch(/\r\ncontent-type: application\/problem\+json/i);
    expect(answer).toContain('"type":"urn:video-analytics:problem:request_timeout"');
  });

  it('keeps a body that trickles in under the idle timeout, and accepts it once complete', { timeout: 15_000 }, async () => {
    const body = collectBody(t.videoId, 'vis_trickle');
    const h = await holdCollect(s.url, t.player_key, body);
    // The whole body takes over twice the idle timeout; no pause reaches it.
    const rest = body.slice(1);
    const step = Math.ceil(rest.length / 8);
    for (let i = 0; i < rest.length; i += step) {
      await new Promise((r) => setTimeout(r, IDLE_MS / 4));
      h.socket.write(rest.slice(i, i + step));
    }
    await expect.poll(() => h.received(), { timeout: 10_000, interval: 20 }).toMatch(/HTTP\/1\.1 202 /);
    h.socket.destroy();
  });

  it('keeps the connection of a complete request whose answer takes longer than the idle timeout', { timeout: 15_000 }, async () => {
    const res = await s.collect(t.player_key, [{ event_name: 'video_play', video_id: t.videoId, visitor_id: 'vis_slow_answer' }]);
    expect(res.status, res.text).toBe(202);
  });

  it('closes a connection that sent part of its headers once the idle timeout passes', { timeout: 15_000 }, async () => {
    const { hostname, port } = new URL(s.url);
    const socket = net.connect({ host: hostname, port: Number(port) });
    socket.on('error', () => undefined);
    socket.write('POST /v1/collect HTTP/1.1\r\nHost: x\r\n');
    const since = performance.now();
    await new Promise<void>((r) => socket.once('close', () => r()));
    expect(performance.now() - since).toBeLessThan(IDLE_MS * 5);
  });
});
