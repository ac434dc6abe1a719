import { useState } from 'preact/hooks';
import { api } from '../api.ts';
import { useAction, useResource, useTitle } from '../hooks.ts';
import { href, navigate } from '../router.ts';
import type { Page, Tenant } from '../types.ts';
import { Empty, ErrorAlert, Loading, Time, TextField } from '../ui.tsx';

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
        <section class="card" aria-labelledby="tenant-list-title">
          <h2 id="tenant-list-title">All tenants</h2>
          <ErrorAlert message={tenants.error?.message} />
          {!tenants.data && !tenants.error && <Loading />}
          {tenants.data && tenants.data.data.length === 0 && <Empty>No tenants yet. Create the first one.</Empty>}
          {tenants.data && tenants.data.data.length > 0 && (
            <table class="table" data-testid="tenants-table">
              <thead>
                <tr>
                  <th scope="col">Name</th>
                  <th scope="col">Tenant id</th>
                  <th scope="col">Created</th>
                </tr>
              </thead>
              <tbody>
                {tenants.data.data.map((t) => (
                  <tr key={t.id}>
                    <td>
                      <a href={href(['tenants', t.id])}>{t.name}</a>
                    </td>
                    <td class="mono small">{t.id}</td>
                    <td>
                      <Time iso={t.created_at} />
                    </td>
                  </tr>
                ))}
              </tbody>
            </table>
          )}
        </section>
        <section class="card" aria-labelledby="tenant-create-title">
          <h2 id="tenant-create-title">New tenant</h2>
          <form
            onSubmit={(e) => {
              e.preventDefault();
              if (name.trim()) void create.run();
            }}
          >
            <TextField id="tenant-name" label="Name" value={name} onInput={setName} required placeholder="Acme Inc." />
            <ErrorAlert message={create.error} />
            <button type="submit" class="btn btn-primary" disabled={create.busy || !name.trim()}>
              {create.busy ? 'Creating…' : 'Create tenant'}
            </button>
          </form>
        </section>
      </div>
    </>
  );
}
