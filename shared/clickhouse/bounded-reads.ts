import type { z } from 'zod';
import type { Config } from '../config.ts';
import { ApiError } from '../http/errors.ts';
import type { ClickHouseClient } from './clickhouse.ts';
import { parseRows } from './rows.ts';

/**
 * How far one read query of the API may go in ClickHouse. NOTE: ClickHouse
 * applies max_result_rows to the final result only, not to subqueries.
 */
export type ReadBounds = Pick<Config, 'READ_MAX_EXECUTION_MS' | 'READ_MAX_MEMORY_BYTES' | 'READ_MAX_RESULT_ROWS'>;

/** One read: its SQL (which may end in a SETTINGS clause of its own) and bound parameters. */
export interface ReadQuery {
  query: string;
  query_params: Record<string, unknown>;
}

/** Query parameters without the unset ones (the client refuses undefined). */
export function definedParams(params: Record<string, unknown>): Record<string, unknown> {
  return Object.fromEntries(Object.entries(params).filter(([, v]) => v !== undefined));
}

/**
 * The bounds as a SETTINGS clause's entries. They go into the SQL, not into
 * clickhouse_settings: the embedded engine's connection turns those into SET
 * statements, which would stay on its one session for every later query.
 */
export function boundSettings(b: ReadBounds): string {
  return [
    `max_execution_time = ${b.READ_MAX_EXECUTION_MS / 1000}`,
    "timeout_overflow_mode = 'throw'",
    `max_memory_usage = ${b.READ_MAX_MEMORY_BYTES}`,
    `max_result_rows = ${b.READ_MAX_RESULT_ROWS}`,
    "result_overflow_mode = 'throw'",
  ].join(', ');
}

/** `sql` with the bounds added to its trailing SETTINGS clause, or with one of its own. */
export function withBounds(sql: string, b: ReadBounds): string {
  const trimmed = sql.trimEnd();
  // A SETTINGS clause ends the statement and holds only `name = literal` entries.
  const hasSettings = /\bSETTINGS\s+\w+\s*=\s*[\w.']+(\s*,\s*\w+\s*=\s*[\w.']+)*$/i.test(trimmed);
  return hasSettings ? `${trimmed}, ${boundSettings(b)}` : `${trimmed}\nSETTINGS ${boundSettings(b)}`;
}

/** The engine's error types that report a bound, and the bound. */
const BOUND_OF_TYPE = new Map<unknown, 'time' | 'memory' | 'rows'>([
  ['TIMEOUT_EXCEEDED', 'time'],
  ['TOO_SLOW', 'time'],
  ['MEMORY_LIMIT_EXCEEDED', 'memory'],
  ['TOO_MANY_ROWS_OR_BYTES', 'rows'],
]);

/** Which bound an engine error reports, if it is one of them. */
export function exceededBound(err: unknown): 'time' | 'memory' | 'rows' | undefined {
  return BOUND_OF_TYPE.get((err as { type?: unknown } | undefined)?.type);
}

const NARROW = {
  time: 'the read took longer than this service allows for one query',
  memory: 'the read needed more memory than this service allows for one query',
  rows: 'the read answered more rows than this service allows for one query',
} as const;

/**
 * The API's reads, each with the deployment's bounds and cancelled with its
 * request: a read over a bound answers `read_limit_exceeded` (503) naming
 * the bound; a read whose client has gone is given up.
 *
 * NOTE: what giving up does depends on the engine. Against a server, the
 * client closes the query's HTTP request, and each read is sent read-only
 * with cancel_http_readonly_queries_on_client_close, so the server stops
 * it. The embedded engine cannot interrupt
 * a query once it runs: the promise settles at once and the engine finishes
 * the query in the background, bounded by max_execution_time; reads with
 * parameters run one at a time, and one whose client has gone before its
 * turn is never started (docs/security.md, Reads).
 */
export class BoundedReads {
  readonly #ch: ClickHouseClient;
  readonly #bounds: ReadBounds;
  readonly #server: boolean;

  /** `server`: `ch` talks to a ClickHouse server (CLICKHOUSE_URL), not to the embedded engine. */
  constructor(ch: ClickHouseClient, bounds: ReadBounds, opts: { server: boolean }) {
    this.#ch = ch;
    this.#bounds = bounds;
    this.#server = opts.server;
  }

  /** Most rows one read may answer (READ_MAX_RESULT_ROWS): a batched read splits to stay under it. */
  get maxResultRows(): number {
    return this.#bounds.READ_MAX_RESULT_ROWS;
  }

  /** The rows of `q`, each parsed with `schema`; `name` names the read in errors. */
  async rows<T extends z.ZodType>(name: string, schema: T, q: ReadQuery, signal?: AbortSignal): Promise<z.output<T>[]> {
    if (signal?.aborted) throw clientGone();
    try {
      const rs = await this.#ch.query({
        query: withBounds(q.query, this.#bounds),
        query_params: q.query_params,
        format: 'JSONEachRow',
        abort_signal: signal,
        // NOTE: server only. These go to a server as parameters of the one
        // request; the embedded connection would SET them on its session,
        // and a read-only session would refuse the projector's inserts.
        clickhouse_settings: this.#server ? { readonly: '2', cancel_http_readonly_queries_on_client_close: 1 } : undefined,
      });
      return parseRows(name, schema, await rs.json());
    } catch (err) {
      if (signal?.aborted) throw clientGone();
      const bound = exceededBound(err);
      if (bound) {
        throw new ApiError('read_limit_exceeded', `${NARROW[bound]}: narrow the request (fewer days, a later since, a smaller limit) or retry later`, {
          headers: { 'retry-after': '5' },
        });
      }
      throw err;
    }
  }
}

/** The answer to a request whose client has gone; nobody receives it. */
export function clientGone(): ApiError {
  return new ApiError('client_closed_request', 'the client closed the request before the answer');
}
