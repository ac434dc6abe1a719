import { z } from 'zod';
import type { BoundedReads } from '../../shared/clickhouse/bounded-reads.ts';
import { chInt } from '../../shared/clickhouse/rows.ts';
import { factorsFrom, scoreV1, type ScoreFactors } from '../../shared/score.ts';
import { VISITOR_FACTORS_SQL, VisitorFactorsRow } from './events.repository.ts';

export interface VideoStats {
  totals: { loads: number; views: number; plays: number; cta_shown: number; cta_clicked: number; completions: number; unique_visitors: number };
  daily: { date: string; loads: number; views: number; plays: number }[];
}

export interface Retention {
  viewers: number;
  points: { position_pct: number; viewers_pct: number }[];
}

export interface TopVisitor {
  visitor_id: string;
  score: number;
  factors: ScoreFactors;
  computed_at: number;
}

const TotalsRow = z.object({
  loads: chInt,
  views: chInt,
  plays: chInt,
  cta_shown: chInt,
  cta_clicked: chInt,
  completions: chInt,
  unique_visitors: chInt,
});
const DailyRow = z.object({ day: z.iso.date(), loads: chInt, views: chInt, plays: chInt });
const RetentionRow = z.object({ viewers: chInt, reached: z.array(chInt) });
const CandidateRow = VisitorFactorsRow.extend({ visitor_id: z.string() });
const NO_TOTALS: z.infer<typeof TotalsRow> = { loads: 0, views: 0, plays: 0, cta_shown: 0, cta_clicked: 0, completions: 0, unique_visitors: 0 };

const DAY_MS = 86_400_000;
/** How many of a video's most recent visitors are scored for its leaderboard. */
const MAX_CANDIDATES = 20_000;
/** The retention curve's positions: 0, 5, …, 100 (% of the video). */
const RETENTION_POSITIONS = Array.from({ length: 21 }, (_, i) => i * 5);

/**
 * The furthest point (0–100) of each viewing session of a video: the highest
 * watched_percentage of its events or the milestone it reached, for sessions
 * with a play, a heartbeat or a milestone. Exported for the test that
 * compares the curve with one computed from these rows.
 */
export const SESSION_REACH_SQL = `
        SELECT max(greatest(watched_percentage, multiIf(
                 event_name = 'watched_90_percent', 90, event_name = 'watched_75_percent', 75,
                 event_name = 'watched_50_percent', 50, event_name = 'watched_25_percent', 25, 0))) AS reached
        FROM events FINAL
        WHERE tenant_id = {tenant:UUID} AND video_id = {video:UUID}
        GROUP BY session_id
        HAVING countIf(event_name IN ('video_play', 'heartbeat', 'watched_25_percent', 'watched_50_percent', 'watched_75_percent', 'watched_90_percent')) > 0`;

/**
 * Score version 1 of shared/score.ts in SQL, over the sums of visitor_events,
 * for ranking only: the same IEEE operations in the same order, and
 * floor(x + 0.5) for Math.round (they differ only past 2^52 and at
 * 0.49999999999999994, neither reachable here), so the order is the one
 * scoreV1 gives. The answered scores are still computed by scoreV1.
 */
const SCORE_V1_SQL = `
  floor(floor((
      0.4 * (floor(least(1., greatest(0., max_watched_percentage / 100)) * 10000 + 0.5) / 10000)
    + 0.2 * if(play_ms > 0, floor(least(1., greatest(0., focus_ms / play_ms)) * 10000 + 0.5) / 10000, 0.)
    + 0.25 * least(greatest(cta_clicks, 0), 2) / 2
    + 0.15 * least(greatest(rewinds, 0), 3) / 3
  ) * 1e9 + 0.5) / 1e7 + 0.5)`;

/**
 * Per-video analytics for the dashboard and /v1: counts over time, the
 * retention curve and the visitors with the highest Lead Intent Score.
 * Exact reads (FINAL) so replays never inflate a count. Every aggregate is
 * computed by ClickHouse; what comes back is at most one row per day, one
 * curve, or a page of visitors.
 */
export class AnalyticsRepository {
  readonly #reads: BoundedReads;

  constructor(reads: BoundedReads) {
    this.#reads = reads;
  }

  async stats(tenantId: string, videoId: string, days: number, signal?: AbortSignal): Promise<VideoStats> {
    const params = { tenant: tenantId, video: videoId };
    const [totals = NO_TOTALS] = await this.#reads.rows(
      'video totals',
      TotalsRow,
      {
        query: `
        SELECT countIf(event_name = 'player_loaded') AS loads, countIf(event_name = 'video_view') AS views,
               countIf(event_name = 'video_play') AS plays, countIf(event_name = 'cta_shown') AS cta_shown,
               countIf(event_name = 'cta_clicked') AS cta_clicked, countIf(event_name = 'watched_90_percent') AS completions,
               uniqExact(visitor_id) AS unique_visitors
        FROM events FINAL
        WHERE tenant_id = {tenant:UUID} AND video_id = {video:UUID}`,
        query_params: params,
      },
      signal,
    );
    const firstDay = Math.floor(Date.now() / DAY_MS) * DAY_MS - (days - 1) * DAY_MS;
    const dailyRows = await this.#reads.rows(
      'video daily counts',
      DailyRow,
      {
        query: `
        SELECT toString(toDate(timestamp)) AS day, countIf(event_name = 'player_loaded') AS loads,
               countIf(event_name = 'video_view') AS views, countIf(event_name = 'video_play') AS plays
        FROM events FINAL
        WHERE tenant_id = {tenant:UUID} AND video_id = {video:UUID} AND timestamp >= fromUnixTimestamp64Milli({from:Int64}, 'UTC')
        GROUP BY day ORDER BY day`,
        query_params: { ...params, from: firstDay },
      },
      signal,
    );
    const byDay = new Map(dailyRows.map((r) => [r.day, r]));
    const daily = Array.from({ length: days }, (_, i) => {
      const date = new Date(firstDay + i * DAY_MS).toISOString().slice(0, 10);
      const r = byDay.get(date);
      return { date, loads: r?.loads ?? 0, views: r?.views ?? 0, plays: r?.plays ?? 0 };
    });
    return { totals, daily };
  }

  /**
   * Share of viewing sessions (sessions that played) that reached each 5%
   * point of the video, from the furthest watched_percentage of any event
   * and the milestones. ClickHouse counts the sessions at or past each
   * point; one row comes back whatever the number of sessions.
   */
  async retention(tenantId: string, videoId: string, signal?: AbortSignal): Promise<Retention> {
    const [row] = await this.#reads.rows(
      'retention',
      RetentionRow,
      {
        query: `
        SELECT count() AS viewers,
               sumForEach(arrayMap(p -> toUInt64(reached >= p), {positions:Array(UInt8)})) AS reached
        FROM (${SESSION_REACH_SQL})`,
        query_params: { tenant: tenantId, video: videoId, positions: RETENTION_POSITIONS },
      },
      signal,
    );
    // No viewing session: sumForEach of nothing is an empty array.
    const viewers = row?.viewers ?? 0;
    return {
      viewers,
      points: RETENTION_POSITIONS.map((position_pct, i) => {
        const count = row?.reached[i] ?? 0;
        return { position_pct, viewers_pct: viewers === 0 ? 0 : Math.round((count / viewers) * 1000) / 10 };
      }),
    };
  }

  /**
   * The video's visitors ranked by their (tenant-wide) Lead Intent Score.
   * ClickHouse ranks by score and newest event and keeps the first `limit`
   * with their ties; the ties are ordered by visitor id here.
   */
  async topVisitors(tenantId: string, videoId: string, limit: number, signal?: AbortSignal): Promise<TopVisitor[]> {
    const rows = await this.#reads.rows(
      'top visitors',
      CandidateRow,
      {
        query: `
        SELECT visitor_id, max_watched_percentage, play_ms, focus_ms, cta_clicks, rewinds, last_ts
        FROM (
          SELECT visitor_id, ${VISITOR_FACTORS_SQL}
          FROM visitor_events FINAL
          WHERE tenant_id = {tenant:UUID} AND visitor_id IN (
            SELECT visitor_id FROM events
            WHERE tenant_id = {tenant:UUID} AND video_id = {video:UUID}
            GROUP BY visitor_id ORDER BY max(timestamp) DESC LIMIT {candidates:UInt32})
          GROUP BY visitor_id)
        ORDER BY ${SCORE_V1_SQL} DESC, last_ts DESC
        LIMIT {limit:UInt32} WITH TIES`,
        query_params: { tenant: tenantId, video: videoId, candidates: MAX_CANDIDATES, limit },
      },
      signal,
    );
    return rows
      .map((r) => {
        const factors = factorsFrom(r);
        return { visitor_id: r.visitor_id, score: scoreV1(factors), factors, computed_at: r.last_ts };
      })
      .sort((a, b) => b.score - a.score || b.computed_at - a.computed_at || a.visitor_id.localeCompare(b.visitor_id))
      .slice(0, limit);
  }
}
