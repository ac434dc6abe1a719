import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { expectProblem } from './helpers/contract.ts';
import { metricSum } from './helpers/prometheus-text.ts';
import { TestStack, type TestTenant } from './helpers/stack.ts';

/**
 * Load shedding of the intake, on the real stack: a valid request over the
 * in-flight bound is answered 503 with Retry-After at once, while the ones
 * in flight are still accepted. A long linger holds the first request in
 * flight (it waits that long for others to share its Kafka transaction).
 */
describe('intake load shedding', () => {
  let s: TestStack;
  let t: TestTenant;

  beforeAll(async () => {
    s = await TestStack.start({
      SERVICES: 'ingest,admin',
      INGEST_LINGER_MS: '1500',
      INGEST_MAX_IN_FLIGHT_REQUESTS: '1',
      // Only the in-flight bound here: the queue-delay bound would also refuse while the linger runs.
      INGEST_MAX_QUEUE_DELAY_MS: '60000',
    });
    t = await s.createTenant();
  });
  afterAll(async () => {
    await s?.stop();
  });

  const rejected = async () => metricSum(await (await fetch(`${s.url}/metrics`)).text(), 'ingest_requests_rejected_total', { reason: 'overloaded' });

  it('answers 503 with Retry-After: 1 over INGEST_MAX_IN_FLIGHT_REQUESTS, and accepts again once the one in flight is answered', async () => {
    const before = await rejected();
    let firstAnswered = false;
    const first = s.collect(t.player_key, [{ event_name: 'video_play', video_id: t.videoId }]).then((r) => {
      firstAnswered = true;
      return r;
    });
    // The first request is in flight (lingering) once the stack has counted it as such: poll until a second is refused.
    let second: Awaited<ReturnType<TestStack['collect']>> | undefined;
    await expect
      .poll(async () => {
        second = await s.collect(t.player_key, [{ event_name: 'video_pause', video_id: t.videoId }]);
        return second.status;
      })
      .toBe(503);
    expect(firstAnswered, 'refused while the first was still in flight').toBe(false);
    expect(second!.headers.get('retry-after')).toBe('1');
    expect(second!.headers.get('content-type')).toMatch(/^application\/problem\+json/);
    expect(second!.body).toMatchObject({ type: 'urn:video-analytics:problem:unavailable', status: 503, detail: expect.stringMatching(/overloaded.*in flight/) });
    expect((await first).status).toBe(202);
    expect(await rejected()).toBeGreaterThan(before);
    expect((await s.collect(t.player_key, [{ event_name: 'video_pause', video_id: t.videoId }])).status).toBe(202);
  });

  it('checks the credential before the bound: an unknown key is answered 401 while the slots are taken', async () => {
    const first = s.collect(t.player_key, [{ event_name: 'video_play', video_id: t.videoId }]);
    // The slot is taken once a valid request is in flight: a second valid one is then shed.
    await expect.poll(async () => (await s.collect(t.player_key, [{ event_name: 'video_pause', video_id: t.videoId }])).status).toBe(503);
    expectProblem(await s.collect('pk_unknown', [{ event_name: 'video_play', video_id: t.videoId }]), 401);
    expect((await first).status).toBe(202);
  });
});
