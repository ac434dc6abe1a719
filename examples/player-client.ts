/**
 * An example of the player side of `POST /v1/collect`: how to send events so
 * that retries never record one twice. Plain TypeScript with no imports; it
 * runs in browsers and in Node 20+ (fetch, crypto.randomUUID, AbortSignal).
 *
 *   const collector = new EventCollector({ endpoint: 'https://analytics.example.com/v1/collect', playerKey: 'pk_…' });
 *   collector.track({ event_name: 'video_play', video_id: 'vid_…', session_id, visitor_id, current_time: 0, duration: 120, watched_percentage: 0 });
 *   addEventListener('pagehide', () => collector.beacon());
 *
 * The rules it follows (docs/api.md, "Retries"):
 *
 * 1. Each event gets its `event_id` (a random UUID) and its `occurred_at`
 *    once, when it happens. Every resend carries both unchanged, so the
 *    service records the event once however often it arrives.
 * 2. 503, 429, 408, other 5xx, a network error and a timeout mean "maybe not
 *    recorded": resend the same events after a backoff (exponential with full
 *    jitter, never sooner than Retry-After).
 * 3. Any other 4xx means "refused, and the same body will be refused
 *    again": do not resend; report it.
 * 4. After the last attempt the events go back to the queue with their ids
 *    and are tried again at the next flush.
 */

/** An event as the player observes it (docs/api.md, `POST /v1/collect`). */
export interface PlayerEventInput {
  event_name: string;
  video_id: string;
  session_id: string;
  visitor_id: string;
  current_time: number;
  duration: number;
  watched_percentage: number;
  play_ms?: number;
  focus_ms?: number;
  from?: number;
  to?: number;
  utm_source?: string;
  utm_campaign?: string;
  ctwa_clid?: string;
  external_lead_id?: string;
}

/** An event as it is sent, stamped once with its idempotency key and time. */
export interface CollectEvent extends PlayerEventInput {
  event_id: string;
  occurred_at: string;
}

/** How often and how patiently one batch is resent. */
export interface RetryPolicy {
  /** Attempts per batch before it goes back to the queue (default 6). */
  maxAttempts: number;
  /** First backoff ceiling; doubles per attempt (default 500 ms). */
  baseDelayMs: number;
  /** Largest backoff ceiling (default 30 s). */
  maxDelayMs: number;
}

/** What one attempt produced: a status with its Retry-After header, or no answer. */
export type AttemptResult = { status: number; retryAfter?: string | null } | { error: 'network' | 'timeout' };

/** What to do after an attempt. */
export type NextStep = { kind: 'done' } | { kind: 'retry'; delayMs: number; reason: string } | { kind: 'give_up'; reason: string } | { kind: 'rejected'; status: number };

const RETRYABLE = new Set([408, 429, 500, 502, 503, 504]);

/** Seconds or an HTTP date, as milliseconds from `now`; undefined when absent or unreadable. */
export function retryAfterMs(header: string | null | undefined, now = Date.now()): number | undefined {
  if (!header) return undefined;
  const s = header.trim();
  if (/^\d+$/.test(s)) return Number(s) * 1000;
  // An HTTP date starts with the day's name ("Wed, 21 Oct 2015 07:28:00 GMT").
  if (!/^[A-Za-z]{3}/.test(s)) return undefined;
  const at = Date.parse(s);
  return Number.isNaN(at) ? undefined : Math.max(0, at - now);
}

/**
 * The retry decision, pure: `attempt` is the number of the attempt that just
 * ended (1 for the first). The backoff is "full jitter": a random wait up to
 * min(maxDelay, base·2^(attempt−1)), raised to Retry-After when the service
 * asked for more.
 */
export function nextStep(result: AttemptResult, attempt: number, policy: RetryPolicy, random: () => number = Math.random, now = Date.now()): NextStep {
  let reason: string;
  let floorMs = 0;
  if ('error' in result) {
    reason = result.error;
  } else if (result.status >= 200 && result.status < 300) {
    return { kind: 'done' };
  } else if (RETRYABLE.has(result.status) || result.status >= 500) {
    reason = `status ${result.status}`;
    floorMs = retryAfterMs(result.retryAfter, now) ?? 0;
  } else {
    return { kind: 'rejected', status: result.status };
  }
  if (attempt >= policy.maxAttempts) return { kind: 'give_up', reason };
  const ceiling = Math.min(policy.maxDelayMs, policy.baseDelayMs * 2 ** (attempt - 1));
  return { kind: 'retry', delayMs: Math.max(floorMs, Math.floor(random() * ceiling)), reason };
}

/** Where and how {@link EventCollector} sends; only the endpoint and the key are required. */
export interface CollectorOptions {
  /** The collect URL, e.g. `https://analytics.example.com/v1/collect`. */
  endpoint: string;
  /** The tenant's public player key (`pk_…`). */
  playerKey: string;
  /** Most events per request (default 50; the service takes up to 500). */
  maxBatch?: number;
  /** How long tracked events wait to share a request (default 2 s). */
  flushDelayMs?: number;
  /** A request without an answer after this long counts as a timeout (default 10 s). */
  requestTimeoutMs?: number;
  /** Most events kept while the service is unreachable; the oldest go first (default 1000). */
  maxQueued?: number;
  retry?: Partial<RetryPolicy>;
  /** Events the service refused for good (4xx other than 408/429), with the answer. */
  onRejected?: (events: CollectEvent[], status: number, body: string) => void;
  /** Called before each wait for a resend. */
  onRetry?: (info: { attempt: number; reason: string; delayMs: number; events: CollectEvent[] }) => void;
  /** Events dropped because the queue was full. */
  onDropped?: (events: CollectEvent[]) => void;
  fetch?: typeof fetch;
  now?: () => number;
  random?: () => number;
  newId?: () => string;
}

/** What {@link EventCollector.flush} achieved. */
export interface FlushResult {
  accepted: number;
  rejected: number;
  /** Still queued (with their ids) after a batch ran out of attempts. */
  pending: number;
}

interface Beacon {
  sendBeacon(url: string, data: Blob): boolean;
}

/**
 * Queues player events and sends them in batches; see the top of this file
 * for the retry rules. One flush runs at a time, so batches go out in order.
 */
export class EventCollector {
  readonly #opts: CollectorOptions;
  readonly #policy: RetryPolicy;
  #queue: CollectEvent[] = [];
  /** The batch being sent, kept so a beacon can resend it if the page goes away. */
  #inFlight: CollectEvent[] = [];
  #flushing: Promise<FlushResult> | undefined;
  #timer: ReturnType<typeof setTimeout> | undefined;

  constructor(opts: CollectorOptions) {
    this.#opts = opts;
    this.#policy = { maxAttempts: 6, baseDelayMs: 500, maxDelayMs: 30_000, ...opts.retry };
  }

  /** Events waiting to be sent (not counting the batch in flight). */
  get queued(): number {
    return this.#queue.length;
  }

  /** Stamps the event with its id and time (once, now) and queues it. */
  track(input: PlayerEventInput): CollectEvent {
    const now = this.#opts.now ?? Date.now;
    const event: CollectEvent = {
      ...input,
      event_id: (this.#opts.newId ?? (() => crypto.randomUUID()))(),
      occurred_at: new Date(now()).toISOString(),
    };
    this.#queue.push(event);
    this.#trim();
    if (this.#queue.length >= this.#batchSize()) void this.flush();
    else this.#timer ??= setTimeout(() => void this.flush(), this.#opts.flushDelayMs ?? 2000);
    return event;
  }

  /** Sends everything queued; resolves when every batch is accepted, refused, or back in the queue. */
  flush(): Promise<FlushResult> {
    clearTimeout(this.#timer);
    this.#timer = undefined;
    this.#flushing ??= this.#drain().finally(() => {
      this.#flushing = undefined;
    });
    return this.#flushing;
  }

  /**
   * For `pagehide`: hands what is queued and what is in flight to
   * navigator.sendBeacon, with the same ids. Should the in-flight request
   * also land, the service keeps one copy of each event.
   */
  beacon(): boolean {
    const nav = (globalThis as { navigator?: Partial<Beacon> }).navigator;
    if (!nav?.sendBeacon) return false;
    const events = [...this.#inFlight, ...this.#queue];
    const url = `${this.#opts.endpoint}?key=${encodeURIComponent(this.#opts.playerKey)}`;
    let ok = true;
    for (let i = 0; i < events.length; i += this.#batchSize()) {
      // text/plain keeps the beacon a simple request (no CORS preflight).
      const body = new Blob([JSON.stringify({ events: events.slice(i, i + this.#batchSize()) })], { type: 'text/plain' });
      ok = nav.sendBeacon.call(nav, url, body) && ok;
    }
    if (ok) this.#queue = [];
    return ok;
  }

  async #drain(): Promise<FlushResult> {
    const result: FlushResult = { accepted: 0, rejected: 0, pending: 0 };
    const giveBack: CollectEvent[] = [];
    while (this.#queue.length > 0) {
      const batch = this.#queue.splice(0, this.#batchSize());
      this.#inFlight = batch;
      const outcome = await this.#send(batch);
      this.#inFlight = [];
      if (outcome === 'accepted') result.accepted += batch.length;
      else if (outcome === 'rejected') result.rejected += batch.length;
      else giveBack.push(...batch);
    }
    // Unsent events keep their ids: whenever they go out again, a copy that
    // did arrive earlier makes them repeats, not new events.
    this.#queue.unshift(...giveBack);
    this.#trim();
    result.pending = this.#queue.length;
    return result;
  }

  async #send(batch: CollectEvent[]): Promise<'accepted' | 'rejected' | 'pending'> {
    const body = JSON.stringify({ events: batch });
    const doFetch = this.#opts.fetch ?? fetch;
    for (let attempt = 1; ; attempt++) {
      let result: AttemptResult;
      let text = '';
      try {
        const res = await doFetch(this.#opts.endpoint, {
          method: 'POST',
          headers: { 'content-type': 'application/json', 'x-player-key': this.#opts.playerKey },
          body,
          signal: AbortSignal.timeout(this.#opts.requestTimeoutMs ?? 10_000),
        });
        text = await res.text();
        result = { status: res.status, retryAfter: res.headers.get('retry-after') };
      } catch (err) {
        result = { error: (err as { name?: string }).name === 'TimeoutError' ? 'timeout' : 'network' };
      }
      const step = nextStep(result, attempt, this.#policy, this.#opts.random);
      switch (step.kind) {
        case 'done':
          return 'accepted';
        case 'rejected':
          this.#opts.onRejected?.(batch, step.status, text);
          return 'rejected';
        case 'give_up':
          return 'pending';
        case 'retry':
          this.#opts.onRetry?.({ attempt, reason: step.reason, delayMs: step.delayMs, events: batch });
          await new Promise((r) => setTimeout(r, step.delayMs));
          break;
        default: {
          const _exhaustive: never = step;
          return _exhaustive;
        }
      }
    }
  }

  #batchSize(): number {
    return Math.min(Math.max(this.#opts.maxBatch ?? 50, 1), 500);
  }

  #trim(): void {
    const max = this.#opts.maxQueued ?? 1000;
    if (this.#queue.length <= max) return;
    this.#opts.onDropped?.(this.#queue.splice(0, this.#queue.length - max));
  }
}
