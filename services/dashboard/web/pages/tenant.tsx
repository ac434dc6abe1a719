import type { ComponentChildren } from 'preact';
import { useResource, useTitle } from '../hooks.ts';
import { href } from '../router.ts';
import type { ApiKey, Destination, Page, Tenant, Video } from '../types.ts';
import { CopyButton, ErrorAlert, Loading, Time } from '../ui.tsx';

export const TABS = [
  { key: '', label: 'Overview' },
  { key: 'videos', label: 'Videos' },
  { key: 'api-keys', label: 'API keys' },
  { key: 'destinations', label: 'Destinations' },
  { key: 'deliveries', label: 'Delivery log' },
  { key: 'security-events', label: 'Security events' },
] as const;

/** Everything under #/tenants/<id>: the tenant's name, its tabs, then the page. */
export function TenantLayout({ tenantId, tab, children }: { tenantId: string; tab: string; children: ComponentChildren }) {
  const tenant = useResource<Tenant>(`/tenants/${encodeURIComponent(tenantId)}`);
  return (
    <>
      <div class="tenant-bar">
        <nav aria-label="Breadcrumb" class="breadcrumb">
          <a href={href(['tenants'])}>Tenants</a>
          <span aria-hidden="true">/</span>
          <span class="tenant-name" data-testid="tenant-name">
            {tenant.data?.name ?? (tenant.error ? 'Unknown tenant' : '…')}
          </span>
        </nav>
        <nav aria-label="Tenant sections" class="tabs">
          {TABS.map((t) => (
            <a key={t.key} href={href(['tenants', tenantId, ...(t.key ? [t.key] : [])])} aria-current={t.key === tab ? 'page' : undefined} class="tab">
              {t.label}
            </a>
          ))}
        </nav>
      </div>
      {tenant.error ? <ErrorAlert message={tenant.error.status === 404 ? 'No such tenant.' : tenant.error.message} /> : children}
    </>
  );
}

export function TenantOverview({ tenantId }: { tenantId: string }) {
  const base = `/tenants/${encodeURIComponent(tenantId)}`;
  const tenant = useResource<Tenant>(base);
  const videos = useResource<Page<Video>>(`${base}/videos`);
  const keys = useResource<Page<ApiKey>>(`${base}/api-keys`);
  const dests = useResource<Page<Destination>>(`${base}/destinations`);
  useTitle(tenant.data ? tenant.data.name : 'Tenant');
  if (!tenant.data) return <Loading />;
  const t = tenant.data;
  const tiles = [
    { label: 'Videos', value: videos.data?.data.length, to: 'videos' },
    { label: 'Active API keys', value: keys.data?.data.filter((k) => !k.revoked_at).length, to: 'api-keys' },
    { label: 'Destinations', value: dests.data?.data.length, to: 'destinations' },
  ];
  return (
    <>
      <header class="page-header">
        <h1>{t.name}</h1>
      </header>
      <section class="card" aria-labelledby="tenant-details">
        <h2 id="tenant-details">Details</h2>
        <dl class="details">
          <dt>Tenant id</dt>
          <dd class="mono">{t.id}</dd>
          <dt>Player key</dt>
          <dd>
            <code class="mono">{t.player_key}</code> <CopyButton text={t.player_key} label="Copy player key" />
            <p class="hint">Public: the embedded player sends it with every event (X-Player-Key). It cannot read data.</p>
          </dd>
          <dt>Created</dt>
          <dd>
            <Time iso={t.created_at} />
          </dd>
        </dl>
      </section>
      <div class="tiles">
        {tiles.map((tile) => (
          <a class="tile" href={href(['tenants', tenantId, tile.to])} key={tile.to}>
            <span class="tile-value">{tile.value ?? '…'}</span>
            <span class="tile-label">{tile.label}</span>
          </a>
        ))}
      </div>
    </>
  );
}
