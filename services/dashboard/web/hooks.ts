import { useCallback, useEffect, useRef, useState } from 'preact/hooks';
import { api, ApiError } from './api.ts';

export interface Resource<T> {
  data: T | undefined;
  error: ApiError | undefined;
  loading: boolean;
  /** Fetches again; the current data stays on screen until the answer arrives. */
  reload: () => Promise<void>;
}

/** GETs `path` (relative to /admin/v1) whenever it changes; null fetches nothing. */
export function useResource<T>(path: string | null): Resource<T> {
  const [state, setState] = useState<{ data?: T; error?: ApiError; loading: boolean; path: string | null }>({ loading: path !== null, path });
  const latest = useRef(0);

  const load = useCallback(async () => {
    if (path === null) return;
    const id = ++latest.current;
    setState((s) => ({ ...s, loading: true }));
    try {
      const data = await api<T>('GET', path);
      if (id === latest.current) setState({ data, loading: false, path });
    } catch (err) {
      if (id === latest.current) {
        const error = err instanceof ApiError ? err : new ApiError(0, String(err));
        // A different path must not keep showing the old path's data.
        setState((s) => ({ data: s.path === path ? s.data : undefined, error, loading: false, path }));
      }
    }
  }, [path]);

  useEffect(() => {
    setState((s) => (s.path === path ? s : { loading: path !== null, path }));
    void load();
  }, [load]);

  return { data: state.path === path ? state.data : undefined, error: state.error, loading: state.loading, reload: load };
}

/** Calls `fn` every `ms` while `enabled` and the page is visible. */
export function useInterval(fn: () => void, ms: number, enabled = true): void {
  const saved = useRef(fn);
  saved.current = fn;
  useEffect(() => {
    if (!enabled) return;
    const timer = setInterval(() => {
      if (document.visibilityState === 'visible') saved.current();
    }, ms);
    return () => clearInterval(timer);
  }, [ms, enabled]);
}

export function useTitle(title: string): void {
  useEffect(() => {
    document.title = `${title} · Video analytics`;
  }, [title]);
}

/**
 * Runs an action (a POST, PATCH or DELETE) and keeps its pending state and
 * error, so every button can say what is happening.
 */
export function useAction<A extends unknown[], R>(fn: (...args: A) => Promise<R>) {
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState<string | undefined>();
  const run = async (...args: A): Promise<R | undefined> => {
    setBusy(true);
    setError(undefined);
    try {
      return await fn(...args);
    } catch (err) {
      setError(err instanceof Error ? err.message : String(err));
      return undefined;
    } finally {
      setBusy(false);
    }
  };
  return { run, busy, error, clearError: () => setError(undefined) };
}

/**
 * useAction for a form that saves in place: `saved` (for its "Saved."
 * status) holds from a success until the next save or edit; `edit(set)` is
 * `set` that also clears it.
 */
export function useSave(fn: () => Promise<unknown>) {
  const [saved, setSaved] = useState(false);
  const action = useAction(async () => {
    setSaved(false);
    await fn();
    setSaved(true);
  });
  const edit = (set: (v: string) => void) => (v: string) => {
    set(v);
    setSaved(false);
  };
  return { ...action, saved: saved && !action.error, edit };
}
