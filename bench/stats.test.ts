import { describe, expect, it } from 'vitest';
import { bucketDelta, promBuckets } from './stats.ts';

const BOUNDS = [0.1, 0.2, 0.5];

const exposition = (counts: number[]) =>
  [
    '# HELP projector_record_age_seconds age',
    '# TYPE projector_record_age_seconds histogram',
    ...['0.1', '0.2', '0.5', '+Inf'].map((le, i) => `projector_record_age_seconds_bucket{le="${le}",stage="readable"} ${counts[i]}`),
    'projector_record_age_seconds_bucket{le="0.1",stage="fetched"} 999',
    `projector_record_age_seconds_count{stage="readable"} ${counts[3]}`,
  ].join('\n');

describe('histogram buckets between two readings', () => {
  it('reads one series, and gives the count, the bucket of a quantile and the share within a bound', () => {
    const before = promBuckets(exposition([10, 20, 30, 30]), 'projector_record_age_seconds', { stage: 'readable' }, BOUNDS);
    const after = promBuckets(exposition([60, 110, 128, 130]), 'projector_record_age_seconds', { stage: 'readable' }, BOUNDS);
    expect([...after]).toEqual([
      [0.1, 60],
      [0.2, 110],
      [0.5, 128],
      [Number.POSITIVE_INFINITY, 130],
    ]);
    // Between them: 100 observations, 50 ≤ 0.1 s, 90 ≤ 0.2 s, 98 ≤ 0.5 s.
    expect(bucketDelta(before, after, 0.5, 0.2)).toEqual({ n: 100, upper: 0.1, share: 0.9 });
    expect(bucketDelta(before, after, 0.9, 0.2).upper).toBe(0.2);
    expect(bucketDelta(before, after, 0.99, 0.2).upper).toBe(Number.POSITIVE_INFINITY);
  });
});
