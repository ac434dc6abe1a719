import { setImmediate as nextTurn } from 'node:timers/promises';

/**
 * Counts turns of the event loop (in its check phase) until stopped, so a
 * test can note the turn each unit of work ran in and check how much ran
 * between two turns.
 */
export function loopTurns(): { readonly count: number; stop(): Promise<void> } {
  let count = 0;
  let ticking = true;
  const ticker = (async () => {
    while (ticking) {
      count++;
      await nextTurn();
    }
  })();
  return {
    get count() {
      return count;
    },
    async stop() {
      ticking = false;
      await ticker;
    },
  };
}

/** The most units of work noted in one turn (`turns`: the turn each ran in). */
export function mostPerTurn(turns: Iterable<number>): number {
  const perTurn = new Map<number, number>();
  for (const turn of turns) perTurn.set(turn, (perTurn.get(turn) ?? 0) + 1);
  return Math.max(0, ...perTurn.values());
}
