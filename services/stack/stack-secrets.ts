import { randomBytes } from 'node:crypto';
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { Config, ServiceName } from '../../shared/config.ts';
import { SecretBox } from '../../shared/secrets.ts';

/** The deployment's secrets: from the configuration, or generated once into DATA_DIR; each only where a service reads it. */
export interface StackSecrets {
  /** Bearer token of /admin/v1 and of the dashboard's sign-in (admin). */
  adminToken?: string;
  /** HMAC key of pagination cursors (api, admin's delivery log). */
  cursorSecret?: string;
  /** Seals destination secrets at rest (admin seals, fanout opens). */
  secretBox?: SecretBox;
}

/**
 * Which service reads which secret. compose.yaml hands each process only
 * these (test/hostile-reads.test.ts holds the file to this table).
 */
export const SECRET_READERS = {
  ADMIN_TOKEN: ['admin'],
  CURSOR_SECRET: ['api', 'admin'],
  SECRETS_KEY: ['admin', 'fanout'],
} as const satisfies Record<string, readonly ServiceName[]>;

const reads = (services: readonly ServiceName[], secret: keyof typeof SECRET_READERS) =>
  services.some((s) => (SECRET_READERS[secret] as readonly ServiceName[]).includes(s));

/**
 * Reads (or on first run creates) each secret the services of this process
 * read and the configuration leaves unset; `dataDir` must exist. A process
 * without the admin service neither holds nor generates an admin token.
 */
export function stackSecrets(
  config: Pick<Config, 'ADMIN_TOKEN' | 'CURSOR_SECRET' | 'SECRETS_KEY' | 'SERVICES'>,
  dataDir: string,
): StackSecrets {
  const services = config.SERVICES;
  const secrets: StackSecrets = {};
  if (reads(services, 'ADMIN_TOKEN')) secrets.adminToken = config.ADMIN_TOKEN ?? persistentSecret(join(dataDir, 'admin-token'), 'adm_');
  if (reads(services, 'CURSOR_SECRET')) secrets.cursorSecret = config.CURSOR_SECRET ?? persistentSecret(join(dataDir, 'cursor-secret'), '');
  if (reads(services, 'SECRETS_KEY')) secrets.secretBox = SecretBox.fromString(config.SECRETS_KEY ?? persistentSecret(join(dataDir, 'secrets-key'), ''));
  return secrets;
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
