import { describe, expect, it } from 'vitest';
import { metricSample, metricSum, parsePrometheusText } from './prometheus-text.ts';

const TEXT = [
  '# HELP http_requests_total requests',
  '# TYPE http_requests_total counter',
  'http_requests_total{method="GET",route="/v1/videos",status="200"} 3',
  'http_requests_total{method="POST",route="/v1/collect",status="202"} 5',
  'http_requests_total_other 100',
  '',
  'projector_batch_size_count 7',
  'projector_batch_size_sum 140',
  'webhook_attempts_total{outcome="failed",error_class="say \\"no\\""} 2',
].join('\n');

describe('Prometheus text', () => {
  it('reads every sample with its labels, and skips comments and blank lines', () => {
    expect(parsePrometheusText(TEXT)).toHaveLength(6);
    expect(parsePrometheusText(TEXT, 'http_requests_total')).toEqual([
      { name: 'http_requests_total', labels: { method: 'GET', route: '/v1/videos', status: '200' }, value: 3 },
      { name: 'http_requests_total', labels: { method: 'POST', route: '/v1/collect', status: '202' }, value: 5 },
    ]);
    expect(parsePrometheusText(TEXT, 'webhook_attempts_total')[0]!.labels.error_class).toBe('say "no"');
  });

  it('sums over the samples whose labels include the given ones, never a metric whose name only starts the same', () => {
    expect(metricSum(TEXT, 'http_requests_total')).toBe(8);
    expect(metricSum(TEXT, 'http_requests_total', { method: 'POST' })).toBe(5);
    expect(metricSum(TEXT, 'missing_total')).toBe(0);
    expect(metricSum(undefined, 'http_requests_total')).toBe(0);
  });

  it('finds one sample by its exact labels, NaN when absent', () => {
    expect(metricSample(TEXT, 'projector_batch_size_sum')).toBe(140);
    expect(metricSample(TEXT, 'http_requests_total')).toBeNaN();
    expect(metricSample(TEXT, 'http_requests_total', { method: 'GET', route: '/v1/videos', status: '200' })).toBe(3);
  });
});
