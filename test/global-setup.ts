import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { TestProject } from 'vitest/node';
import { provideTestInfrastructure } from '../infra/test/test-infrastructure.ts';

declare module 'vitest' {
  export interface ProvidedContext {
    kafkaBrokers: string[];
    clickhouseUrl: string | undefined;
    infraKind: string;
  }
}

/**
 * One Kafka for the whole run (a local broker from Maven Central jars, or a
 * testcontainers broker, ready before any test file starts, where a container
 * runtime works); every test file isolates itself with its own topic prefix
 * and its own embedded ClickHouse, or its own database on a ClickHouse server
 * container (`TEST_CLICKHOUSE_IMAGE`, `embedded` for none). The first line
 * the run prints says which it got (see infra/test/test-infrastructure.ts).
 */
export default async function setup(project: TestProject) {
  const dataDir = mkdtempSync(join(tmpdir(), 'va-test-kafka-'));
  const infra = await provideTestInfrastructure({ dataDir, log: (m) => console.log(m) });
  project.provide('kafkaBrokers', infra.kafkaBrokers);
  project.provide('clickhouseUrl', infra.clickhouseUrl);
  project.provide('infraKind', infra.kind);
  return async () => {
    await infra.stop();
    rmSync(dataDir, { recursive: true, force: true });
  };
}
