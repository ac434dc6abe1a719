import { randomBytes } from 'node:crypto';
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { Config } from '../../shared/config.ts';
import { SecretBox } from '../../shared/secrets.ts';

/** The deployment's secrets: from the configuration, or generated once into DATA_DIR. */
export interface StackSecrets {
  /** Bearer token of /admin/v1 and of the dashboard's sign-in. */
  adminToken: string;
  /** HMAC key of pagination cursors. */
  cursorSecret: string;
  /** Seals destination secrets at rest. */
  secretBox: SecretBox;
}

/** Reads (or on first run creates) each secret the configuration leaves unset; `dataDir` must exist. */
export function stackSecrets(config: Pick<Config, 'ADMIN_TOKEN' | 'CURSOR_SECRET' | 'SECRETS_KEY'>, dataDir: string): StackSecrets {
  const adminToken = config.ADMIN_TOKEN ?? persistentSecret(join(dataDir, 'admin-token'), 'adm_');
  const cursorSecret = config.CURSOR_SECRET ?? persistentSecret(join(dataDir, 'cursor-secret'), '');
  const secretBox = SecretBox.fromString(config.SECRETS_KEY ?? persistentSecret(join(dataDir, 'secrets-key'), ''));
  return { adminToken, cursorSecret, secretBox };
}

/** Reads a secret kept in the data directory, creating it (mode 0600) on first run. */
function persistentSecret(path: string, prefix: string): string {
  if (existsSync(path)) {
    const stored = readFileSync(path, 'utf8').trim();
    // An empty file would make the empty string the secret (an admin token anyone can send).
    if (stored === '') throw new Error(`${path} is empty: write a secret into it, or delete it to have one generated`);
    return stored;
  }
  const secret = `${prefix}${randomBytes(32).toString('base64url')}`;
  writeFileSync(path, `${secret}\n`, { mode: 0o600, flag: 'wx' });
  return secret;
}
