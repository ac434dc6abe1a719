/**
 * Reads of many visitors as one query (scores, first pages of timelines).
 * The engine's cost of a query is mostly fixed (parsing, planning, opening
 * parts), so reading many visitors' rows costs about what one costs: concurrent
 * reads that would queue behind each other are sent together instead. No
 * timer: a read goes out at once when fewer than `maxInFlight` batches are
 * running, and the reads that arrive meanwhile wait for the next free slot
 * and go out as one batch. Reads are batched within a group: a tenant and
 * whatever else the query shares (a timeline's `since` and page size).
 */
export interface ReadBatcherOptions<V> {
  /** Reads the given visitors of one group; visitors without rows are absent from the answer. */
  read: (group: string, visitors: string[], signal: AbortSignal) => Promise<Map<string, V>>;
  /** Most visitors in one query. */
  maxBatch: number;
  /** Most queries running at once. */
  maxInFlight: number;
  /** What a waiter whose client has gone is rejected with. */
  clientGone: () => Error;
}

interface Waiter<V> {
  resolve: (v: V | undefined) => void;
  reject: (err: unknown) => void;
  signal?: AbortSignal;
  leave?: () => void;
  /** Once sent: its batch's query and how many of its waiters have not left. */
  sent?: { waiting: number; controller: AbortController };
}

export class ReadBatcher<V> {
  readonly #opts: ReadBatcherOptions<V>;
  /** Group → visitor → waiters, groups in the order their first read arrived. */
  readonly #queue = new Map<string, Map<string, Waiter<V>[]>>();
  #inFlight = 0;

  constructor(opts: ReadBatcherOptions<V>) {
    this.#opts = opts;
  }

  /** The visitor's answer in the group, or undefined when the group has none. */
  get(group: string, visitor: string, signal?: AbortSignal): Promise<V | undefined> {
    if (signal?.aborted) return Promise.reject(this.#opts.clientGone());
    return new Promise((resolve, reject) => {
      let byVisitor = this.#queue.get(group);
      if (!byVisitor) this.#queue.set(group, (byVisitor = new Map()));
      let waiters = byVisitor.get(visitor);
      if (!waiters) byVisitor.set(visitor, (waiters = []));
      const w: Waiter<V> = { resolve, reject, signal };
      if (signal) {
        // Still queued: leave the queue; already sent: the batch is given up when nobody else waits on it.
        w.leave = () => {
          reject(this.#opts.clientGone());
          if (w.sent) {
            if (--w.sent.waiting === 0) w.sent.controller.abort();
            return;
          }
          const queued = this.#queue.get(group);
          const list = queued?.get(visitor);
          const i = list?.indexOf(w) ?? -1;
          if (queued && list && i >= 0) {
            list.splice(i, 1);
            if (list.length === 0) queued.delete(visitor);
            if (queued.size === 0) this.#queue.delete(group);
          }
        };
        signal.addEventListener('abort', w.leave, { once: true });
      }
      waiters.push(w);
      this.#pump();
    });
  }

  #pump(): void {
    while (this.#inFlight < this.#opts.maxInFlight && this.#queue.size > 0) {
      const [group, byVisitor] = this.#queue.entries().next().value!;
      const batch: [string, Waiter<V>[]][] = [];
      for (const entry of byVisitor) {
        batch.push(entry);
        if (batch.length === this.#opts.maxBatch) break;
      }
      for (const [visitor] of batch) byVisitor.delete(visitor);
      // A group with more waiting goes to the back of the line behind the others.
      this.#queue.delete(group);
      if (byVisitor.size > 0) this.#queue.set(group, byVisitor);
      void this.#send(group, batch);
    }
  }

  async #send(group: string, batch: [string, Waiter<V>[]][]): Promise<void> {
    this.#inFlight++;
    const all = batch.flatMap(([, ws]) => ws);
    const sent = { waiting: all.length, controller: new AbortController() };
    for (const w of all) w.sent = sent;
    try {
      const found = await this.#opts.read(
        group,
        batch.map(([v]) => v),
        sent.controller.signal,
      );
      for (const [visitor, ws] of batch) for (const w of ws) settle(w, () => w.resolve(found.get(visitor)));
    } catch (err) {
      for (const w of all) settle(w, () => w.reject(err));
    } finally {
      this.#inFlight--;
      this.#pump();
    }
  }
}

function settle<V>(w: Waiter<V>, done: () => void): void {
  if (w.signal && w.leave) w.signal.removeEventListener('abort', w.leave);
  // A waiter that left was already rejected; settling a promise twice does nothing.
  done();
}
