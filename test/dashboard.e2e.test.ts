import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Page, Response } from 'playwright-core';
import { scoreV1 } from '../shared/score.ts';
import { verifyWebhook } from '../shared/webhooks/verify.ts';
import { captureProcessOutput, launchBrowser, screenshot, unlabelledControls, type Browser } from './helpers/browser.ts';
import { startHttpsReceiver, type HttpsReceiver } from './helpers/https-receiver.ts';
import { TestStack, eventually } from './helpers/stack.ts';

/**
 * The dashboard in real headless Chromium against the whole stack: sign-in,
 * tenants, API keys, destinations, the delivery log (Test, failure,
 * reprocess), security events, video analytics and the player key's controls
 * (limits, allowed origins, rotation, suspension), with the security rules
 * (session cookie, CSRF, secrets shown once) checked along the way.
 * Screenshots of each page go to test-output/screenshots/.
 */
describe('dashboard in a real browser', () => {
  let s: TestStack;
  let rx: HttpsReceiver;
  let b: Browser;
  let page: Page;
  let output: ReturnType<typeof captureProcessOutput>;
  const responses: { method: string; url: string; status: number; body: string }[] = [];
  const pendingBodies: Promise<void>[] = [];
  const consoleLines: string[] = [];
  const requestedUrls: string[] = [];

  // Filled in as the story goes on.
  let tenantId = '';
  let playerKey = '';
  let apiKey = '';
  let revokedKey = '';
  let destinationId = '';
  const secrets: string[] = [];
  let videoId = '';
  let teaserId = '';

  const dash = (path: string) => `${s.url}/dashboard${path}`;
  const tenantHash = (...rest: string[]) => `#/tenants/${tenantId}${rest.length ? `/${rest.join('/')}` : ''}`;
  const goto = async (hash: string) => {
    await page.goto(dash(hash));
    await page.locator('main').waitFor();
  };
  const shoot = async (name: string) => {
    expect(await unlabelledControls(page), `unlabelled form controls on ${name}`).toEqual([]);
    await screenshot(page, name);
  };
  const text = (selector: string) => page.locator(selector).first().innerText();

  beforeAll(async () => {
    // Before the stack starts, so every log line it ever writes is recorded.
    output = captureProcessOutput();
    rx = await startHttpsReceiver();
    s = await TestStack.start({
      WEBHOOK_RETRY_DELAYS_S: '1,1,1',
      ...rx.env,
      // Info level, so that the log check below covers more than errors.
      LOG_LEVEL: 'info',
      // The intake's limits on (the test stack turns them off), so that the tenant page has figures to show.
      PLAYER_KEY_EVENTS_PER_MINUTE: '120000',
      CLIENT_ADDRESS_REQUESTS_PER_MINUTE: '600',
    });
    b = await launchBrowser({ permissions: ['clipboard-read', 'clipboard-write'] });
    page = b.page;
    page.setDefaultTimeout(15_000);
    b.context.on('request', (req) => void requestedUrls.push(req.url()));
    b.context.on('response', (res: Response) => {
      if (!res.url().startsWith(s.url)) return;
      pendingBodies.push(
        res
          .text()
          .catch(() => '')
          .then((body) => void responses.push({ method: res.request().method(), url: res.url(), status: res.status(), body })),
      );
    });
    page.on('console', (m) => consoleLines.push(`${m.type()}: ${m.text()}`));
    page.on('pageerror', (e) => consoleLines.push(`pageerror: ${e.message}`));
  });

  afterAll(async () => {
    await b?.close();
    await s?.stop();
    await rx?.close();
    output?.restore();
  });

  it('serves the shell with a strict CSP, and refuses the API without a session or with a bad CSRF token', async () => {
    const shell = await fetch(dash(''));
    expect(shell.status).toBe(200);
    const csp = shell.headers.get('content-security-policy') ?? '';
    expect(csp).toContain("default-src 'self'");
    expect(csp).not.toMatch(/script-src[^;]*unsafe-inline/);
    const html = await shell.text();
    expect(html).toContain('<div id="app"></div>');
    expect(html).toContain('/dashboard/assets/app.js');
    expect(html).not.toMatch(/<script(?![^>]*\bsrc=)[^>]*>/); // no inline script
    for (const asset of ['app.js', 'app.css']) expect((await fetch(dash(`/assets/${asset}`))).status).toBe(200);
    // Deep links serve the same shell.
    expect((await fetch(dash('/tenants/x'))).status).toBe(200);

    // No cookie: refused, even with the admin token as a bearer.
    expect((await fetch(dash('/api/tenants'))).status).toBe(401);
    expect((await fetch(dash('/api/tenants'), { headers: { authorization: `Bearer ${s.stack.adminToken}` } })).status).toBe(401);
    expect((await fetch(dash('/api/tenants'), { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{"name":"x"}' })).status).toBe(401);
    expect((await fetch(dash('/session'))).status).toBe(401);

    // A wrong token gets no session.
    const bad = await fetch(dash('/session'), { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ token: `${s.stack.adminToken}x` }) });
    expect(bad.status).toBe(401);
    expect(bad.headers.get('set-cookie')).toBeNull();

    const signIn = async () => {
      const res = await fetch(dash('/session'), { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ token: s.stack.adminToken }) });
      expect(res.status).toBe(200);
      const setCookie = res.headers.get('set-cookie') ?? '';
      expect(setCookie).toMatch(/^va_session=[^;]+/);
      expect(setCookie).toMatch(/;\s*HttpOnly/i);
      expect(setCookie).toMatch(/;\s*SameSite=Strict/i);
      expect(setCookie).toMatch(/;\s*Path=\/dashboard(;|$)/i);
      expect(setCookie).not.toContain(s.stack.adminToken);
      const csrf = ((await res.json()) as { csrf_token: string }).csrf_token;
      expect(csrf).toMatch(/.{16,}/);
      return { cookie: setCookie.split(';')[0]!, csrf };
    };
    const one = await signIn();
    const two = await signIn();
    const call = (method: string, path: string, headers: Record<string, string>, body?: unknown) =>
      fetch(dash(path), {
        method,
        headers: { ...headers, ...(body !== undefined ? { 'content-type': 'application/json' } : {}) },
        body: body !== undefined ? JSON.stringify(body) : undefined,
      });

    const before = await call('GET', '/api/tenants', { cookie: one.cookie });
    expect(before.status).toBe(200);
    const count = ((await before.json()) as { data: unknown[] }).data.length;
    // State changes need the session's own CSRF token.
    expect((await call('POST', '/api/tenants', { cookie: one.cookie }, { name: 'no csrf' })).status).toBe(403);
    expect((await call('POST', '/api/tenants', { cookie: one.cookie, 'x-csrf-token': 'wrong' }, { name: 'bad csrf' })).status).toBe(403);
    expect((await call('POST', '/api/tenants', { cookie: one.cookie, 'x-csrf-token': two.csrf }, { name: 'other session csrf' })).status).toBe(403);
    expect((await call('DELETE', '/session', { cookie: one.cookie, 'x-csrf-token': 'wrong' })).status).toBe(403);
    const after = (await (await call('GET', '/api/tenants', { cookie: one.cookie })).json()) as { data: unknown[] };
    expect(after.data).toHaveLength(count);
    expect((await call('GET', '/session', { cookie: one.cookie })).status).toBe(200);

    // Sign-out ends the session for good.
    const out = await call('DELETE', '/session', { cookie: one.cookie, 'x-csrf-token': one.csrf });
    expect(out.status).toBe(204);
    expect(out.headers.get('set-cookie') ?? '').toMatch(/va_session=;.*Max-Age=0/i);
    expect((await call('GET', '/api/tenants', { cookie: one.cookie })).status).toBe(401);
    expect((await call('GET', '/api/tenants', { cookie: two.cookie })).status).toBe(200);
    expect((await call('DELETE', '/session', { cookie: two.cookie, 'x-csrf-token': two.csrf })).status).toBe(204);
  });

  it('signs in with the keyboard; the token stays out of storage, URLs and the page', async () => {
    await goto('');
    const token = page.getByLabel('Admin token');
    await token.waitFor();
    expect(await page.locator('label[for="admin-token"]').count()).toBe(1);
    await shoot('01-sign-in');

    await token.fill('adm_wrong');
    await token.press('Enter');
    await expect.poll(() => page.getByRole('alert').innerText()).toContain('not accepted');

    await token.fill(s.stack.adminToken!);
    await token.press('Tab');
    expect(await page.evaluate('document.activeElement.tagName + ":" + document.activeElement.textContent')).toBe('BUTTON:Sign in');
    await page.keyboard.press('Enter');
    await page.getByRole('heading', { name: 'Tenants', exact: true }).waitFor();

    expect(page.url()).not.toContain(s.stack.adminToken);
    const storage = (await page.evaluate('JSON.stringify([Object.entries(localStorage), Object.entries(sessionStorage), document.cookie])')) as string;
    expect(storage).toBe('[[],[],""]'); // nothing stored, and the session cookie is invisible to scripts
    const cookies = await b.context.cookies();
    expect(cookies).toHaveLength(1);
    expect(cookies[0]).toMatchObject({ name: 'va_session', httpOnly: true, sameSite: 'Strict', path: '/dashboard' });
    expect(await page.content()).not.toContain(s.stack.adminToken);

    // The session survives a reload (the CSRF token is fetched again, never stored).
    await page.reload();
    await page.getByRole('heading', { name: 'Tenants', exact: true }).waitFor();
  });

  it('creates a tenant', async () => {
    await page.getByLabel('Name').fill('Acme Video');
    await page.getByRole('button', { name: 'Create tenant' }).click();
    await page.getByRole('heading', { name: 'Acme Video', exact: true }).waitFor();
    tenantId = /#\/tenants\/([0-9a-f-]{36})$/.exec(page.url())![1]!;
    playerKey = ((await s.admin('GET', `/tenants/${tenantId}`)).body as { player_key: string }).player_key;
    await expect.poll(() => text('.details')).toContain(playerKey);
    await shoot('03-tenant-overview');
    await page.getByRole('link', { name: 'Tenants', exact: true }).first().click();
    await page.getByTestId('tenants-table').getByRole('link', { name: 'Acme Video' }).waitFor();
    await shoot('02-tenants');
  });

  it('creates an API key shown once with a copy button, lists it, and revokes another after confirmation', async () => {
    await goto(tenantHash('api-keys'));
    await page.getByLabel('Name').fill('backend');
    await page.getByRole('button', { name: 'Create API key' }).click();
    const panel = page.getByTestId('secret-once');
    await panel.waitFor();
    expect(await panel.innerText()).toContain('will not be shown again');
    apiKey = await panel.getByLabel('API key').inputValue();
    expect(apiKey).toMatch(/^sk_[A-Za-z0-9]{40}$/);
    await panel.getByRole('button', { name: 'Copy' }).click();
    await expect.poll(() => panel.getByRole('status').innerText()).toBe('Copied');
    expect(await page.evaluate('navigator.clipboard.readText()')).toBe(apiKey);
    await shoot('04-api-key-created');
    await panel.getByRole('button', { name: 'I have stored it' }).click();
    expect(await page.content()).not.toContain(apiKey);

    // The key works, and its use shows up as "last used".
    expect((await s.api('/videos', apiKey)).status).toBe(200);

    await page.getByLabel('Name').fill('old integration');
    await page.getByRole('button', { name: 'Create API key' }).click();
    revokedKey = await page.getByTestId('secret-once').getByLabel('API key').inputValue();
    await page.getByRole('button', { name: 'I have stored it' }).click();
    expect((await s.api('/videos', revokedKey)).status).toBe(200);

    await page.getByRole('button', { name: 'Revoke key old integration' }).click();
    const dialog = page.getByRole('dialog', { name: 'Revoke “old integration”?' });
    await dialog.waitFor();
    await dialog.getByRole('button', { name: 'Cancel' }).click();
    await dialog.waitFor({ state: 'hidden' });
    expect((await s.api('/videos', revokedKey)).status).toBe(200);
    await page.getByRole('button', { name: 'Revoke key old integration' }).click();
    await shoot('05-api-key-revoke-confirm');
    await dialog.getByRole('button', { name: 'Revoke key' }).click();
    await dialog.waitFor({ state: 'hidden' });
    const oldRow = page.locator('tr[data-key-name="old integration"]');
    await expect.poll(() => oldRow.innerText()).toContain('Revoked');
    expect((await s.api('/videos', revokedKey)).status).toBe(401);

    const row = page.locator('tr[data-key-name="backend"]');
    await eventually(async () => {
      await page.reload();
      const used = await row.locator('[data-col="last-used"]').innerText();
      return used !== 'never' ? used : undefined;
    }, 15_000, 500);
    expect(await row.innerText()).toContain(`${apiKey.slice(0, 9)}…`);
    expect(await row.innerText()).toContain('Active');
    const content = await page.content();
    expect(content).not.toContain(apiKey);
    expect(content).not.toContain(revokedKey);
    await shoot('06-api-keys');
  });

  it('registers videos', async () => {
    await goto(tenantHash('videos'));
    for (const [title, duration, pitch] of [
      ['Product demo', '120', '95'],
      ['Teaser', '30', ''],
    ] as const) {
      await page.getByLabel('Title').fill(title);
      await page.getByLabel('Duration (seconds)').fill(duration);
      await page.getByLabel('Pitch starts at (seconds)').fill(pitch);
      await page.getByRole('button', { name: 'Register video' }).click();
      await page.getByTestId('videos-table').getByRole('link', { name: title }).waitFor();
    }
    const idOf = (title: string) => page.locator('tr[data-video-id]', { hasText: title }).getAttribute('data-video-id');
    videoId = (await idOf('Product demo'))!;
    teaserId = (await idOf('Teaser'))!;
    expect(videoId).toMatch(/^vid_[0-9a-f]{32}$/);
    expect(await page.locator(`tr[data-video-id="${videoId}"]`).innerText()).toContain('2:00');
    expect(await page.locator(`tr[data-video-id="${videoId}"] [data-col="pitch"]`).innerText()).toBe('1:35');
    const registered = (await s.admin('GET', `/tenants/${tenantId}/videos`)).body.data as { id: string; pitch_at_sec: number | null; offer_window_sec: number }[];
    expect(registered.find((v) => v.id === videoId)).toMatchObject({ pitch_at_sec: 95, offer_window_sec: 60 });
    expect(registered.find((v) => v.id === teaserId)).toMatchObject({ pitch_at_sec: null, offer_window_sec: 60 });
    await shoot('07-videos');
  });

  it('creates a webhook: the secret is shown once, masked after a reload; edits name and events', async () => {
    await goto(tenantHash('destinations'));
    await page.getByLabel('Name', { exact: true }).fill('Receiver');
    await page.getByLabel('URL').fill('http://127.0.0.1/plain');
    expect(await page.locator('#dest-url-hint').innerText()).toContain('https://');
    expect(await page.getByRole('button', { name: 'Create webhook' }).isDisabled()).toBe(true);
    await page.getByLabel('URL').fill(rx.url('/dash'));
    await page.getByLabel('player_loaded').check();
    await page.getByLabel('video_play').check();
    await page.getByLabel('conversion').check(); // a server-side event
    await page.getByRole('button', { name: 'Create webhook' }).click();
    const panel = page.getByTestId('secret-once');
    await panel.waitFor();
    expect(await panel.innerText()).toContain('will not be shown again');
    const secret = await panel.getByLabel('Signing secret').inputValue();
    expect(secret).toMatch(/^whsec_[A-Za-z0-9_-]{32}$/);
    secrets.push(secret);
    const row = page.locator('tr[data-destination-id]', { hasText: 'Receiver' });
    destinationId = (await row.getAttribute('data-destination-id'))!;
    expect(await row.innerText()).toContain('player_loaded, video_play, conversion');
    await shoot('08-destination-created');

    await page.reload();
    await row.waitFor();
    expect(await page.content()).not.toContain(secret);
    expect(await row.getByTestId('secret-masked').innerText()).toBe(`whsec_…${secret.slice(-4)}`);
    await shoot('09-destinations');

    await row.getByRole('link', { name: 'Receiver', exact: true }).click();
    await page.getByRole('heading', { name: 'Receiver', exact: true }).waitFor();
    expect(await page.getByLabel('conversion').isChecked()).toBe(true);
    expect(await page.locator('fieldset', { hasText: 'high_intent_lead' }).locator('legend').innerText()).toBe('Intent');
    await page.getByLabel('Name', { exact: true }).fill('Receiver (prod)');
    await page.getByLabel('video_play').uncheck();
    await page.getByLabel('high_intent_lead').check();
    await page.getByRole('button', { name: 'Save changes' }).click();
    await page.getByText('Saved.').waitFor();
    await page.getByRole('heading', { name: 'Receiver (prod)', exact: true }).waitFor();
    const saved = (await s.admin('GET', `/tenants/${tenantId}/destinations/${destinationId}`)).body as { name: string; events: string[]; url: string };
    expect(saved).toMatchObject({ name: 'Receiver (prod)', url: rx.url('/dash') });
    expect([...saved.events].sort()).toEqual(['conversion', 'high_intent_lead', 'player_loaded']);
    expect(await page.content()).not.toContain(secret);
    await shoot('10-destination-edit');
  });

  const deliveryIdFromTest = async () => {
    const link = page.getByTestId('test-delivery-link');
    await link.waitFor();
    return /deliveries\/([0-9a-f-]{36})$/.exec((await link.getAttribute('href'))!)![1]!;
  };
  const received = (id: string) => rx.to('/dash').filter((r) => r.headers['x-player-delivery-id'] === id);

  it('Test sends a signed player_loaded that appears in the log as succeeded', async () => {
    await page.getByRole('button', { name: 'Test', exact: true }).click();
    const id = await deliveryIdFromTest();
    const [req] = await eventually(async () => (received(id).length ? received(id) : undefined), 15_000);
    expect(req!.headers['x-player-event']).toBe('player_loaded');
    // Signed with the secret the page showed once.
    expect(verifyWebhook({ secret: secrets[0], headers: req!.headers, rawBody: req!.rawBody })).toMatchObject({ ok: true });

    await page.getByRole('link', { name: 'Delivery log' }).click();
    const row = page.locator(`tr[data-delivery-id="${id}"]`);
    await expect.poll(() => row.getAttribute('data-status'), { timeout: 15_000 }).toBe('succeeded');
    expect(await row.innerText()).toContain('Receiver (prod)');
    expect(await row.innerText()).toContain('player_loaded');
    await shoot('11-delivery-log');

    await row.getByRole('link', { name: /Attempts/ }).click();
    const attempts = page.getByTestId('attempts-table').locator('tbody tr');
    await expect.poll(() => attempts.count()).toBe(1);
    expect(await attempts.first().getAttribute('data-outcome')).toBe('succeeded');
    expect(await attempts.first().locator('[data-col="result"]').innerText()).toBe('HTTP 200');
  });

  it('a broken receiver: the delivery retries, ends failed, and a reprocess makes it succeed', async () => {
    let broken = true;
    rx.setBehaviour((req) => (req.path === '/dash' && broken ? { status: 503 } : { status: 200 }));
    await goto(tenantHash('destinations'));
    await page.getByRole('button', { name: 'Send test event to Receiver (prod)' }).click();
    const id = await deliveryIdFromTest();

    await page.getByRole('link', { name: 'Delivery log' }).click();
    await page.getByLabel('Status').selectOption('failed');
    await page.getByLabel('Destination').selectOption({ label: 'Receiver (prod)' });
    expect(page.url()).toContain('status=failed');
    const row = page.locator(`tr[data-delivery-id="${id}"]`);
    await expect.poll(() => row.getAttribute('data-status'), { timeout: 30_000 }).toBe('failed');
    expect(await row.locator('td.num').innerText()).toBe('4');
    expect(await page.locator('tr[data-delivery-id]').count()).toBe(1); // the filter hides the succeeded one
    await shoot('12-delivery-log-failed');

    await row.getByRole('link', { name: /Attempts/ }).click();
    const attempts = page.getByTestId('attempts-table').locator('tbody tr');
    await expect.poll(() => attempts.count()).toBe(4);
    const outcomes = await attempts.evaluateAll((rows) => rows.map((r) => r.getAttribute('data-outcome')));
    expect(outcomes).toEqual(['retrying', 'retrying', 'retrying', 'failed']);
    for (const r of await attempts.all()) expect(await r.locator('[data-col="result"]').innerText()).toBe('HTTP 503');
    expect(received(id)).toHaveLength(4);
    await shoot('13-delivery-failed-attempts');

    broken = false;
    await page.getByRole('button', { name: 'Reprocess' }).click();
    await expect.poll(() => page.getByTestId('delivery-summary').locator('[data-status]').getAttribute('data-status'), { timeout: 15_000 }).toBe('succeeded');
    await expect.poll(() => attempts.count()).toBe(5);
    expect(await attempts.nth(4).getAttribute('data-outcome')).toBe('succeeded');
    expect(await attempts.nth(4).locator('[data-col="result"]').innerText()).toBe('HTTP 200');
    expect(received(id)).toHaveLength(5);
    await shoot('14-delivery-reprocessed');
  });

  it('regenerates the secret after confirmation; the next delivery is signed with the new one', async () => {
    await goto(tenantHash('destinations', destinationId));
    await page.getByRole('button', { name: 'Regenerate secret' }).click();
    await page.getByRole('dialog').getByRole('button', { name: 'Regenerate' }).click();
    const panel = page.getByTestId('secret-once');
    await panel.waitFor();
    const fresh = await panel.getByLabel('Signing secret').inputValue();
    expect(fresh).toMatch(/^whsec_/);
    expect(fresh).not.toBe(secrets[0]);
    secrets.push(fresh);
    await expect.poll(() => page.getByTestId('secret-masked').innerText()).toBe(`whsec_…${fresh.slice(-4)}`);
    await panel.getByRole('button', { name: 'I have stored it' }).click();

    await page.getByRole('button', { name: 'Test', exact: true }).click();
    const id = await deliveryIdFromTest();
    const [req] = await eventually(async () => (received(id).length ? received(id) : undefined), 15_000);
    expect(verifyWebhook({ secret: fresh, headers: req!.headers, rawBody: req!.rawBody })).toMatchObject({ ok: true });
    expect(verifyWebhook({ secret: secrets[0], headers: req!.headers, rawBody: req!.rawBody }).ok).toBe(false);
    await page.reload();
    await page.getByTestId('secret-masked').waitFor();
    const content = await page.content();
    for (const secret of secrets) expect(content).not.toContain(secret);
  });

  it('an integration without a secret receives nothing and shows up under security events; then it is deleted', async () => {
    await goto(tenantHash('destinations'));
    await page.getByLabel('Integration').check();
    await page.getByLabel('Name', { exact: true }).fill('CRM without secret');
    await page.getByLabel('URL').fill(rx.url('/crm/hook?token=abc'));
    await page.getByLabel('cta_clicked').check();
    expect(await page.getByLabel('Integration webhook secret').inputValue()).toBe('');
    await page.getByRole('button', { name: 'Create integration' }).click();
    await page.getByText('created without a secret').waitFor();
    const row = page.locator('tr[data-destination-id]', { hasText: 'CRM without secret' });
    expect(await row.innerText()).toContain('No secret');
    const crmId = (await row.getAttribute('data-destination-id'))!;

    expect((await s.collect(playerKey, [{ event_name: 'cta_clicked', video_id: teaserId, visitor_id: 'vis_teaser', session_id: 'ses_teaser', duration: 30 }])).status).toBe(202);
    await page.getByRole('link', { name: 'Security events' }).click();
    const event = page.getByTestId('security-events-table').locator('tbody tr').first();
    await expect.poll(() => event.getAttribute('data-kind'), { timeout: 20_000 }).toBe('integration_missing_webhook_secret');
    const line = await event.innerText();
    expect(line).toContain('CRM without secret');
    expect(line).toContain(`127.0.0.1:${rx.port}`);
    expect(line).toContain('cta_clicked');
    expect(await page.getByTestId('security-events-table').innerText()).not.toContain('token=abc');
    expect(rx.requests.filter((r) => r.path.startsWith('/crm'))).toHaveLength(0);
    await shoot('15-security-events');

    await goto(tenantHash('destinations', crmId));
    await page.getByRole('button', { name: 'Delete destination' }).click();
    await page.getByRole('dialog').getByRole('button', { name: 'Delete' }).click();
    await page.getByRole('heading', { name: 'Webhook destinations' }).waitFor();
    await expect.poll(() => page.locator('tr[data-destination-id]').count()).toBe(1);
    expect((await s.admin('GET', `/tenants/${tenantId}/destinations/${crmId}`)).status).toBe(404);
  });

  it('shows a video’s analytics: counts per day, retention, CTA and top visitors, as charts and as numbers', async () => {
    const ev = (visitor: string, event_name: string, extra: Record<string, unknown> = {}) => ({
      event_name,
      video_id: videoId,
      visitor_id: `vis_${visitor}`,
      session_id: `ses_${visitor}`,
      duration: 120,
      ...extra,
    });
    const at = (p: number) => ({ watched_percentage: p, current_time: (120 * p) / 100 });
    const traffic = [
      // 5 loads, 4 views, 3 plays.
      ...['a', 'b', 'c', 'd', 'e'].map((v) => ev(v, 'player_loaded')),
      ...['a', 'b', 'c', 'd'].map((v) => ev(v, 'video_view')),
      ...['a', 'b', 'c'].map((v) => ev(v, 'video_play')),
      // a watches to 95% with one rewind, sees the CTA and clicks it.
      ev('a', 'watched_25_percent', at(25)),
      ev('a', 'watched_50_percent', at(50)),
      ev('a', 'watched_75_percent', at(75)),
      ev('a', 'watched_90_percent', at(90)),
      ev('a', 'heartbeat', { ...at(95), play_ms: 10_000, focus_ms: 9_000 }),
      ev('a', 'seek', { ...at(50), from: 60, to: 30 }),
      ev('a', 'cta_shown', at(80)),
      ev('a', 'cta_clicked', at(81)),
      // b stops at 55% and ignores the CTA.
      ev('b', 'watched_25_percent', at(25)),
      ev('b', 'watched_50_percent', at(50)),
      ev('b', 'heartbeat', { ...at(55), play_ms: 10_000, focus_ms: 5_000 }),
      ev('b', 'cta_shown', at(52)),
      // c leaves at 10%.
      ev('c', 'heartbeat', { ...at(10), play_ms: 5_000, focus_ms: 5_000 }),
    ];
    expect((await s.collect(playerKey, traffic)).status).toBe(202);
    const base = `/tenants/${tenantId}/videos/${videoId}`;
    const expectedTotals = { loads: 5, views: 4, plays: 3, cta_shown: 2, cta_clicked: 1, completions: 1, unique_visitors: 5 };
    await eventually(async () => {
      const r = await s.admin('GET', `${base}/stats?days=30`);
      return JSON.stringify(r.body?.totals) === JSON.stringify(expectedTotals) ? true : undefined;
    }, 20_000, 200);

    await goto(tenantHash('videos'));
    await page.getByRole('link', { name: 'Product demo' }).click();
    await page.getByRole('heading', { name: 'Product demo', exact: true }).waitFor();
    const stat = (name: string) => text(`[data-stat="${name}"] dd`);
    await expect.poll(() => stat('plays')).toBe('3');
    expect(await stat('loads')).toBe('5');
    expect(await stat('views')).toBe('4');
    expect(await stat('completions')).toBe('1');
    expect(await stat('unique_visitors')).toBe('5');
    expect(await stat('play_rate')).toBe('75%');
    expect(await stat('cta_shown')).toBe('2');
    expect(await stat('cta_clicked')).toBe('1');
    expect(await stat('cta_rate')).toBe('50%');

    // Per day: everything happened today (UTC).
    const daily = page.getByTestId('daily-chart');
    expect(await daily.locator('canvas').count()).toBeGreaterThan(0);
    expect(await daily.getAttribute('aria-label')).toContain('4 views, 3 plays, 5 player loads');
    expect(await text('[data-testid="daily-summary"] [data-sum="views"]')).toBe('4');
    expect(await text('[data-testid="daily-summary"] [data-sum="plays"]')).toBe('3');
    const today = new Date().toISOString().slice(0, 10);
    const todayRow = page.locator(`[data-testid="daily-table"] tr[data-date="${today}"]`);
    expect(await todayRow.locator('[data-col="loads"]').textContent()).toBe('5');
    expect(await todayRow.locator('[data-col="views"]').textContent()).toBe('4');
    expect(await todayRow.locator('[data-col="plays"]').textContent()).toBe('3');
    expect(await page.locator('[data-testid="daily-table"] tbody tr').count()).toBe(30);

    // Retention: 3 viewing sessions reached 95%, 55% and 10%.
    const retention = page.getByTestId('retention-chart');
    expect(await retention.locator('canvas').count()).toBeGreaterThan(0);
    expect(await text('[data-sum="viewers"]')).toBe('3');
    const pct = (p: number) => page.locator(`[data-testid="retention-table"] tr[data-position="${p}"] [data-col="viewers_pct"]`).textContent();
    expect(await pct(0)).toBe('100%');
    expect(await pct(10)).toBe('100%');
    expect(await pct(15)).toBe('66.7%');
    expect(await pct(55)).toBe('66.7%');
    expect(await pct(60)).toBe('33.3%');
    expect(await pct(95)).toBe('33.3%');
    expect(await pct(100)).toBe('0%');
    expect(await retention.getAttribute('aria-label')).toContain('Retention of 3 viewing sessions');

    // Top visitors by Lead Intent Score, with their factors.
    const rows = page.getByTestId('top-visitors-table').locator('tbody tr');
    expect(await rows.evaluateAll((r) => r.map((x) => x.getAttribute('data-visitor')))).toEqual(['vis_a', 'vis_b', 'vis_c', 'vis_d', 'vis_e']);
    const a = rows.first();
    expect(await a.locator('[data-col="score"] strong').innerText()).toBe(String(scoreV1({ watched_percent: 0.95, focus_time_ratio: 0.9, cta_clicks: 1, rewinds: 1 })));
    expect(await a.locator('[data-col="watched_percent"]').innerText()).toBe('95%');
    expect(await a.locator('[data-col="focus_time_ratio"]').innerText()).toBe('90%');
    expect(await a.locator('[data-col="cta_clicks"]').innerText()).toBe('1');
    expect(await a.locator('[data-col="rewinds"]').innerText()).toBe('1');
    expect(await rows.nth(1).locator('[data-col="score"] strong').innerText()).toBe(String(scoreV1({ watched_percent: 0.55, focus_time_ratio: 0.5, cta_clicks: 0, rewinds: 0 })));
    // The page shows what the API says.
    const top = (await s.admin('GET', `${base}/top-visitors?limit=10`)).body as { data: { visitor_id: string; score: number }[] };
    for (const [i, v] of top.data.entries()) expect(await rows.nth(i).locator('[data-col="score"] strong').innerText()).toBe(String(v.score));
    await shoot('16-video-analytics');

    await page.getByLabel('Period').selectOption('7');
    // A new period is a fetch and a render: on a loaded machine that takes more than poll's default second.
    await expect.poll(() => page.locator('[data-testid="daily-table"] tbody tr').count(), { timeout: 15_000 }).toBe(7);
    expect(await text('[data-testid="daily-summary"] [data-sum="plays"]')).toBe('3');
  });

  it('shows the player key’s limits, saves allowed origins, rotates the key and suspends and resumes the tenant', async () => {
    const guards = page.getByTestId('player-key-guards');
    const collectFrom = (key: string, origin?: string) =>
      s.request('POST', '/v1/collect', {
        headers: { 'x-player-key': key, ...(origin ? { origin } : {}) },
        body: { events: [{ event_name: 'player_loaded', video_id: teaserId, visitor_id: 'vis_guard', session_id: 'ses_guard', current_time: 0, duration: 30, watched_percentage: 0 }] },
      });
    const problem = (r: { body: { type?: string } | undefined }) => r.body?.type?.replace('urn:video-analytics:problem:', '');
    await goto(tenantHash());
    await page.getByRole('heading', { name: 'Acme Video', exact: true }).waitFor();
    await expect.poll(() => guards.getByTestId('player-key-limits').innerText()).toContain('120,000 events a minute per player key');
    expect(await guards.getByTestId('player-key-limits').innerText()).toContain('600 requests a minute per client address');

    // Allowed origins: a malformed one is refused with a message, a good list is saved and enforced.
    const origins = page.getByLabel('Allowed origins');
    await origins.fill('www.example.com');
    await page.getByRole('button', { name: 'Save allowed origins' }).click();
    await expect.poll(() => guards.getByRole('alert').innerText()).toContain('“www.example.com” is not an origin: write it as https://host');
    expect(((await s.admin('GET', `/tenants/${tenantId}`)).body as { allowed_origins: string[] }).allowed_origins).toEqual([]);
    await origins.fill('https://www.example.com  https://shop.example.com:8443');
    await page.getByRole('button', { name: 'Save allowed origins' }).click();
    await expect.poll(() => guards.getByRole('status').filter({ hasText: 'Saved.' }).count()).toBe(1);
    expect(await guards.getByRole('alert').count()).toBe(0);
    expect(((await s.admin('GET', `/tenants/${tenantId}`)).body as { allowed_origins: string[] }).allowed_origins).toEqual([
      'https://www.example.com',
      'https://shop.example.com:8443',
    ]);
    const foreign = await collectFrom(playerKey, 'https://elsewhere.example');
    expect(foreign.status).toBe(403);
    expect(problem(foreign)).toBe('origin_not_allowed');
    expect((await collectFrom(playerKey, 'https://www.example.com')).status).toBe(202);
    expect((await collectFrom(playerKey)).status).toBe(202); // no Origin: a script, not stopped by the list
    await page.reload();
    await expect.poll(() => origins.inputValue()).toBe('https://www.example.com https://shop.example.com:8443');

    // Rotation: the new key is announced once, the previous one is listed with its overlap end and keeps working.
    const oldKey = playerKey;
    await page.getByLabel('Overlap (hours)').fill('2');
    await page.getByRole('button', { name: 'Rotate player key' }).click();
    const dialog = page.getByRole('dialog', { name: 'Rotate the player key?' });
    await dialog.waitFor();
    expect(await dialog.innerText()).toContain('keeps working for 2 hours');
    await dialog.getByRole('button', { name: 'Rotate' }).click();
    await dialog.waitFor({ state: 'hidden' });
    const announced = guards.getByTestId('rotated-key');
    await announced.waitFor();
    const after = (await s.admin('GET', `/tenants/${tenantId}`)).body as { player_key: string; previous_player_key: string; previous_player_key_expires_at: string };
    playerKey = after.player_key;
    expect(playerKey).not.toBe(oldKey);
    expect(after.previous_player_key).toBe(oldKey);
    const overlapEnd = Date.parse(after.previous_player_key_expires_at) - Date.now();
    expect(overlapEnd).toBeGreaterThan(1.9 * 3600_000);
    expect(overlapEnd).toBeLessThanOrEqual(2 * 3600_000);
    expect(await announced.innerText()).toContain(playerKey);
    expect(await text('.details')).toContain(playerKey);
    const previous = guards.getByTestId('previous-player-key');
    expect(await previous.innerText()).toContain(oldKey);
    expect(await previous.locator('time').getAttribute('datetime')).toBe(after.previous_player_key_expires_at);
    await page.screenshot({ path: '/tmp/tenant-controls.png', fullPage: true });
    await shoot('17-tenant-player-key-rotated');
    expect((await collectFrom(playerKey, 'https://www.example.com')).status).toBe(202);
    expect((await collectFrom(oldKey, 'https://www.example.com')).status).toBe(202); // within its overlap
    await announced.getByRole('button', { name: 'Done' }).click();
    expect(await announced.count()).toBe(0);
    await page.reload();
    await guards.waitFor();
    expect(await guards.getByTestId('rotated-key').count()).toBe(0);
    expect(await guards.getByTestId('previous-player-key').innerText()).toContain(oldKey);

    // Suspension: marked here and in the list, refused on intake and reads, then resumed.
    await page.getByRole('button', { name: 'Suspend tenant' }).click();
    const suspend = page.getByRole('dialog', { name: 'Suspend “Acme Video”?' });
    await suspend.getByRole('button', { name: 'Suspend' }).click();
    await suspend.waitFor({ state: 'hidden' });
    await expect.poll(() => text('[data-testid="tenant-status"]')).toContain('Suspended');
    await page.getByRole('button', { name: 'Resume tenant' }).waitFor();
    expect(await page.getByTestId('suspension-state').innerText()).toContain('Suspended since');
    await shoot('18-tenant-suspended');
    const refused = await collectFrom(playerKey, 'https://www.example.com');
    expect(refused.status).toBe(403);
    expect(problem(refused)).toBe('tenant_suspended');
    expect(problem(await collectFrom(oldKey))).toBe('tenant_suspended');
    const read = await s.api('/videos', apiKey);
    expect(read.status).toBe(403);
    expect(problem(read)).toBe('tenant_suspended');
    await page.getByRole('link', { name: 'Tenants', exact: true }).first().click();
    const listed = page.getByTestId('tenants-table').locator('tr', { hasText: 'Acme Video' });
    await expect.poll(() => listed.locator('[data-status="suspended"]').count()).toBe(1);
    await listed.getByRole('link', { name: 'Acme Video' }).click();
    await page.getByRole('button', { name: 'Resume tenant' }).click();
    await expect.poll(() => text('[data-testid="tenant-status"]')).toContain('Active');
    expect(await page.getByTestId('suspension-state').count()).toBe(0);
    await page.getByRole('button', { name: 'Suspend tenant' }).waitFor();
    expect((await collectFrom(playerKey, 'https://www.example.com')).status).toBe(202);
    expect((await s.api('/videos', apiKey)).status).toBe(200);
    await goto('#/tenants');
    await page.getByTestId('tenants-table').getByRole('link', { name: 'Acme Video' }).waitFor();
    expect(await page.getByTestId('tenants-table').locator('[data-status="suspended"]').count()).toBe(0);
  });

  it('sets the tenant’s high-intent threshold and a video’s pitch and offer window', async () => {
    await goto(tenantHash());
    const intent = page.getByTestId('intent-settings');
    const threshold = intent.getByLabel('High-intent threshold');
    await expect.poll(() => threshold.inputValue()).toBe('70');
    await threshold.fill('101');
    expect(await intent.getByRole('button', { name: 'Save threshold' }).isDisabled()).toBe(true);
    await threshold.fill('85');
    await intent.getByRole('button', { name: 'Save threshold' }).click();
    await expect.poll(() => intent.getByRole('status').filter({ hasText: 'Saved.' }).count()).toBe(1);
    expect(((await s.admin('GET', `/tenants/${tenantId}`)).body as { high_intent_threshold: number }).high_intent_threshold).toBe(85);
    await page.reload();
    await expect.poll(() => page.getByTestId('intent-settings').getByLabel('High-intent threshold').inputValue()).toBe('85');
    await shoot('19-tenant-intent');

    const teaser = async () =>
      ((await s.admin('GET', `/tenants/${tenantId}/videos`)).body.data as { id: string; pitch_at_sec: number | null; offer_window_sec: number }[]).find((v) => v.id === teaserId);
    await goto(tenantHash('videos', teaserId));
    const settings = page.getByTestId('video-intent-settings');
    await settings.waitFor();
    const pitch = settings.getByLabel('Pitch starts at (seconds)');
    const offerWindow = settings.getByLabel('Offer window (seconds)');
    expect(await pitch.inputValue()).toBe('');
    expect(await offerWindow.inputValue()).toBe('60');
    await offerWindow.fill('0');
    expect(await settings.getByRole('button', { name: 'Save pitch and offer' }).isDisabled()).toBe(true);
    await pitch.fill('20');
    await offerWindow.fill('30');
    await settings.getByRole('button', { name: 'Save pitch and offer' }).click();
    await expect.poll(() => settings.getByRole('status').filter({ hasText: 'Saved.' }).count()).toBe(1);
    expect(await teaser()).toMatchObject({ pitch_at_sec: 20, offer_window_sec: 30 });
    await shoot('20-video-intent');
    // An empty pitch clears it.
    await pitch.fill('');
    await settings.getByRole('button', { name: 'Save pitch and offer' }).click();
    await expect.poll(async () => (await teaser())?.pitch_at_sec).toBeNull();
    expect((await teaser())?.offer_window_sec).toBe(30);
  });

  it('lists the leads at the tenant’s threshold and shows a new one without a reload', async () => {
    await goto(tenantHash('leads'));
    await page.getByRole('heading', { name: 'Leads', level: 1 }).waitFor();
    // The heading shows before the tenant's settings have loaded; the threshold follows them.
    await expect.poll(() => text('.page-header')).toContain('(85)');
    // Marks this document: a reload would lose it.
    await page.evaluate(() => void ((globalThis as unknown as { leadsMark: number }).leadsMark = 1));
    // 40 (watched all) + 20 (all play time focused) + 25 (two CTA clicks) = 85: at the threshold set above.
    const base = { video_id: videoId, visitor_id: 'vis_live_lead', session_id: 'ses_live_lead', duration: 120 };
    const events = [
      { ...base, event_name: 'watched_90_percent', watched_percentage: 100, current_time: 108 },
      { ...base, event_name: 'heartbeat', play_ms: 4000, focus_ms: 4000, current_time: 109, watched_percentage: 100 },
      { ...base, event_name: 'cta_clicked', current_time: 110, watched_percentage: 100 },
      { ...base, event_name: 'cta_clicked', current_time: 111, watched_percentage: 100 },
    ];
    const sent = await s.request('POST', '/v1/collect', { headers: { 'x-player-key': playerKey, origin: 'https://www.example.com' }, body: { events } });
    expect(sent.status, sent.text).toBe(202);
    const row = page.locator('[data-testid="leads-table"] tr[data-visitor-id="vis_live_lead"]');
    await row.waitFor({ timeout: 60_000 });
    expect(await row.getByTestId('lead-score').innerText()).toBe('85');
    expect(await row.innerText()).toContain('2 CTA clicks');
    expect(await page.evaluate(() => (globalThis as unknown as { leadsMark?: number }).leadsMark)).toBe(1);
    await shoot('21-leads');
  });

  it('signs out; the credentials never appeared in a later response, the page, the console or the log', async () => {
    await goto(tenantHash());
    await page.getByRole('button', { name: 'Sign out' }).focus();
    await page.keyboard.press('Enter');
    await page.getByLabel('Admin token').waitFor();
    expect((await page.request.get(dash('/api/tenants'))).status()).toBe(401);
    await page.reload();
    await page.getByLabel('Admin token').waitFor();

    await Promise.all(pendingBodies);
    const credentials = [apiKey, revokedKey, ...secrets];
    expect(credentials.every((c) => c.length > 20)).toBe(true);
    // Only the response that created a credential carries it.
    const creation = (r: { method: string; url: string }) =>
      r.method === 'POST' && (/\/api-keys$/.test(r.url) || /\/destinations$/.test(r.url) || /\/destinations\/[^/]+\/secret$/.test(r.url));
    const later = responses.filter((r) => !creation(r));
    expect(later.length).toBeGreaterThan(50);
    for (const c of credentials) {
      expect(responses.filter(creation).some((r) => r.body.includes(c))).toBe(true);
      expect(later.filter((r) => r.body.includes(c)).map((r) => `${r.method} ${r.url}`)).toEqual([]);
    }
    expect(responses.every((r) => !r.body.includes(s.stack.adminToken!))).toBe(true);
    const log = output.text();
    expect(log).toContain('dashboard_built'); // the capture works
    for (const c of [...credentials, s.stack.adminToken]) {
      expect(log).not.toContain(c);
      expect(consoleLines.join('\n')).not.toContain(c);
    }
    expect(consoleLines.filter((l) => l.startsWith('pageerror'))).toEqual([]);
    // The page needs nothing but the service: no font, CDN or analytics request.
    expect(requestedUrls.filter((u) => !u.startsWith(`${s.url}/`))).toEqual([]);
  });
});
