/**
 * The dashboard's only way to the server. The admin token is sent once, to
 * POST /dashboard/session, and then forgotten: the session lives in an
 * HttpOnly cookie the page cannot read, and the CSRF token lives in this
 * module's memory only (never in localStorage, sessionStorage or a URL).
 */

/** A failed request, with the problem+json detail when the server sent one. */
export class ApiError extends Error {
  readonly status: number;
  constructor(status: number, message: string) {
    super(message);
    this.status = status;
  }
}

let csrfToken: string | null = null;
const signedOutListeners = new Set<() => void>();

/** Called when the server says the session is gone (401), so the app shows the sign-in page. */
export function onSignedOut(listener: () => void): () => void {
  signedOutListeners.add(listener);
  return () => signedOutListeners.delete(listener);
}

async function errorOf(res: Response): Promise<ApiError> {
  let message = `${res.status} ${res.statusText}`.trim();
  try {
    const body = (await res.json()) as { title?: string; detail?: string };
    message = body.detail || body.title || message;
  } catch {
    // Not JSON: keep the status line.
  }
  return new ApiError(res.status, message);
}

async function send(method: string, url: string, body?: unknown): Promise<Response> {
  const headers: Record<string, string> = { accept: 'application/json' };
  if (body !== undefined) headers['content-type'] = 'application/json';
  if (method !== 'GET' && csrfToken) headers['x-csrf-token'] = csrfToken;
  return fetch(url, {
    method,
    headers,
    credentials: 'same-origin',
    cache: 'no-store',
    ...(body !== undefined ? { body: JSON.stringify(body) } : {}),
  });
}

/**
 * Calls the management API through the dashboard's proxy: `path` is relative
 * to /admin/v1 (e.g. `/tenants`). Resolves with the parsed JSON (undefined
 * for 204), rejects with an ApiError.
 */
export async function api<T>(method: 'GET' | 'POST' | 'PUT' | 'PATCH' | 'DELETE', path: string, body?: unknown): Promise<T> {
  const res = await send(method, `/dashboard/api${path}`, body);
  if (res.status === 401) {
    csrfToken = null;
    for (const l of signedOutListeners) l();
    throw await errorOf(res);
  }
  if (!res.ok) throw await errorOf(res);
  if (res.status === 204) return undefined as T;
  const text = await res.text();
  return (text ? JSON.parse(text) : undefined) as T;
}

/** Is there a valid session? Fetches its CSRF token when there is. */
export async function checkSession(): Promise<boolean> {
  const res = await send('GET', '/dashboard/session');
  if (res.ok) {
    csrfToken = ((await res.json()) as { csrf_token: string }).csrf_token;
    return true;
  }
  csrfToken = null;
  if (res.status === 401) {
    // NOTE: read the answer even though only its status matters: Chromium
    // does not finish a no-store response whose body nobody reads, which
    // holds its connection (and kept the browser test waiting for it).
    await res.text();
    return false;
  }
  throw await errorOf(res);
}

/** Trades the admin token for a session cookie. */
export async function signIn(token: string): Promise<void> {
  const res = await send('POST', '/dashboard/session', { token });
  if (!res.ok) {
    const err = await errorOf(res);
    throw res.status === 401 ? new ApiError(401, 'That admin token was not accepted.') : err;
  }
  csrfToken = ((await res.json()) as { csrf_token: string }).csrf_token;
}

export async function signOut(): Promise<void> {
  const res = await send('DELETE', '/dashboard/session');
  csrfToken = null;
  if (!res.ok && res.status !== 401) throw await errorOf(res);
}
