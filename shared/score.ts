/**
 * The Lead Intent Score: a pure function of a visitor's factors, versioned so
 * that a change of weights is a new version rather than a silent shift.
 */
export const SCORE_VERSION = 1;

export interface ScoreFactors {
  /** The visitor's highest watched fraction, 0–1. */
  watched_percent: number;
  /** Focused play time ÷ play time, 0–1. */
  focus_time_ratio: number;
  /** CTA clicks. */
  cta_clicks: number;
  /** Backward seeks. */
  rewinds: number;
}

/**
 * What the visitor read model stores of a visitor: made from the
 * derived-events service's state by the projector, read back by the API.
 */
export interface VisitorSnapshot {
  tenant_id: string;
  visitor_id: string;
  score: number;
  score_version: number;
  factors: ScoreFactors;
  first_seen: number;
  last_seen: number;
  videos: string[];
  lead_at: number | null;
}

const clamp01 = (x: number): number => (Number.isFinite(x) ? Math.min(1, Math.max(0, x)) : 0);

/**
 * Version 1: round(100 × (0.40·watched + 0.20·focus + 0.25·min(cta,2)/2
 * + 0.15·min(rewinds,3)/3)), so 0–100.
 */
export function scoreV1(f: ScoreFactors): number {
  const value =
    0.4 * clamp01(f.watched_percent) +
    0.2 * clamp01(f.focus_time_ratio) +
    (0.25 * Math.min(Math.max(f.cta_clicks, 0), 2)) / 2 +
    (0.15 * Math.min(Math.max(f.rewinds, 0), 3)) / 3;
  // Rounded in two steps so 0.1 + 0.2 style float noise cannot tip a .5 boundary.
  return Math.round(Math.round(value * 1e9) / 1e7);
}

/** Raw per-visitor sums as the read model stores them. */
export interface FactorInputs {
  max_watched_percentage: number;
  play_ms: number;
  focus_ms: number;
  cta_clicks: number;
  rewinds: number;
}

/** Turns raw sums into the factors of spec 2.3. */
export function factorsFrom(inputs: FactorInputs): ScoreFactors {
  return {
    watched_percent: round4(clamp01(inputs.max_watched_percentage / 100)),
    focus_time_ratio: inputs.play_ms > 0 ? round4(clamp01(inputs.focus_ms / inputs.play_ms)) : 0,
    cta_clicks: inputs.cta_clicks,
    rewinds: inputs.rewinds,
  };
}

function round4(x: number): number {
  return Math.round(x * 10000) / 10000;
}
