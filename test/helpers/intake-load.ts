import { randomUUID } from 'node:crypto';
import { vi } from 'vitest';

/** One event as the load sends it; `visitor` is unique per event, so it names the event in reads and webhook bodies. */
export interface LoadEvent {
  eventId: string;
  visitor: string;
  name: string;
  videoId: string;
}

/** One request of the load and everything that happened to it. */
export interface LoadRequest {
  seq: number;
  events: LoadEvent[];
  firstSentAt: number;
  /** When a 202 came back, if one did. */
  acceptedAt?: number;
  /** Status of every try: 0 for a network error or a timeout (the answer was lost). */
  tries: { at: number; status: number }[];
  outcome: 'pending' | 'accepted' | 'refused' | 'gave_up';
}

export interface IntakeLoadOptions {
  /** The intake's base URL (read at every try, so it may change). */
  url: () => string;
  playerKey: string;
  videoId: string;
  /** Target requests per second (open loop: the schedule does not wait for answers). */
  rps: number;
  /** Stop issuing new requests after this many seconds… */
  seconds: number;
  /** …or after this many requests, whichever comes first. */
  maxRequests: number;
  /** Most requests outstanding at once; past it the schedule falls behind instead of piling up. */
  concurrency: number;
  eventsPerRequest: number;
  /** Event name of the n-th event sent. */
  eventName: (n: number) => string;
  /** A request is given up this long after it was first sent. */
  retryForMs: number;
  /** Distinguishes the visitors of this run. */
  tag: string;
}

/**
 * Steady player traffic to POST /v1/collect. Each event carries its own
 * client `event_id` (UUID) and a unique visitor id. A 503, a network error or
 * a timeout is retried, like a player does, with the very same body (same
 * event ids), until a 202 or `retryForMs`; any 4xx is final.
 */
export function startIntakeLoad(o: IntakeLoadOptions) {
  const requests: LoadRequest[] = [];
  const startedAt = Date.now();
  let issued = 0;
  let outstanding = 0;
  let eventSeq = 0;
  let stopped = false;
  const running = new Set<Promise<void>>();

  const send = async (req: LoadRequest, body: string): Promise<void> => {
    for (let delay = 200; ; delay = Math.min(delay * 2, 2_000)) {
      let status = 0;
      let retryAfterMs = 0;
      try {
        const res = await fetch(`${o.url()}/v1/collect`, {
          method: 'POST',
          headers: { 'content-type': 'application/json', 'x-player-key': o.playerKey },
          body,
          signal: AbortSignal.timeout(10_000),
        });
        status = res.status;
        retryAfterMs = Number(res.headers.get('retry-after') ?? 0) * 1000;
        await res.arrayBuffer();
      } catch {
        status = 0;
      }
      const at = Date.now();
      req.tries.push({ at, status });
      if (status === 202) {
        req.acceptedAt = at;
        req.outcome = 'accepted';
        return;
      }
      if (status >= 400 && status < 500) {
        req.outcome = 'refused';
        return;
      }
      if (at - req.firstSentAt > o.retryForMs) {
        req.outcome = 'gave_up';
        return;
      }
      await new Promise((r) => setTimeout(r, Math.min(Math.max(delay, retryAfterMs), 2_000)));
    }
  };

  /** Sends one request of `events` outside the schedule (a probe), with the same retry rules. */
  const sendOne = (events: Omit<LoadEvent, 'eventId'>[]): { request: LoadRequest; done: Promise<void> } => {
    const request: LoadRequest = {
      seq: -1,
      events: events.map((e) => ({ ...e, eventId: randomUUID() })),
      firstSentAt: Date.now(),
      tries: [],
      outcome: 'pending',
    };
    requests.push(request);
    const done = send(request, bodyOf(request.events));
    running.add(done);
    void done.finally(() => running.delete(done));
    return { request, done };
  };

  const bodyOf = (events: LoadEvent[]): string =>
    JSON.stringify({
      events: events.map((e, i) => ({
        event_id: e.eventId,
        event_name: e.name,
        video_id: e.videoId,
        session_id: `ses_${e.visitor.slice(4)}`,
        visitor_id: e.visitor,
        current_time: i,
        duration: 120,
        watched_percentage: 0,
      })),
    });

  const tick = setInterval(() => {
    const elapsedS = (Date.now() - startedAt) / 1000;
    if (stopped || elapsedS >= o.seconds || issued >= o.maxRequests) {
      clearInterval(tick);
      return;
    }
    const due = Math.min(Math.floor(elapsedS * o.rps), o.maxRequests);
    while (issued < due && outstanding < o.concurrency) {
      const events: LoadEvent[] = Array.from({ length: o.eventsPerRequest }, () => {
        const n = eventSeq++;
        return { eventId: randomUUID(), visitor: `vis_${o.tag}_${n}`, name: o.eventName(n), videoId: o.videoId };
      });
      const request: LoadRequest = { seq: issued++, events, firstSentAt: Date.now(), tries: [], outcome: 'pending' };
      requests.push(request);
      outstanding++;
      const done = send(request, bodyOf(events)).finally(() => outstanding--);
      running.add(done);
      void done.finally(() => running.delete(done));
    }
  }, 10);

  return {
    requests,
    startedAt,
    sendOne,
    /** True while the schedule still issues requests. */
    get issuing(): boolean {
      return !stopped && (Date.now() - startedAt) / 1000 < o.seconds && issued < o.maxRequests;
    },
    /** Stops issuing and waits (at most `timeoutMs`) for outstanding requests and their retries. */
    async stop(timeoutMs: number): Promise<void> {
      stopped = true;
      clearInterval(tick);
      await vi.waitFor(
        () => {
          if (running.size > 0) throw new Error(`${running.size} intake requests still retrying ${timeoutMs} ms after the load stopped`);
        },
        { timeout: timeoutMs, interval: 250 },
      );
    },
    /** Resolves when the schedule has issued everything and every request is settled. */
    async finished(timeoutMs: number): Promise<void> {
      const deadline = Date.now() + timeoutMs;
      // Not a failure by itself: stop() below stops the schedule and fails if requests are still out.
      await vi
        .waitFor(
          () => {
            if (this.issuing) throw new Error('still issuing');
          },
          { timeout: timeoutMs, interval: 100 },
        )
        .catch(() => undefined);
      await this.stop(Math.max(0, deadline - Date.now()));
    },
  };
}

export type IntakeLoad = ReturnType<typeof startIntakeLoad>;
