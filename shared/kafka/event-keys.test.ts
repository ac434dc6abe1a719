import { describe, expect, it } from 'vitest';
import { playerEventKey, tenantOfPlayerEventKey } from './event-keys.ts';

describe('player event keys', () => {
  const tenant = '0b7d6c1e-4f5a-4d3b-9c2e-1a2b3c4d5e6f';

  it("give back the tenant of the intake's key, whatever the session", () => {
    for (const session of ['ses_1', '', 'a:b:c', 'séance']) {
      expect(tenantOfPlayerEventKey(Buffer.from(playerEventKey(tenant, session)))).toBe(tenant);
    }
  });

  it('name no tenant for any other key', () => {
    for (const key of [
      null,
      undefined,
      Buffer.from(''),
      Buffer.from(tenant),
      Buffer.from(`${tenant.toUpperCase()}:ses_1`),
      Buffer.from(`${tenant.slice(0, 35)}x:ses_1`),
      Buffer.from(`${tenant}-ses_1`),
      Buffer.from(`poison-truncated-1a2b3c4d:${tenant}`),
      Buffer.from(`${'z'.repeat(36)}:ses_1`),
    ]) {
      expect(tenantOfPlayerEventKey(key)).toBeUndefined();
    }
  });
});
