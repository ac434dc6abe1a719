import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { BoundedReads } from '../../shared/clickhouse/bounded-reads.ts';
import { createClickHouse, migrate, type ClickHouseClient } from '../../shared/clickhouse/clickhouse.ts';
import { createLogger } from '../../shared/logger.ts';
import { VisitorsRepository } from './visitors.repository.ts';

const TENANT = '11111111-1111-4111-8111-111111111111';
const OTHER = '33333333-3333-4333-8333-333333333333';
const T0 = 1_700_000_000_000;

/** `n` events per visitor for `visitors` visitors (vis_<i>, i from `first`), one a second; a visitor's events share one name. */
const insertEvents = (tenant: string, first: number, visitors: number, n: number) => `
  INSERT INTO events (tenant_id, video_id, timestamp, event_id, event_name, session_id, visitor_id, current_time, duration,
          watched_percentage, play_ms, focus_ms, received_at)
  SELECT toUUID('${tenant}'), toUUID('22222222-2222-4222-8222-222222222222'),
         fromUnixTimestamp64Milli(toInt64(${T0} + intDiv(number, ${visitors}) * 1000), 'UTC'),
         toUUID(concat('00000000-0000-4000-8${first % 10}00-', leftPad(toString(number), 12, '0'))),
         ['heartbeat', 'cta_clicked', 'video_play'][number % 3 + 1], 'ses', concat('vis_', toString(${first} + number % ${visitors})),
         0, 600, 10, 5000, 4000, now64(3)
  FROM numbers(${visitors * n})`;

describe('VisitorsRepository.firstPages (embedded ClickHouse)', () => {
  let dir: string;
  let ch: ClickHouseClient;
  const bounds = { READ_MAX_EXECUTION_MS: 10_000, READ_MAX_MEMORY_BYTES: 1e9, READ_MAX_RESULT_ROWS: 10_000 };

  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'va-visitors-repo-'));
    ch = (await createClickHouse({ dataDir: join(dir, 'db') })).client;
    await migrate(ch, createLogger({ level: 'silent' }));
    // 60 visitors with 12 events, 2 with 400; then a replay of the 400-event ones (copies until a merge).
    await ch.command({ query: insertEvents(TENANT, 0, 60, 12) });
    await ch.command({ query: insertEvents(TENANT, 100, 2, 400) });
    await ch.command({ query: insertEvents(TENANT, 100, 2, 400) });
    await ch.command({ query: insertEvents(OTHER, 0, 60, 3) });
  });

  afterAll(async () => {
    await ch?.close();
    rmSync(dir, { recursive: true, force: true });
  });

  it('answers each visitor as a read of its own timeline would, copies dropped, across split queries', async () => {
    const repo = new VisitorsRepository(new BoundedReads(ch, bounds, { server: false }));
    const visitorIds = [...Array.from({ length: 60 }, (_, i) => `vis_${i}`), 'vis_100', 'vis_101', 'vis_nobody'];
    for (const [limit, sinceMs] of [
      [101, undefined],
      [5, undefined],
      [101, T0 + 100_000],
    ] as const) {
      const pages = await repo.firstPages({ tenantId: TENANT, visitorIds, sinceMs, limit });
      expect(pages.has('vis_nobody')).toBe(false);
      for (const visitorId of visitorIds.slice(0, -1)) {
        const alone = await repo.timeline({ tenantId: TENANT, visitorId, sinceMs, limit });
        expect(pages.get(visitorId) ?? [], `${visitorId} limit ${limit} since ${sinceMs}`).toEqual(alone);
      }
      // The replayed visitors' pages are full and hold each event once.
      const replayed = pages.get('vis_100')!;
      expect(replayed).toHaveLength(limit);
      expect(new Set(replayed.map((r) => r.event_id)).size).toBe(limit);
    }
    // Only the tenant's own events; a visitor with heartbeats alone (vis_0) has no page.
    const small = await repo.firstPages({ tenantId: TENANT, visitorIds: ['vis_0', 'vis_7'], limit: 101 });
    expect([...small.keys()]).toEqual(['vis_7']);
    expect(small.get('vis_7')).toHaveLength(12);
  });
});
