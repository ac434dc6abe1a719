/**
 * What one ClickHouse insert of the projector touched, in the terms the read
 * API's cache is keyed by (services/api/read-cache.ts). Pure: the projector
 * fills one per insert and reports it twice, as the insert is sent and once
 * it has returned: between the two its rows may or may not be readable, so
 * the cache stores no answer read in that window (read-cache.ts).
 *
 * Scopes are strings: a video's listed events carry the range of timestamps
 * inserted (a page behind the newest events stays valid unless a late event
 * lands in its range); a visitor's score, a visitor's timeline and a
 * tenant's visitor lists are touched as a whole.
 */

const SEP = '\u0000';

/** A video's listed events (events pages), ranged by timestamp. */
export const videoScope = (tenant: string, video: string) => `v${SEP}${tenant}${SEP}${video}`;
/** A visitor's score inputs (every event, signals included) and whether the tenant has seen the visitor. */
export const visitorScope = (tenant: string, visitor: string) => `s${SEP}${tenant}${SEP}${visitor}`;
/** A visitor's timeline (listed events only). */
export const timelineScope = (tenant: string, visitor: string) => `t${SEP}${tenant}${SEP}${visitor}`;
/** A tenant's visitor lists (the visitor read model, `visitors`). */
export const visitorListScope = (tenant: string) => `l${SEP}${tenant}`;

export class InsertTouches {
  /** Ranged scopes: the earliest and latest timestamp (ms) inserted. */
  readonly ranges = new Map<string, [number, number]>();
  /** Scopes touched as a whole. */
  readonly scopes = new Set<string>();

  /** One event row; `listed`: not a player signal (signals feed the score only). */
  event(tenant: string, video: string, visitor: string, ts: number, listed: boolean): void {
    this.scopes.add(visitorScope(tenant, visitor));
    if (!listed) return;
    this.scopes.add(timelineScope(tenant, visitor));
    const key = videoScope(tenant, video);
    // A time that did not parse touches the whole video rather than nothing.
    const [lo, hi] = Number.isFinite(ts) ? [ts, ts] : [Number.NEGATIVE_INFINITY, Number.POSITIVE_INFINITY];
    const r = this.ranges.get(key);
    if (!r) this.ranges.set(key, [lo, hi]);
    else {
      if (lo < r[0]) r[0] = lo;
      if (hi > r[1]) r[1] = hi;
    }
  }

  /** One snapshot of the visitor read model. */
  visitorSnapshot(tenant: string): void {
    this.scopes.add(visitorListScope(tenant));
  }

  get empty(): boolean {
    return this.ranges.size === 0 && this.scopes.size === 0;
  }
}

/**
 * Where the projector reports what each insert touched: as it sends the
 * insert (its rows may be readable before the call returns) and once the
 * call has returned or failed. Absent when nobody in the process listens.
 */
export interface InsertListener {
  inserting(touches: InsertTouches): void;
  insertDone(touches: InsertTouches): void;
}
