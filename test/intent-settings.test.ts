import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { randomUUID } from 'node:crypto';
import avro from 'avsc';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { TenantRecord, VideoRecord } from '../schemas/records.ts';
import { SchemaRegistry } from '../schemas/registry.ts';
import { ConfigStore } from '../shared/config-store/config-store.ts';
import { createKafka } from '../shared/kafka/kafka.ts';
import { topicNames } from '../shared/kafka/topics.ts';
import { createLogger } from '../shared/logger.ts';
import { createMetrics } from '../shared/metrics.ts';
import { expectProblem } from './helpers/contract.ts';
import { TestStack, eventually, type TestTenant } from './helpers/stack.ts';

/**
 * The intent settings of tenants (high_intent_threshold) and videos
 * (pitch_at_sec, offer_window_sec): set on create, changed with PATCH,
 * refused out of bounds, shown in the OpenAPI document, and materialised by
 * every config store from the config topics, with defaults for records
 * written before the fields existed.
 */
describe('intent settings', () => {
  let s: TestStack;
  let A: TestTenant;

  beforeAll(async () => {
    s = await TestStack.start();
    A = await s.createTenant('intent');
  });
  afterAll(async () => {
    await s?.stop();
  });

  describe('tenant high_intent_threshold', () => {
    it('is 70 unless the tenant is created with one, and PATCH changes it and nothing else', async () => {
      expect(A).toMatchObject({ high_intent_threshold: 70 });
      const created = await s.admin('POST', '/tenants', { name: 'Picky', high_intent_threshold: 85 });
      expect(created.status, created.text).toBe(201);
      expect(created.body.high_intent_threshold).toBe(85);

      const patched = await s.admin('PATCH', `/tenants/${created.body.id}`, { high_intent_threshold: 0 });
      expect(patched.status, patched.text).toBe(200);
      expect(patched.body).toEqual({ ...created.body, high_intent_threshold: 0 });
      expect((await s.admin('GET', `/tenants/${created.body.id}`)).body).toEqual(patched.body);
      expect((await s.admin('GET', '/tenants')).body.data).toContainEqual(patched.body);
      // The other settings of the tenant are untouched, and so is the threshold by other changes.
      const suspended = await s.admin('POST', `/tenants/${created.body.id}/suspend`);
      expect(suspended.body.high_intent_threshold).toBe(0);
      expect((await s.admin('PATCH', `/tenants/${created.body.id}`, { high_intent_threshold: 100 })).body).toMatchObject({
        high_intent_threshold: 100,
        suspended_at: suspended.body.suspended_at,
      });
    });

    it('refuses a threshold outside 0–100, not an integer, an empty change or an unknown field with 422 naming the field; 404 for an unknown tenant', async () => {
      for (const bad of [-1, 101, 70.5, '80', null]) {
        expectProblem(await s.admin('PATCH', `/tenants/${A.id}`, { high_intent_threshold: bad }), 422, /body\.high_intent_threshold/);
        expectProblem(await s.admin('POST', '/tenants', { name: 'x', high_intent_threshold: bad }), 422, /body\.high_intent_threshold/);
      }
      expectProblem(await s.admin('PATCH', `/tenants/${A.id}`, {}), 422, /nothing to change/);
      expectProblem(await s.admin('PATCH', `/tenants/${A.id}`, { high_intent_treshold: 50 }), 422, /high_intent_treshold/);
      expectProblem(await s.admin('PATCH', `/tenants/${randomUUID()}`, { high_intent_threshold: 50 }), 404, /no such tenant/);
      expectProblem(await s.admin('PATCH', '/tenants/nope', { high_intent_threshold: 50 }), 422, /params\.tenant_id/);
      expect((await s.admin('GET', `/tenants/${A.id}`)).body.high_intent_threshold).toBe(70);
    });
  });

  describe('video pitch_at_sec and offer_window_sec', () => {
    it('has no pitch and a 60 s window unless created with them, and PATCH changes them (null clears the pitch)', async () => {
      const listed = await s.admin('GET', `/tenants/${A.id}/videos`);
      expect(listed.body.data[0]).toMatchObject({ id: A.videoId, pitch_at_sec: null, offer_window_sec: 60 });

      const created = await s.admin('POST', `/tenants/${A.id}/videos`, { title: 'Webinar', duration_sec: 3600, pitch_at_sec: 2400, offer_window_sec: 90 });
      expect(created.status, created.text).toBe(201);
      expect(created.body).toMatchObject({ title: 'Webinar', duration_sec: 3600, pitch_at_sec: 2400, offer_window_sec: 90 });
      const path = `/tenants/${A.id}/videos/${created.body.id}`;

      const moved = await s.admin('PATCH', path, { pitch_at_sec: 0 });
      expect(moved.status, moved.text).toBe(200);
      expect(moved.body).toEqual({ ...created.body, pitch_at_sec: 0 });
      const widened = await s.admin('PATCH', path, { offer_window_sec: 3600, title: 'Webinar (replay)' });
      expect(widened.body).toEqual({ ...created.body, pitch_at_sec: 0, offer_window_sec: 3600, title: 'Webinar (replay)' });
      const cleared = await s.admin('PATCH', path, { pitch_at_sec: null });
      expect(cleared.body).toEqual({ ...widened.body, pitch_at_sec: null });
      expect((await s.admin('GET', `/tenants/${A.id}/videos`)).body.data).toContainEqual(cleared.body);
      // The UUID form of the id names the same video.
      const uuid = created.body.id.slice(4).replace(/^(.{8})(.{4})(.{4})(.{4})(.{12})$/, '$1-$2-$3-$4-$5');
      expect((await s.admin('PATCH', `/tenants/${A.id}/videos/${uuid}`, { offer_window_sec: 1 })).body.offer_window_sec).toBe(1);
      // The read API's video is unchanged in shape.
      const read = await s.api('/videos', A.apiKey);
      expect(Object.keys(read.body.data[0]).sort()).toEqual(['created_at', 'duration_sec', 'id', 'title']);
    });

    it('refuses bad values with 422 naming the field, another tenant\'s video with 404', async () => {
      const path = `/tenants/${A.id}/videos/${A.videoId}`;
      for (const bad of [0, 3601, 1.5, '60', null]) {
        expectProblem(await s.admin('PATCH', path, { offer_window_sec: bad }), 422, /body\.offer_window_sec/);
        expectProblem(await s.admin('POST', `/tenants/${A.id}/videos`, { title: 'x', duration_sec: 1, offer_window_sec: bad }), 422, /body\.offer_window_sec/);
      }
      for (const bad of [-1, 2.5, '30', 1_000_001]) {
        expectProblem(await s.admin('PATCH', path, { pitch_at_sec: bad }), 422, /body\.pitch_at_sec/);
        expectProblem(await s.admin('POST', `/tenants/${A.id}/videos`, { title: 'x', duration_sec: 1, pitch_at_sec: bad }), 422, /body\.pitch_at_sec/);
      }
      expectProblem(await s.admin('PATCH', path, {}), 422, /nothing to change/);
      expectProblem(await s.admin('PATCH', path, { duration_sec: 10 }), 422, /duration_sec/);
      expectProblem(await s.admin('PATCH', `/tenants/${A.id}/videos/vid_nope`, { pitch_at_sec: 1 }), 422, /params\.video_id/);
      const B = await s.createTenant('intent-other');
      expectProblem(await s.admin('PATCH', `/tenants/${B.id}/videos/${A.videoId}`, { pitch_at_sec: 1 }), 404, /no such video/);
      expectProblem(await s.admin('PATCH', `/tenants/${A.id}/videos/vid_${'0'.repeat(32)}`, { pitch_at_sec: 1 }), 404, /no such video/);
      expectProblem(await s.admin('PATCH', `/tenants/${randomUUID()}/videos/${A.videoId}`, { pitch_at_sec: 1 }), 404, /no such tenant/);
      expect((await s.admin('GET', `/tenants/${A.id}/videos`)).body.data[0]).toMatchObject({ pitch_at_sec: null, offer_window_sec: 60 });
    });
  });

  it('documents the fields and both PATCH operations in the OpenAPI document', async () => {
    const doc = (await s.request('GET', '/v1/openapi.json')).body;
    const schemas = doc.components.schemas;
    expect(schemas.Tenant.properties.high_intent_threshold).toMatchObject({ type: 'integer' });
    expect(schemas.Tenant.required).toContain('high_intent_threshold');
    expect(schemas.AdminVideo.properties).toHaveProperty('pitch_at_sec');
    expect(schemas.AdminVideo.properties.offer_window_sec).toMatchObject({ type: 'integer' });
    const patchTenant = doc.paths['/admin/v1/tenants/{tenant_id}'].patch;
    expect(patchTenant.operationId).toBe('updateTenant');
    expect(patchTenant.requestBody.content['application/json'].schema.properties.high_intent_threshold).toMatchObject({ minimum: 0, maximum: 100 });
    const patchVideo = doc.paths['/admin/v1/tenants/{tenant_id}/videos/{video_id}'].patch;
    expect(patchVideo.operationId).toBe('updateVideo');
    expect(patchVideo.requestBody.content['application/json'].schema.properties.offer_window_sec).toMatchObject({ minimum: 1, maximum: 3600 });
    const createVideo = doc.paths['/admin/v1/tenants/{tenant_id}/videos'].post.requestBody.content['application/json'].schema;
    expect(Object.keys(createVideo.properties)).toEqual(expect.arrayContaining(['pitch_at_sec', 'offer_window_sec']));
    const createTenant = doc.paths['/admin/v1/tenants'].post.requestBody.content['application/json'].schema;
    expect(Object.keys(createTenant.properties)).toContain('high_intent_threshold');
  });

  it('reaches every config store through the config topics, with defaults for tenants and videos written before the fields', async () => {
    const topics = topicNames(s.topicPrefix);
    const log = createLogger({ level: 'error' });
    const kafka = createKafka({ brokers: s.stack.kafkaBrokers, clientId: 'intent-settings-test', log });
    const avsc = (file: string) => avro.Type.forSchema(JSON.parse(readFileSync(join(import.meta.dirname, '../schemas/avro', file), 'utf8')));
    const framed = (id: number, body: Buffer) => Buffer.concat([Buffer.from([0, 0, 0, 0, id]), body]);

    // A tenant (v2, schema id 11) and a video (v1, id 30) as the versions before these fields wrote them.
    const oldTenant = { id: randomUUID(), name: 'Old', player_key: 'pk_old0tenant', created_at: 1, allowed_origins: [], previous_player_key: null, previous_player_key_expires_at: null, suspended_at: null };
    const oldVideo = { id: randomUUID(), tenant_id: oldTenant.id, title: 'Old video', duration_sec: 300, created_at: 2 };
    const producer = kafka.producer();
    await producer.connect();
    try {
      await producer.send({ topic: topics.tenants, acks: -1, messages: [{ key: oldTenant.id, value: framed(11, avsc('tenant.v2.avsc').toBuffer(oldTenant)) }] });
      await producer.send({ topic: topics.videos, acks: -1, messages: [{ key: oldVideo.id, value: framed(30, avsc('video.v1.avsc').toBuffer(oldVideo)) }] });
    } finally {
      await producer.disconnect();
    }

    const T = (await s.admin('POST', '/tenants', { name: 'New', high_intent_threshold: 55 })).body;
    const V = (await s.admin('POST', `/tenants/${T.id}/videos`, { title: 'New video', duration_sec: 600, pitch_at_sec: 420 })).body;
    await s.admin('PATCH', `/tenants/${T.id}/videos/${V.id}`, { offer_window_sec: 120 });

    const admin = kafka.admin();
    await admin.connect();
    const store = new ConfigStore({ kafka, registry: SchemaRegistry.fromManifest(), log, metrics: createMetrics(), topics, stallMs: 30_000 });
    try {
      await store.start(admin);
      expect(store.skipped).toBe(0);
      expect(store.tenants.get(T.id)).toMatchObject<Partial<TenantRecord>>({ high_intent_threshold: 55 });
      expect(store.tenants.get(A.id)?.high_intent_threshold).toBe(70);
      const video = store.videos.get(V.id.slice(4).replace(/^(.{8})(.{4})(.{4})(.{4})(.{12})$/, '$1-$2-$3-$4-$5'));
      expect(video).toMatchObject<Partial<VideoRecord>>({ pitch_at_sec: 420, offer_window_sec: 120 });
      expect(store.tenants.get(oldTenant.id)).toEqual({ ...oldTenant, high_intent_threshold: 70 });
      expect(store.videos.get(oldVideo.id)).toEqual({ ...oldVideo, pitch_at_sec: null, offer_window_sec: 60 });
    } finally {
      await store.stop();
      await admin.disconnect();
    }

    // The stack's own store read them too: the API shows the defaults, and a PATCH writes them back as the current version.
    const shown = await eventually(async () => {
      const r = await s.admin('GET', `/tenants/${oldTenant.id}`);
      return r.status === 200 ? r.body : undefined;
    });
    expect(shown.high_intent_threshold).toBe(70);
    const oldVid = `vid_${oldVideo.id.replaceAll('-', '')}`;
    expect((await s.admin('GET', `/tenants/${oldTenant.id}/videos`)).body.data).toEqual([expect.objectContaining({ id: oldVid, pitch_at_sec: null, offer_window_sec: 60 })]);
    expect((await s.admin('PATCH', `/tenants/${oldTenant.id}/videos/${oldVid}`, { pitch_at_sec: 30 })).body).toMatchObject({ pitch_at_sec: 30, offer_window_sec: 60 });
  });
});
