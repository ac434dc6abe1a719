import fc from 'fast-check';

/**
 * Runs an async property with a fixed budget (fast-check prints the seed on
 * failure). fast-check's `interruptAfterTimeLimit` races the run in flight
 * against the deadline and returns without waiting for it, so that run's
 * request could still be answered, and its result recorded, after the test
 * has read what the runs sent: on a loaded machine the list then holds
 * events the test never counted. The budget still ends the runs, but this
 * returns only once the one in flight has settled, and fails with its error.
 */
export async function checkWithin<T>(
  arb: fc.Arbitrary<T>,
  predicate: (v: T) => Promise<void>,
  { numRuns = 200, timeLimitMs = 45_000 }: { numRuns?: number; timeLimitMs?: number } = {},
): Promise<void> {
  const running = new Set<Promise<void>>();
  const tracked = (v: T) => {
    const run = predicate(v);
    running.add(run);
    const done = () => running.delete(run);
    run.then(done, done);
    return run;
  };
  try {
    await fc.assert(fc.asyncProperty(arb, tracked), { numRuns, interruptAfterTimeLimit: timeLimitMs, markInterruptAsFailure: false });
  } catch (e) {
    await Promise.allSettled(running);
    throw e;
  }
  await Promise.all(running);
}
