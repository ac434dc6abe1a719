import { defineConfig } from 'vitest/config';
import base, { CLUSTER_FILES } from './vitest.config.ts';

/** The cluster and fault-injection files (see vitest.config.ts), one file at a time. */
export default defineConfig({
  test: {
    ...base.test,
    include: CLUSTER_FILES,
    exclude: ['**/node_modules/**'],
    maxWorkers: 1,
    fileParallelism: false,
  },
});
