import { parseError } from '@clickhouse/client';
import { KafkaJSConnectionError, KafkaJSNumberOfRetriesExceeded, KafkaJSProtocolError, KafkaJSRequestTimeoutError } from 'kafkajs';
import { describe, expect, it } from 'vitest';
import { classifyFailure, RecordTooLargeError } from './failure-class.ts';

/** A ClickHouseError as the client parses it from the engine's own text. */
const clickhouse = (code: number, type: string, message: string) => parseError(`Code: ${code}. DB::Exception: ${message}. (${type}) (version 25.8.1.1)`);

/** chdb's error shape: a number `clickhouseCode`, the engine's error as `cause` of the client's. */
class ChdbQueryError extends Error {
  readonly clickhouseCode: number;
  constructor(message: string, clickhouseCode: number) {
    super(message);
    this.clickhouseCode = clickhouseCode;
  }
}

const kafkaProtocol = (type: string, code: number, retriable: boolean) => new KafkaJSProtocolError({ type, code, retriable, message: type } as never);

describe('classifyFailure', () => {
  it.each([
    ['too many partitions for one insert', clickhouse(252, 'TOO_MANY_PARTS', 'Too many partitions for single INSERT block (more than 100)'), 'clickhouse 252'],
    ['a parse error', clickhouse(27, 'CANNOT_PARSE_INPUT_ASSERTION_FAILED', "Cannot parse input: expected '\"' before: 'secret-value'"), 'clickhouse 27'],
    ['a number that does not parse', clickhouse(72, 'CANNOT_PARSE_NUMBER', "Unsigned type must not contain '-' symbol"), 'clickhouse 72'],
    ['a value out of range', clickhouse(321, 'VALUE_IS_OUT_OF_RANGE_OF_DATA_TYPE', 'Value is out of range'), 'clickhouse 321'],
    ['a type mismatch', clickhouse(53, 'TYPE_MISMATCH', 'Type mismatch'), 'clickhouse 53'],
    ['a violated constraint', clickhouse(469, 'VIOLATED_CONSTRAINT', 'Constraint `c` for table events is violated'), 'clickhouse 469'],
    ['a bad UUID', clickhouse(376, 'CANNOT_PARSE_UUID', 'Cannot parse uuid'), 'clickhouse 376'],
    ["chdb's error under the client's", Object.assign(new Error('wrapped'), { cause: new ChdbQueryError('Too many partitions for single INSERT block', 252) }), 'clickhouse 252'],
    ['a record too large (the sender)', new RecordTooLargeError('record batch of 2000000 bytes refused'), 'record too large'],
    ['a record too large (the broker)', kafkaProtocol('MESSAGE_TOO_LARGE', 10, false), 'kafka MESSAGE_TOO_LARGE'],
    ['a batch too large, after retries', new KafkaJSNumberOfRetriesExceeded(kafkaProtocol('RECORD_LIST_TOO_LARGE', 18, false), { retryCount: 5, retryTime: 100 }), 'kafka RECORD_LIST_TOO_LARGE'],
    ['a corrupt record', kafkaProtocol('CORRUPT_MESSAGE', 2, true), 'kafka CORRUPT_MESSAGE'],
  ])('%s is permanent', (_, err, detail) => {
    const c = classifyFailure(err);
    expect(c.kind).toBe('permanent');
    expect(c.kind === 'permanent' && c.detail).toMatch(new RegExp(`^${detail}`));
  });

  it.each([
    ['too many parts (merges behind)', clickhouse(252, 'TOO_MANY_PARTS', 'Too many parts (3001 with average size of 1.00 KiB) in table. Merges are processing significantly slower than inserts')],
    ['memory', clickhouse(241, 'MEMORY_LIMIT_EXCEEDED', 'Memory limit (total) exceeded')],
    ['a timeout', clickhouse(159, 'TIMEOUT_EXCEEDED', 'Timeout exceeded')],
    ['too many queries', clickhouse(202, 'TOO_MANY_SIMULTANEOUS_QUERIES', 'Too many simultaneous queries')],
    ['a table not yet created', clickhouse(60, 'UNKNOWN_TABLE', 'Table default.events does not exist')],
    ['an unknown engine code', clickhouse(9999, 'SOMETHING_NEW', 'Something new')],
    ["chdb's memory error", Object.assign(new Error('wrapped'), { cause: new ChdbQueryError('Memory limit exceeded', 241) })],
    ['a refused connection (server mode)', Object.assign(new Error('connect ECONNREFUSED 127.0.0.1:8123'), { code: 'ECONNREFUSED' })],
    ['a Kafka connection error', new KafkaJSConnectionError('Connection error')],
    ['a Kafka request timeout', new KafkaJSRequestTimeoutError('Request Produce(key: 0, version: 7) timed out')],
    ['no leader', kafkaProtocol('NOT_LEADER_FOR_PARTITION', 6, true)],
    ['not enough replicas', new KafkaJSNumberOfRetriesExceeded(kafkaProtocol('NOT_ENOUGH_REPLICAS', 19, true), { retryCount: 5, retryTime: 100 })],
    // An operator fixes authorization; the records are not at fault.
    ['authorization', kafkaProtocol('TOPIC_AUTHORIZATION_FAILED', 29, false)],
    ['a plain error', new Error('boom')],
    ['a thrown string', 'boom'],
    ['nothing', undefined],
  ])('%s is transient', (_, err) => {
    expect(classifyFailure(err)).toEqual({ kind: 'transient' });
  });

  it("never carries the engine's message, which can quote the row", () => {
    const c = classifyFailure(clickhouse(27, 'CANNOT_PARSE_INPUT_ASSERTION_FAILED', "Cannot parse input: expected '\"' before: 'secret-value'"));
    expect(JSON.stringify(c)).not.toContain('secret-value');
  });
});
