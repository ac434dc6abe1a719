import { useState } from 'preact/hooks';
import { Pager, ResourceTable } from '../components/lists.tsx';
import { formatRatio } from '../format.ts';
import { useInterval, useResource, useTitle } from '../hooks.ts';
import { href } from '../router.ts';
import type { Lead, Page, Tenant, Video } from '../types.ts';
import { Badge, Time } from '../ui.tsx';
import { ListToolbar } from './deliveries.tsx';

const REFRESH_MS = 3000;
const PAGE_SIZE = 50;

/** The tenant's high-intent leads, newest first, refreshed every few seconds while on the first page. */
export function LeadsPage({ tenantId }: { tenantId: string }) {
  useTitle('Leads');
  const base = `/tenants/${encodeURIComponent(tenantId)}`;
  const [cursors, setCursors] = useState<string[]>([]);
  const [auto, setAuto] = useState(true);
  const cursor = cursors.at(-1);
  const qs = new URLSearchParams({ limit: String(PAGE_SIZE) });
  if (cursor) qs.set('cursor', cursor);
  const list = useResource<Page<Lead>>(`${base}/leads?${qs}`);
  const tenant = useResource<Tenant>(base);
  const videos = useResource<Page<Video>>(`${base}/videos`);
  const titles = new Map((videos.data?.data ?? []).map((v) => [v.id, v.title]));
  useInterval(() => void list.reload(), REFRESH_MS, auto && !list.loading && cursors.length === 0);

  return (
    <>
      <header class="page-header">
        <h1>Leads</h1>
        <p class="lead">
          Visitors whose Lead Intent Score reached the tenant's threshold
          {tenant.data ? ` (${tenant.data.high_intent_threshold})` : ''}, newest lead first, with the webhooks sent about them.
        </p>
      </header>
      <section class="card" aria-labelledby="leads-title">
        <div class="card-head">
          <h2 id="leads-title">High-intent leads</h2>
          <ListToolbar auto={auto} setAuto={setAuto} list={list} />
        </div>
        <ResourceTable
          res={list}
          testId="leads-table"
          columns={['Lead since', 'Visitor', 'Score', 'Factors', 'Videos watched', 'Last seen', 'Deliveries']}
          empty="No leads yet. A visitor becomes one when its score reaches the threshold."
          row={(l) => (
            <tr key={l.visitor_id} data-visitor-id={l.visitor_id}>
              <td>
                <Time iso={l.lead_at} />
              </td>
              <td class="mono">{l.visitor_id}</td>
              <td class="num" data-testid="lead-score">
                {l.score}
              </td>
              <td class="small">
                Watched {formatRatio(l.factors.watched_percent, 0)} · focus {formatRatio(l.factors.focus_time_ratio, 0)} · {l.factors.cta_clicks} CTA
                {l.factors.cta_clicks === 1 ? ' click' : ' clicks'} · {l.factors.rewinds} {l.factors.rewinds === 1 ? 'rewind' : 'rewinds'}
              </td>
              <td>
                <ul class="plain-list">
                  {l.videos.map((id) => (
                    <li key={id}>
                      <a href={href(['tenants', tenantId, 'videos', id])}>{titles.get(id) ?? id}</a>
                    </li>
                  ))}
                </ul>
              </td>
              <td>
                <Time iso={l.last_seen} />
              </td>
              <td>
                {l.deliveries.length === 0 ? (
                  <span class="muted">None</span>
                ) : (
                  <ul class="plain-list" data-testid="lead-deliveries">
                    {l.deliveries.map((d) => (
                      <li key={d.id}>
                        <a href={href(['tenants', tenantId, 'deliveries', d.id])}>
                          <code>{d.event_name}</code>
                        </a>{' '}
                        <Badge status={d.status} />
                      </li>
                    ))}
                  </ul>
                )}
              </td>
            </tr>
          )}
        />
        <Pager cursors={cursors} setCursors={setCursors} next={list.data?.next_cursor} />
      </section>
    </>
  );
}
