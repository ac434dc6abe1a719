import { describe, expect, it } from 'vitest';
import { SCORE_VERSION, factorsFrom, scoreV1 } from './score.ts';

describe('score v1', () => {
  it('is version 1', () => expect(SCORE_VERSION).toBe(1));

  it('weights the four factors as specified', () => {
    expect(scoreV1({ watched_percent: 0, focus_time_ratio: 0, cta_clicks: 0, rewinds: 0 })).toBe(0);
    expect(scoreV1({ watched_percent: 1, focus_time_ratio: 1, cta_clicks: 2, rewinds: 3 })).toBe(100);
    expect(scoreV1({ watched_percent: 1, focus_time_ratio: 0, cta_clicks: 0, rewinds: 0 })).toBe(40);
    expect(scoreV1({ watched_percent: 0, focus_time_ratio: 1, cta_clicks: 0, rewinds: 0 })).toBe(20);
    expect(scoreV1({ watched_percent: 0, focus_time_ratio: 0, cta_clicks: 1, rewinds: 0 })).toBe(13); // 12.5 rounds up
    expect(scoreV1({ watched_percent: 0, focus_time_ratio: 0, cta_clicks: 0, rewinds: 1 })).toBe(5);
    // 0.4·0.91 + 0.2·0.8 + 0.25·0.5 + 0.15·(1/3) = 0.699
    expect(scoreV1({ watched_percent: 0.91, focus_time_ratio: 0.8, cta_clicks: 1, rewinds: 1 })).toBe(70);
  });

  it('caps clicks at 2 and rewinds at 3, clamps fractions', () => {
    expect(scoreV1({ watched_percent: 0, focus_time_ratio: 0, cta_clicks: 50, rewinds: 0 })).toBe(25);
    expect(scoreV1({ watched_percent: 0, focus_time_ratio: 0, cta_clicks: 0, rewinds: 9 })).toBe(15);
    expect(scoreV1({ watched_percent: 3, focus_time_ratio: -1, cta_clicks: -2, rewinds: 0 })).toBe(40);
    expect(scoreV1({ watched_percent: Number.NaN, focus_time_ratio: 0, cta_clicks: 0, rewinds: 0 })).toBe(0);
  });

  it('derives factors from raw sums', () => {
    expect(factorsFrom({ max_watched_percentage: 91, play_ms: 10_000, focus_ms: 8_000, cta_clicks: 1, rewinds: 2 })).toEqual({
      watched_percent: 0.91,
      focus_time_ratio: 0.8,
      cta_clicks: 1,
      rewinds: 2,
    });
    expect(factorsFrom({ max_watched_percentage: 150, play_ms: 0, focus_ms: 0, cta_clicks: 0, rewinds: 0 })).toEqual({
      watched_percent: 1,
      focus_time_ratio: 0,
      cta_clicks: 0,
      rewinds: 0,
    });
  });
});
