import type { ComponentChildren } from 'preact';
import { useEffect, useState } from 'preact/hooks';
import { api } from '../api.ts';
import { wholeNumber } from '../format.ts';
import { useAction, useResource, useSave, useTitle, type Resource } from '../hooks.ts';
import { href } from '../router.ts';
import type { ApiKey, Destination, Page, Tenant, Video } from '../types.ts';
import { Card, ConfirmButton, CopyButton, ErrorAlert, Loading, Notice, SaveForm, TextField, Time } from '../ui.tsx';

export const TABS = [
  { key: '', label: 'Overview' },
  { key: 'videos', label: 'Videos' },
  { key: 'leads', label: 'Leads' },
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
      <Card titleId="tenant-details" title="Details">
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
          <dt>Status</dt>
          <dd data-testid="tenant-status">
            {t.suspended_at ? (
              <>
                <span class="badge badge-failed">Suspended</span> since <Time iso={t.suspended_at} />
              </>
            ) : (
              <span class="badge badge-active">Active</span>
            )}
          </dd>
        </dl>
      </Card>
      <PlayerKeyGuards tenant={tenant} />
      <IntentSettings tenant={tenant} />
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

/**
 * What bounds the use of the public player key: the intake's limits, the
 * allowed origins, rotation and suspension (docs/api.md, "The player key").
 */
function PlayerKeyGuards({ tenant }: { tenant: Resource<Tenant> }) {
  const t = tenant.data!;
  const base = `/tenants/${encodeURIComponent(t.id)}`;
  const [origins, setOrigins] = useState(t.allowed_origins.join(' '));
  const [overlapHours, setOverlapHours] = useState('24');
  // The new key is announced here once, until dismissed or leaving the page; the details above keep showing it.
  const [rotated, setRotated] = useState<Tenant | null>(null);
  useEffect(() => setOrigins(t.allowed_origins.join(' ')), [t.allowed_origins.join(' ')]);

  const saveOrigins = useSave(async () => {
    const list = origins.split(/[\s,]+/).filter(Boolean);
    try {
      await api<Tenant>('PUT', `${base}/allowed-origins`, { allowed_origins: list });
    } catch (err) {
      // The API names the entry by its index (body.allowed_origins.2): name it by what was typed.
      const at = err instanceof Error ? /allowed_origins\.(\d+)/.exec(err.message) : null;
      const entry = at ? list[Number(at[1])] : undefined;
      if (entry !== undefined) throw new Error(`“${entry}” is not an origin: write it as https://host or https://host:port, without a path.`);
      throw err;
    }
    await tenant.reload();
  });
  const resume = useAction(async () => {
    await api<Tenant>('POST', `${base}/resume`);
    await tenant.reload();
  });
  const overlap = Number(overlapHours);
  const overlapValid = overlapHours.trim() !== '' && Number.isFinite(overlap) && overlap >= 0 && overlap <= 720;
  const limit = (n: number, unit: string) => (n === 0 ? <span class="muted">no limit</span> : `${n.toLocaleString('en')} ${unit}`);

  return (
    <div class="grid-2">
      <Card titleId="player-key-title" title="Player key" testId="player-key-guards">
        {rotated && (
          <div data-testid="rotated-key">
            <Notice>
              New player key: <code class="mono">{rotated.player_key}</code> <CopyButton text={rotated.player_key} label="Copy new player key" />
              <br />
              Put it in the player's embed code. The previous key works until <Time iso={rotated.previous_player_key_expires_at} />.{' '}
              <button type="button" class="btn btn-small" onClick={() => setRotated(null)}>
                Done
              </button>
            </Notice>
          </div>
        )}
        <dl class="details">
          <dt>Limits</dt>
          <dd data-testid="player-key-limits">
            {limit(t.limits.player_key_events_per_minute, 'events a minute per player key')}; {limit(t.limits.client_address_requests_per_minute, 'requests a minute per client address')}
            <p class="hint">Per intake process. Over a limit, the intake answers 429 with Retry-After.</p>
          </dd>
          {t.previous_player_key && (
            <>
              <dt>Previous key</dt>
              <dd data-testid="previous-player-key">
                <code class="mono">{t.previous_player_key}</code> works until <Time iso={t.previous_player_key_expires_at} />
              </dd>
            </>
          )}
        </dl>
        <div class="card-part">
          <SaveForm save={saveOrigins} ready label="Save allowed origins">
            <TextField
              id="allowed-origins"
              label="Allowed origins"
              value={origins}
              onInput={saveOrigins.edit(setOrigins)}
              placeholder="https://www.example.com https://shop.example.com"
              hint="Sites whose pages may send events with this key, separated by spaces. Empty: any. A browser on another site is refused (403); scripts that send no Origin are not stopped by this list."
            />
          </SaveForm>
        </div>
        <div class="card-part key-rotation">
          <TextField id="rotate-overlap" label="Overlap (hours)" type="number" min={0} max={720} value={overlapHours} onInput={setOverlapHours} hint="How long the current key keeps working after the rotation (0 to 720)." />
          <ConfirmButton
            label="Rotate player key"
            title="Rotate the player key?"
            confirmLabel="Rotate"
            onConfirm={async () => {
              if (!overlapValid) throw new Error('the overlap must be 0 to 720 hours');
              const next = await api<Tenant>('POST', `${base}/player-key/rotate`, { overlap_seconds: Math.round(overlap * 3600) });
              setRotated(next);
              await tenant.reload();
            }}
          >
            <p>A new key is issued. The current key keeps working for {overlapValid ? overlapHours : '?'} hours, then is refused (401).</p>
          </ConfirmButton>
        </div>
      </Card>
      <Card titleId="suspension-title" title="Suspension">
        <p class="hint">A suspended tenant's player key and API keys are refused (403) on intake and reads. Its data, keys and settings stay.</p>
        {t.suspended_at && (
          <p data-testid="suspension-state">
            <span class="badge badge-failed">Suspended</span> since <Time iso={t.suspended_at} />: its player events and API requests are refused.
          </p>
        )}
        <ErrorAlert message={resume.error} />
        {t.suspended_at ? (
          <button type="button" class="btn btn-primary" disabled={resume.busy} onClick={() => void resume.run()}>
            {resume.busy ? 'Resuming…' : 'Resume tenant'}
          </button>
        ) : (
          <ConfirmButton
            label="Suspend tenant"
            danger
            title={`Suspend “${t.name}”?`}
            confirmLabel="Suspend"
            onConfirm={async () => {
              await api<Tenant>('POST', `${base}/suspend`);
              await tenant.reload();
            }}
          >
            <p>Every player event and API request of this tenant is refused (403) until it is resumed.</p>
          </ConfirmButton>
        )}
      </Card>
    </div>
  );
}

/** The tenant's intent settings: the Lead Intent Score at which a visitor counts as a high-intent lead. */
function IntentSettings({ tenant }: { tenant: Resource<Tenant> }) {
  const t = tenant.data!;
  const [threshold, setThreshold] = useState(String(t.high_intent_threshold));
  useEffect(() => setThreshold(String(t.high_intent_threshold)), [t.high_intent_threshold]);
  const value = wholeNumber(threshold, 0, 100);
  const save = useSave(async () => {
    await api<Tenant>('PATCH', `/tenants/${encodeURIComponent(t.id)}`, { high_intent_threshold: value });
    await tenant.reload();
  });
  return (
    <Card titleId="intent-title" title="Lead intent" testId="intent-settings">
      <div class="intent-settings">
        <SaveForm save={save} ready={value !== undefined} label="Save threshold">
          <TextField
            id="high-intent-threshold"
            label="High-intent threshold"
            type="number"
            min={0}
            max={100}
            value={threshold}
            onInput={save.edit(setThreshold)}
            required
            hint={
              value === undefined
                ? 'A whole number from 0 to 100.'
                : `A visitor whose Lead Intent Score reaches ${value} (of 100) counts as a high-intent lead. Default 70.`
            }
          />
        </SaveForm>
      </div>
    </Card>
  );
}
