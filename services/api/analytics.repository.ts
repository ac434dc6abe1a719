import { z } from 'zod';
import type { ClickHouseClient } from '../../shared/clickhouse/clickhouse.ts';
import { chFloat, chInt, parseRows } from '../../shared/clickhouse/rows.ts';
import { factorsFrom, scoreV1, type ScoreFactors } from '../../shared/score.ts';

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
const ReachedRow = z.object({ reached: chFloat });
const CandidateRow = z.object({
  visitor_id: z.string(),
  max_watched_percentage: chFloat,
  play_ms: chInt,
  focus_ms: chInt,
  cta_clicks: chInt,
  rewinds: chInt,
  last_ts: chInt,
});
const NO_TOTALS: z.infer<typeof TotalsRow> = { loads: 0, views: 0, plays: 0, cta_shown: 0, cta_clicked: 0, completions: 0, unique_visitors: 0 };

const DAY_MS = 86_400_000;
/** How many of a video's most recent visitors are scored for its leaderboard. */
const MAX_CANDIDATES = 20_000;

/**
 * Per-video analytics for the dashboard and /v1: counts over time, the
 * retention curve and the visitors with the highest Lead Intent Score.
 * Exact reads (FINAL) so replays never inflate a count.
 */
export class AnalyticsRepository {
  readonly #ch: ClickHouseClient;

  constructor(ch: ClickHouseClient) {
    this.#ch = ch;
  }

  async stats(tenantId: string, videoId: string, days: number, now = Date.now()): Promise<VideoStats> {
    const params = { tenant: tenantId, video: videoId };
    const totalsRs = await this.#ch.query({
      query: `
        SELECT countIf(event_name = 'player_loaded') AS loads, countIf(event_name = 'video_view') AS views,
               countIf(event_name = 'video_play') AS plays, countIf(event_name = 'cta_shown') AS cta_shown,
               countIf(event_name = 'cta_clicked') AS cta_clicked, countIf(event_name = 'watched_90_percent') AS completions,
               uniqExact(visitor_id) AS unique_visitors
        FROM events FINAL
        WHERE tenant_id = {tenant:UUID} AND video_id = {video:UUID}`,
      query_params: params,
      format: 'JSONEachRow',
    });
    const [totals = NO_TOTALS] = parseRows('video totals', TotalsRow, await totalsRs.json());
    const firstDay = Math.floor(now / DAY_MS) * DAY_MS - (days - 1) * DAY_MS;
    const dailyRs = await this.#ch.query({
      query: `
        SELECT toString(toDate(timestamp)) AS day, countIf(event_name = 'player_loaded') AS loads,
               countIf(event_name = 'video_view') AS views, countIf(event_name = 'video_play') AS plays
        FROM events FINAL
        WHERE tenant_id = {tenant:UUID} AND video_id = {video:UUID} AND timestamp >= fromUnixTimestamp64Milli({from:Int64}, 'UTC')
        GROUP BY day ORDER BY day`,
      query_params: { ...params, from: firstDay },
      format: 'JSONEachRow',
    });
    const byDay = new Map(parseRows('video daily counts', DailyRow, await dailyRs.json()).map((r) => [r.day, r]));
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
   * and the milestones.
   */
  async retention(tenantId: string, videoId: string): Promise<Retention> {
    const rs = await this.#ch.query({
      query: `
        SELECT max(greatest(watched_percentage, multiIf(
                 event_name = 'watched_90_percent', 90, event_name = 'watched_75_percent', 75,
                 event_name = 'watched_50_percent', 50, event_name = 'watched_25_percent', 25, 0))) AS reached
        FROM events FINAL
        WHERE tenant_id = {tenant:UUID} AND video_id = {video:UUID}
        GROUP BY session_id
        HAVING countIf(event_name IN ('video_play', 'heartbeat', 'watched_25_percent', 'watched_50_percent', 'watched_75_percent', 'watched_90_percent')) > 0`,
      query_params: { tenant: tenantId, video: videoId },
      format: 'JSONEachRow',
    });
    const reached = parseRows('retention', ReachedRow, await rs.json()).map((r) => r.reached);
    const viewers = reached.length;
    const points = Array.from({ length: 21 }, (_, i) => {
      const position_pct = i * 5;
      const count = reached.filter((r) => r >= position_pct).length;
      return { position_pct, viewers_pct: viewers === 0 ? 0 : Math.round((count / viewers) * 1000) / 10 };
    });
    return { viewers, points };
  }

  /** The video's visitors ranked by their (tenant-wide) Lead Intent Score. */
  async topVisitors(tenantId: string, videoId: string, limit: number): Promise<TopVisitor[]> {
    const rs = await this.#ch.query({
      query: `
        SELECT visitor_id,
               max(watched_percentage) AS max_watched_percentage, sum(play_ms) AS play_ms, sum(focus_ms) AS focus_ms,
               countIf(event_name = 'cta_clicked') AS cta_clicks, sum(is_rewind) AS rewinds,
               toUnixTimestamp64Milli(max(timestamp)) AS last_ts
        FROM visitor_events FINAL
        WHERE tenant_id = {tenant:UUID} AND visitor_id IN (
          SELECT visitor_id FROM events
          WHERE tenant_id = {tenant:UUID} AND video_id = {video:UUID}
          GROUP BY visitor_id ORDER BY max(timestamp) DESC LIMIT {candidates:UInt32})
        GROUP BY visitor_id`,
      query_params: { tenant: tenantId, video: videoId, candidates: MAX_CANDIDATES },
      format: 'JSONEachRow',
    });
    return parseRows('top visitors', CandidateRow, await rs.json())
      .map((r) => {
        const factors = factorsFrom(r);
        return { visitor_id: r.visitor_id, score: scoreV1(factors), factors, computed_at: r.last_ts };
      })
      .sort((a, b) => b.score - a.score || b.computed_at - a.computed_at || a.visitor_id.localeCompare(b.visitor_id))
      .slice(0, limit);
  }
}
