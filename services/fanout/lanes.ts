import pLimit, { type LimitFunction } from 'p-limit';

/** How often a full lane may push a delivery back before that counts as a failed attempt. */
export const MAX_DEFERRALS = 3;

/**
 * The same for a lane whose destination is answering (a success within the
 * progress window): its lane is full because of a burst or a backlog, not
 * because the destination is down, so its deliveries wait their turn (an
 * hour at the default first tier) instead of failing attempts a healthy
 * destination would have taken.
 */
export const MAX_DEFERRALS_PROGRESSING = 60;

/**
 * What a lane does with one more delivery: run it (now, or queued behind the
 * lane's running attempts), defer it to the first retry tier (`deferrals` is
 * the count the deferred record carries), or count the full lane as a failed
 * attempt (`destination_backlogged`).
 */
export type Admission = { kind: 'run' } | { kind: 'defer'; deferrals: number } | { kind: 'backlogged' };

export interface LaneState {
  /** Attempts running in the lane. */
  active: number;
  /** Deliveries queued in the lane behind them. */
  pending: number;
  /** Most attempts the lane runs at once. */
  concurrency: number;
  /** Most deliveries the lane queues while all its slots are taken. */
  queueBound: number;
  /** How often this delivery has already been deferred. */
  deferrals: number;
  /** The destination answered an attempt successfully within the progress window. */
  progressing?: boolean;
}

/**
 * The admission rule of a destination's lane. A lane whose slots are all taken
 * and whose queue is at its bound is full: a delivery it cannot take is
 * deferred, at most MAX_DEFERRALS times (MAX_DEFERRALS_PROGRESSING while the
 * destination is answering); after that the full lane counts as a failed
 * attempt, so a dead destination's deliveries still move on through the
 * tiers instead of circling the first tier forever.
 */
export function admit(s: LaneState): Admission {
  const full = s.active >= s.concurrency && s.pending >= s.queueBound;
  if (!full) return { kind: 'run' };
  if (s.deferrals >= (s.progressing ? MAX_DEFERRALS_PROGRESSING : MAX_DEFERRALS)) return { kind: 'backlogged' };
  return { kind: 'defer', deferrals: s.deferrals + 1 };
}

/** An admission as `Lanes.enter` carries it out: a delivery that runs comes with its completion. */
export type Entry<R = void> = Exclude<Admission, { kind: 'run' }> | { kind: 'run'; done: Promise<R> };

export interface LanesOptions {
  /** Attempts one destination may have running at once. */
  concurrency: number;
  /** Deliveries one destination may have queued while its attempts run. */
  queueBound: number;
  /**
   * A destination counts as answering for this long after a successful
   * attempt. It must outlast the first tier's delay: deferred deliveries come
   * back a tier's delay later, and the lane may have had nothing to do since.
   */
  progressWindowMs: number;
}

/**
 * One bounded FIFO lane per destination (a `p-limit` limiter each), so a slow
 * or dead destination fills only its own lane.
 */
export class Lanes {
  readonly #lanes = new Map<string, LimitFunction>();
  /** When each destination last answered an attempt successfully. */
  readonly #lastSuccess = new Map<string, number>();
  readonly #opts: LanesOptions;

  constructor(opts: LanesOptions) {
    this.#opts = opts;
  }

  /**
   * Admits `work` to `destinationId`'s lane or says why not. The check and the
   * enqueue happen in one synchronous step, so two deliveries offered in the
   * same tick cannot both take the lane's last queue place.
   */
  enter<R = void>(destinationId: string, deferrals: number, work: () => Promise<R>, now = Date.now()): Entry<R> {
    const lane = this.#laneOf(destinationId);
    const admission = admit({
      active: lane.activeCount,
      pending: lane.pendingCount,
      concurrency: lane.concurrency,
      queueBound: this.#opts.queueBound,
      deferrals,
      progressing: this.progressing(destinationId, now),
    });
    if (admission.kind !== 'run') return admission;
    return { kind: 'run', done: lane(work) };
  }

  /** Records that `destinationId` answered an attempt successfully at `at`. */
  noteSuccess(destinationId: string, at: number): void {
    if ((this.#lastSuccess.get(destinationId) ?? -Infinity) < at) this.#lastSuccess.set(destinationId, at);
  }

  /** Whether `destinationId` answered an attempt successfully within the progress window before `now`. */
  progressing(destinationId: string, now: number): boolean {
    const last = this.#lastSuccess.get(destinationId);
    return last !== undefined && now - last <= this.#opts.progressWindowMs;
  }

  /** Running and queued attempts of `destinationId`'s lane (0 and 0 for a lane not yet used). */
  sizeOf(destinationId: string): { active: number; pending: number } {
    const lane = this.#lanes.get(destinationId);
    return { active: lane?.activeCount ?? 0, pending: lane?.pendingCount ?? 0 };
  }

  #laneOf(destinationId: string): LimitFunction {
    let lane = this.#lanes.get(destinationId);
    if (!lane) this.#lanes.set(destinationId, (lane = pLimit(this.#opts.concurrency)));
    return lane;
  }
}
