import { createRequire } from 'node:module';
import { describe, expect, it } from 'vitest';

/** patches/ 009: kafkajs's read_committed filter, the one kafkajs uses, against fetches with several aborted transactions. */
const filterAbortedMessages = createRequire(import.meta.url)('kafkajs/src/consumer/filterAbortedMessages.js') as (p: {
  messages: Msg[];
  abortedTransactions: { firstOffset: string; producerId: string }[];
}) => Msg[];

interface Msg {
  offset: string;
  key: Buffer | null;
  value: string;
  batchContext: { producerId: string; inTransaction: boolean };
}
const record = (offset: number, producerId: string): Msg => ({ offset: String(offset), key: Buffer.from('k'), value: `${producerId}@${offset}`, batchContext: { producerId, inTransaction: true } });
const abortMarker = (offset: number, producerId: string): Msg => ({ offset: String(offset), key: Buffer.from([0, 0, 0, 0]), value: 'abort', batchContext: { producerId, inTransaction: true } });
const kept = (messages: Msg[], aborted: [number, string][]) =>
  filterAbortedMessages({ messages, abortedTransactions: aborted.map(([o, p]) => ({ firstOffset: String(o), producerId: p })) })
    .filter((m) => m.value !== 'abort')
    .map((m) => m.value);

describe('kafkajs read_committed filter (patch 009)', () => {
  it('drops the records of every aborted transaction that started before the fetch, not only the first', () => {
    // Producers 1 and 2 each began a transaction (offsets 100 and 101) that was aborted; the fetch starts at 105.
    const messages = [record(105, '2'), record(106, '1'), abortMarker(107, '1'), abortMarker(108, '2'), record(109, '3')];
    expect(kept(messages, [[100, '1'], [101, '2']])).toEqual(['3@109']);
  });

  it('takes the aborted transactions in order of first offset, whatever order the broker lists them in', () => {
    const messages = [record(10, '1'), record(11, '2'), abortMarker(12, '1'), record(13, '1'), abortMarker(14, '2')];
    // Producer 1's second transaction (13) committed: kept.
    expect(kept(messages, [[11, '2'], [10, '1']])).toEqual(['1@13']);
  });
});
