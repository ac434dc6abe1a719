import type { ComponentChildren } from 'preact';
import { useState } from 'preact/hooks';
import { api } from '../api.ts';
import { DataTable, Pager, ResourceTable } from '../components/lists.tsx';
import { ALL_EVENTS } from '../events.tsx';
import { formatMs, shortId } from '../format.ts';
import { type Resource, useAction, useInterval, useResource, useTitle } from '../hooks.ts';
import { href, navigate, type Route } from '../router.ts';
import { DELIVERY_STATUSES, type Delivery, type DeliveryDetail, type Destination, type Page, type SecurityEvent } from '../types.ts';
import { Badge, Card, Empty, ErrorAlert, Loading, Time } from '../ui.tsx';

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

/** Auto-refresh switch and Refresh button of a list. */
export function ListToolbar({ auto, setAuto, list }: { auto: boolean; setAuto: (v: boolean) => void; list: Resource<unknown> }) {
  return (
    <div class="toolbar">
      <span class="auto-refresh">
        <input type="checkbox" id="auto-refresh" checked={auto} onChange={(e) => setAuto((e.currentTarget as HTMLInputElement).checked)} />
        <label for="auto-refresh">Auto-refresh</label>
        <span class={`spinner ${list.loading ? 'spinning' : ''}`} aria-hidden="true" />
      </span>
      <button type="button" class="btn btn-small" onClick={() => void list.reload()}>
        Refresh
      </button>
    </div>
  );
}

interface FilterSelectProps {
  id: string;
  label: string;
  /** Text of the first option, which filters nothing. */
  any: string;
  value: string;
  options: readonly string[];
  labelOf?: (value: string) => string;
  onChange: (value: string) => void;
  /** Options after the listed ones. */
  children?: ComponentChildren;
}

function FilterSelect(p: FilterSelectProps) {
  return (
    <div class="field">
      <label for={p.id}>{p.label}</label>
      <select id={p.id} value={p.value} onChange={(e) => p.onChange((e.currentTarget as HTMLSelectElement).value)}>
        <option value="">{p.any}</option>
        {p.options.map((o) => (
          <option key={o} value={o}>
            {p.labelOf ? p.labelOf(o) : o}
          </option>
        ))}
        {p.children}
      </select>
    </div>
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
          <ListToolbar auto={auto} setAuto={setAuto} list={list} />
        </div>
        <form class="filters" onSubmit={(e) => e.preventDefault()} aria-label="Filters">
          <FilterSelect id="filter-status" label="Status" any="Any status" value={status} options={DELIVERY_STATUSES} onChange={(v) => setFilter('status', v)} />
          <FilterSelect
            id="filter-destination"
            label="Destination"
            any="Any destination"
            value={destinationId}
            options={dests.list.map((d) => d.id)}
            labelOf={(id) => dests.nameOf(id) ?? id}
            onChange={(v) => setFilter('destination_id', v)}
          >
            {destinationId && !dests.nameOf(destinationId) && <option value={destinationId}>{shortId(destinationId)} (deleted?)</option>}
          </FilterSelect>
          <FilterSelect id="filter-event" label="Event" any="Any event" value={eventName} options={ALL_EVENTS} onChange={(v) => setFilter('event_name', v)} />
        </form>
        <ResourceTable
          res={list}
          testId="deliveries-table"
          columns={['Created', 'Event', 'Destination', 'Status', 'Attempts', 'Next attempt']}
          actions
          empty={status || destinationId || eventName ? 'No delivery matches these filters.' : 'No deliveries yet. Press Test on a destination to send one.'}
          row={(d) => (
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
          )}
        />
        <Pager cursors={cursors} setCursors={setCursors} next={list.data?.next_cursor} />
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
          <Card titleId="attempts-title" title="Attempt history">
            {d.attempts.length === 0 ? (
              <Empty>No attempt made yet.</Empty>
            ) : (
              <DataTable testId="attempts-table" columns={['#', 'Started', 'Duration', 'Response or error', 'Outcome', 'Next attempt']}>
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
              </DataTable>
            )}
          </Card>
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
          <ListToolbar auto={auto} setAuto={setAuto} list={list} />
        </div>
        <ResourceTable
          res={list}
          testId="security-events-table"
          columns={['Time', 'Kind', 'Destination', 'Host', 'Event']}
          empty="No security events."
          row={(e) => (
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
          )}
        />
        <Pager cursors={cursors} setCursors={setCursors} next={list.data?.next_cursor} />
      </section>
    </>
  );
}
