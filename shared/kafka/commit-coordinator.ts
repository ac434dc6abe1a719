/** A record taken on: committed past once it and every earlier record of its partition are done. */
export interface Ticket {
  readonly lane: Lane;
  readonly message: { readonly offset: string };
  done: boolean;
}

/** The tickets of one partition in the current assignment, in offset order. */
export interface Lane {
  readonly topic: string;
  readonly partition: number;
  /** False once the partition was revoked or rewound: its tickets commit nothing. */
  live: boolean;
  /** Tickets not yet committed past are `tickets[head..]`. */
  tickets: Ticket[];
  head: number;
}

export interface CommitCoordinatorOptions {
  /** Sends offsets (the next offset to read of each partition); undefined: commit nothing. */
  commit?: (offsets: { topic: string; partition: number; offset: string }[]) => Promise<void>;
  /** How long commit points gather before they are sent. */
  delayMs: number;
  /** Most tickets taken on and not done before the coordinator is `full` (backpressure). */
  maxInFlight: number;
}

/**
 * Commit points of records that finish out of order: a partition's offset
 * moves past a record only once it and every earlier one are done. One
 * commit is in flight at a time; points that come meanwhile go in the next.
 * Every step is O(1) per record (offsets are below 2^53, so Number reads
 * them): the projector's drain goes through here.
 */
export class CommitCoordinator {
  readonly #opts: CommitCoordinatorOptions;
  #lanes = new Map<string, Lane>();
  #inFlight = 0;
  readonly #points = new Map<Lane, string>();
  #timer: NodeJS.Timeout | undefined;
  #sending: Promise<void> | undefined;
  /** Resolved when a ticket is done; awaited by every loop at the bound. */
  #freed: PromiseWithResolvers<void> | undefined;

  constructor(opts: CommitCoordinatorOptions) {
    this.#opts = opts;
  }

  /** Tickets taken on and not done, over all partitions. */
  get inFlight(): number {
    return this.#inFlight;
  }

  /** The commit being sent, if any. */
  get sending(): Promise<void> | undefined {
    return this.#sending;
  }

  /** The partition's lane (ask once per fetched batch, not per record). */
  lane(topic: string, partition: number): Lane {
    const key = `${topic}:${partition}`;
    let lane = this.#lanes.get(key);
    if (!lane) this.#lanes.set(key, (lane = { topic, partition, live: true, tickets: [], head: 0 }));
    return lane;
  }

  /** Registers a ticket, in offset order within its lane (one of a revoked lane is left out). */
  take(ticket: Ticket): void {
    if (!ticket.lane.live) return;
    ticket.lane.tickets.push(ticket);
    this.#inFlight++;
  }

  /** Marks the ticket done and moves its partition's commit point past every done ticket at its front. */
  finish(ticket: Ticket): void {
    if (ticket.done || !ticket.lane.live) return;
    ticket.done = true;
    this.#inFlight--;
    this.#advance(ticket.lane);
    this.#wake();
  }

  /** finish() of many tickets (a handler call's): each partition's commit point moves once per run of its tickets, not once per ticket. */
  finishAll(tickets: readonly Ticket[]): void {
    let lane: Lane | undefined;
    for (const t of tickets) {
      if (t.done || !t.lane.live) continue;
      t.done = true;
      this.#inFlight--;
      if (lane !== undefined && lane !== t.lane) this.#advance(lane);
      lane = t.lane;
    }
    if (lane) this.#advance(lane);
    this.#wake();
  }

  /**
   * Records up to `lastOffset` carried nothing to process (transaction
   * markers): committed past once everything before them is done.
   */
  skip(lane: Lane, lastOffset: string): void {
    if (!lane.live) return;
    lane.tickets.push({ lane, message: { offset: lastOffset }, done: true });
    this.#advance(lane);
  }

  /** Whether `maxInFlight` tickets are outstanding: take no more until `freed()`. */
  get full(): boolean {
    return this.#inFlight >= this.#opts.maxInFlight;
  }

  /**
   * Backpressure: resolves once a ticket is done (or after a second), then
   * beats the group's heartbeat. The caller checks `full` again: another
   * loop may have taken the room.
   */
  async freed(heartbeat: () => Promise<void>): Promise<void> {
    // One shared promise for every waiting loop, not a race over all the
    // work in flight (thousands of reactions per record at the bound).
    this.#freed ??= Promise.withResolvers<void>();
    let beat: NodeJS.Timeout | undefined;
    try {
      await Promise.race([this.#freed.promise, new Promise<void>((r) => (beat = setTimeout(r, 1000)))]);
    } finally {
      clearTimeout(beat);
    }
    await heartbeat();
  }

  /** Drops the lane (its partition is read again from its first ticket not done, answered). */
  rewind(lane: Lane): string | undefined {
    if (!lane.live) return undefined;
    lane.live = false;
    this.#lanes.delete(`${lane.topic}:${lane.partition}`);
    this.#points.delete(lane);
    let first: string | undefined;
    for (let i = lane.head; i < lane.tickets.length; i++) {
      const t = lane.tickets[i]!;
      if (t.done) continue;
      first ??= t.message.offset;
      this.#inFlight--;
    }
    this.#wake();
    return first;
  }

  /** Forgets every lane (a rebalance: the new assignment starts from the committed offsets). */
  clear(): void {
    for (const lane of this.#lanes.values()) lane.live = false;
    this.#lanes.clear();
    this.#points.clear();
    this.#inFlight = 0;
    this.#wake();
  }

  /** Sends the commit points gathered so far, and any that come while they go. */
  flush(): Promise<void> {
    clearTimeout(this.#timer);
    this.#timer = undefined;
    this.#sending ??= this.#send().finally(() => {
      this.#sending = undefined;
      if (this.#points.size > 0) this.#schedule();
    });
    return this.#sending;
  }

  #advance(lane: Lane): void {
    const { tickets } = lane;
    let last: Ticket | undefined;
    while (lane.head < tickets.length && tickets[lane.head]!.done) last = tickets[lane.head++];
    if (!last) return;
    if (lane.head === tickets.length) {
      lane.tickets = [];
      lane.head = 0;
    } else if (lane.head > 1024 && lane.head * 2 > tickets.length) {
      lane.tickets = tickets.slice(lane.head);
      lane.head = 0;
    }
    if (!this.#opts.commit) return;
    this.#points.set(lane, String(Number(last.message.offset) + 1));
    this.#schedule();
  }

  #wake(): void {
    this.#freed?.resolve();
    this.#freed = undefined;
  }

  #schedule(): void {
    if (this.#timer || this.#sending) return;
    this.#timer = setTimeout(() => void this.flush(), this.#opts.delayMs);
  }

  async #send(): Promise<void> {
    while (this.#points.size > 0) {
      const offsets = [...this.#points].map(([{ topic, partition }, offset]) => ({ topic, partition, offset }));
      this.#points.clear();
      await this.#opts.commit!(offsets);
    }
  }
}
