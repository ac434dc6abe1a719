import { setImmediate as nextTurn } from 'node:timers/promises';

/**
 * Slices of the event loop's time for loops that work through many records
 * synchronously (a consumer draining a backlog). A loop asks `due` between
 * records and, when its slice is used up, awaits `next()`: a turn of the
 * event loop (timers, I/O: the intake's and the API's requests) behind every
 * other loop already waiting, then a fresh slice. The slice is shared, so
 * sixteen partitions' loops of one fetch run one slice between turns, not
 * one slice each.
 */
export class TimeSlices {
  readonly sliceMs: number;
  #sliceEnd = 0;
  /** Settles when the last loop to ask for a slice has its turn. */
  #queue: Promise<void> = Promise.resolve();

  constructor(sliceMs: number) {
    this.sliceMs = sliceMs;
  }

  /** True once the current slice is used up. */
  get due(): boolean {
    return performance.now() >= this.#sliceEnd;
  }

  /** Waits for a turn of the event loop after the loops waiting before this one, then starts a fresh slice. */
  async next(): Promise<void> {
    const before = this.#queue;
    let release!: () => void;
    this.#queue = new Promise<void>((resolve) => (release = resolve));
    try {
      await before;
      await nextTurn();
      this.#sliceEnd = performance.now() + this.sliceMs;
    } finally {
      release();
    }
  }
}

/**
 * The process's slices: 10 ms of record work between turns of the event
 * loop. Every consumer of a process shares them, since they share its loop.
 */
export const eventLoopSlices = new TimeSlices(10);
