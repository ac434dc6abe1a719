import { randomBytes } from 'node:crypto';
import { expect } from 'vitest';

/**
 * The parts of the service contract the whole-stack tests check, written out
 * here from the spec rather than imported from the service, so a change on
 * either side shows up as a failing test.
 */

export type Res = { status: number; headers: Headers; body: any; text: string };
export type EventItem = { event: string; visitor_id: string; timestamp: string };

/** Problem type codes by status (docs/api.md). */
const PROBLEM_CODE: Record<number, string> = {
  400: 'bad_request|invalid_json',
  401: 'unauthorized',
  403: 'forbidden|origin_not_allowed|tenant_suspended',
  404: 'not_found',
  409: 'conflict',
  413: 'payload_too_large',
  414: 'uri_too_long',
  415: 'unsupported_media_type',
  422: 'validation_failed',
  429: 'rate_limited',
};

/** The error contract: a 4xx problem+json with type/title/status/detail/request_id, and X-Request-Id = request_id. */
export function expectProblem(res: Res, status?: number, detail?: RegExp): void {
  if (status !== undefined) expect(res.status, res.text).toBe(status);
  expect(res.status, res.text).toBeGreaterThanOrEqual(400);
  expect(res.status, res.text).toBeLessThan(500);
  expect(res.headers.get('content-type'), res.text).toMatch(/^application\/problem\+json/);
  expect(res.body, res.text).toMatchObject({
    type: expect.stringMatching(new RegExp(`^urn:video-analytics:problem:(${PROBLEM_CODE[res.status] ?? '[a-z_]+'})$`)),
    title: expect.any(String),
    status: res.status,
    detail: expect.any(String),
    request_id: expect.stringMatching(/^req_[A-Za-z0-9_-]+$/),
  });
  expect(res.body.title.length).toBeGreaterThan(0);
  expect(res.headers.get('x-request-id')).toBe(res.body.request_id);
  if (detail) expect(res.body.detail).toMatch(detail);
}

/** The player's event names of spec 6.1 and the short names the events API shows. */
export const SHORT: Record<string, string> = {
  player_loaded: 'loaded',
  video_view: 'view',
  video_play: 'play',
  video_pause: 'pause',
  video_resume: 'resume',
  video_unmute: 'unmute',
  watched_25_percent: 'watched_25',
  watched_50_percent: 'watched_50',
  watched_75_percent: 'watched_75',
  watched_90_percent: 'watched_90',
  cta_shown: 'cta_shown',
  cta_clicked: 'cta_clicked',
  session_ended: 'session_ended',
};
export const ACTIVE = Object.keys(SHORT);
export const SIGNALS = ['heartbeat', 'seek'];
/** Events the service raises itself: a player may not send them. */
export const NOT_FROM_PLAYER = ['reached_pitch', 'high_intent_lead', 'conversion', 'abandoned_before_pitch', 'abandoned_after_offer'];

export const iso = (ms: number) => new Date(ms).toISOString();
export const randomVid = () => `vid_${randomBytes(16).toString('hex')}`;
