import { defineConfig } from 'vitest/config';
import base, { CLUSTER_FILES, FAULT_FILES } from './vitest.config.ts';

/** The three-node cluster and fault-injection files (see vitest.config.ts), one at a time: npm run test:faults. */
export default defineConfig({
  test: {
    ...base.test,
    include: [...CLUSTER_FILES, ...FAULT_FILES],
    exclude: ['**/node_modules/**'],
    maxWorkers: 1,
    fileParallelism: false,
  },
});
