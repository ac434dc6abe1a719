import { z } from 'zod';

/**
 * The intent settings of tenants (v3) and videos (v2): their bounds and the
 * defaults the Avro schemas fill in for older records. Pure zod, no Node
 * imports: the management API's schemas (and through them the dashboard's
 * types) take them from here.
 */

/** A tenant's high-intent threshold unless it sets one (schema default of tenant v3). */
export const DEFAULT_HIGH_INTENT_THRESHOLD = 70;
/** The offer window of a video unless it sets one (schema default of video v2). */
export const DEFAULT_OFFER_WINDOW_SEC = 60;
/** Bounds of a video's offer window, in seconds. */
export const MIN_OFFER_WINDOW_SEC = 1;
export const MAX_OFFER_WINDOW_SEC = 3600;

/** A Lead Intent Score (0–100) at or above which a visitor counts as a high-intent lead. */
export const HighIntentThreshold = z.number().int().min(0).max(100);
/** Where a video's offer segment (the pitch) starts, in whole seconds of playback. */
export const PitchAtSec = z.number().int().min(0).max(1_000_000);
/** Seconds of stream time after a `cta_shown` within which a session that ends without a `cta_clicked` counts as abandoned after the offer. */
export const OfferWindowSec = z.number().int().min(MIN_OFFER_WINDOW_SEC).max(MAX_OFFER_WINDOW_SEC);
