/** Browser origins as the player key's allow-list holds and compares them. Pure. */

/**
 * NOTE: a request without Origin passes: browsers send it on every
 * cross-origin fetch and on sendBeacon, so its absence means a script or a
 * server, which can send any Origin it likes anyway. The allow-list keeps
 * other sites from embedding the key, not scripts from using it.
 */
export function originAllowed(origin: string | undefined, allowed: readonly string[]): boolean {
  if (allowed.length === 0 || origin === undefined) return true;
  const normalised = normaliseOrigin(origin);
  return normalised !== undefined && allowed.includes(normalised);
}

/**
 * `scheme://host[:port]` in the form browsers send in Origin (lower case,
 * default port left out), or undefined for anything that is not an http(s)
 * origin: a path, a query, credentials, or the opaque origin `null`.
 */
export function normaliseOrigin(text: string): string | undefined {
  let url: URL;
  try {
    url = new URL(text.trim());
  } catch {
    return undefined;
  }
  if (url.protocol !== 'https:' && url.protocol !== 'http:') return undefined;
  if (url.username || url.password || url.search || url.hash || (url.pathname !== '/' && url.pathname !== '')) return undefined;
  if (!/^[a-z]+:\/\/[^/]+\/?$/i.test(text.trim())) return undefined;
  return url.origin;
}
