import { useEffect, useState } from 'preact/hooks';

/**
 * Hash routing (`#/tenants/<id>/deliveries?status=failed`): the server serves
 * the same shell for every /dashboard path, and a hash never reaches the
 * server or a Referer header.
 */
export interface Route {
  segments: string[];
  query: URLSearchParams;
}

function current(): Route {
  const raw = location.hash.replace(/^#/, '') || '/';
  const q = raw.indexOf('?');
  const path = q >= 0 ? raw.slice(0, q) : raw;
  const query = new URLSearchParams(q >= 0 ? raw.slice(q + 1) : '');
  const segments = path
    .split('/')
    .filter(Boolean)
    .map((s) => {
      try {
        return decodeURIComponent(s);
      } catch {
        return s;
      }
    });
  return { segments, query };
}

export function useRoute(): Route {
  const [route, setRoute] = useState(current);
  useEffect(() => {
    const update = () => setRoute(current());
    addEventListener('hashchange', update);
    return () => removeEventListener('hashchange', update);
  }, []);
  return route;
}

/** `#/a/b?x=1` from segments and query values (empty values are left out). */
export function href(segments: string[], query: Record<string, string | undefined> = {}): string {
  const qs = new URLSearchParams();
  for (const [k, v] of Object.entries(query)) if (v) qs.set(k, v);
  const q = qs.toString();
  return `#/${segments.map(encodeURIComponent).join('/')}${q ? `?${q}` : ''}`;
}

export function navigate(to: string, opts: { replace?: boolean } = {}): void {
  if (opts.replace) {
    history.replaceState(null, '', to);
    dispatchEvent(new HashChangeEvent('hashchange'));
  } else {
    location.hash = to.replace(/^#/, '');
  }
}
