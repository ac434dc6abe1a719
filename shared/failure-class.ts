/** The broker refused a record for its size; no retry of the same bytes can succeed. */
export class RecordTooLargeError extends Error {
  override name = 'RecordTooLargeError';
}

/**
 * Whether a failed effect (a ClickHouse insert, a Kafka produce) can succeed
 * if the same records are tried again. Permanent means: nothing an operator
 * or time can fix makes these bytes acceptable (a value the column refuses,
 * an insert spanning too many partitions, a record too large). Failures of
 * the sink itself (network, timeouts, memory, merges behind, authorization,
 * a table missing until a migration runs) are transient, and so is anything
 * not known here: a record is dead-lettered only for a reason it carries.
 */
export type FailureClass = { kind: 'transient' } | { kind: 'permanent'; detail: string };

/**
 * ClickHouse error codes (src/Common/ErrorCodes.cpp) a row's own content can
 * cause, with the detail a dead letter carries. NOTE: the engine's message is
 * not used as the detail: parse errors quote the row's text.
 */
const CLICKHOUSE_PERMANENT: ReadonlyMap<number, string> = new Map([
  [6, 'cannot parse text'],
  [25, 'cannot parse escape sequence'],
  [26, 'cannot parse quoted string'],
  [27, 'cannot parse input'],
  [38, 'cannot parse date'],
  [41, 'cannot parse date and time'],
  [53, 'type mismatch'],
  [69, 'argument out of bound'],
  [70, 'cannot convert type'],
  [72, 'cannot parse number'],
  [117, 'incorrect data'],
  [131, 'string too large'],
  [321, 'value out of range of the data type'],
  [349, 'null in a column that cannot hold it'],
  [376, 'cannot parse UUID'],
  [407, 'decimal overflow'],
  [469, 'violates a constraint of the table'],
]);

/** TOO_MANY_PARTS: transient (merges behind) except this one message, which only a different insert avoids. */
const TOO_MANY_PARTS = 252;
const TOO_MANY_PARTITIONS = /too many partitions for single insert block/i;

/** kafkajs protocol error types a produce's own records cause. */
const KAFKA_PERMANENT: ReadonlyMap<string, string> = new Map([
  ['MESSAGE_TOO_LARGE', 'record too large for the broker'],
  ['RECORD_LIST_TOO_LARGE', 'record batch too large for the broker'],
  ['INVALID_RECORD', 'record refused by the broker'],
  ['CORRUPT_MESSAGE', 'record corrupt'],
]);

/** Classifies `err` (a ClickHouse client, chdb or kafkajs error, possibly wrapped). */
export function classifyFailure(err: unknown): FailureClass {
  if (err instanceof RecordTooLargeError) return { kind: 'permanent', detail: 'record too large for the broker' };
  for (const e of chain(err)) {
    const code = clickHouseCode(e);
    if (code !== undefined) {
      if (code === TOO_MANY_PARTS) {
        return TOO_MANY_PARTITIONS.test(String(e.message ?? '')) ? { kind: 'permanent', detail: 'clickhouse 252: too many partitions for one insert' } : { kind: 'transient' };
      }
      const detail = CLICKHOUSE_PERMANENT.get(code);
      // The first code found decides: an outer wrapper's code is the engine's own.
      return detail === undefined ? { kind: 'transient' } : { kind: 'permanent', detail: `clickhouse ${code}: ${detail}` };
    }
    if (typeof e.type === 'string') {
      const detail = KAFKA_PERMANENT.get(e.type);
      if (detail !== undefined) return { kind: 'permanent', detail: `kafka ${e.type}: ${detail}` };
    }
  }
  return { kind: 'transient' };
}

interface ErrorLike {
  message?: unknown;
  code?: unknown;
  type?: unknown;
  clickhouseCode?: unknown;
  cause?: unknown;
  originalError?: unknown;
  errors?: unknown;
}

/** The kafkajs error types of `err` and the errors it wraps, outermost first. */
export function errorTypes(err: unknown): string[] {
  return chain(err).flatMap((e) => (typeof e.type === 'string' ? [e.type] : []));
}

/** `err` and the errors it wraps (cause, kafkajs' originalError and retry lists), outermost first. */
function chain(err: unknown): ErrorLike[] {
  const out: ErrorLike[] = [];
  const walk = (e: unknown, depth: number) => {
    if (!e || typeof e !== 'object' || depth > 4) return;
    const x = e as ErrorLike;
    out.push(x);
    walk(x.cause, depth + 1);
    walk(x.originalError, depth + 1);
    if (Array.isArray(x.errors)) for (const inner of x.errors) walk(inner, depth + 1);
  };
  walk(err, 0);
  return out;
}

/**
 * The ClickHouse code of an error: @clickhouse/client's ClickHouseError has
 * it as a decimal string `code` beside a `type` name, chdb's errors as a
 * number `clickhouseCode`. Node's own errors have string codes that are not
 * numbers (ECONNRESET), kafkajs' have number codes: both are left out.
 */
function clickHouseCode(e: ErrorLike): number | undefined {
  if (typeof e.clickhouseCode === 'number') return e.clickhouseCode;
  if (typeof e.code === 'string' && /^\d{1,4}$/.test(e.code) && typeof e.type === 'string') return Number(e.code);
  return undefined;
}
