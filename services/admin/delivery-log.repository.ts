import { z } from 'zod';
import { definedParams, type BoundedReads } from '../../shared/clickhouse/bounded-reads.ts';
import { chInt, chNullableInt, chUuid } from '../../shared/clickhouse/rows.ts';
import type { Keyset } from '../../shared/http/cursor-param.ts';
import { DeliveryStatus } from './admin.schema.ts';

/** A delivery's summary: the columns of {@link summaryColumns}. */
const SummaryRow = z.object({ id: chUuid, dest_id: chUuid, ev_name: z.string(), status: DeliveryStatus, attempts: chInt, created_at_ms: chInt });
const ListRow = SummaryRow.extend({ next_attempt_ms: chNullableInt });
const VisitorSummaryRow = SummaryRow.extend({ vis: z.string() });

/**
 * The SELECT list of a delivery's summary over the rows of `webhook_attempts`
 * (as `t`) grouped by delivery_id. NOTE: aliases differ from column names:
 * ClickHouse lets an alias shadow a column in WHERE, which would put
 * aggregates there.
 */
const summaryColumns = (t: string) => `
               toString(${t}.delivery_id) AS id,
               toString(any(${t}.destination_id)) AS dest_id,
               any(${t}.event_name) AS ev_name,
               argMax(${t}.state, (${t}.recorded_at, ${t}.attempt)) AS status,
               max(${t}.attempt) AS attempts,
               toUnixTimestamp64Milli(min(${t}.delivery_created_at)) AS created_at_ms`;

const summary = (r: z.output<typeof SummaryRow>) => ({
  id: r.id,
  destination_id: r.dest_id,
  event_name: r.ev_name,
  status: r.status,
  attempts: r.attempts,
  created_at: r.created_at_ms,
});
const AttemptRowSchema = z.object({
  tenant_id: chUuid,
  destination_id: chUuid,
  event_name: z.string(),
  event_id: chUuid,
  attempt: chInt,
  state: z.string(),
  recorded_at: chInt,
  started_at: chNullableInt,
  duration_ms: chNullableInt,
  status_code: chNullableInt,
  error_class: z.string().nullable(),
  next_attempt_at: chNullableInt,
  created_at: chInt,
  body: z.string(),
});

/** One row of a delivery in the log: its state after an attempt (or pending), with the delivery's own fields. */
export type AttemptRow = z.infer<typeof AttemptRowSchema>;

const SecurityEventRow = z.object({
  id: chUuid,
  kind: z.string(),
  endpoint_id: chUuid,
  host: z.string(),
  event_id: chUuid.nullable(),
  event_name: z.string().nullable(),
  occurred_at: chInt,
});

/**
 * Reads of the delivery log (webhook_attempts) and security events. A
 * delivery's status is the state of its latest row; FINAL collapses replays.
 */
export class DeliveryLogRepository {
  readonly #reads: BoundedReads;

  constructor(reads: BoundedReads) {
    this.#reads = reads;
  }

  async list(q: {
    tenantId: string;
    status?: string;
    destinationId?: string;
    eventName?: string;
    before?: Keyset;
    limit: number;
  }) {
    const where = ['tenant_id = {tenant:UUID}'];
    if (q.destinationId) where.push('destination_id = {destination:UUID}');
    if (q.eventName) where.push('event_name = {event_name:String}');
    const having = ['1'];
    if (q.status) having.push('status = {status:String}');
    if (q.before) having.push("(created_at_ms, delivery_id) < ({before_ts:Int64}, {before_id:UUID})");
    const found = await this.#reads.rows('delivery list', ListRow, {
      query: `
        SELECT ${summaryColumns('webhook_attempts')},
               toUnixTimestamp64Milli(argMax(next_attempt_at, (recorded_at, attempt))) AS next_attempt_ms
        FROM webhook_attempts FINAL
        WHERE ${where.join(' AND ')}
        GROUP BY delivery_id
        HAVING ${having.join(' AND ')}
        ORDER BY created_at_ms DESC, delivery_id DESC
        LIMIT {limit:UInt32}`,
      query_params: definedParams({
        tenant: q.tenantId,
        destination: q.destinationId,
        event_name: q.eventName,
        status: q.status,
        before_ts: q.before?.ts,
        before_id: q.before?.id,
        limit: q.limit,
      }),
    });
    return found.map((r) => ({ ...summary(r), next_attempt_at: r.status === 'retrying' ? r.next_attempt_ms : null }));
  }

  /**
   * The newest deliveries (at most `perVisitor` each) about each of the
   * given visitors: those of their events, found through visitor_timeline
   * (keyed by visitor). NOTE: the attempts are read for the tenant's
   * deliveries of those events only, but webhook_attempts is keyed by
   * delivery, so this scans the tenant's part of it; call it for one page
   * of visitors.
   */
  async ofVisitors(tenantId: string, visitorIds: string[], perVisitor: number) {
    if (visitorIds.length === 0) return [];
    const rows = await this.#reads.rows('lead deliveries', VisitorSummaryRow, {
      query: `
        SELECT tl.visitor_id AS vis, ${summaryColumns('a')}
        FROM webhook_attempts AS a FINAL
        INNER JOIN (
            SELECT DISTINCT visitor_id, event_id
            FROM visitor_timeline
            WHERE tenant_id = {tenant:UUID} AND visitor_id IN {visitors:Array(String)}
        ) AS tl ON a.event_id = tl.event_id
        WHERE a.tenant_id = {tenant:UUID}
        GROUP BY vis, a.delivery_id
        ORDER BY created_at_ms DESC, id DESC
        LIMIT {per_visitor:UInt32} BY vis`,
      query_params: { tenant: tenantId, visitors: visitorIds, per_visitor: perVisitor },
    });
    return rows.map((r) => ({ visitor_id: r.vis, ...summary(r) }));
  }

  /** Every row of one delivery in order, with the tenant that owns it. */
  async rows(deliveryId: string): Promise<{ tenant_id: string; destination_id: string; event_name: string; created_at: number; rows: AttemptRow[] } | undefined> {
    const rows = await this.#reads.rows('delivery rows', AttemptRowSchema, {
      query: `
        SELECT toString(tenant_id) AS tenant_id, toString(destination_id) AS destination_id, event_name, toString(event_id) AS event_id,
               attempt, state, toUnixTimestamp64Milli(recorded_at) AS recorded_at,
               toUnixTimestamp64Milli(started_at) AS started_at, duration_ms, status_code, error_class,
               toUnixTimestamp64Milli(next_attempt_at) AS next_attempt_at,
               toUnixTimestamp64Milli(delivery_created_at) AS created_at, body
        FROM webhook_attempts FINAL
        WHERE delivery_id = {id:UUID}
        ORDER BY recorded_at, attempt`,
      query_params: { id: deliveryId },
    });
    const first = rows[0];
    if (!first) return undefined;
    return {
      tenant_id: first.tenant_id,
      destination_id: first.destination_id,
      event_name: first.event_name,
      created_at: Math.min(...rows.map((r) => r.created_at)),
      rows,
    };
  }

  async securityEvents(q: { tenantId: string; before?: Keyset; limit: number }) {
    const found = await this.#reads.rows('security events', SecurityEventRow, {
      query: `
        SELECT toString(id) AS id, kind, toString(endpoint_id) AS endpoint_id, host, event_id, event_name,
               toUnixTimestamp64Milli(occurred_at) AS occurred_at
        FROM security_events FINAL
        WHERE tenant_id = {tenant:UUID}
          ${q.before ? "AND (occurred_at, id) < (fromUnixTimestamp64Milli({before_ts:Int64}, 'UTC'), {before_id:UUID})" : ''}
        ORDER BY occurred_at DESC, id DESC
        LIMIT {limit:UInt32}`,
      query_params: definedParams({ tenant: q.tenantId, before_ts: q.before?.ts, before_id: q.before?.id, limit: q.limit }),
    });
    return found.map((r) => ({ ...r, tenant_id: q.tenantId }));
  }
}
