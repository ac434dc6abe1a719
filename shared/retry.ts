import { setTimeout as delay } from 'node:timers/promises';

/**
 * The one backoff loop of the service: a function retried on a schedule
 * until it succeeds, its error is not retryable, the schedule gives up, or
 * its owner stops. Pure: no Kafka, no ClickHouse; the clock and the random
 * source can be passed in.
 */

/**
 * When to try again, as data: the wait before retry n (1 for the first) is
 * `initialMs · factor^(n-1)`, capped at `maxMs`, then reduced by up to
 * `jitter` of itself at random (0: exact, 1: "full jitter", anywhere from 0
 * to the capped wait), so that many owners failing at once do not retry in
 * step. With `giveUpAfterMs`, no retry is made that would start later than
 * that long after the first try.
 */
export interface Schedule {
  readonly initialMs: number;
  readonly maxMs: number;
  /** Default 2. */
  readonly factor?: number;
  /** Share of each wait taken off at random, 0 to 1 (default 0). */
  readonly jitter?: number;
  readonly giveUpAfterMs?: number;
}

/** The schedule of a hand-off that must eventually happen (a produce, a dead letter): 200 ms doubling to 5 s. */
export const DURABLE_HANDOFF: Schedule = { initialMs: 200, maxMs: 5000 };

/** The wait before retry `attempt` (1 for the first retry) of `schedule`. */
export function delayFor(schedule: Schedule, attempt: number, random: () => number = Math.random): number {
  const { initialMs, maxMs, factor = 2, jitter = 0 } = schedule;
  // Exponent bounded so that a long outage never overflows to Infinity.
  const exp = Math.min(Math.max(0, attempt - 1), 64);
  const capped = Math.min(initialMs * factor ** exp, maxMs);
  return jitter > 0 ? capped - capped * jitter * random() : capped;
}

export interface RetryOptions {
  schedule: Schedule;
  /** Whether `err` may succeed on a later try (default: every error). */
  isRetryable?: (err: unknown) => boolean;
  /** Called before each wait: to log, count, or mark the owner as failing. */
  onRetry?: (err: unknown, attempt: number, delayMs: number) => void;
  /** Stops retrying: the wait ends early and the last error is thrown. */
  signal?: AbortSignal;
  /** For tests: the clock, the wait and the random source. */
  now?: () => number;
  sleep?: (ms: number, signal?: AbortSignal) => Promise<void>;
  random?: () => number;
}

/**
 * Runs `fn` until it resolves, and answers its value. Throws the error of
 * the last try when it is not retryable, when the schedule gives up, or when
 * `signal` is (or becomes) aborted.
 */
export async function retry<T>(fn: (attempt: number) => Promise<T>, opts: RetryOptions): Promise<T> {
  const { schedule, isRetryable = () => true, onRetry, signal, now = Date.now, sleep: wait = sleep, random } = opts;
  const started = now();
  for (let attempt = 1; ; attempt++) {
    try {
      return await fn(attempt);
    } catch (err) {
      if (signal?.aborted || !isRetryable(err)) throw err;
      const delayMs = delayFor(schedule, attempt, random);
      if (schedule.giveUpAfterMs !== undefined && now() + delayMs - started > schedule.giveUpAfterMs) throw err;
      onRetry?.(err, attempt, delayMs);
      await wait(delayMs, signal);
      if (signal?.aborted) throw err;
    }
  }
}

/** Waits `ms`, or less once `signal` is aborted. */
export function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  // Node's timer rejects when aborted; here an abort only ends the wait early.
  return delay(ms, undefined, { signal }).catch(() => undefined);
}
