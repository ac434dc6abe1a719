import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { TestStack, eventually } from './helpers/stack.ts';

describe('smoke: collect → Kafka → ClickHouse → read API', () => {
  let s: TestStack;
  beforeAll(async () => {
    s = await TestStack.start();
  });
  afterAll(async () => {
    await s?.stop();
  });

  it('serves an event it acknowledged', async () => {
    const t = await s.createTenant();
    const res = await s.collect(t.player_key, [{ event_name: 'video_play', video_id: t.videoId, visitor_id: 'vis_smoke' }]);
    expect(res.status).toBe(202);
    expect(res.body).toEqual({ accepted: 1 });
    const events = await eventually(async () => {
      const page = await s.api(`/videos/${t.videoId}/events`, t.apiKey);
      return page.body.data.length > 0 ? page.body.data : undefined;
    });
    expect(events).toEqual([{ event: 'play', visitor_id: 'vis_smoke', timestamp: expect.any(String) }]);
  });
});
