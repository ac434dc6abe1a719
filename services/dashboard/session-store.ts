import type { SessionStore } from '@fastify/session';

type StoredSession = Parameters<SessionStore['set']>[1];

/**
 * @fastify/session's store interface over a bounded Map: expired sessions
 * are dropped on read and when the bound is reached, then the oldest. A
 * store shared by replicas (e.g. connect-redis) plugs in the same way.
 */
export class BoundedMemoryStore implements SessionStore {
  readonly #sessions = new Map<string, StoredSession>();
  readonly #max: number;
  readonly #now: () => number;

  constructor(opts: { max: number; now?: () => number }) {
    this.#max = opts.max;
    this.#now = opts.now ?? Date.now;
  }

  get size(): number {
    return this.#sessions.size;
  }

  set(id: string, session: StoredSession, callback: (err?: unknown) => void): void {
    this.#sessions.delete(id);
    if (this.#sessions.size >= this.#max) {
      for (const [k, s] of this.#sessions) if (this.#expired(s)) this.#sessions.delete(k);
      if (this.#sessions.size >= this.#max) this.#sessions.delete(this.#sessions.keys().next().value!);
    }
    this.#sessions.set(id, session);
    callback();
  }

  get(id: string, callback: (err: unknown, result?: StoredSession | null) => void): void {
    const s = this.#sessions.get(id);
    if (s && this.#expired(s)) {
      this.#sessions.delete(id);
      callback(null, null);
      return;
    }
    callback(null, s ?? null);
  }

  destroy(id: string, callback: (err?: unknown) => void): void {
    this.#sessions.delete(id);
    callback();
  }

  clear(): void {
    this.#sessions.clear();
  }

  #expired(s: StoredSession): boolean {
    const expires = s.cookie?.expires;
    return expires ? new Date(expires).getTime() <= this.#now() : false;
  }
}
