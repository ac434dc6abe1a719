import { resolve } from 'node:path';
import { defineConfig } from 'vitest/config';

// `npm run test:image`: the container image test alone. Its file is named
// *.spec.ts so that `npm test` (vitest.config.ts, *.test.ts) never builds an
// image; it needs podman and a Docker API for the Kafka container.
export default defineConfig({
  root: resolve(import.meta.dirname, '../..'),
  test: {
    pool: 'forks',
    include: ['infra/container/*.spec.ts'],
    // A first build on a fresh machine installs node, npm and every
    // production dependency inside the build: minutes on two cores.
    testTimeout: 120_000,
    hookTimeout: 1_200_000,
    reporters: ['default'],
  },
});
