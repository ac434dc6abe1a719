import { z } from 'zod';

/**
 * zod schemas for rows read from ClickHouse (JSONEachRow). The server
 * writes 64-bit integers as strings (output_format_json_quote_64bit_integers)
 * and narrower ones as numbers; these accept exactly those two forms of an
 * integer, and anything else (a missing column, text, a float where an
 * integer belongs, a value past 2^53) fails the read instead of becoming NaN
 * or a rounded number.
 */

/** An integer column: a JSON number or a string of digits, within the safe range. */
export const chInt = z
  .union([z.number().int(), z.string().regex(/^-?\d+$/, 'an integer')])
  .transform(Number)
  .pipe(z.number().int().refine(Number.isSafeInteger, 'beyond 2^53'));

/** A Float64 column (numbers; ClickHouse may write inf/nan as strings, which are refused). */
export const chFloat = z.number();

/** A millisecond timestamp column (toUnixTimestamp64Milli), nullable. */
export const chNullableInt = chInt.nullable();

export const chUuid = z.uuid();

/** Parses every row of a result with `schema`; the error names the query and the first bad field. */
export function parseRows<T extends z.ZodType>(query: string, schema: T, rows: unknown[]): z.output<T>[] {
  const result = z.array(schema).safeParse(rows);
  if (result.success) return result.data;
  const issue = result.error.issues[0]!;
  throw new Error(`ClickHouse ${query}: row ${issue.path.join('.')}: ${issue.message}`);
}
