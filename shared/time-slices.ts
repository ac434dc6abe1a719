import { setImmediate as nextTurn } from 'node:timers/promises';

/**
 * Slices of the event loop's time for loops that work through many records
 * synchronously (a consumer draining a backlog). A loop asks `due` between
 * records and, when its slice is used up, awaits `next()`: a turn of the
 * event loop (timers, I/O: the intake's and the API's requests) behind every
 * other loop already waiting, then a fresh slice. The slice is shared, so
 * sixteen partitions' loops of one fetch run one slice between turns, not
 * one slice each.
 *
 * A slice lasts as long as the rest of the loop took since the last slice
 * ended, between `minMs` and `maxMs`: the records get a fair share of a busy
 * process (about half, as two processes would get of a core), not whatever
 * the requests leave them, and a quiet loop still turns every `minMs`.
 */
export class TimeSlices {
  readonly minMs: number;
  readonly maxMs: number;
  readonly #now: () => number;
  #sliceEnd = 0;
  /** When the last slice ended (a loop asked for the next). */
  #lastEnd = 0;
  /** Settles when the last loop to ask for a slice has its turn. */
  #queue: Promise<void> = Promise.resolve();

  constructor(minMs: number, maxMs = minMs, now: () => number = () => performance.now()) {
    this.minMs = minMs;
    this.maxMs = Math.max(minMs, maxMs);
    this.#now = now;
  }

  /** True once the current slice is used up. */
  get due(): boolean {
    return this.#now() >= this.#sliceEnd;
  }

  /** Waits for a turn of the event loop after the loops waiting before this one, then starts a fresh slice. */
  async next(): Promise<void> {
    this.#lastEnd = this.#now();
    const before = this.#queue;
    let release!: () => void;
    this.#queue = new Promise<void>((resolve) => (release = resolve));
    try {
      await before;
      await nextTurn();
      const now = this.#now();
      this.#sliceEnd = now + Math.min(this.maxMs, Math.max(this.minMs, now - this.#lastEnd));
    } finally {
      release();
    }
  }
}

/**
 * The process's slices: 10 to 40 ms of record work between turns of the
 * event loop. Every consumer of a process shares them, since they share its
 * loop.
 */
export const eventLoopSlices = new TimeSlices(10, 40);
