/** A part of the stack that has something to stop. */
export interface Stoppable {
  name: string;
  stop(): Promise<void>;
}

/**
 * Share of SHUTDOWN_TIMEOUT_MS the steps may use. The rest is margin for
 * committing and closing clients before services/main.ts exits regardless.
 */
export const SHUTDOWN_SHARE = 0.8;

/** The least time a step is given to drain, however late its turn comes. */
export const MIN_DRAIN_MS = 200;

/** When the steps of a shutdown that starts at `startedAt` must be done. */
export function shutdownDeadline(startedAt: number, timeoutMs: number): number {
  return startedAt + Math.floor(timeoutMs * SHUTDOWN_SHARE);
}

/**
 * How long a step may drain: `share` of what remains until the deadline,
 * never less than MIN_DRAIN_MS. Before a shutdown starts the deadline is
 * infinite, and so is the budget.
 */
export function drainBudget(deadline: number, now: number, share: number): number {
  return Math.max(MIN_DRAIN_MS, Math.floor((deadline - now) * share));
}

export interface ShutdownSequenceOptions {
  /** SHUTDOWN_TIMEOUT_MS: the whole shutdown, after which main.ts exits. */
  timeoutMs: number;
  /** A step that threw; the sequence goes on with the next one. */
  onStopFailed: (name: string, err: unknown) => void;
  now?: () => number;
}

/**
 * The stack's parts in start order, stopped in reverse: what started last
 * (the HTTP server, so intake closes first) stops first, the broker last.
 * Consumers ask {@link budget} for their share of the time that remains.
 */
export class ShutdownSequence {
  readonly #steps: Stoppable[] = [];
  readonly #opts: ShutdownSequenceOptions;
  #deadline = Number.POSITIVE_INFINITY;

  constructor(opts: ShutdownSequenceOptions) {
    this.#opts = opts;
  }

  /** Adds a step; it will be stopped before every step added earlier. */
  add(name: string, stop: () => Promise<void>): void {
    this.#steps.push({ name, stop });
  }

  /** The drain budget of a step (ms) at this moment: `share` of the time left. */
  budget(share: number): number {
    return drainBudget(this.#deadline, (this.#opts.now ?? Date.now)(), share);
  }

  /** Stops every step in reverse order, each once; a failed step is reported and skipped over. */
  async run(): Promise<void> {
    this.#deadline = shutdownDeadline((this.#opts.now ?? Date.now)(), this.#opts.timeoutMs);
    const steps = this.#steps.splice(0).reverse();
    for (const step of steps) {
      try {
        await step.stop();
      } catch (err) {
        this.#opts.onStopFailed(step.name, err);
      }
    }
  }
}
