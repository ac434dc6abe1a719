/** Messages between bench/run.ts and bench/stack-worker.ts (Node IPC). */

export type WorkerRequest = { id: number } & (
  | { op: 'query'; sql: string }
  | { op: 'command'; sql: string }
  | { op: 'awaitWatch' }
  | { op: 'rawInsert'; batchSize: number; rounds: number }
  | { op: 'stop' }
);

export type WorkerOp = WorkerRequest['op'];

export interface WorkerReady {
  type: 'ready';
  url: string;
  adminToken: string;
  /** Date.now() just before startStack and just after it resolved. */
  startedAt: number;
  readyAt: number;
  clickhouseVersion: string;
}

export interface WorkerResponse {
  type: 'response';
  id: number;
  ok: boolean;
  result?: unknown;
  error?: string;
}

export interface WatchResult {
  watchStartedAt: number;
  firstRowAt: number | undefined;
  doneAt: number;
  count: number;
  reached: boolean;
  /** [Date.now(), count()] samples, about every 50 ms. */
  timeline: [number, number][];
}

export interface RawInsertResult {
  rows: number;
  batchSize: number;
  /** rows/s per round, into a copy of events with the visitor view attached. */
  withMv: number[];
  /** rows/s per round, into a copy of events alone. */
  plain: number[];
  /** Rows the copied view produced (a check that it fired). */
  mvRows: number;
}
