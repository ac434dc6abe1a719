import { defineConfig } from 'vitest/config';
import base, { CLUSTER_FILES, FAULT_FILES } from './vitest.config.ts';

/**
 * The three-node cluster files (see vitest.config.ts), one file at a time;
 * with FAULTS=1 the fault-injection run instead (npm run test:faults).
 */
export default defineConfig({
  test: {
    ...base.test,
    include: process.env.FAULTS === '1' ? FAULT_FILES : CLUSTER_FILES,
    exclude: ['**/node_modules/**'],
    maxWorkers: 1,
    fileParallelism: false,
  },
});
