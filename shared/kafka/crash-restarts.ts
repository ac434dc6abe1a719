import type { Consumer, ConsumerConfig } from 'kafkajs';
import { delayFor, sleep, type Schedule } from '../retry.ts';

/** The wait before a restart after n crashes in a row: 250 ms, doubling up to 10 s. */
export const RESTART_SCHEDULE: Schedule = { initialMs: 250, maxMs: 10_000 };

/**
 * Restarts of a kafkajs consumer after retriable crashes, with a wait that
 * grows while the crashes come in a row.
 *
 * kafkajs restarts a consumer after a short fixed wait, however often it
 * crashes: a topic deleted under it (or a partition no broker hosts) would
 * loop on group joins and fetches for as long as the fault lasts. Given to
 * the consumer's `retry.restartOnFailure`, this answers after the wait of
 * {@link RESTART_SCHEDULE} for the crashes in a row, and says no once the
 * owner's `signal` is aborted. A fetch that goes through ends the run.
 */
export class CrashRestarts {
  /** Crashes since the last fetch that went through, and when the first of them came. */
  #inRow = 0;
  #since: number | undefined;
  #last = '';
  readonly #signal: AbortSignal;
  readonly #onRestart: () => void;

  constructor(opts: { signal: AbortSignal; onRestart?: () => void }) {
    this.#signal = opts.signal;
    this.#onRestart = opts.onRestart ?? (() => undefined);
  }

  /** The consumer's `retry` option, with `restartOnFailure` answered here. */
  retry(retry: ConsumerConfig['retry']): ConsumerConfig['retry'] {
    return { ...retry, restartOnFailure: () => this.beforeRestart() };
  }

  /** Listens to the consumer's CRASH (the cause, for the report) and FETCH (the end of a run). */
  watch(consumer: Consumer): void {
    consumer.on(consumer.events.CRASH, (e) => {
      this.#last = crashCause(e.payload.error);
    });
    consumer.on(consumer.events.FETCH, () => {
      this.#inRow = 0;
      this.#since = undefined;
    });
  }

  get inRow(): number {
    return this.#inRow;
  }

  /** Why the consumer is unhealthy, once it has crashed and restarted for longer than `limitMs`; else undefined. */
  problem(limitMs: number, now = Date.now()): string | undefined {
    if (this.#since === undefined || now - this.#since <= limitMs) return undefined;
    return `crashing: ${this.#inRow} restarts in a row for ${Math.round((now - this.#since) / 1000)} s (${this.#last})`;
  }

  /** Counts a restart and waits its turn of the schedule; false once the owner stops. */
  async beforeRestart(): Promise<boolean> {
    this.#inRow++;
    this.#since ??= Date.now();
    this.#onRestart();
    await sleep(delayFor(RESTART_SCHEDULE, this.#inRow), this.#signal);
    return !this.#signal.aborted;
  }
}

/** The message of the error a kafkajs CRASH event carries. */
export function crashCause(error: unknown): string {
  return String((error as Error | undefined)?.message ?? error);
}
