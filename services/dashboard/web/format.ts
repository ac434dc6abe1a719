/** Display helpers. Times are shown in the viewer's time zone, with the ISO value in a tooltip. */

const dateTime = new Intl.DateTimeFormat(undefined, { dateStyle: 'medium', timeStyle: 'medium' });
const number = new Intl.NumberFormat();

export function formatTime(iso: string | null | undefined): string {
  if (!iso) return '—';
  const d = new Date(iso);
  return Number.isNaN(d.getTime()) ? iso : dateTime.format(d);
}

export function formatNumber(n: number): string {
  return number.format(n);
}

/** 0.913 → "91.3%" */
export function formatRatio(r: number, digits = 1): string {
  return `${(r * 100).toFixed(digits).replace(/\.0+$/, '')}%`;
}

export function formatPercent(p: number, digits = 1): string {
  return `${p.toFixed(digits).replace(/\.0+$/, '')}%`;
}

export function formatDuration(sec: number): string {
  const h = Math.floor(sec / 3600);
  const m = Math.floor((sec % 3600) / 60);
  const s = sec % 60;
  const mm = h ? String(m).padStart(2, '0') : String(m);
  return `${h ? `${h}:` : ''}${mm}:${String(s).padStart(2, '0')}`;
}

export function formatMs(ms: number | null): string {
  if (ms === null) return '—';
  return ms < 1000 ? `${ms} ms` : `${(ms / 1000).toFixed(2)} s`;
}

/** First 8 characters of a UUID, for tables; the full id goes in a title. */
export function shortId(id: string): string {
  return id.slice(0, 8);
}

/** A whole number of `min`..`max` typed into a field, or undefined. */
export function wholeNumber(text: string, min: number, max: number): number | undefined {
  if (!/^\s*\d+\s*$/.test(text)) return undefined;
  const n = Number(text);
  return n >= min && n <= max ? n : undefined;
}
