import { useState } from 'preact/hooks';
import { api } from '../api.ts';
import { ResourceTable } from '../components/lists.tsx';
import { useAction, useResource, useTitle } from '../hooks.ts';
import { href, navigate } from '../router.ts';
import type { Page, Tenant } from '../types.ts';
import { ActionForm, Card, TextField, Time } from '../ui.tsx';

export function TenantsPage() {
  useTitle('Tenants');
  const tenants = useResource<Page<Tenant>>('/tenants');
  const [name, setName] = useState('');
  const create = useAction(async () => {
    const t = await api<Tenant>('POST', '/tenants', { name: name.trim() });
    setName('');
    navigate(href(['tenants', t.id]));
  });

  return (
    <>
      <header class="page-header">
        <h1>Tenants</h1>
        <p class="lead">Each tenant has its own videos, API keys, webhook destinations and data.</p>
      </header>
      <div class="grid-2">
        <Card titleId="tenant-list-title" title="All tenants">
          <ResourceTable
            res={tenants}
            testId="tenants-table"
            columns={['Name', 'Tenant id', 'Created']}
            empty="No tenants yet. Create the first one."
            row={(t) => (
              <tr key={t.id}>
                <td>
                  <a href={href(['tenants', t.id])}>{t.name}</a>
                  {t.suspended_at && (
                    <>
                      {' '}
                      <span class="badge badge-failed" data-status="suspended">
                        Suspended
                      </span>
                    </>
                  )}
                </td>
                <td class="mono small">{t.id}</td>
                <td>
                  <Time iso={t.created_at} />
                </td>
              </tr>
            )}
          />
        </Card>
        <Card titleId="tenant-create-title" title="New tenant">
          <ActionForm action={create} ready={!!name.trim()} label="Create tenant" busyLabel="Creating…">
            <TextField id="tenant-name" label="Name" value={name} onInput={setName} required placeholder="Acme Inc." />
          </ActionForm>
        </Card>
      </div>
    </>
  );
}
