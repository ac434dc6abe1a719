import { useState } from 'preact/hooks';
import { api } from '../api.ts';
import { ResourceTable } from '../components/lists.tsx';
import { useAction, useResource, useTitle } from '../hooks.ts';
import type { ApiKey, ApiKeyCreated, Page } from '../types.ts';
import { ActionForm, Badge, Card, ConfirmButton, SecretOnce, TextField, Time } from '../ui.tsx';

export function ApiKeysPage({ tenantId }: { tenantId: string }) {
  useTitle('API keys');
  const base = `/tenants/${encodeURIComponent(tenantId)}/api-keys`;
  const keys = useResource<Page<ApiKey>>(base);
  const [name, setName] = useState('');
  // The new key lives only here, until "I have stored it" or leaving the page.
  const [created, setCreated] = useState<ApiKeyCreated | null>(null);
  const create = useAction(async () => {
    const k = await api<ApiKeyCreated>('POST', base, { name: name.trim() });
    setName('');
    setCreated(k);
    await keys.reload();
  });

  return (
    <>
      <header class="page-header">
        <h1>API keys</h1>
        <p class="lead">
          Server-side keys for the read API (<code>Authorization: Bearer sk_…</code>). A key reads everything of this tenant; revoke it when it leaks or is no longer used.
        </p>
      </header>
      {created && <SecretOnce title={`API key “${created.name}” created`} label="API key" value={created.key} onDone={() => setCreated(null)} />}
      <div class="grid-2 grid-wide-left">
        <Card titleId="keys-title" title="Keys">
          <ResourceTable
            res={keys}
            testId="api-keys-table"
            columns={['Name', 'Prefix', 'Created', 'Last used', 'Status']}
            actions
            empty="No API keys yet."
            row={(k) => (
              <tr key={k.id} data-key-id={k.id} data-key-name={k.name}>
                <td>{k.name}</td>
                <td class="mono">{k.prefix}…</td>
                <td>
                  <Time iso={k.created_at} />
                </td>
                <td data-col="last-used">{k.last_used_at ? <Time iso={k.last_used_at} /> : <span class="muted">never</span>}</td>
                <td>
                  {k.revoked_at ? (
                    <>
                      <Badge status="revoked" /> <Time iso={k.revoked_at} />
                    </>
                  ) : (
                    <Badge status="active" />
                  )}
                </td>
                <td class="actions-cell">
                  {!k.revoked_at && (
                    <ConfirmButton
                      label="Revoke"
                      ariaLabel={`Revoke key ${k.name}`}
                      small
                      danger
                      title={`Revoke “${k.name}”?`}
                      confirmLabel="Revoke key"
                      onConfirm={async () => {
                        await api('DELETE', `${base}/${encodeURIComponent(k.id)}`);
                        await keys.reload();
                      }}
                    >
                      <p>
                        Requests with <code class="mono">{k.prefix}…</code> are refused at once (401). This cannot be undone.
                      </p>
                    </ConfirmButton>
                  )}
                </td>
              </tr>
            )}
          />
        </Card>
        <Card titleId="key-create-title" title="New API key">
          <ActionForm action={create} ready={!!name.trim()} label="Create API key" busyLabel="Creating…">
            <TextField id="key-name" label="Name" value={name} onInput={setName} required placeholder="backend" hint="What uses this key, so you know which one to revoke." />
          </ActionForm>
        </Card>
      </div>
    </>
  );
}
