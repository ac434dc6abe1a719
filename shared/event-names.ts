/**
 * Event names of spec 6.1, their status, and the short names the events API
 * shows (spec 2.2). This table is the single source for validation, webhook
 * selection and the documentation of the mapping.
 */
export const WEBHOOK_EVENTS = {
  player_loaded: { status: 'active', short: 'loaded' },
  video_view: { status: 'active', short: 'view' },
  video_play: { status: 'active', short: 'play' },
  video_pause: { status: 'active', short: 'pause' },
  video_resume: { status: 'active', short: 'resume' },
  video_unmute: { status: 'active', short: 'unmute' },
  watched_25_percent: { status: 'active', short: 'watched_25' },
  watched_50_percent: { status: 'active', short: 'watched_50' },
  watched_75_percent: { status: 'active', short: 'watched_75' },
  watched_90_percent: { status: 'active', short: 'watched_90' },
  cta_shown: { status: 'active', short: 'cta_shown' },
  cta_clicked: { status: 'active', short: 'cta_clicked' },
  session_ended: { status: 'active', short: 'session_ended' },
  reached_pitch: { status: 'coming_soon', short: 'reached_pitch' },
  high_intent_lead: { status: 'coming_soon', short: 'high_intent_lead' },
  conversion: { status: 'coming_soon', short: 'conversion' },
  abandoned_before_pitch: { status: 'coming_soon', short: 'abandoned_before_pitch' },
  abandoned_after_offer: { status: 'coming_soon', short: 'abandoned_after_offer' },
} as const;

export type WebhookEventName = keyof typeof WEBHOOK_EVENTS;

/** Player signals: they feed the score but are neither listed as events nor delivered. */
export const PLAYER_SIGNALS = ['heartbeat', 'seek'] as const;
export type PlayerSignal = (typeof PLAYER_SIGNALS)[number];

export const WEBHOOK_EVENT_NAMES = Object.keys(WEBHOOK_EVENTS) as WebhookEventName[];
export const ACTIVE_EVENT_NAMES = WEBHOOK_EVENT_NAMES.filter((n) => WEBHOOK_EVENTS[n].status === 'active');

/** Names a player may send to /v1/collect: the active events and the signals. */
export const COLLECTABLE_EVENT_NAMES = [...ACTIVE_EVENT_NAMES, ...PLAYER_SIGNALS] as const;

/** Every name stored on player.events.v1 (collect, plus server-side conversions). */
export type StoredEventName = (typeof COLLECTABLE_EVENT_NAMES)[number] | 'conversion';

export function isSignal(name: string): name is PlayerSignal {
  return (PLAYER_SIGNALS as readonly string[]).includes(name);
}

/** Short name for the events API, e.g. `watched_90_percent` → `watched_90`. */
export function shortName(name: string): string {
  return (WEBHOOK_EVENTS as Record<string, { short: string }>)[name]?.short ?? name;
}
