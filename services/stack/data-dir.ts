import { chmodSync, existsSync, mkdirSync } from 'node:fs';
import { join } from 'node:path';

/** What the service keeps in DATA_DIR: generated secrets (files) and the engines' data (directories). */
const SECRET_FILES = ['admin-token', 'cursor-secret', 'secrets-key'];
const DATA_DIRS = ['clickhouse', 'kafka'];

/**
 * Creates DATA_DIR readable by its owner only (0700) and takes group and
 * other access away from what the service keeps there already: 0600 for
 * the secrets, 0700 for ClickHouse's and Kafka's directories. A directory
 * made with the default umask is fixed at the next start. Only these
 * entries are touched: DATA_DIR may be shared with files
 * of the operator's. Nobody else can enter a 0700 directory, whatever the
 * modes below it.
 */
export function privateDataDir(dataDir: string): void {
  mkdirSync(dataDir, { recursive: true, mode: 0o700 });
  chmodSync(dataDir, 0o700);
  for (const name of SECRET_FILES) if (existsSync(join(dataDir, name))) chmodSync(join(dataDir, name), 0o600);
  for (const name of DATA_DIRS) if (existsSync(join(dataDir, name))) chmodSync(join(dataDir, name), 0o700);
}
