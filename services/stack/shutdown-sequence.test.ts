import { describe, expect, it } from 'vitest';
import { MIN_DRAIN_MS, ShutdownSequence, drainBudget, shutdownDeadline } from './shutdown-sequence.ts';

describe('shutdown budget', () => {
  it('ends the steps at 80 % of SHUTDOWN_TIMEOUT_MS, leaving the rest before main.ts exits', () => {
    expect(shutdownDeadline(1_000, 15_000)).toBe(13_000);
    expect(shutdownDeadline(0, 101)).toBe(80);
  });

  it("gives a step its share of what remains, never less than 200 ms, and no limit before shutdown starts", () => {
    expect(drainBudget(13_000, 1_000, 0.6)).toBe(7_200);
    expect(drainBudget(13_000, 8_200, 0.4)).toBe(1_920);
    expect(drainBudget(13_000, 12_900, 0.6)).toBe(MIN_DRAIN_MS);
    expect(drainBudget(13_000, 20_000, 0.4)).toBe(MIN_DRAIN_MS); // past the deadline
    expect(drainBudget(Number.POSITIVE_INFINITY, 5, 0.6)).toBe(Number.POSITIVE_INFINITY);
  });
});

describe('ShutdownSequence', () => {
  it('stops in reverse order of adding, each step once, and goes on past a failed step', async () => {
    const stopped: string[] = [];
    const failed: [string, unknown][] = [];
    const seq = new ShutdownSequence({ timeoutMs: 1_000, onStopFailed: (name, err) => failed.push([name, err]) });
    const boom = new Error('boom');
    seq.add('broker', async () => void stopped.push('broker'));
    seq.add('consumer', async () => {
      stopped.push('consumer');
      throw boom;
    });
    seq.add('http', async () => void stopped.push('http'));
    await seq.run();
    expect(stopped).toEqual(['http', 'consumer', 'broker']);
    expect(failed).toEqual([['consumer', boom]]);
    await seq.run();
    expect(stopped).toHaveLength(3);
  });

  it('measures each budget from the moment the step asks, against the deadline set when run starts', async () => {
    let now = 10_000;
    const budgets: number[] = [];
    const seq = new ShutdownSequence({ timeoutMs: 15_000, onStopFailed: () => undefined, now: () => now });
    expect(seq.budget(0.6)).toBe(Number.POSITIVE_INFINITY);
    // Added in start order: the projector before the fan-out, so the fan-out drains first.
    seq.add('projector', async () => void budgets.push(seq.budget(0.6)));
    seq.add('fanout', async () => {
      budgets.push(seq.budget(0.4));
      now += 4_000; // the fan-out took 4 s
    });
    await seq.run();
    // Deadline 10 000 + 12 000; the fan-out gets 0.4 × 12 000, the projector 0.6 × the 8 000 left.
    expect(budgets).toEqual([4_800, 4_800]);
  });
});
