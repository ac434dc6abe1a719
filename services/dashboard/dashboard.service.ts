import { existsSync } from 'node:fs';
import { join } from 'node:path';
import type { App } from '../../shared/http/app.ts';
import type { FailedAttemptLimit } from '../../shared/http/failed-attempts.ts';
import type { Logger } from '../../shared/logger.ts';
import type { ManagementRoutesOptions } from '../admin/management.routes.ts';
import { dashboardPlugin, type Asset } from './dashboard.plugin.ts';
import { BoundedMemoryStore } from './session-store.ts';

export interface DashboardDeps {
  app: App;
  adminToken: string;
  log: Logger;
  /** The management routes and the failed-token limit of /admin/v1 (startAdmin). */
  admin: { routes: ManagementRoutesOptions; failures: FailedAttemptLimit };
  /** Session lifetime from sign-in. */
  sessionTtlMs?: number;
}

const WEB_DIR = join(import.meta.dirname, 'web');
const MAX_SESSIONS = 10_000;

const SHELL = `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>Video analytics dashboard</title>
<link rel="icon" href="data:,">
<link rel="stylesheet" href="/dashboard/assets/app.css">
</head>
<body>
<div id="app"></div>
<noscript>The dashboard needs JavaScript.</noscript>
<script type="module" src="/dashboard/assets/app.js"></script>
</body>
</html>
`;

/** Builds the single-page app with esbuild into memory: a few hundred ms at start, no build step to forget. */
async function buildAssets(log: Logger): Promise<Map<string, Asset>> {
  const assets = new Map<string, Asset>();
  const entry = join(WEB_DIR, 'main.tsx');
  if (!existsSync(entry)) {
    log.warn({ entry }, 'dashboard_sources_missing');
    return assets;
  }
  const { build } = await import('esbuild');
  const started = performance.now();
  const result = await build({
    entryPoints: { app: entry },
    bundle: true,
    minify: true,
    format: 'esm',
    target: 'es2022',
    jsx: 'automatic',
    jsxImportSource: 'preact',
    outdir: '/dashboard-assets',
    write: false,
    legalComments: 'none',
    logLevel: 'silent',
  });
  for (const file of result.outputFiles) {
    const name = file.path.split('/').pop()!;
    assets.set(name, { body: Buffer.from(file.contents), type: name.endsWith('.css') ? 'text/css; charset=utf-8' : 'text/javascript; charset=utf-8' });
  }
  log.info({ ms: Math.round(performance.now() - started), files: [...assets.keys()] }, 'dashboard_built');
  return assets;
}

/**
 * The dashboard: a single-page app under /dashboard and its back end, the
 * management routes behind a session (dashboard.plugin.ts).
 */
export async function startDashboard(deps: DashboardDeps): Promise<{ stop(): Promise<void> }> {
  const assets = await buildAssets(deps.log).catch((err: unknown) => {
    deps.log.error({ err }, 'dashboard_build_failed');
    return new Map<string, Asset>();
  });
  const store = new BoundedMemoryStore({ max: MAX_SESSIONS });
  void deps.app.register(dashboardPlugin, {
    prefix: '/dashboard',
    adminToken: deps.adminToken,
    failures: deps.admin.failures,
    routes: deps.admin.routes,
    assets,
    shell: SHELL,
    sessionTtlMs: deps.sessionTtlMs ?? 8 * 3600 * 1000,
    store,
  });
  return {
    async stop() {
      store.clear();
    },
  };
}
