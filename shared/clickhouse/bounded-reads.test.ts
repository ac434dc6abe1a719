import { describe, expect, it } from 'vitest';
import { boundSettings, exceededBound, withBounds } from './bounded-reads.ts';

const bounds = { READ_MAX_EXECUTION_MS: 2500, READ_MAX_MEMORY_BYTES: 64 * 1024 * 1024, READ_MAX_RESULT_ROWS: 5000 };

describe('read bounds', () => {
  it('writes every bound as a setting, the time in seconds', () => {
    expect(boundSettings(bounds)).toBe(
      "max_execution_time = 2.5, timeout_overflow_mode = 'throw', max_memory_usage = 67108864, max_result_rows = 5000, result_overflow_mode = 'throw'",
    );
  });

  it('adds a SETTINGS clause, or extends the one the query ends with', () => {
    expect(withBounds('SELECT 1\n  ', bounds)).toBe(`SELECT 1\nSETTINGS ${boundSettings(bounds)}`);
    expect(withBounds('SELECT x FROM t LIMIT {n:UInt32}\n        SETTINGS max_block_size = 1024', bounds)).toBe(
      `SELECT x FROM t LIMIT {n:UInt32}\n        SETTINGS max_block_size = 1024, ${boundSettings(bounds)}`,
    );
    // A SETTINGS word inside the query (a subquery's clause) is not the trailing clause.
    const inner = 'SELECT * FROM (SELECT 1 SETTINGS max_threads = 1) WHERE 1';
    expect(withBounds(inner, bounds)).toBe(`${inner}\nSETTINGS ${boundSettings(bounds)}`);
  });

  it('names the bound an engine error reports, and nothing else', () => {
    expect(exceededBound({ type: 'TIMEOUT_EXCEEDED', code: '159' })).toBe('time');
    expect(exceededBound({ type: 'TOO_SLOW', code: '160' })).toBe('time');
    expect(exceededBound({ type: 'MEMORY_LIMIT_EXCEEDED', code: '241' })).toBe('memory');
    expect(exceededBound({ type: 'TOO_MANY_ROWS_OR_BYTES', code: '396' })).toBe('rows');
    expect(exceededBound({ type: 'UNKNOWN_TABLE', code: '60' })).toBeUndefined();
    expect(exceededBound(new Error('socket hang up'))).toBeUndefined();
    expect(exceededBound(undefined)).toBeUndefined();
  });
});
