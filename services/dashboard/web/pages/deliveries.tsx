import { useState } from 'preact/hooks';
import { api } from '../api.ts';
import { ALL_EVENTS } from '../events.tsx';
import { formatMs, shortId } from '../format.ts';
import { useAction, useInterval, useResource, useTitle } from '../hooks.ts';
import { href, navigate, type Route } from '../router.ts';
import { DELIVERY_STATUSES, type Delivery, type DeliveryDetail, type Destination, type Page, type SecurityEvent } from '../types.ts';
import { Badge, Empty, ErrorAlert, Loading, Time } from '../ui.tsx';

const REFRESH_MS = 2000;
const PAGE_SIZE = 50;

function useDestinations(tenantId: string) {
  const res = useResource<Page<Destination>>(`/tenants/${encodeURIComponent(tenantId)}/destinations`);
  const names = new Map((res.data?.data ?? []).map((d) => [d.id, d.name]));
  return { list: res.data?.data ?? [], nameOf: (id: string) => names.get(id) };
}

/**
 * Reprocess a failed delivery. Once queued it says so instead of offering the
 * button again: the log shows the new attempt a moment later, and a second
 * press before that would queue a second attempt. Give it key={attempt_count}
 * so it offers the button again when that attempt fails too.
 */
function ReprocessButton({ tenantId, id, onDone, label }: { tenantId: string; id: string; onDone: () => Promise<void>; label?: string }) {
  const [queued, setQueued] = useState(false);
  const action = useAction(async () => {
    await api('POST', `/tenants/${encodeURIComponent(tenantId)}/deliveries/${encodeURIComponent(id)}/reprocess`);
    setQueued(true);
    await onDone();
  });
  if (queued) {
    return (
      <span role="status" class="small muted">
        Reprocess queued…
      </span>
    );
  }
  return (
    <>
      <button type="button" class="btn btn-small btn-primary" onClick={() => void action.run()} disabled={action.busy} aria-label={label}>
        {action.busy ? 'Queuing…' : 'Reprocess'}
      </button>
      {action.error && (
        <span role="alert" class="error-text">
          {' '}
          {action.error}
        </span>
      )}
    </>
  );
}

function AutoRefresh({ on, setOn, loading }: { on: boolean; setOn: (v: boolean) => void; loading: boolean }) {
  return (
    <span class="auto-refresh">
      <input type="checkbox" id="auto-refresh" checked={on} onChange={(e) => setOn((e.currentTarget as HTMLInputElement).checked)} />
      <label for="auto-refresh">Auto-refresh</label>
      <span class={`spinner ${loading ? 'spinning' : ''}`} aria-hidden="true" />
    </span>
  );
}

/** The delivery log, newest first, filtered by status, destination and event (kept in the URL). */
export function DeliveriesPage({ tenantId, route }: { tenantId: string; route: Route }) {
  useTitle('Delivery log');
  const status = route.query.get('status') ?? '';
  const destinationId = route.query.get('destination_id') ?? '';
  const eventName = route.query.get('event_name') ?? '';
  const [cursors, setCursors] = useState<string[]>([]);
  const [auto, setAuto] = useState(true);
  const cursor = cursors.at(-1);
  const qs = new URLSearchParams({ limit: String(PAGE_SIZE) });
  if (status) qs.set('status', status);
  if (destinationId) qs.set('destination_id', destinationId);
  if (eventName) qs.set('event_name', eventName);
  if (cursor) qs.set('cursor', cursor);
  const list = useResource<Page<Delivery>>(`/tenants/${encodeURIComponent(tenantId)}/deliveries?${qs}`);
  const dests = useDestinations(tenantId);
  useInterval(() => void list.reload(), REFRESH_MS, auto && !list.loading);

  const setFilter = (key: string, value: string) => {
    const next = { status, destination_id: destinationId, event_name: eventName, [key]: value };
    setCursors([]);
    navigate(href(['tenants', tenantId, 'deliveries'], next), { replace: true });
  };

  return (
    <>
      <header class="page-header">
        <h1>Delivery log</h1>
        <p class="lead">Every webhook delivery with its attempts. Failed deliveries can be reprocessed: one more attempt, same delivery id and body, signed afresh.</p>
      </header>
      <section class="card" aria-labelledby="deliveries-title">
        <div class="card-head">
          <h2 id="deliveries-title">Deliveries</h2>
          <div class="toolbar">
            <AutoRefresh on={auto} setOn={setAuto} loading={list.loading} />
            <button type="button" class="btn btn-small" onClick={() => void list.reload()}>
              Refresh
            </button>
          </div>
        </div>
        <form class="filters" onSubmit={(e) => e.preventDefault()} aria-label="Filters">
          <div class="field">
            <label for="filter-status">Status</label>
            <select id="filter-status" value={status} onChange={(e) => setFilter('status', (e.currentTarget as HTMLSelectElement).value)}>
              <option value="">Any status</option>
              {DELIVERY_STATUSES.map((s) => (
                <option key={s} value={s}>
                  {s}
                </option>
              ))}
            </select>
          </div>
          <div class="field">
            <label for="filter-destination">Destination</label>
            <select id="filter-destination" value={destinationId} onChange={(e) => setFilter('destination_id', (e.currentTarget as HTMLSelectElement).value)}>
              <option value="">Any destination</option>
              {dests.list.map((d) => (
                <option key={d.id} value={d.id}>
                  {d.name}
                </option>
              ))}
              {destinationId && !dests.nameOf(destinationId) && <option value={destinationId}>{shortId(destinationId)} (deleted?)</option>}
            </select>
          </div>
          <div class="field">
            <label for="filter-event">Event</label>
            <select id="filter-event" value={eventName} onChange={(e) => setFilter('event_name', (e.currentTarget as HTMLSelectElement).value)}>
              <option value="">Any event</option>
              {ALL_EVENTS.map((n) => (
                <option key={n} value={n}>
                  {n}
                </option>
              ))}
            </select>
          </div>
        </form>
        <ErrorAlert message={list.error?.message} />
        {!list.data && !list.error && <Loading />}
        {list.data && list.data.data.length === 0 && <Empty>{status || destinationId || eventName ? 'No delivery matches these filters.' : 'No deliveries yet. Press Test on a destination to send one.'}</Empty>}
        {list.data && list.data.data.length > 0 && (
          <table class="table" data-testid="deliveries-table">
            <thead>
              <tr>
                <th scope="col">Created</th>
                <th scope="col">Event</th>
                <th scope="col">Destination</th>
                <th scope="col">Status</th>
                <th scope="col">Attempts</th>
                <th scope="col">Next attempt</th>
                <th scope="col">
                  <span class="sr-only">Actions</span>
                </th>
              </tr>
            </thead>
            <tbody>
              {list.data.data.map((d) => (
                <tr key={d.id} data-delivery-id={d.id} data-status={d.status}>
                  <td>
                    <Time iso={d.created_at} />
                  </td>
                  <td>
                    <code>{d.event_name}</code>
                  </td>
                  <td>{dests.nameOf(d.destination_id) ?? <span class="mono muted" title={d.destination_id}>{shortId(d.destination_id)}</span>}</td>
                  <td>
                    <Badge status={d.status} />
                  </td>
                  <td class="num">{d.attempt_count}</td>
                  <td>
                    <Time iso={d.next_attempt_at} />
                  </td>
                  <td class="actions-cell">
                    <a class="btn btn-small" href={href(['tenants', tenantId, 'deliveries', d.id])} aria-label={`Attempts of delivery ${d.id}`}>
                      Attempts
                    </a>
                    {d.status === 'failed' && <ReprocessButton key={d.attempt_count} tenantId={tenantId} id={d.id} onDone={list.reload} label={`Reprocess delivery ${d.id}`} />}
                  </td>
                </tr>
              ))}
            </tbody>
          </table>
        )}
        {(cursors.length > 0 || list.data?.next_cursor) && (
          <div class="pager">
            <button type="button" class="btn btn-small" disabled={cursors.length === 0} onClick={() => setCursors(cursors.slice(0, -1))}>
              ← Newer
            </button>
            <button type="button" class="btn btn-small" disabled={!list.data?.next_cursor} onClick={() => list.data?.next_cursor && setCursors([...cursors, list.data.next_cursor])}>
              Older →
            </button>
          </div>
        )}
      </section>
    </>
  );
}

/** "HTTP 503", or the error class (timeout, tls, …) when no response came. */
function AttemptResult({ statusCode, errorClass }: { statusCode: number | null; errorClass: string | null }) {
  // http_status only says "the status was not 2xx": the code says it better.
  const error = errorClass === 'http_status' && statusCode !== null ? null : errorClass;
  return (
    <>
      {statusCode !== null && <span class={statusCode < 300 ? 'ok-text' : 'error-text'}>HTTP {statusCode}</span>}
      {statusCode !== null && error && ' · '}
      {error && (
        <code class="error-text" title={ERROR_HINTS[error]}>
          {error}
        </code>
      )}
      {statusCode === null && !error && '—'}
    </>
  );
}

const ERROR_HINTS: Record<string, string> = {
  timeout: 'No response within the time limit (10 s)',
  dns: 'The host name did not resolve',
  refused_address: 'The host resolved to an address the SSRF policy refuses',
  connect: 'The connection failed',
  tls: 'The TLS handshake or certificate check failed',
  network: 'The connection broke',
  invalid_url: 'The URL is not valid',
  missing_secret: 'The destination has no secret',
  destination_deleted: 'The destination was deleted',
};

const OUTCOME_STATUS: Record<string, string> = { retrying: 'retrying', succeeded: 'succeeded', failed: 'failed' };

export function DeliveryDetailPage({ tenantId, deliveryId }: { tenantId: string; deliveryId: string }) {
  useTitle('Delivery');
  const res = useResource<DeliveryDetail>(`/tenants/${encodeURIComponent(tenantId)}/deliveries/${encodeURIComponent(deliveryId)}`);
  const dests = useDestinations(tenantId);
  const d = res.data;
  // After Reprocess the log may still say "failed" for a moment: keep polling until the new attempt shows.
  const [reprocessedAt, setReprocessedAt] = useState<number | null>(null);
  const waiting = d !== undefined && reprocessedAt !== null && d.status === 'failed' && d.attempt_count <= reprocessedAt;
  const settled = (d?.status === 'succeeded' || d?.status === 'failed') && !waiting;
  useInterval(() => void res.reload(), REFRESH_MS / 2, !settled && !res.loading && !res.error);

  return (
    <>
      <header class="page-header">
        <p class="crumb">
          <a href={href(['tenants', tenantId, 'deliveries'])}>← Delivery log</a>
        </p>
        <h1>Delivery</h1>
        <p class="lead mono">{deliveryId}</p>
      </header>
      <ErrorAlert message={res.error ? (res.error.status === 404 ? 'No such delivery (yet): it appears with its first attempt.' : res.error.message) : undefined} />
      {!d && !res.error && <Loading />}
      {d && (
        <>
          <section class="card" aria-labelledby="delivery-summary">
            <div class="card-head">
              <h2 id="delivery-summary">Summary</h2>
              <div class="toolbar">
                {d.status === 'failed' && (
                  <ReprocessButton
                    key={d.attempt_count}
                    tenantId={tenantId}
                    id={d.id}
                    onDone={async () => {
                      setReprocessedAt(d.attempt_count);
                      await res.reload();
                    }}
                  />
                )}
                <button type="button" class="btn btn-small" onClick={() => void res.reload()}>
                  Refresh
                </button>
              </div>
            </div>
            <dl class="details" data-testid="delivery-summary">
              <dt>Status</dt>
              <dd>
                <Badge status={d.status} />
              </dd>
              <dt>Event</dt>
              <dd>
                <code>{d.event_name}</code>
              </dd>
              <dt>Destination</dt>
              <dd>
                {dests.nameOf(d.destination_id) ? (
                  <a href={href(['tenants', tenantId, 'destinations', d.destination_id])}>{dests.nameOf(d.destination_id)}</a>
                ) : (
                  <span class="mono">{d.destination_id}</span>
                )}
              </dd>
              <dt>Created</dt>
              <dd>
                <Time iso={d.created_at} />
              </dd>
              <dt>Attempts</dt>
              <dd>{d.attempt_count}</dd>
              {d.next_attempt_at && (
                <>
                  <dt>Next attempt</dt>
                  <dd>
                    <Time iso={d.next_attempt_at} />
                  </dd>
                </>
              )}
            </dl>
          </section>
          <section class="card" aria-labelledby="attempts-title">
            <h2 id="attempts-title">Attempt history</h2>
            {d.attempts.length === 0 ? (
              <Empty>No attempt made yet.</Empty>
            ) : (
              <table class="table" data-testid="attempts-table">
                <thead>
                  <tr>
                    <th scope="col">#</th>
                    <th scope="col">Started</th>
                    <th scope="col">Duration</th>
                    <th scope="col">Response or error</th>
                    <th scope="col">Outcome</th>
                    <th scope="col">Next attempt</th>
                  </tr>
                </thead>
                <tbody>
                  {d.attempts.map((a) => (
                    <tr key={a.attempt} data-attempt={a.attempt} data-outcome={a.outcome}>
                      <td class="num">{a.attempt}</td>
                      <td>
                        <Time iso={a.started_at} />
                      </td>
                      <td class="num">{formatMs(a.duration_ms)}</td>
                      <td data-col="result">
                        <AttemptResult statusCode={a.status_code} errorClass={a.error_class} />
                      </td>
                      <td>
                        <Badge status={OUTCOME_STATUS[a.outcome] ?? a.outcome} />
                      </td>
                      <td>
                        <Time iso={a.next_attempt_at} />
                      </td>
                    </tr>
                  ))}
                </tbody>
              </table>
            )}
          </section>
        </>
      )}
    </>
  );
}

export function SecurityEventsPage({ tenantId }: { tenantId: string }) {
  useTitle('Security events');
  const [cursors, setCursors] = useState<string[]>([]);
  const cursor = cursors.at(-1);
  const qs = new URLSearchParams({ limit: String(PAGE_SIZE) });
  if (cursor) qs.set('cursor', cursor);
  const list = useResource<Page<SecurityEvent>>(`/tenants/${encodeURIComponent(tenantId)}/security-events?${qs}`);
  const dests = useDestinations(tenantId);
  const [auto, setAuto] = useState(true);
  useInterval(() => void list.reload(), REFRESH_MS * 2, auto && !list.loading && cursors.length === 0);
  const KIND: Record<string, string> = {
    webhook_missing_secret: 'Webhook without a secret',
    integration_missing_webhook_secret: 'Integration without a webhook secret',
  };
  return (
    <>
      <header class="page-header">
        <h1>Security events</h1>
        <p class="lead">Events that were not sent because the destination has no secret. Each record carries the destination's host only, never its full URL or a secret.</p>
      </header>
      <section class="card" aria-labelledby="sec-title">
        <div class="card-head">
          <h2 id="sec-title">Refused deliveries</h2>
          <div class="toolbar">
            <AutoRefresh on={auto} setOn={setAuto} loading={list.loading} />
            <button type="button" class="btn btn-small" onClick={() => void list.reload()}>
              Refresh
            </button>
          </div>
        </div>
        <ErrorAlert message={list.error?.message} />
        {!list.data && !list.error && <Loading />}
        {list.data && list.data.data.length === 0 && <Empty>No security events.</Empty>}
        {list.data && list.data.data.length > 0 && (
          <table class="table" data-testid="security-events-table">
            <thead>
              <tr>
                <th scope="col">Time</th>
                <th scope="col">Kind</th>
                <th scope="col">Destination</th>
                <th scope="col">Host</th>
                <th scope="col">Event</th>
              </tr>
            </thead>
            <tbody>
              {list.data.data.map((e) => (
                <tr key={e.id} data-kind={e.kind}>
                  <td>
                    <Time iso={e.occurred_at} />
                  </td>
                  <td>
                    {KIND[e.kind] ?? e.kind} <code class="small muted">{e.kind}</code>
                  </td>
                  <td>
                    {dests.nameOf(e.endpoint_id) ? (
                      <a href={href(['tenants', tenantId, 'destinations', e.endpoint_id])}>{dests.nameOf(e.endpoint_id)}</a>
                    ) : (
                      <span class="mono" title={e.endpoint_id}>
                        {shortId(e.endpoint_id)}
                      </span>
                    )}
                  </td>
                  <td class="mono">{e.host}</td>
                  <td>{e.event_name ? <code>{e.event_name}</code> : '—'}</td>
                </tr>
              ))}
            </tbody>
          </table>
        )}
        {(cursors.length > 0 || list.data?.next_cursor) && (
          <div class="pager">
            <button type="button" class="btn btn-small" disabled={cursors.length === 0} onClick={() => setCursors(cursors.slice(0, -1))}>
              ← Newer
            </button>
            <button type="button" class="btn btn-small" disabled={!list.data?.next_cursor} onClick={() => list.data?.next_cursor && setCursors([...cursors, list.data.next_cursor])}>
              Older →
            </button>
          </div>
        )}
      </section>
    </>
  );
}
