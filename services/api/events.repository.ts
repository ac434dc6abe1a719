import { z } from 'zod';
import type { ClickHouseClient } from '../../shared/clickhouse/clickhouse.ts';
import { chFloat, chInt, chUuid, parseRows } from '../../shared/clickhouse/rows.ts';
import { PLAYER_SIGNALS } from '../../shared/event-names.ts';
import type { FactorInputs } from '../../shared/score.ts';

export interface EventRow {
  event_name: string;
  visitor_id: string;
  ts: number;
  event_id: string;
}

const EventPageRow = z.object({ event_name: z.string(), visitor_id: z.string(), ts: chInt, id_text: chUuid });
const VisitorFactorsRow = z.object({
  tenant_id: chUuid,
  max_watched_percentage: chFloat,
  play_ms: chInt,
  focus_ms: chInt,
  cta_clicks: chInt,
  rewinds: chInt,
  last_ts: chInt,
});

/** ClickHouse reads of the API. Exact reads use FINAL: replays may have left duplicates unmerged. */
export class EventsRepository {
  readonly #ch: ClickHouseClient;

  constructor(ch: ClickHouseClient) {
    this.#ch = ch;
  }

  /** One keyset page of a video's events ordered by (timestamp, event_id), signals excluded. */
  async page(q: { tenantId: string; videoId: string; sinceMs: number | undefined; after?: { ts: number; id: string }; limit: number }): Promise<EventRow[]> {
    const rs = await this.#ch.query({
      query: `
        SELECT event_name, visitor_id, toUnixTimestamp64Milli(timestamp) AS ts, toString(event_id) AS id_text
        FROM events FINAL
        WHERE tenant_id = {tenant:UUID} AND video_id = {video:UUID}
          AND event_name NOT IN {signals:Array(String)}
          ${q.sinceMs === undefined ? '' : "AND timestamp >= fromUnixTimestamp64Milli({since:Int64}, 'UTC')"}
          ${q.after ? "AND (timestamp, event_id) > (fromUnixTimestamp64Milli({after_ts:Int64}, 'UTC'), {after_id:UUID})" : ''}
        ORDER BY timestamp, event_id
        LIMIT {limit:UInt32}`,
      query_params: {
        tenant: q.tenantId,
        video: q.videoId,
        signals: [...PLAYER_SIGNALS],
        since: q.sinceMs ?? 0,
        after_ts: q.after?.ts ?? 0,
        after_id: q.after?.id ?? '00000000-0000-0000-0000-000000000000',
        limit: q.limit,
      },
      format: 'JSONEachRow',
    });
    // NOTE: the alias is not `event_id`: an alias shadows the column in
    // WHERE and ORDER BY, and the keyset must compare UUIDs, not strings.
    const rows = parseRows('events page', EventPageRow, await rs.json());
    return rows.map((r) => ({ event_name: r.event_name, visitor_id: r.visitor_id, ts: r.ts, event_id: r.id_text }));
  }

  /** The visitor's factor inputs per tenant that has seen them (for 403 vs 404). */
  async visitorFactors(visitorId: string): Promise<(FactorInputs & { tenant_id: string; last_ts: number })[]> {
    const rs = await this.#ch.query({
      query: `
        SELECT toString(tenant_id) AS tenant_id,
               max(watched_percentage) AS max_watched_percentage,
               sum(play_ms) AS play_ms,
               sum(focus_ms) AS focus_ms,
               countIf(event_name = 'cta_clicked') AS cta_clicks,
               sum(is_rewind) AS rewinds,
               toUnixTimestamp64Milli(max(timestamp)) AS last_ts
        FROM visitor_events FINAL
        WHERE visitor_id = {visitor:String}
        GROUP BY tenant_id`,
      query_params: { visitor: visitorId },
      format: 'JSONEachRow',
    });
    return parseRows('visitor factors', VisitorFactorsRow, await rs.json());
  }
}
