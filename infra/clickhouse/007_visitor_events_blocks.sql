-- A visitor's score reads one granule (1,024 rows) of visitor_events per part
-- (services/api/events.repository.ts, visitorFactorsQuery). With the default
-- min_compress_block_size (64 KiB) a compressed block of a numeric column
-- holds 8 granules, and the read decompresses all of them for the one it
-- needs. A block per granule makes it decompress only that one: the score's
-- SQL at 10M stored events took 8.1 against 9.7 ms at p50 and 12.3 against
-- 15.6 ms at p99, for 4 % more bytes on disk (docs/performance.md).
-- NOTE: a table setting: parts written before it keep their blocks until a
-- merge rewrites them; nothing else about the table changes.
ALTER TABLE visitor_events MODIFY SETTING min_compress_block_size = 1;
