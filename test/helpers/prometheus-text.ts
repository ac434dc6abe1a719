/**
 * The one reader of the Prometheus text exposition (what `/metrics` serves)
 * for tests and benches. Comments (`# HELP`, `# TYPE`) and blank lines are
 * skipped; every other line is one sample.
 */

/** One sample line: `name{labels} value`. */
export interface PromSample {
  name: string;
  labels: Record<string, string>;
  value: number;
}

const SAMPLE = /^([A-Za-z_:][A-Za-z0-9_:]*)(?:\{([^}]*)\})?\s+(\S+)/;
const LABEL = /([A-Za-z_][A-Za-z0-9_]*)="((?:[^"\\]|\\.)*)"/g;

/** Every sample of `text`, in order; `name` keeps only that metric's samples. */
export function parsePrometheusText(text: string | undefined, name?: string): PromSample[] {
  const out: PromSample[] = [];
  for (const line of (text ?? '').split('\n')) {
    if (line === '' || line.startsWith('#')) continue;
    // Cheap filter first: /metrics has hundreds of lines and the benches read it often.
    if (name !== undefined && !line.startsWith(name)) continue;
    const m = SAMPLE.exec(line);
    if (!m || (name !== undefined && m[1] !== name)) continue;
    const labels = Object.fromEntries([...(m[2] ?? '').matchAll(LABEL)].map((x) => [x[1]!, unescape(x[2]!)]));
    out.push({ name: m[1]!, labels, value: Number(m[3]) });
  }
  return out;
}

/** Sum of a metric's samples, over those whose labels include `labels`; 0 when there are none. */
export function metricSum(text: string | undefined, name: string, labels: Record<string, string> = {}): number {
  let sum = 0;
  for (const s of parsePrometheusText(text, name)) if (matches(s, labels)) sum += s.value;
  return sum;
}

/** The one sample of `name` whose labels are exactly `labels`; NaN when absent. */
export function metricSample(text: string | undefined, name: string, labels: Record<string, string> = {}): number {
  const wanted = Object.keys(labels).length;
  const hit = parsePrometheusText(text, name).find((s) => Object.keys(s.labels).length === wanted && matches(s, labels));
  return hit ? hit.value : Number.NaN;
}

function matches(sample: PromSample, labels: Record<string, string>): boolean {
  return Object.entries(labels).every(([k, v]) => sample.labels[k] === v);
}

function unescape(value: string): string {
  return value.replace(/\\(.)/g, (_, c: string) => (c === 'n' ? '\n' : c));
}
