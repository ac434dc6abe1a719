import { createCipheriv, createDecipheriv, createSecretKey, randomBytes, type KeyObject } from 'node:crypto';

/**
 * AES-256-GCM for secrets at rest (webhook destination secrets). The
 * ciphertext is bound to the record it belongs to through the additional
 * authenticated data, so it cannot be copied onto another destination.
 * Format: `v1.<iv>.<tag>.<ciphertext>`, each base64url.
 */
export class SecretBox {
  /**
   * A KeyObject, not the Buffer: given a Buffer, every cipher Node 24 makes
   * builds a costly key object of its own first, and the fan-out opens a
   * destination's secret at every attempt.
   */
  readonly #key: KeyObject;

  constructor(key: Buffer) {
    if (key.length !== 32) throw new Error('SECRETS_KEY must be 32 bytes');
    this.#key = createSecretKey(key);
  }

  /** Accepts 64 hex characters or base64/base64url of 32 bytes. */
  static fromString(value: string): SecretBox {
    const key = /^[0-9a-fA-F]{64}$/.test(value) ? Buffer.from(value, 'hex') : Buffer.from(value, 'base64url');
    return new SecretBox(key);
  }

  seal(plaintext: string, aad: string): string {
    const iv = randomBytes(12);
    const cipher = createCipheriv('aes-256-gcm', this.#key, iv);
    cipher.setAAD(Buffer.from(aad));
    const ct = Buffer.concat([cipher.update(plaintext, 'utf8'), cipher.final()]);
    return ['v1', iv, cipher.getAuthTag(), ct].map((p) => (typeof p === 'string' ? p : p.toString('base64url'))).join('.');
  }

  open(sealed: string, aad: string): string {
    const [version, iv, tag, ct] = sealed.split('.');
    if (version !== 'v1' || iv === undefined || tag === undefined || ct === undefined) throw new Error('not a sealed secret');
    const decipher = createDecipheriv('aes-256-gcm', this.#key, Buffer.from(iv, 'base64url'));
    decipher.setAAD(Buffer.from(aad));
    decipher.setAuthTag(Buffer.from(tag, 'base64url'));
    return Buffer.concat([decipher.update(Buffer.from(ct, 'base64url')), decipher.final()]).toString('utf8');
  }
}

/** The label generated secrets start with; it carries none of the secret. */
const SECRET_LABEL = 'whsec_';

/**
 * What the dashboard may show of a secret: its `whsec_` label when it has
 * one, and at most an eighth of the rest, from its end (4 characters at
 * most). A secret a user typed (an integration's webhook_secret) has no
 * label, and its first characters are as secret as the others: none of
 * them is shown.
 */
export function secretHint(secret: string): string {
  const label = secret.startsWith(SECRET_LABEL) ? SECRET_LABEL : '';
  const rest = secret.slice(label.length);
  const shown = Math.min(4, Math.floor(rest.length / 8));
  return `${label}…${shown > 0 ? rest.slice(-shown) : ''}`;
}

/**
 * A stored hint as it may be shown. Hints stored by an earlier rule began
 * with the first characters of a typed secret (`abc…wxyz`, `ab…`); they are
 * cut to what secretHint would show of the shortest secret that rule gave
 * such a hint (the last 1 of 13 characters), since the length is unknown.
 */
export function shownHint(hint: string | null): string | null {
  if (hint === null || hint.startsWith('…') || hint.startsWith(`${SECRET_LABEL}…`)) return hint;
  const tail = hint.slice(hint.indexOf('…') + 1);
  return `…${tail.length >= 4 ? tail.slice(-1) : ''}`;
}
