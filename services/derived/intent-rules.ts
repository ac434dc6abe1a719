import type { PlayerEventRecord } from '../../schemas/records.ts';
import { uuidV5 } from '../../shared/webhooks/fanout-plan.ts';
import { factorsFrom, scoreV1, SCORE_VERSION, type FactorInputs, type VisitorSnapshot } from '../../shared/score.ts';

/**
 * The rules of the derived events, over one partition of the by-visitor log:
 * pure state in, state and events out, no I/O and no clock. Time is the
 * partition's stream time (the newest `received_at` seen, or a tick), so a
 * replay of the same records decides the same events.
 */

/** A tenant's and a video's settings, as the rules need them. */
export interface IntentSettings {
  /** Score at or above which a visitor is a high-intent lead (0–100). */
  threshold: number;
  /** Where the video's offer segment starts, in seconds of playback; null: none configured. */
  pitchAtSec: number | null;
  /** A session that ends this long after a `cta_shown`, without a `cta_clicked`, abandoned the offer. */
  offerWindowSec: number;
}

export interface RuleOptions {
  settings: (tenantId: string, videoId: string) => IntentSettings;
  /** A session with no event for this long (stream time) has ended. */
  sessionIdleMs: number;
  /** How long an ended session is remembered, so late events do not restart it. */
  endedRetentionMs: number;
  /** A visitor with no event for this long (stream time) is forgotten. */
  visitorTtlMs: number;
  /** Most visitors, and most sessions (open or ended), kept per tenant in one partition: past it the least recently seen go. */
  maxVisitorsPerTenant: number;
  maxSessionsPerTenant: number;
}

/** Per visitor: the score's inputs, what has been counted, and the lead already raised. */
export interface VisitorState {
  inputs: FactorInputs;
  /** Per source partition of player.events.v1, the last offset counted: a replay counts nothing twice. */
  src: Record<string, number>;
  /** Tags (eventTag) of the newest event ids counted: a client's retries of one event carry the same id. */
  recent: string[];
  /** The score version of the high_intent_lead raised, 0 while none. */
  lead: number;
  /** When it was raised (the crossing event's time), null while none. */
  leadAt: number | null;
  /** The player's time of its first and newest events. */
  firstSeen: number;
  lastSeen: number;
  /** received_at of its newest event (stream time); absent in older state, which is still read. */
  seenAt?: number;
  /** The videos it watched, newest last (at most MAX_VIDEOS). */
  videos: string[];
}

const MAX_VIDEOS = 20;

/** Per session: where it stands against the video's pitch and offer. */
export interface SessionState {
  tenant_id: string;
  video_id: string;
  session_id: string;
  visitor_id: string;
  /** received_at of its newest event (stream time). */
  seenAt: number;
  /** timestamp of its newest event (the player's time). */
  lastAt: number;
  played: boolean;
  pitchReached: boolean;
  ctaShownAt: number | null;
  ctaClicked: boolean;
  /** Stream time at which it ended; null while open. */
  endedAt: number | null;
  /** Fields a derived event about the session repeats from its newest event. */
  current_time: number;
  duration: number;
  watched_percentage: number;
  utm_source: string | null;
  utm_campaign: string | null;
  ctwa_clid: string | null;
  external_lead_id: string | null;
}

export function visitorSnapshot(key: string, v: VisitorState): VisitorSnapshot {
  const [, tenant_id, visitor_id] = key.split(':', 3) as [string, string, string];
  const factors = factorsFrom(v.inputs);
  return { tenant_id, visitor_id, score: scoreV1(factors), score_version: SCORE_VERSION, factors, first_seen: v.firstSeen, last_seen: v.lastSeen, videos: v.videos, lead_at: v.leadAt };
}

/**
 * Per tenant, its keys in the order they were last touched, so the least
 * recently seen is first to go. Keeping it per tenant is what makes the
 * bound safe: a player key flooding new visitor or session ids (the key is
 * public) pushes out only its own tenant's state.
 */
export class TenantOrder {
  readonly #byTenant = new Map<string, Set<string>>();

  /** Moves `key` to the newest end of its tenant's order; answers how many keys the tenant holds. */
  touch(tenantId: string, key: string): number {
    let keys = this.#byTenant.get(tenantId);
    if (!keys) this.#byTenant.set(tenantId, (keys = new Set()));
    keys.delete(key);
    keys.add(key);
    return keys.size;
  }

  delete(tenantId: string, key: string): void {
    const keys = this.#byTenant.get(tenantId);
    if (!keys) return;
    keys.delete(key);
    if (keys.size === 0) this.#byTenant.delete(tenantId);
  }

  /** The tenant's keys, least recently touched first. */
  keys(tenantId: string): Iterable<string> {
    return this.#byTenant.get(tenantId) ?? [];
  }

  tenants(): Iterable<string> {
    return this.#byTenant.keys();
  }
}

/** One partition's state: every key's value as the changelog holds it. */
export interface PartitionState {
  visitors: Map<string, VisitorState>;
  /** Open sessions, ordered by `seenAt` (re-inserted on every event), so expiry reads from the front. */
  sessions: Map<string, SessionState>;
  /** Ended sessions, ordered by `endedAt`, kept for endedRetentionMs. */
  ended: Map<string, SessionState>;
  /** Visitor keys and session keys (open or ended) per tenant, least recently seen first. */
  visitorOrder: TenantOrder;
  sessionOrder: TenantOrder;
  streamTime: number;
}

export const emptyState = (): PartitionState => ({
  visitors: new Map(),
  sessions: new Map(),
  ended: new Map(),
  visitorOrder: new TenantOrder(),
  sessionOrder: new TenantOrder(),
  streamTime: 0,
});

/** What one step changed: events to raise, keys whose state to write (null: delete), and state forgotten to stay within bounds. */
export interface Step {
  events: PlayerEventRecord[];
  changed: Map<string, VisitorState | SessionState | null>;
  evicted: { visitors: number; sessions: number };
}

export const newStep = (): Step => ({ events: [], changed: new Map(), evicted: { visitors: 0, sessions: 0 } });

const RECENT_IDS = 16;

/**
 * A 48-bit tag of an event id, 12 hex digits (32 bits of FNV-1a and 16 of a
 * second hash like it): what a visitor's state keeps of its recent ids.
 * Full ids would be most of the bytes of a visitor's record, which is
 * written on each of its events; an event is taken for one of the 16 before
 * it about once in 2^44.
 */
export function eventTag(eventId: string): string {
  let a = 0x811c9dc5;
  let b = 0x050c5d1f;
  for (let i = 0; i < eventId.length; i++) {
    const c = eventId.charCodeAt(i);
    a = Math.imul(a ^ c, 0x01000193);
    b = Math.imul(b ^ c, 0x01000193) ^ (b >>> 15);
  }
  return (a >>> 0).toString(16).padStart(8, '0') + ((b >>> 0) & 0xffff).toString(16).padStart(4, '0');
}

export const visitorKey = (tenantId: string, visitorId: string): string => `v:${tenantId}:${visitorId}`;
export const sessionKey = (tenantId: string, sessionId: string): string => `s:${tenantId}:${sessionId}`;

/**
 * The id of a derived event: a UUIDv5 of what it is about, so that it is the
 * same whenever and however often it is decided (and the fan-out's delivery
 * id, a UUIDv5 of it, with it).
 */
export function derivedEventId(tenantId: string, name: string, subject: string, version = 1): string {
  return uuidV5(`${name}:${subject}:${version}`, tenantId);
}

/** The score's inputs after one more event (the same sums the read model keeps, shared/score.ts). */
export function addToInputs(inputs: FactorInputs, e: PlayerEventRecord): FactorInputs {
  return {
    max_watched_percentage: Math.max(inputs.max_watched_percentage, Number.isFinite(e.watched_percentage) ? e.watched_percentage : 0),
    play_ms: inputs.play_ms + (e.play_ms ?? 0),
    focus_ms: inputs.focus_ms + (e.focus_ms ?? 0),
    cta_clicks: inputs.cta_clicks + (e.event_name === 'cta_clicked' ? 1 : 0),
    rewinds: inputs.rewinds + (e.event_name === 'seek' && e.seek_from !== null && e.seek_to !== null && e.seek_to < e.seek_from ? 1 : 0),
  };
}

/**
 * Applies one player event (read from source partition `srcPartition` at
 * `srcOffset`) to the state: the visitor's score and lead, the session's
 * pitch and offer, and the session's end when the event is `session_ended`.
 * Then ends the sessions idle past the new stream time. What it decides is
 * added to `step`, which a batch's events may share.
 */
export function applyEvent(state: PartitionState, e: PlayerEventRecord, srcPartition: number, srcOffset: number, opts: RuleOptions, step: Step = newStep()): Step {
  advance(state, e.received_at);
  const settings = opts.settings(e.tenant_id, e.video_id);

  const vKey = visitorKey(e.tenant_id, e.visitor_id);
  const visitor: VisitorState = state.visitors.get(vKey) ?? {
    inputs: { max_watched_percentage: 0, play_ms: 0, focus_ms: 0, cta_clicks: 0, rewinds: 0 },
    src: {},
    recent: [],
    lead: 0,
    leadAt: null,
    firstSeen: e.timestamp,
    lastSeen: e.timestamp,
    videos: [],
  };
  const tag = eventTag(e.event_id);
  const counted = (visitor.src[srcPartition] ?? -1) >= srcOffset || visitor.recent.includes(tag);
  if (counted) return expire(state, opts, step, e.tenant_id);
  visitor.src[srcPartition] = srcOffset;
  visitor.recent.push(tag);
  if (visitor.recent.length > RECENT_IDS) visitor.recent.splice(0, visitor.recent.length - RECENT_IDS);
  visitor.inputs = addToInputs(visitor.inputs, e);
  visitor.firstSeen = Math.min(visitor.firstSeen, e.timestamp);
  visitor.lastSeen = Math.max(visitor.lastSeen, e.timestamp);
  visitor.seenAt = Math.max(visitor.seenAt ?? 0, e.received_at);
  if (visitor.videos.at(-1) !== e.video_id) visitor.videos = [...visitor.videos.filter((v) => v !== e.video_id), e.video_id].slice(-MAX_VIDEOS);
  const factors = factorsFrom(visitor.inputs);
  const score = scoreV1(factors);
  if (score >= settings.threshold && visitor.lead < SCORE_VERSION) {
    visitor.lead = SCORE_VERSION;
    visitor.leadAt = e.timestamp;
    step.events.push({
      ...derived(e, 'high_intent_lead', derivedEventId(e.tenant_id, 'high_intent_lead', e.visitor_id, SCORE_VERSION)),
      lead: { score, score_version: SCORE_VERSION, ...factors },
    });
  }
  state.visitors.set(vKey, visitor);
  step.changed.set(vKey, visitor);
  if (state.visitorOrder.touch(e.tenant_id, vKey) > opts.maxVisitorsPerTenant) {
    forgetVisitor(state, e.tenant_id, first(state.visitorOrder.keys(e.tenant_id))!, step);
    step.evicted.visitors++;
  }

  if (e.source === 'player') session(state, e, settings, step, opts);
  return expire(state, opts, step, e.tenant_id);
}

function first<T>(items: Iterable<T>): T | undefined {
  for (const item of items) return item;
  return undefined;
}

/** Drops a visitor's state (its snapshot in the read model stays). If it comes back it starts from zero. */
function forgetVisitor(state: PartitionState, tenantId: string, key: string, step: Step): void {
  state.visitors.delete(key);
  state.visitorOrder.delete(tenantId, key);
  step.changed.set(key, null);
}

/** Drops a session, open or ended, without deciding anything about it. */
function forgetSession(state: PartitionState, tenantId: string, key: string, step: Step): void {
  state.sessions.delete(key);
  state.ended.delete(key);
  state.sessionOrder.delete(tenantId, key);
  step.changed.set(key, null);
  step.evicted.sessions++;
}

/** Moves stream time to `at` (a tick) and ends the sessions idle past it. */
export function applyTick(state: PartitionState, at: number, opts: RuleOptions, step: Step = newStep()): Step {
  advance(state, at);
  return expire(state, opts, step);
}

function advance(state: PartitionState, at: number): void {
  if (at > state.streamTime) state.streamTime = at;
}

function session(state: PartitionState, e: PlayerEventRecord, settings: IntentSettings, step: Step, opts: RuleOptions): void {
  const key = sessionKey(e.tenant_id, e.session_id);
  if (state.ended.has(key)) return; // a late event of an ended session changes nothing
  const s: SessionState = state.sessions.get(key) ?? {
    tenant_id: e.tenant_id,
    video_id: e.video_id,
    session_id: e.session_id,
    visitor_id: e.visitor_id,
    seenAt: e.received_at,
    lastAt: e.timestamp,
    played: false,
    pitchReached: false,
    ctaShownAt: null,
    ctaClicked: false,
    endedAt: null,
    current_time: 0,
    duration: 0,
    watched_percentage: 0,
    utm_source: null,
    utm_campaign: null,
    ctwa_clid: null,
    external_lead_id: null,
  };
  state.sessions.delete(key); // re-inserted last: the map stays ordered by seenAt
  s.seenAt = Math.max(s.seenAt, e.received_at);
  s.lastAt = Math.max(s.lastAt, e.timestamp);
  if (e.event_name !== 'seek') {
    s.current_time = e.current_time;
    s.duration = e.duration || s.duration;
    s.watched_percentage = Math.max(s.watched_percentage, e.watched_percentage);
  }
  s.utm_source = e.utm_source ?? s.utm_source;
  s.utm_campaign = e.utm_campaign ?? s.utm_campaign;
  s.ctwa_clid = e.ctwa_clid ?? s.ctwa_clid;
  s.external_lead_id = e.external_lead_id ?? s.external_lead_id;
  if (e.event_name === 'video_play' || (e.play_ms ?? 0) > 0) s.played = true;
  if (e.event_name === 'cta_shown' && s.ctaShownAt === null) s.ctaShownAt = e.timestamp;
  if (e.event_name === 'cta_clicked') s.ctaClicked = true;
  if (settings.pitchAtSec !== null && !s.pitchReached && e.event_name !== 'seek' && e.current_time >= settings.pitchAtSec) {
    s.pitchReached = true;
    step.events.push(derived(e, 'reached_pitch', derivedEventId(e.tenant_id, 'reached_pitch', e.session_id), s));
  }
  state.sessions.set(key, s);
  step.changed.set(key, s);
  if (state.sessionOrder.touch(e.tenant_id, key) > opts.maxSessionsPerTenant) {
    forgetSession(state, e.tenant_id, first(state.sessionOrder.keys(e.tenant_id))!, step);
  }
  if (e.event_name === 'session_ended') end(state, key, s, e.timestamp, settings, step);
}

/** Raises the abandonment a session's end means, and moves it to the ended ones. */
function end(state: PartitionState, key: string, s: SessionState, endAt: number, settings: IntentSettings, step: Step): void {
  s.endedAt = state.streamTime;
  state.sessions.delete(key);
  state.ended.set(key, s);
  const base = { ...s, event_name: '', timestamp: endAt, received_at: state.streamTime };
  if (settings.pitchAtSec !== null && s.played && !s.pitchReached) {
    step.events.push(derived(base, 'abandoned_before_pitch', derivedEventId(s.tenant_id, 'abandoned_before_pitch', s.session_id)));
  }
  if (s.ctaShownAt !== null && !s.ctaClicked && endAt - s.ctaShownAt <= settings.offerWindowSec * 1000) {
    step.events.push(derived(base, 'abandoned_after_offer', derivedEventId(s.tenant_id, 'abandoned_after_offer', s.session_id)));
  }
  step.changed.set(key, s);
}

/**
 * Ends the open sessions idle for longer than sessionIdleMs, forgets ended
 * ones past their retention, and forgets visitors idle past visitorTtlMs
 * (those of `tenantId`, or of every tenant on a tick).
 */
function expire(state: PartitionState, opts: RuleOptions, step: Step, tenantId?: string): Step {
  for (const [key, s] of state.sessions) {
    if (state.streamTime - s.seenAt <= opts.sessionIdleMs) break; // ordered by seenAt: the rest are newer
    end(state, key, s, s.lastAt, opts.settings(s.tenant_id, s.video_id), step);
  }
  for (const [key, s] of state.ended) {
    if (state.streamTime - s.endedAt! <= opts.endedRetentionMs) break;
    state.ended.delete(key);
    state.sessionOrder.delete(s.tenant_id, key);
    step.changed.set(key, null);
  }
  for (const tenant of tenantId === undefined ? [...state.visitorOrder.tenants()] : [tenantId]) {
    for (const key of state.visitorOrder.keys(tenant)) {
      const v = state.visitors.get(key);
      // Touched in stream order, so the first one still fresh ends the scan.
      if (v && state.streamTime - (v.seenAt ?? v.lastSeen) <= opts.visitorTtlMs) break;
      forgetVisitor(state, tenant, key, step);
    }
  }
  return step;
}

type DerivedSource = Pick<
  PlayerEventRecord,
  'tenant_id' | 'video_id' | 'session_id' | 'visitor_id' | 'timestamp' | 'received_at' | 'current_time' | 'duration' | 'watched_percentage' | 'utm_source' | 'utm_campaign' | 'ctwa_clid' | 'external_lead_id'
>;

/** A derived event about `from` (the event that triggered it, or the session that ended). */
function derived(from: DerivedSource, name: string, eventId: string, session?: SessionState): PlayerEventRecord {
  return {
    event_id: eventId,
    tenant_id: from.tenant_id,
    video_id: from.video_id,
    session_id: from.session_id,
    visitor_id: from.visitor_id,
    event_name: name,
    timestamp: from.timestamp,
    received_at: from.received_at,
    current_time: from.current_time,
    duration: from.duration,
    watched_percentage: from.watched_percentage,
    play_ms: null,
    focus_ms: null,
    seek_from: null,
    seek_to: null,
    utm_source: from.utm_source ?? session?.utm_source ?? null,
    utm_campaign: from.utm_campaign ?? session?.utm_campaign ?? null,
    ctwa_clid: from.ctwa_clid ?? session?.ctwa_clid ?? null,
    external_lead_id: from.external_lead_id ?? session?.external_lead_id ?? null,
    source: 'derived',
    conversion_value: null,
    conversion_currency: null,
    event_id_from_client: false,
    lead: null,
  };
}
