import { defineConfig } from 'vitest/config';

/**
 * Files that run a three-node Kafka cluster (and, for fault injection, the
 * services as separate processes besides): on two cores they run after the
 * rest of the suite, one at a time (vitest.faults.config.ts), so their JVMs
 * never share the machine with another file's broker restarts.
 */
export const CLUSTER_FILES: string[] = [];

/**
 * The three-node cluster test and the fault-injection run (about 8 minutes):
 * `npm run test:faults`. Not part of `npm test` yet: across a broker kill
 * kafkajs can lose records (tulios/kafkajs#1303, see infra/kafka/README.md)
 * and a freshly created topic's metadata can lag on one node, so both fail
 * now and then; a suite that fails on a known open defect would hide every
 * other result.
 */
export const FAULT_FILES = ['infra/kafka/cluster.test.ts', 'test/fault-injection.test.ts'];

// NOTE: the forks pool is required: libchdb binds one data directory per
// process, so every test file runs in its own process with its own database.
export default defineConfig({
  test: {
    pool: 'forks',
    maxWorkers: 2,
    include: ['**/*.test.ts'],
    exclude: ['**/node_modules/**', '.data/**', '.cache/**', 'test-output/**', ...CLUSTER_FILES, ...FAULT_FILES],
    globalSetup: ['test/global-setup.ts'],
    testTimeout: 180_000,
    // Whole-stack and browser checks poll real processes: on a loaded 2-core
    // machine a second (the default) is not always enough.
    expect: { poll: { timeout: 10_000, interval: 50 } },
    hookTimeout: 240_000,
    teardownTimeout: 60_000,
    reporters: ['default'],
  },
});
