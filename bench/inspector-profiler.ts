import { Session } from 'node:inspector/promises';
import type { CpuProfile } from './cpu-profile.ts';

/**
 * The V8 CPU profiler of this process, started and stopped on request (over
 * IPC by the bench's children), so that start-up (module loading, TypeScript
 * stripping, chdb) is left out of a profile, unlike with --cpu-prof.
 */
export class InspectorProfiler {
  #session: Session | undefined;

  async start(samplingIntervalUs = 500): Promise<void> {
    if (this.#session) throw new Error('a CPU profile is already being taken');
    const session = new Session();
    session.connect();
    this.#session = session;
    await session.post('Profiler.enable');
    await session.post('Profiler.setSamplingInterval', { interval: samplingIntervalUs });
    await session.post('Profiler.start');
  }

  async stop(): Promise<CpuProfile> {
    const session = this.#session;
    if (!session) throw new Error('no CPU profile is being taken');
    this.#session = undefined;
    const { profile } = await session.post('Profiler.stop');
    session.disconnect();
    return profile as unknown as CpuProfile;
  }
}

/**
 * Answers `{ op: 'profileStart' | 'profileStop' }` IPC messages of the parent
 * with `{ type: 'profile', profile? , error? }` (for children that have no
 * request protocol of their own).
 */
export function answerProfileRequests(): void {
  const profiler = new InspectorProfiler();
  process.on('message', (m: { op?: string }) => {
    if (m.op !== 'profileStart' && m.op !== 'profileStop') return;
    const work = m.op === 'profileStart' ? profiler.start().then(() => ({ type: 'profile', started: true })) : profiler.stop().then((profile) => ({ type: 'profile', profile }));
    work.then(
      (r) => process.send?.(r),
      (err: unknown) => process.send?.({ type: 'profile', error: err instanceof Error ? err.message : String(err) }),
    );
  });
}

/** Asks a child that runs answerProfileRequests() to start or stop its profiler. */
export function childProfile(child: import('node:child_process').ChildProcess, op: 'profileStart' | 'profileStop'): Promise<{ profile?: CpuProfile }> {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      child.off('message', onMessage);
      reject(new Error(`child ${child.pid}: no answer to ${op}`));
    }, 120_000);
    const onMessage = (m: { type?: string; error?: string; profile?: CpuProfile }) => {
      if (m.type !== 'profile') return;
      clearTimeout(timer);
      child.off('message', onMessage);
      if (m.error) reject(new Error(`child ${child.pid}: ${m.error}`));
      else resolve(m);
    };
    child.on('message', onMessage);
    child.send({ op });
  });
}
