/**
 * Event names of spec 6.1, who raises each, and the short names the events
 * API shows (spec 2.2). This table is the single source for validation,
 * webhook selection and the documentation of the mapping. Every event is
 * delivered; only `player` events may come from /v1/collect: `server` ones
 * come from the conversion intake, `derived` ones from the derived-events
 * service (services/derived).
 */
export const WEBHOOK_EVENTS = {
  player_loaded: { origin: 'player', short: 'loaded' },
  video_view: { origin: 'player', short: 'view' },
  video_play: { origin: 'player', short: 'play' },
  video_pause: { origin: 'player', short: 'pause' },
  video_resume: { origin: 'player', short: 'resume' },
  video_unmute: { origin: 'player', short: 'unmute' },
  watched_25_percent: { origin: 'player', short: 'watched_25' },
  watched_50_percent: { origin: 'player', short: 'watched_50' },
  watched_75_percent: { origin: 'player', short: 'watched_75' },
  watched_90_percent: { origin: 'player', short: 'watched_90' },
  cta_shown: { origin: 'player', short: 'cta_shown' },
  cta_clicked: { origin: 'player', short: 'cta_clicked' },
  session_ended: { origin: 'player', short: 'session_ended' },
  reached_pitch: { origin: 'derived', short: 'reached_pitch' },
  high_intent_lead: { origin: 'derived', short: 'high_intent_lead' },
  conversion: { origin: 'server', short: 'conversion' },
  abandoned_before_pitch: { origin: 'derived', short: 'abandoned_before_pitch' },
  abandoned_after_offer: { origin: 'derived', short: 'abandoned_after_offer' },
} as const;

export type WebhookEventName = keyof typeof WEBHOOK_EVENTS;

/** Player signals: they feed the score but are neither listed as events nor delivered. */
export const PLAYER_SIGNALS = ['heartbeat', 'seek'] as const;
export type PlayerSignal = (typeof PLAYER_SIGNALS)[number];

export const WEBHOOK_EVENT_NAMES = Object.keys(WEBHOOK_EVENTS) as WebhookEventName[];
export type EventOrigin = (typeof WEBHOOK_EVENTS)[WebhookEventName]['origin'];

/** The events of one origin, in the order of spec 6.1. */
export function eventsOf(origin: EventOrigin): WebhookEventName[] {
  return WEBHOOK_EVENT_NAMES.filter((n) => WEBHOOK_EVENTS[n].origin === origin);
}

export const PLAYER_EVENT_NAMES = eventsOf('player');

/** Names a player may send to /v1/collect: the player events and the signals. */
export const COLLECTABLE_EVENT_NAMES = [...PLAYER_EVENT_NAMES, ...PLAYER_SIGNALS] as const;

export function isSignal(name: string): name is PlayerSignal {
  return (PLAYER_SIGNALS as readonly string[]).includes(name);
}

/** Short name for the events API, e.g. `watched_90_percent` → `watched_90`. */
export function shortName(name: string): string {
  return (WEBHOOK_EVENTS as Record<string, { short: string }>)[name]?.short ?? name;
}
