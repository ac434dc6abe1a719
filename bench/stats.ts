/** Small statistics and formatting helpers for the benchmark report. */
import { metricSum } from '../test/helpers/prometheus-text.ts';

export function median(values: number[]): number {
  return quantile(values, 0.5);
}

/** Nearest-rank quantile (q in 0..1); NaN for no values. */
export function quantile(values: number[], q: number): number {
  if (values.length === 0) return Number.NaN;
  const sorted = [...values].sort((a, b) => a - b);
  const rank = Math.min(sorted.length - 1, Math.max(0, Math.ceil(q * sorted.length) - 1));
  return sorted[rank]!;
}

export function fmtInt(n: number): string {
  if (!Number.isFinite(n)) return 'n/a';
  return Math.round(n).toLocaleString('en-US');
}

export function fmtMs(n: number): string {
  if (!Number.isFinite(n)) return 'n/a';
  return n >= 100 ? `${n.toFixed(0)} ms` : n >= 10 ? `${n.toFixed(1)} ms` : `${n.toFixed(2)} ms`;
}

export function fmtRatio(n: number): string {
  return Number.isFinite(n) ? `${n.toFixed(2)}×` : 'n/a';
}

/** Renders rows as a fixed-width text table (first row is the header). */
export function table(rows: string[][]): string {
  const widths = rows[0]!.map((_, i) => Math.max(...rows.map((r) => (r[i] ?? '').length)));
  const line = (r: string[]) => r.map((c, i) => (i === 0 ? c.padEnd(widths[i]!) : c.padStart(widths[i]!))).join('  ');
  return [line(rows[0]!), widths.map((w) => '-'.repeat(w)).join('  '), ...rows.slice(1).map(line)].join('\n');
}

/** The cumulative buckets (upper bound in seconds → count) of the series of histogram `name` with `labels`, at the given bounds and +Inf. */
export function promBuckets(text: string, name: string, labels: Record<string, string>, bounds: readonly number[]): Map<number, number> {
  const out = new Map<number, number>();
  for (const le of [...bounds, Number.POSITIVE_INFINITY]) {
    out.set(le, metricSum(text, `${name}_bucket`, { ...labels, le: le === Number.POSITIVE_INFINITY ? '+Inf' : String(le) }));
  }
  return out;
}

/**
 * Of the observations between two readings of one histogram's buckets: how
 * many, the upper bound of the bucket holding the quantile `q` (seconds), and
 * the share at most `within` seconds (`within` must be a bucket bound).
 */
export function bucketDelta(before: Map<number, number>, after: Map<number, number>, q: number, within: number): { n: number; upper: number; share: number } {
  const bounds = [...after.keys()].sort((a, b) => a - b);
  const count = (le: number) => (after.get(le) ?? 0) - (before.get(le) ?? 0);
  const n = count(Number.POSITIVE_INFINITY);
  const upper = bounds.find((le) => count(le) >= q * n) ?? Number.NaN;
  return { n, upper, share: n > 0 ? count(within) / n : Number.NaN };
}

