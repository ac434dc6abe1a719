import { describe, expect, it } from 'vitest';
import { ApiError } from './errors.ts';
import { parseJsonBody } from './json-body.ts';

const refusal = (text: string): ApiError => {
  try {
    parseJsonBody(text);
  } catch (err) {
    if (err instanceof ApiError) return err;
    throw err;
  }
  throw new Error(`accepted ${text}`);
};

describe('parseJsonBody', () => {
  it('parses JSON documents, a leading BOM included, and keeps ordinary keys named like prototypes', () => {
    expect(parseJsonBody('{"events":[{"a":1}]}')).toEqual({ events: [{ a: 1 }] });
    expect(parseJsonBody('\uFEFF[1,2]')).toEqual([1, 2]);
    expect(parseJsonBody('{"constructor":1,"prototype":{"x":2},"proto":3}')).toEqual({ constructor: 1, prototype: { x: 2 }, proto: 3 });
    expect(parseJsonBody('null')).toBeNull();
  });

  it('refuses malformed and empty bodies as invalid_json', () => {
    for (const text of ['{', '{"a":1}x', "{'a':1}", '']) expect(refusal(text).code).toBe('invalid_json');
    expect(refusal('  ').message).toMatch(/empty/);
    expect(refusal('{').message).toMatch(/not valid JSON/);
  });

  it('refuses prototype keys at any depth, escaped or not, as bad_request', () => {
    for (const text of [
      '{"__proto__":{"polluted":true}}',
      '{"a":[{"b":{"__proto__":0}}]}',
      '{"\\u005f\\u005fproto__":1}',
      '{"a":{"constructor":{"prototype":{"polluted":true}}}}',
    ]) {
      const err = refusal(text);
      expect(err.code, text).toBe('bad_request');
      expect(err.status).toBe(400);
    }
    expect(({} as Record<string, unknown>).polluted).toBeUndefined();
  });
});
