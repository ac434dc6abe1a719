import { describe, expect, it } from 'vitest';
import type { TenantRecord } from '../../schemas/records.ts';
import { playerAccess } from './player-access.ts';

const tenant: TenantRecord = {
  id: '0f8fad5b-d9cb-469f-a165-70867728950e',
  name: 'Acme',
  player_key: 'pk_new',
  created_at: 1,
  allowed_origins: [],
  previous_player_key: 'pk_old',
  previous_player_key_expires_at: 1000,
  suspended_at: null,
  high_intent_threshold: 70,
};

describe('playerAccess', () => {
  it('accepts the current key, and the previous one only before its overlap ends', () => {
    expect(playerAccess(tenant, 'pk_new', undefined, 5000)).toEqual({ ok: true, tenant });
    expect(playerAccess(tenant, 'pk_old', undefined, 999)).toEqual({ ok: true, tenant });
    expect(playerAccess(tenant, 'pk_old', undefined, 1000)).toEqual({ ok: false, refusal: 'retired_player_key' });
    expect(playerAccess(undefined, 'pk_x', undefined, 0)).toEqual({ ok: false, refusal: 'unknown_player_key' });
  });

  it('refuses every key of a suspended tenant, and a retired key as retired first', () => {
    const suspended = { ...tenant, suspended_at: 10 };
    expect(playerAccess(suspended, 'pk_new', undefined, 20)).toEqual({ ok: false, refusal: 'suspended' });
    expect(playerAccess(suspended, 'pk_old', undefined, 2000)).toEqual({ ok: false, refusal: 'retired_player_key' });
  });

  it('refuses a browser origin that is not on a non-empty allow-list', () => {
    const listed = { ...tenant, allowed_origins: ['https://shop.example.com'] };
    expect(playerAccess(listed, 'pk_new', 'https://evil.example', 0)).toEqual({ ok: false, refusal: 'origin' });
    expect(playerAccess(listed, 'pk_new', 'https://shop.example.com', 0).ok).toBe(true);
    expect(playerAccess(listed, 'pk_new', undefined, 0).ok).toBe(true);
  });
});
