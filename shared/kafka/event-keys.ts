/**
 * The key of a player event's record: its tenant and session, so that a
 * session's events stay in order on one partition. Written by the intake.
 */
export const playerEventKey = (tenantId: string, sessionId: string): string => `${tenantId}:${sessionId}`;

const UUID_LOWER = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;
const COLON = 0x3a;

/**
 * The tenant a player event's key names (a lowercase UUID before the first
 * colon, as `playerEventKey` writes it), or undefined for any other key.
 * NOTE: the key is the intake's; a reader that acts on it without decoding
 * the value trusts that the value names the same tenant.
 */
export function tenantOfPlayerEventKey(key: Buffer | null | undefined): string | undefined {
  if (!key || key.length < 37 || key[36] !== COLON) return undefined;
  const tenant = key.toString('latin1', 0, 36);
  return UUID_LOWER.test(tenant) ? tenant : undefined;
}
