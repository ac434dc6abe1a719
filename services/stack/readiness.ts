/**
 * What /readyz answers, from the results of its reachability probes and the
 * health of each component. Pure: the probes run elsewhere (ops.routes.ts).
 */

/** A component's problems by the name of the part that has it; empty when healthy. */
export type Problems = Record<string, string>;

/** A component /readyz lists under `name` (the projector, the fan-out, the config store, …). */
export interface HealthSource {
  name: string;
  problems(): Problems;
}

/** The body of /readyz. */
export interface ReadinessBody {
  status: 'ready' | 'not_ready';
  /** Every check by name: `ok`, or `error: ` and what is wrong. */
  checks: Record<string, string>;
}

/** What /readyz answers anyone: each check's state, never what is wrong. */
export interface PublicReadinessBody {
  status: 'ready' | 'not_ready';
  checks: Record<string, 'ok' | 'error'>;
}

/**
 * The body without the problems' text. /readyz needs no credential, and
 * the text of a driver's error names hosts, ports, users and databases;
 * it goes to the log instead (ops.routes.ts).
 */
export function publicReadiness(body: ReadinessBody): PublicReadinessBody {
  return {
    status: body.status,
    checks: Object.fromEntries(Object.entries(body.checks).map(([name, check]) => [name, check === 'ok' ? 'ok' : 'error'])),
  };
}

/** One component's check: `ok`, or `error: part: why; part: why`. */
export function componentCheck(problems: Problems): string {
  const entries = Object.entries(problems);
  return entries.length === 0 ? 'ok' : `error: ${entries.map(([part, why]) => `${part}: ${why}`).join('; ')}`;
}

/**
 * The probes' results (already `ok` or `error: …`) followed by each
 * component's check, in the order given; ready only when every one is `ok`.
 */
export function readiness(probes: Record<string, string>, components: readonly { name: string; problems: Problems }[]): { ready: boolean; body: ReadinessBody } {
  const checks: Record<string, string> = { ...probes };
  for (const c of components) checks[c.name] = componentCheck(c.problems);
  const ready = Object.values(checks).every((v) => v === 'ok');
  return { ready, body: { status: ready ? 'ready' : 'not_ready', checks } };
}
