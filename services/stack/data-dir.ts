import { chmodSync, mkdirSync, readdirSync } from 'node:fs';
import { join } from 'node:path';

/**
 * Creates DATA_DIR readable by its owner only (0700) and takes group and
 * other access away from what it holds already: 0600 for its files (the
 * admin token, the keys), 0700 for its directories (ClickHouse, Kafka).
 * A directory made by an earlier version with the default umask is fixed
 * at the next start. Only the top level is walked: nobody else can enter
 * a 0700 directory, whatever the modes below it.
 */
export function privateDataDir(dataDir: string): void {
  mkdirSync(dataDir, { recursive: true, mode: 0o700 });
  chmodSync(dataDir, 0o700);
  for (const entry of readdirSync(dataDir, { withFileTypes: true })) {
    if (entry.isDirectory()) chmodSync(join(dataDir, entry.name), 0o700);
    else if (entry.isFile()) chmodSync(join(dataDir, entry.name), 0o600);
  }
}
