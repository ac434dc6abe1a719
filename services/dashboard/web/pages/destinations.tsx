import { useEffect, useState } from 'preact/hooks';
import { api } from '../api.ts';
import { ResourceTable } from '../components/lists.tsx';
import { describeEvents, EventPicker } from '../events.tsx';
import { useAction, useResource, useTitle } from '../hooks.ts';
import { href, navigate } from '../router.ts';
import type { Destination, DestinationKind, DestinationWithSecret, Page } from '../types.ts';
import { ActionForm, Card, ConfirmButton, ErrorAlert, Loading, Notice, SecretOnce, TextField, Time } from '../ui.tsx';

const destPath = (tenantId: string, id?: string) => `/tenants/${encodeURIComponent(tenantId)}/destinations${id ? `/${encodeURIComponent(id)}` : ''}`;

function urlProblem(url: string): string | undefined {
  if (!url) return undefined;
  try {
    const u = new URL(url);
    if (u.protocol !== 'https:') return 'The URL must start with https://';
    if (u.username || u.password) return 'The URL must not contain credentials.';
  } catch {
    return 'Not a valid URL.';
  }
  return undefined;
}

/** "Send test event": queues one player_loaded delivery and links to it. */
function TestButton({ tenantId, dest, small }: { tenantId: string; dest: Destination; small?: boolean }) {
  const [queued, setQueued] = useState<string | null>(null);
  const test = useAction(async () => {
    const r = await api<{ delivery_id: string }>('POST', `${destPath(tenantId, dest.id)}/test`);
    setQueued(r.delivery_id);
  });
  return (
    <span class="test-button">
      <button type="button" class={`btn ${small ? 'btn-small' : ''}`} onClick={() => void test.run()} disabled={test.busy} aria-label={small ? `Send test event to ${dest.name}` : undefined}>
        {test.busy ? 'Sending…' : 'Test'}
      </button>
      {queued && (
        <span role="status" class="small">
          {' '}
          Test queued:{' '}
          <a href={href(['tenants', tenantId, 'deliveries', queued])} data-testid="test-delivery-link">
            delivery {queued.slice(0, 8)}
          </a>
        </span>
      )}
      {test.error && (
        <span role="alert" class="error-text">
          {' '}
          {test.error}
        </span>
      )}
    </span>
  );
}

function SecretCell({ d }: { d: Destination }) {
  if (d.secret_masked) return <code class="mono" data-testid="secret-masked">{d.secret_masked}</code>;
  return (
    <span class="badge badge-failed" title="Receives nothing; each event is recorded as a security event">
      No secret
    </span>
  );
}

export function DestinationsPage({ tenantId }: { tenantId: string }) {
  useTitle('Destinations');
  const list = useResource<Page<Destination>>(destPath(tenantId));
  const [created, setCreated] = useState<DestinationWithSecret | null>(null);
  const [notice, setNotice] = useState<string>();

  return (
    <>
      <header class="page-header">
        <h1>Webhook destinations</h1>
        <p class="lead">
          Player events are POSTed to each destination, signed with HMAC-SHA256 (<code>X-Player-Signature</code>), and retried after 1, 5 and 30 minutes on failure.
        </p>
      </header>
      {created && (
        <SecretOnce
          title={`Signing secret of “${created.name}”`}
          label="Signing secret"
          value={created.secret}
          onDone={() => setCreated(null)}
        />
      )}
      {notice && <Notice>{notice}</Notice>}
      <Card titleId="dest-list-title" title="Destinations">
        <ResourceTable
          res={list}
          testId="destinations-table"
          columns={['Name', 'Type', 'URL', 'Events', 'Secret']}
          actions
          empty="No destinations yet."
          row={(d) => (
            <tr key={d.id} data-destination-id={d.id}>
              <td>
                <a href={href(['tenants', tenantId, 'destinations', d.id])}>{d.name}</a>
              </td>
              <td>{d.kind === 'integration' ? 'Integration' : 'Webhook'}</td>
              <td class="mono small break">{d.url}</td>
              <td class="small">{describeEvents(d.events)}</td>
              <td>
                <SecretCell d={d} />
              </td>
              <td class="actions-cell">
                <TestButton tenantId={tenantId} dest={d} small />
                <a class="btn btn-small" href={href(['tenants', tenantId, 'destinations', d.id])} aria-label={`Edit ${d.name}`}>
                  Edit
                </a>
                <a class="btn btn-small" href={href(['tenants', tenantId, 'deliveries'], { destination_id: d.id })} aria-label={`Deliveries of ${d.name}`}>
                  Deliveries
                </a>
              </td>
            </tr>
          )}
        />
      </Card>
      <CreateDestination
        tenantId={tenantId}
        onCreated={async (d) => {
          if (d.kind === 'webhook') {
            setCreated(d);
            setNotice(undefined);
          } else {
            setCreated(null);
            setNotice(d.secret_masked ? `Integration “${d.name}” created.` : `Integration “${d.name}” created without a secret: it will receive nothing until one is set.`);
          }
          await list.reload();
        }}
      />
    </>
  );
}

function CreateDestination({ tenantId, onCreated }: { tenantId: string; onCreated: (d: DestinationWithSecret) => Promise<void> }) {
  const [kind, setKind] = useState<DestinationKind>('webhook');
  const [name, setName] = useState('');
  const [url, setUrl] = useState('');
  const [secret, setSecret] = useState('');
  const [events, setEvents] = useState<string[]>([]);
  const problem = urlProblem(url);
  const create = useAction(async () => {
    const body =
      kind === 'webhook'
        ? { kind, name: name.trim(), url: url.trim(), events }
        : { kind, name: name.trim(), url: url.trim(), events, config: { webhook_secret: secret } };
    const d = await api<DestinationWithSecret>('POST', destPath(tenantId), body);
    setName('');
    setUrl('');
    setSecret('');
    setEvents([]);
    await onCreated(d);
  });
  return (
    <Card titleId="dest-create-title" title="New destination">
      <ActionForm
        action={create}
        ready={!!name.trim() && !!url.trim() && !problem}
        label={kind === 'webhook' ? 'Create webhook' : 'Create integration'}
        busyLabel="Creating…"
      >
        <fieldset class="radios">
          <legend>Type</legend>
          <div>
            <input type="radio" id="dest-kind-webhook" name="kind" value="webhook" checked={kind === 'webhook'} onChange={() => setKind('webhook')} />
            <label for="dest-kind-webhook">
              Webhook <span class="hint">signed with a secret generated here (<code>whsec_…</code>)</span>
            </label>
          </div>
          <div>
            <input type="radio" id="dest-kind-integration" name="kind" value="integration" checked={kind === 'integration'} onChange={() => setKind('integration')} />
            <label for="dest-kind-integration">
              Integration <span class="hint">an automation, messaging or lead tool that gives you its own webhook secret</span>
            </label>
          </div>
        </fieldset>
        <div class="grid-2">
          <TextField id="dest-name" label="Name" value={name} onInput={setName} required placeholder="CRM sync" />
          <TextField id="dest-url" label="URL" type="url" value={url} onInput={setUrl} required placeholder="https://example.com/hooks/video" hint={problem ?? 'HTTPS only.'} />
        </div>
        {kind === 'integration' && (
          <TextField
            id="dest-integration-secret"
            label="Integration webhook secret"
            type="password"
            value={secret}
            onInput={setSecret}
            hint="The secret the tool shows for its webhook (config.webhook_secret). Without one the integration receives nothing and each event is logged as a security event."
          />
        )}
        <EventPicker idPrefix="create" value={events} onChange={setEvents} />
      </ActionForm>
    </Card>
  );
}

export function DestinationEditPage({ tenantId, destinationId }: { tenantId: string; destinationId: string }) {
  const res = useResource<Destination>(destPath(tenantId, destinationId));
  useTitle(res.data ? res.data.name : 'Destination');
  const [name, setName] = useState('');
  const [url, setUrl] = useState('');
  const [events, setEvents] = useState<string[]>([]);
  const [newSecret, setNewSecret] = useState('');
  const [saved, setSaved] = useState<string>();
  const [revealed, setRevealed] = useState<string | null>(null);
  const d = res.data;

  useEffect(() => {
    if (!d) return;
    setName(d.name);
    setUrl(d.url);
    setEvents(d.events);
  }, [d?.id, d?.updated_at]);

  const problem = urlProblem(url);
  const save = useAction(async () => {
    const body: Record<string, unknown> = { name: name.trim(), url: url.trim(), events };
    if (d?.kind === 'integration' && newSecret) body.config = { webhook_secret: newSecret };
    await api<Destination>('PATCH', destPath(tenantId, destinationId), body);
    setNewSecret('');
    setSaved('Saved.');
    await res.reload();
  });

  if (res.error) return <ErrorAlert message={res.error.status === 404 ? 'No such destination (it may have been deleted).' : res.error.message} />;
  if (!d) return <Loading />;

  return (
    <>
      <header class="page-header">
        <p class="crumb">
          <a href={href(['tenants', tenantId, 'destinations'])}>← Destinations</a>
        </p>
        <h1>{d.name}</h1>
        <p class="lead">
          {d.kind === 'integration' ? 'Integration' : 'Webhook'} · created <Time iso={d.created_at} /> · updated <Time iso={d.updated_at} />
        </p>
      </header>
      {revealed && <SecretOnce title="New signing secret" label="Signing secret" value={revealed} onDone={() => setRevealed(null)} />}
      <div class="grid-2 grid-wide-left">
        <Card titleId="dest-edit-title" title="Settings">
          <ActionForm
            action={save}
            ready={!!name.trim() && !!url.trim() && !problem}
            label="Save changes"
            busyLabel="Saving…"
            onSubmit={() => setSaved(undefined)}
            status={
              saved &&
              !save.busy && (
                <p role="status" class="ok-text">
                  {saved}
                </p>
              )
            }
          >
            <TextField id="edit-name" label="Name" value={name} onInput={setName} required />
            <TextField id="edit-url" label="URL" type="url" value={url} onInput={setUrl} required hint={problem ?? 'HTTPS only.'} />
            {d.kind === 'integration' && (
              <TextField
                id="edit-integration-secret"
                label="Replace the integration webhook secret"
                type="password"
                value={newSecret}
                onInput={setNewSecret}
                hint="Leave empty to keep the current one."
              />
            )}
            <EventPicker idPrefix="edit" value={events} onChange={setEvents} />
          </ActionForm>
        </Card>
        <aside class="stack">
          <Card titleId="dest-secret-title" title="Signing secret">
            <p>
              {d.secret_masked ? (
                <code class="mono" data-testid="secret-masked">
                  {d.secret_masked}
                </code>
              ) : (
                <span class="badge badge-failed">No secret: receives nothing</span>
              )}
            </p>
            {d.kind === 'webhook' ? (
              <>
                <p class="hint">Regenerating takes effect at once: queued retries are signed with the new secret.</p>
                <ConfirmButton
                  label="Regenerate secret"
                  title="Regenerate the signing secret?"
                  confirmLabel="Regenerate"
                  danger
                  onConfirm={async () => {
                    const r = await api<DestinationWithSecret>('POST', `${destPath(tenantId, destinationId)}/secret`);
                    setRevealed(r.secret);
                    await res.reload();
                  }}
                >
                  <p>The current secret stops working immediately. Update the receiver with the new secret, which is shown once.</p>
                </ConfirmButton>
              </>
            ) : (
              <p class="hint">An integration is signed with the secret its tool gave you; replace it in the settings.</p>
            )}
          </Card>
          <Card titleId="dest-actions-title" title="Actions">
            <p class="hint">Test queues one <code>player_loaded</code> event to this destination only.</p>
            <div class="actions">
              <TestButton tenantId={tenantId} dest={d} />
              <a class="btn" href={href(['tenants', tenantId, 'deliveries'], { destination_id: d.id })}>
                View deliveries
              </a>
            </div>
            <div class="danger-zone">
              <ConfirmButton
                label="Delete destination"
                title={`Delete “${d.name}”?`}
                confirmLabel="Delete"
                danger
                onConfirm={async () => {
                  await api('DELETE', destPath(tenantId, destinationId));
                  navigate(href(['tenants', tenantId, 'destinations']));
                }}
              >
                <p>It stops receiving events at once. Deliveries still queued for it end as failed (destination_deleted).</p>
              </ConfirmButton>
            </div>
          </Card>
        </aside>
      </div>
    </>
  );
}
