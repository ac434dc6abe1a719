/** Messages between bench/run.ts and bench/stack-worker.ts (Node IPC). */

export type WorkerRequest = { id: number } & (
  | { op: 'query'; sql: string }
  | { op: 'queryStats'; sql: string; params?: Record<string, unknown> }
  | { op: 'command'; sql: string }
  /** `concurrency` loops sending `queries` (in turn) straight to the worker's own ClickHouse client for `durationMs`. */
  | { op: 'queryLoad'; queries: { sql: string; params?: Record<string, unknown> }[]; concurrency: number; durationMs: number }
  | { op: 'awaitWatch' }
  | { op: 'rawInsert'; batchSize: number; rounds: number }
  | { op: 'stats'; reset?: boolean }
  /** Starts the V8 CPU profiler in the stack process (node:inspector), e.g. after a warm-up. */
  | { op: 'profileStart' }
  /** Stops it; returns the profile (a .cpuprofile object). */
  | { op: 'profileStop' }
  | { op: 'stop' }
);

/** The stack process's own view of itself (op 'stats'). */
export interface ProcessStats {
  /** Event-loop delay since the last reset (perf_hooks.monitorEventLoopDelay, 10 ms resolution), ms. */
  eldP50: number;
  eldP99: number;
  eldMax: number;
  /** Peak resident set size of the process since it started, bytes. */
  maxRss: number;
  rss: number;
  /** Garbage-collection pauses since the last reset (PerformanceObserver 'gc'): count, sum, longest, and how many took over 50 ms. */
  gc: { count: number; totalMs: number; maxMs: number; over50: number };
}

export type WorkerOp = WorkerRequest['op'];

/** What ClickHouse reports of one query (op 'queryStats', FORMAT JSON's statistics). */
export interface QueryStats {
  rows: number;
  rowsRead: number;
  elapsedMs: number;
}

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
  /** rows/s per round, into a copy of events with the visitor view attached, as the projector sends them (JSONCompactEachRow). */
  withMv: number[];
  /** The same as JSONEachRow objects (the format of the runs before 2026-11-23). */
  withMvObjects: number[];
  /** rows/s per round, into a copy of events alone (JSONCompactEachRow). */
  plain: number[];
  /** Rows the copied view produced (a check that it fired). */
  mvRows: number;
}

/** What op 'queryLoad' measured: queries answered, their latency quantiles (ms) and failures. */
export interface QueryLoadResult {
  count: number;
  seconds: number;
  p50: number;
  p99: number;
  errors: number;
  firstError?: string;
}
