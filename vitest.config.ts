import { defineConfig } from 'vitest/config';

/**
 * Files that run a three-node Kafka cluster and, for fault injection, the
 * services as separate processes besides (about 3 minutes together). They are
 * the `faults` project: it runs after the rest of the suite (groupOrder 1), one
 * file at a time, so their JVMs and kill -9s never share the two cores with
 * another file's brokers. `npm run test:faults` runs them alone.
 */
const FAULT_FILES = ['infra/kafka/cluster.test.ts', 'test/fault-injection.test.ts', 'test/derived-exactly-once.test.ts'];

const EXCLUDE = ['**/node_modules/**', '.data/**', '.cache/**', 'test-output/**'];

// NOTE: the forks pool is required: libchdb binds one data directory per
// process, so every test file runs in its own process with its own database.
export default defineConfig({
  test: {
    pool: 'forks',
    globalSetup: ['test/global-setup.ts'],
    testTimeout: 180_000,
    // Whole-stack and browser checks poll real processes: on a loaded 2-core
    // machine a second (the default) is not always enough.
    expect: { poll: { timeout: 10_000, interval: 50 } },
    hookTimeout: 240_000,
    teardownTimeout: 60_000,
    reporters: ['default'],
    projects: [
      {
        extends: true,
        test: { name: 'suite', include: ['**/*.test.ts'], exclude: [...EXCLUDE, ...FAULT_FILES], maxWorkers: 2, sequence: { groupOrder: 0 } },
      },
      {
        extends: true,
        test: { name: 'faults', include: FAULT_FILES, exclude: EXCLUDE, maxWorkers: 1, fileParallelism: false, sequence: { groupOrder: 1 } },
      },
    ],
  },
});
