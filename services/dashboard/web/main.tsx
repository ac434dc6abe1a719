import 'uplot/dist/uPlot.min.css';
import './styles.css';
import { render } from 'preact';
import { useEffect, useState } from 'preact/hooks';
import { checkSession, onSignedOut, signOut } from './api.ts';
import { href, useRoute, type Route } from './router.ts';
import { ErrorAlert, Loading } from './ui.tsx';
import { ApiKeysPage } from './pages/api-keys.tsx';
import { DeliveriesPage, DeliveryDetailPage, SecurityEventsPage } from './pages/deliveries.tsx';
import { DestinationEditPage, DestinationsPage } from './pages/destinations.tsx';
import { LeadsPage } from './pages/leads.tsx';
import { SignInPage } from './pages/sign-in.tsx';
import { TenantLayout, TenantOverview } from './pages/tenant.tsx';
import { TenantsPage } from './pages/tenants.tsx';
import { VideoAnalyticsPage, VideosPage } from './pages/videos.tsx';

type SessionState = 'checking' | 'signed-in' | 'signed-out' | 'expired';

function App() {
  const [session, setSession] = useState<SessionState>('checking');
  const [error, setError] = useState<string>();
  const route = useRoute();

  useEffect(() => {
    checkSession().then(
      (ok) => setSession(ok ? 'signed-in' : 'signed-out'),
      (err: unknown) => {
        setError(err instanceof Error ? err.message : String(err));
        setSession('signed-out');
      },
    );
    return onSignedOut(() => setSession('expired'));
  }, []);

  if (session === 'checking') return <Loading label="Checking your session…" />;
  if (session !== 'signed-in') {
    return (
      <>
        <ErrorAlert message={error} />
        <SignInPage expired={session === 'expired'} onSignedIn={() => setSession('signed-in')} />
      </>
    );
  }
  return <Shell route={route} onSignedOut={() => setSession('signed-out')} />;
}

function Shell({ route, onSignedOut: done }: { route: Route; onSignedOut: () => void }) {
  const [error, setError] = useState<string>();
  const [busy, setBusy] = useState(false);
  const doSignOut = async () => {
    setBusy(true);
    try {
      await signOut();
      done();
    } catch (err) {
      setError(err instanceof Error ? err.message : String(err));
      setBusy(false);
    }
  };
  return (
    <>
      <a class="skip-link" href="#main" onClick={(e) => {
        e.preventDefault();
        document.getElementById('main')?.focus();
      }}>
        Skip to content
      </a>
      <header class="topbar">
        <a class="brand" href={href(['tenants'])}>
          <span class="brand-mark" aria-hidden="true">
            ▶
          </span>{' '}
          Video analytics
        </a>
        <nav aria-label="Main" class="topnav">
          <a href={href(['tenants'])} aria-current={route.segments[0] === 'tenants' && route.segments.length === 1 ? 'page' : undefined}>
            Tenants
          </a>
        </nav>
        <button type="button" class="btn btn-small btn-ghost" onClick={() => void doSignOut()} disabled={busy}>
          {busy ? 'Signing out…' : 'Sign out'}
        </button>
      </header>
      <main id="main" tabIndex={-1} class="content">
        <ErrorAlert message={error} />
        <Page route={route} />
      </main>
    </>
  );
}

function Page({ route }: { route: Route }) {
  const [root, tenantId, section, id] = route.segments;
  if (root !== 'tenants' || !tenantId) return <TenantsPage />;
  const tab = section ?? '';
  let page;
  switch (tab) {
    case '':
      page = <TenantOverview tenantId={tenantId} />;
      break;
    case 'api-keys':
      page = <ApiKeysPage tenantId={tenantId} />;
      break;
    case 'destinations':
      page = id ? <DestinationEditPage key={id} tenantId={tenantId} destinationId={id} /> : <DestinationsPage tenantId={tenantId} />;
      break;
    case 'deliveries':
      page = id ? <DeliveryDetailPage key={id} tenantId={tenantId} deliveryId={id} /> : <DeliveriesPage tenantId={tenantId} route={route} />;
      break;
    case 'leads':
      page = <LeadsPage tenantId={tenantId} />;
      break;
    case 'security-events':
      page = <SecurityEventsPage tenantId={tenantId} />;
      break;
    case 'videos':
      page = id ? <VideoAnalyticsPage key={id} tenantId={tenantId} videoId={id} route={route} /> : <VideosPage tenantId={tenantId} />;
      break;
    default:
      page = <ErrorAlert message="No such page." />;
  }
  return (
    <TenantLayout key={tenantId} tenantId={tenantId} tab={tab}>
      {page}
    </TenantLayout>
  );
}

render(<App />, document.getElementById('app')!);
