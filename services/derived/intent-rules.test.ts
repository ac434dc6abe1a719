import { randomUUID } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import type { PlayerEventRecord } from '../../schemas/records.ts';
import { PLAYER_EVENT } from '../../test/helpers/player-event.ts';
import { restoreState } from './derived.service.ts';
import { applyEvent, applyTick, derivedEventId, emptyState, eventTag, visitorKey, type IntentSettings, type PartitionState, type RuleOptions } from './intent-rules.ts';

const T = PLAYER_EVENT.tenant_id;
const V = PLAYER_EVENT.video_id;
let offset = 0;

function ev(over: Partial<PlayerEventRecord>): PlayerEventRecord {
  return {
    ...PLAYER_EVENT,
    event_id: `00000000-0000-4000-8000-${String(++offset).padStart(12, '0')}`,
    event_name: 'heartbeat',
    play_ms: null,
    focus_ms: null,
    watched_percentage: 0,
    current_time: 0,
    external_lead_id: null,
    utm_source: null,
    ...over,
  };
}

function rules(settings: Partial<IntentSettings> = {}): RuleOptions {
  return {
    settings: () => ({ threshold: 70, pitchAtSec: null, offerWindowSec: 60, ...settings }),
    sessionIdleMs: 60_000,
    endedRetentionMs: 3_600_000,
    visitorTtlMs: 30 * 86_400_000,
    maxVisitorsPerTenant: 1_000_000,
    maxSessionsPerTenant: 1_000_000,
  };
}

/** Applies events in order from one source partition, returning the names of what was raised. */
function run(state: PartitionState, events: PlayerEventRecord[], opts: RuleOptions, src = 0): string[] {
  const raised: string[] = [];
  for (const e of events) raised.push(...applyEvent(state, e, src, ++offset, opts).events.map((d) => d.event_name));
  return raised;
}

describe('intent rules', () => {
  it('raises high_intent_lead once, when the score first reaches the threshold, with its score, factors and a stable id', () => {
    const state = emptyState();
    const opts = rules({ threshold: 70 });
    // watched 100 % (40) + focus 100 % (20) = 60: below 70.
    expect(run(state, [ev({ event_name: 'watched_90_percent', watched_percentage: 100, received_at: 1000 }), ev({ play_ms: 1000, focus_ms: 1000, received_at: 1001 })], opts)).toEqual([]);
    // One CTA click: +12.5 → 73.
    const step = applyEvent(state, ev({ event_name: 'cta_clicked', received_at: 1002, external_lead_id: 'crm-1' }), 0, ++offset, opts);
    expect(step.events).toHaveLength(1);
    const lead = step.events[0]!;
    expect(lead).toMatchObject({ event_name: 'high_intent_lead', source: 'derived', visitor_id: 'vis_xyz', external_lead_id: 'crm-1' });
    expect(lead.lead).toEqual({ score: 73, score_version: 1, watched_percent: 1, focus_time_ratio: 1, cta_clicks: 1, rewinds: 0 });
    expect(lead.event_id).toBe(derivedEventId(T, 'high_intent_lead', 'vis_xyz', 1));
    // A second click raises the score, not a second lead.
    expect(run(state, [ev({ event_name: 'cta_clicked', received_at: 1003 })], opts)).toEqual([]);
  });

  it('counts nothing twice: a replayed offset or a repeated event id leaves the score as it was', () => {
    const state = emptyState();
    const opts = rules({ threshold: 60 });
    const click = ev({ event_name: 'cta_clicked', received_at: 1000 });
    applyEvent(state, ev({ event_name: 'watched_90_percent', watched_percentage: 100, received_at: 999 }), 3, 10, opts); // 40
    expect(applyEvent(state, click, 3, 11, opts).events).toEqual([]); // 52.5 → 53
    expect(applyEvent(state, click, 3, 11, opts).events).toEqual([]); // replayed offset
    expect(applyEvent(state, click, 4, 7, opts).events).toEqual([]); // the client's retry, through another partition
    expect(state.visitors.get(`v:${T}:vis_xyz`)!.inputs.cta_clicks).toBe(1);
    expect(applyEvent(state, ev({ event_name: 'cta_clicked', received_at: 1001 }), 3, 12, opts).events.map((e) => e.event_name)).toEqual(['high_intent_lead']);
  });

  it('keeps tags of the recent ids, not the ids; a state written with the ids themselves still counts a retry of one once', () => {
    const opts = rules({ threshold: 60 });
    const click = ev({ event_name: 'cta_clicked', received_at: 1000 });
    const state = emptyState();
    applyEvent(state, ev({ event_name: 'watched_90_percent', watched_percentage: 100, received_at: 999 }), 3, 10, opts);
    applyEvent(state, click, 3, 11, opts);
    const visitor = state.visitors.get(visitorKey(T, 'vis_xyz'))!;
    expect(visitor.recent).toEqual([expect.stringMatching(/^[0-9a-f]{12}$/), eventTag(click.event_id)]);
    // As written before tags: the same state with the full ids.
    const old = { ...visitor, recent: [PLAYER_EVENT.event_id, click.event_id] };
    const restored = restoreState(new Map([[visitorKey(T, 'vis_xyz'), Buffer.from(JSON.stringify(old))]]));
    expect(applyEvent(restored, click, 5, 1, opts).events).toEqual([]); // the retry, through another partition
    expect(restored.visitors.get(visitorKey(T, 'vis_xyz'))!.inputs.cta_clicks).toBe(1);
  });

  it('gives ids that differ anywhere, or share a time-ordered prefix, different tags', () => {
    const tags = new Set<string>();
    for (let i = 0; i < 50_000; i++) tags.add(eventTag(randomUUID()));
    // UUIDv7: the first 48 bits are the millisecond, shared by ids made together.
    for (let i = 0; i < 50_000; i++) tags.add(eventTag(`019abcde-f012-7${(i % 4096).toString(16).padStart(3, '0')}-8${Math.floor(i / 4096).toString(16).padStart(3, '0')}-000000000000`));
    expect(tags.size).toBe(100_000);
    expect(eventTag('00000000-0000-4000-8000-000000000001')).toBe(eventTag('00000000-0000-4000-8000-000000000001'));
  });

  it('raises reached_pitch the first time playback reaches pitch_at_sec in a session, not on a seek', () => {
    const state = emptyState();
    const opts = rules({ pitchAtSec: 30 });
    expect(run(state, [ev({ event_name: 'video_play', current_time: 0, received_at: 1 }), ev({ event_name: 'seek', seek_from: 5, seek_to: 40, current_time: 40, received_at: 2 })], opts)).toEqual([]);
    expect(run(state, [ev({ current_time: 31, received_at: 3 }), ev({ current_time: 45, received_at: 4 })], opts)).toEqual(['reached_pitch']);
    expect(run(state, [ev({ session_id: 'ses_other', current_time: 30, received_at: 5 })], opts)).toEqual(['reached_pitch']);
  });

  it('at session_ended: abandoned_before_pitch when it played and never reached the pitch; nothing when no pitch is set', () => {
    expect(run(emptyState(), [ev({ event_name: 'video_play', received_at: 1 }), ev({ event_name: 'session_ended', current_time: 12, received_at: 2 })], rules({ pitchAtSec: 30 }))).toEqual(['abandoned_before_pitch']);
    expect(run(emptyState(), [ev({ event_name: 'video_play', received_at: 1 }), ev({ event_name: 'session_ended', received_at: 2 })], rules())).toEqual([]);
    expect(run(emptyState(), [ev({ event_name: 'player_loaded', received_at: 1 }), ev({ event_name: 'session_ended', received_at: 2 })], rules({ pitchAtSec: 30 }))).toEqual([]);
  });

  it('abandoned_after_offer: the session ends within the window after cta_shown and without a click', () => {
    const shown = (ms: number) => ev({ event_name: 'cta_shown', timestamp: ms, received_at: ms });
    const ended = (ms: number) => ev({ event_name: 'session_ended', timestamp: ms, received_at: ms });
    expect(run(emptyState(), [shown(10_000), ended(30_000)], rules({ offerWindowSec: 60 }))).toEqual(['abandoned_after_offer']);
    expect(run(emptyState(), [shown(10_000), ended(80_000)], rules({ offerWindowSec: 60 }))).toEqual([]);
    expect(run(emptyState(), [shown(10_000), ev({ event_name: 'cta_clicked', received_at: 20_000 }), ended(30_000)], rules({ offerWindowSec: 60, threshold: 101 }))).toEqual([]);
  });

  it('ends a session whose events stop, by stream time (an event of another session or a tick), once; late events change nothing', () => {
    const state = emptyState();
    const opts = rules({ pitchAtSec: 30 });
    expect(run(state, [ev({ event_name: 'video_play', timestamp: 500, received_at: 1000 })], opts)).toEqual([]);
    expect(applyTick(state, 61_000, opts).events).toEqual([]); // 60 s idle: not yet
    const step = applyTick(state, 61_001, opts);
    expect(step.events.map((e) => e.event_name)).toEqual(['abandoned_before_pitch']);
    expect(step.events[0]!.timestamp).toBe(500); // the session's last event, not the tick
    expect(run(state, [ev({ current_time: 40, received_at: 61_002 })], opts)).toEqual([]); // late: the session stays ended
    expect(applyTick(state, 200_000, opts).events).toEqual([]);
    // Forgotten after the retention: its key is deleted from the changelog.
    const forget = applyTick(state, 61_001 + 3_600_001, opts);
    expect([...forget.changed]).toEqual([[`s:${T}:ses_abc`, null]]);
    expect(state.ended.size).toBe(0);
  });

  it('uses the settings of the event\'s tenant and video', () => {
    const seen: string[] = [];
    const opts: RuleOptions = { ...rules(), settings: (t, v) => (seen.push(`${t}/${v}`), { threshold: 70, pitchAtSec: null, offerWindowSec: 60 }) };
    run(emptyState(), [ev({ received_at: 1 })], opts);
    expect(seen).toEqual([`${T}/${V}`]);
  });

  describe('bounded state (a public player key may send any number of visitor and session ids)', () => {
    const OTHER = '0b7c3e55-2f1a-4c4e-9d3b-1a2b3c4d5e6f';
    /** A lead for the visitor in three events: 40 + 20 + 12.5. */
    const leadEvents = (over: Partial<PlayerEventRecord>, at: number) => [
      ev({ ...over, event_name: 'watched_90_percent', watched_percentage: 100, received_at: at }),
      ev({ ...over, play_ms: 1000, focus_ms: 1000, received_at: at + 1 }),
      ev({ ...over, event_name: 'cta_clicked', received_at: at + 2 }),
    ];

    it("a tenant flooding new visitors and sessions pushes out only its own least recently seen; another tenant's state stays and its lead is raised", () => {
      const state = emptyState();
      const opts = { ...rules(), maxVisitorsPerTenant: 10, maxSessionsPerTenant: 5 };
      // The other tenant's visitor is half-way to its lead before the flood.
      const theirs = leadEvents({ tenant_id: OTHER, visitor_id: 'vis_kept', session_id: 'ses_kept' }, 1);
      run(state, theirs.slice(0, 2), opts);
      let evicted = { visitors: 0, sessions: 0 };
      const tombstones: string[] = [];
      for (let i = 0; i < 200; i++) {
        const step = applyEvent(state, ev({ visitor_id: `vis_flood_${i}`, session_id: `ses_flood_${i}`, received_at: 100 + i }), 0, ++offset, opts);
        evicted = { visitors: evicted.visitors + step.evicted.visitors, sessions: evicted.sessions + step.evicted.sessions };
        for (const [k, v] of step.changed) if (v === null) tombstones.push(k);
      }
      const flooded = [...state.visitors.keys()].filter((k) => k.startsWith(`v:${T}:`));
      expect(flooded).toHaveLength(10);
      expect(flooded).toContain(visitorKey(T, 'vis_flood_199'));
      expect(flooded).not.toContain(visitorKey(T, 'vis_flood_189'));
      expect([...state.sessions.keys()].filter((k) => k.startsWith(`s:${T}:`))).toHaveLength(5);
      expect(evicted).toEqual({ visitors: 190, sessions: 195 });
      // Each forgotten key is deleted from the changelog (a tombstone), so a restore holds the bound too.
      expect(tombstones).toContain(visitorKey(T, 'vis_flood_0'));
      expect(tombstones).toContain(`s:${T}:ses_flood_0`);
      expect(state.visitors.has(visitorKey(OTHER, 'vis_kept'))).toBe(true);
      expect(state.sessions.has(`s:${OTHER}:ses_kept`)).toBe(true);
      expect(run(state, theirs.slice(2), opts)).toEqual(['high_intent_lead']);
    });

    it('a visitor idle past the TTL (stream time) is forgotten; back later, it starts from zero', () => {
      const state = emptyState();
      const opts = { ...rules(), visitorTtlMs: 10_000, sessionIdleMs: 1_000 };
      run(state, leadEvents({}, 1000).slice(0, 2), opts);
      expect(applyTick(state, 11_001, opts).changed.get(visitorKey(T, 'vis_xyz'))).toBeUndefined(); // 10 s idle: kept
      expect(applyTick(state, 11_002, opts).changed.get(visitorKey(T, 'vis_xyz'))).toBeNull();
      expect(state.visitors.size).toBe(0);
      run(state, [ev({ event_name: 'cta_clicked', received_at: 12_000 })], opts);
      expect(state.visitors.get(visitorKey(T, 'vis_xyz'))!.inputs).toMatchObject({ cta_clicks: 1, max_watched_percentage: 0 });
    });

    it('a restored partition keeps the order of last sight, so the bound pushes out the least recently seen first', () => {
      const state = emptyState();
      const opts = { ...rules(), maxVisitorsPerTenant: 3 };
      for (const [i, name] of ['old', 'mid', 'new'].entries()) run(state, [ev({ visitor_id: `vis_${name}`, received_at: 10 + i })], opts);
      run(state, [ev({ visitor_id: 'vis_old', received_at: 20 })], opts); // seen again: now the newest
      const values = new Map<string, Buffer>([...state.visitors].reverse().map(([k, v]) => [k, Buffer.from(JSON.stringify(v))]));
      const restored = restoreState(values);
      const step = applyEvent(restored, ev({ visitor_id: 'vis_next', received_at: 30 }), 0, ++offset, opts);
      expect([...step.changed].filter(([, v]) => v === null).map(([k]) => k)).toEqual([visitorKey(T, 'vis_mid')]);
    });
  });
});
