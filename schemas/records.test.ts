import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import avro from 'avsc';
import { describe, expect, it } from 'vitest';
import {
  ApiKeyRecord,
  ApiKeyUsageRecord,
  DeliveryRecord,
  DestinationRecord,
  PlayerEventRecord,
  SecurityEventRecord,
  TenantRecord,
  VideoRecord,
  WebhookAttemptRecord,
} from './records.ts';
import { DEFAULT_HIGH_INTENT_THRESHOLD, DEFAULT_OFFER_WINDOW_SEC } from './intent-settings.ts';
import { PLAYER_EVENT } from '../test/helpers/player-event.ts';
import { SchemaDecodeError, SchemaRegistry, type Subject } from './registry.ts';

const registry = SchemaRegistry.fromManifest();
const avsc = (file: string) => avro.Type.forSchema(JSON.parse(readFileSync(join(import.meta.dirname, 'avro', file), 'utf8')));

const playerEvent: PlayerEventRecord = PLAYER_EVENT;

const fixtures: [Subject, { parse(v: unknown): unknown }, object][] = [
  ['player-event', PlayerEventRecord, playerEvent],
  [
    'tenant',
    TenantRecord,
    {
      id: playerEvent.tenant_id,
      name: 'Acme',
      player_key: 'pk_abc123',
      created_at: 1,
      allowed_origins: ['https://shop.example.com'],
      previous_player_key: 'pk_old1',
      previous_player_key_expires_at: 9,
      suspended_at: 8,
      high_intent_threshold: 85,
    },
  ],
  [
    'api-key',
    ApiKeyRecord,
    { id: playerEvent.event_id, tenant_id: playerEvent.tenant_id, name: 'ci', prefix: 'sk_abcdef', key_hash: 'a'.repeat(64), created_at: 1, revoked_at: null },
  ],
  ['api-key-usage', ApiKeyUsageRecord, { key_id: playerEvent.event_id, tenant_id: playerEvent.tenant_id, last_used_at: 5 }],
  [
    'video',
    VideoRecord,
    { id: playerEvent.video_id, tenant_id: playerEvent.tenant_id, title: 'Demo', duration_sec: 120, created_at: 2, pitch_at_sec: 95, offer_window_sec: 45 },
  ],
  [
    'destination',
    DestinationRecord,
    {
      id: playerEvent.event_id,
      tenant_id: playerEvent.tenant_id,
      kind: 'integration',
      name: 'crm',
      url: 'https://hooks.example.com/in',
      events: ['video_play', 'conversion'],
      secret_enc: 'v1.a.b.c',
      secret_hint: 'whs…abcd',
      created_at: 3,
      updated_at: 4,
    },
  ],
  [
    'delivery',
    DeliveryRecord,
    {
      delivery_id: playerEvent.event_id,
      tenant_id: playerEvent.tenant_id,
      destination_id: playerEvent.video_id,
      event_id: playerEvent.event_id,
      event_name: 'video_play',
      body: '{"a":1}',
      attempt: 2,
      due_at: 5,
      created_at: 1,
      origin: 'reprocess',
    },
  ],
  [
    'webhook-attempt',
    WebhookAttemptRecord,
    {
      delivery_id: playerEvent.event_id,
      tenant_id: playerEvent.tenant_id,
      destination_id: playerEvent.video_id,
      event_id: playerEvent.event_id,
      event_name: 'video_play',
      attempt: 1,
      state: 'retrying',
      started_at: 10,
      duration_ms: 12,
      status_code: 503,
      error_class: 'http_status',
      next_attempt_at: 60_010,
      delivery_created_at: 9,
      recorded_at: 23,
      body: '{"a":1}',
    },
  ],
  [
    'security-event',
    SecurityEventRecord,
    {
      id: playerEvent.event_id,
      kind: 'webhook_missing_secret',
      tenant_id: playerEvent.tenant_id,
      endpoint_id: playerEvent.video_id,
      host: 'hooks.example.com',
      event_id: playerEvent.event_id,
      event_name: 'video_play',
      occurred_at: 7,
    },
  ],
];

describe('schemas', () => {
  it.each(fixtures)('%s: the Avro and zod schemas accept the same fixture and round-trip it', (subject, zod, value) => {
    expect(zod.parse(value)).toEqual(value);
    const bytes = registry.encode(subject, value);
    expect(bytes[0]).toBe(0);
    expect(bytes.readUInt32BE(1)).toBe(registry.writerId(subject));
    expect(registry.decode(subject, bytes)).toEqual(value);
  });

  it('both refuse the same broken fixture', () => {
    const broken = { ...playerEvent, watched_percentage: 'ten' };
    expect(PlayerEventRecord.safeParse(broken).success).toBe(false);
    expect(() => registry.encode('player-event', broken)).toThrow();
  });

  it('reads a record written by the old v1 writer with the newest reader', () => {
    const v1 = avsc('player-event.v1.avsc');
    const { source: _s, conversion_value: _v, conversion_currency: _c, event_id_from_client: _f, ...oldShape } = playerEvent;
    const body = v1.toBuffer(oldShape);
    const wire = Buffer.concat([Buffer.from([0, 0, 0, 0, 1]), body]); // magic 0, schema id 1 (v1)
    const read = registry.decode<PlayerEventRecord>('player-event', wire);
    expect(read).toEqual({ ...oldShape, source: 'player', conversion_value: null, conversion_currency: null, event_id_from_client: false });
    expect(PlayerEventRecord.parse(read)).toEqual(read);
  });

  it('reads a record written by the v2 writer with the v3 reader: the event id counts as the server\'s', () => {
    const v2 = avsc('player-event.v2.avsc');
    const { event_id_from_client: _f, ...v2Shape } = { ...playerEvent, source: 'server' as const, conversion_value: 9.5, conversion_currency: 'EUR' };
    const wire = Buffer.concat([Buffer.from([0, 0, 0, 0, 2]), v2.toBuffer(v2Shape)]); // magic 0, schema id 2 (v2)
    const read = registry.decode<PlayerEventRecord>('player-event', wire);
    expect(read).toEqual({ ...v2Shape, event_id_from_client: false, lead: null });
    expect(PlayerEventRecord.parse(read)).toEqual(read);
  });

  it('writes player events with v4 (id 4): a record without the flag says the server chose the id, one without a lead has none', () => {
    expect(registry.writerId('player-event')).toBe(4);
    const { event_id_from_client: _f, lead: _l, ...unflagged } = playerEvent;
    expect(registry.decode('player-event', registry.encode('player-event', unflagged))).toEqual({ ...unflagged, event_id_from_client: false, lead: null });
    const v3 = avsc('player-event.v3.avsc');
    const fromV3 = registry.decode<PlayerEventRecord>('player-event', Buffer.concat([Buffer.from([0, 0, 0, 0, 3]), v3.toBuffer(unflagged)]));
    expect(fromV3).toEqual({ ...unflagged, event_id_from_client: false, lead: null });
    const lead = { score: 82, score_version: 1, watched_percent: 0.9, focus_time_ratio: 0.75, cta_clicks: 1, rewinds: 2 };
    const derived = { ...playerEvent, event_name: 'high_intent_lead', source: 'derived' as const, lead };
    expect(registry.decode<PlayerEventRecord>('player-event', registry.encode('player-event', derived))).toEqual(derived);
    const broken = { ...playerEvent, event_id_from_client: 'yes' };
    expect(PlayerEventRecord.safeParse(broken).success).toBe(false);
    expect(() => registry.encode('player-event', broken)).toThrow();
  });

  it('reads a tenant written by the v1 writer as one with no allowed origins, no previous key and not suspended', () => {
    const v1 = avsc('tenant.v1.avsc');
    const oldShape = { id: playerEvent.tenant_id, name: 'Acme', player_key: 'pk_abc123', created_at: 1 };
    const wire = Buffer.concat([Buffer.from([0, 0, 0, 0, 10]), v1.toBuffer(oldShape)]); // magic 0, schema id 10 (v1)
    const read = registry.decode<TenantRecord>('tenant', wire);
    expect(read).toEqual({
      ...oldShape,
      allowed_origins: [],
      previous_player_key: null,
      previous_player_key_expires_at: null,
      suspended_at: null,
      high_intent_threshold: DEFAULT_HIGH_INTENT_THRESHOLD,
    });
    expect(TenantRecord.parse(read)).toEqual(read);
  });

  it('reads a tenant written by the v2 writer with the default high-intent threshold, and writes tenants with v3 (id 12)', () => {
    const v2 = avsc('tenant.v2.avsc');
    const { high_intent_threshold: _t, ...v2Shape } = fixtures[1]![2] as TenantRecord;
    const wire = Buffer.concat([Buffer.from([0, 0, 0, 0, 11]), v2.toBuffer(v2Shape)]); // magic 0, schema id 11 (v2)
    const read = registry.decode<TenantRecord>('tenant', wire);
    expect(read).toEqual({ ...v2Shape, high_intent_threshold: 70 });
    expect(TenantRecord.parse(read)).toEqual(read);
    expect(registry.writerId('tenant')).toBe(12);
    for (const bad of [-1, 101, 70.5]) expect(TenantRecord.safeParse({ ...read, high_intent_threshold: bad }).success, String(bad)).toBe(false);
  });

  it('reads a video written by the v1 writer as one without a pitch and with a 60 s offer window, and writes videos with v2 (id 31)', () => {
    const v1 = avsc('video.v1.avsc');
    const oldShape = { id: playerEvent.video_id, tenant_id: playerEvent.tenant_id, title: 'Demo', duration_sec: 120, created_at: 2 };
    const wire = Buffer.concat([Buffer.from([0, 0, 0, 0, 30]), v1.toBuffer(oldShape)]); // magic 0, schema id 30 (v1)
    const read = registry.decode<VideoRecord>('video', wire);
    expect(read).toEqual({ ...oldShape, pitch_at_sec: null, offer_window_sec: DEFAULT_OFFER_WINDOW_SEC });
    expect(DEFAULT_OFFER_WINDOW_SEC).toBe(60);
    expect(VideoRecord.parse(read)).toEqual(read);
    expect(registry.writerId('video')).toBe(31);
    // A pitch at 0 s is a pitch (not "none"), and survives the round trip.
    expect(registry.decode('video', registry.encode('video', { ...read, pitch_at_sec: 0 }))).toEqual({ ...read, pitch_at_sec: 0 });
    for (const bad of [{ offer_window_sec: 0 }, { offer_window_sec: 3601 }, { pitch_at_sec: -1 }, { pitch_at_sec: 1.5 }]) {
      expect(VideoRecord.safeParse({ ...read, ...bad }).success, JSON.stringify(bad)).toBe(false);
    }
  });

  it('encodeAll writes each record as encode does, into views of one buffer, growing past its scratch space', () => {
    const records = Array.from({ length: 900 }, (_, i) => ({ ...playerEvent, visitor_id: `vis_${'x'.repeat(i % 64)}${i}`, utm_campaign: 'c'.repeat(i % 200) }));
    const all = registry.encodeAll('player-event', records);
    expect(all).toHaveLength(records.length);
    expect(all.reduce((n, b) => n + b.length, 0)).toBeGreaterThan(64 * 1024);
    all.forEach((bytes, i) => expect(Buffer.compare(bytes, registry.encode('player-event', records[i]))).toBe(0));
    expect(new Set(all.map((b) => b.buffer)).size).toBe(1);
    // Reused scratch space: a second call does not change the first call's results.
    const again = registry.encodeAll('player-event', [{ ...playerEvent, visitor_id: 'vis_other' }]);
    expect(registry.decode<PlayerEventRecord>('player-event', all[0]!)).toEqual(records[0]);
    expect(registry.decode<PlayerEventRecord>('player-event', again[0]!).visitor_id).toBe('vis_other');
    expect(registry.encodeAll('player-event', [])).toEqual([]);
    expect(() => registry.encodeAll('player-event', [playerEvent, { ...playerEvent, watched_percentage: 'ten' }])).toThrow();
  });

  it('refuses bytes that are not a known schema of the subject', () => {
    expect(() => registry.decode('player-event', Buffer.from([1, 0, 0, 0, 2]))).toThrow(SchemaDecodeError);
    expect(() => registry.decode('player-event', Buffer.from([0, 0, 0, 0, 99, 1]))).toThrow(/unknown schema id 99/);
    const tenant = registry.encode('tenant', fixtures[1]![2]);
    expect(() => registry.decode('player-event', tenant)).toThrow(/is tenant/);
  });
});
