/**
 * Child process of the reads-concurrency phase: the mixed run's reads, a
 * closed loop of `conns` connections, each asking one kind of read over that
 * kind's paths (so that a slow kind holds its own connections, not all of
 * them), in a process of its own so that their client does not share an
 * event loop with the intake's sender, whose latencies are the figure being
 * measured.
 *
 * IPC: receives one ReadLoadJob, answers one ReadLoadResult, exits.
 */
import { HttpClient } from './http-client.ts';

export interface ReadLoadJob {
  url: string;
  headers: Record<string, string>;
  /** kind → its paths, asked in turn by that kind's connections; the connections go to the kinds in turn. */
  paths: Record<string, string[]>;
  conns: number;
  ms: number;
}

export interface ReadLoadResult {
  seconds: number;
  /** kind → latencies (ms) of the 200 answers */
  lat: Record<string, number[]>;
  errors: number;
  firstError?: string;
}

async function run(job: ReadLoadJob): Promise<ReadLoadResult> {
  const client = new HttpClient(job.url, job.conns + 2);
  const lat: Record<string, number[]> = {};
  const kinds = Object.keys(job.paths);
  const next: Record<string, number> = {};
  for (const kind of kinds) {
    lat[kind] = [];
    next[kind] = 0;
  }
  let errors = 0;
  let firstError: string | undefined;
  const t0 = performance.now();
  const end = t0 + job.ms;
  const loop = async (kind: string) => {
    const paths = job.paths[kind]!;
    while (performance.now() < end) {
      const path = paths[next[kind]!++ % paths.length]!;
      const t = performance.now();
      try {
        const res = await client.request('GET', path, { headers: job.headers });
        if (res.status === 200) lat[kind]!.push(performance.now() - t);
        else {
          errors++;
          firstError ??= `HTTP ${res.status} ${path}: ${res.body.slice(0, 160)}`;
        }
      } catch (err) {
        errors++;
        firstError ??= String(err);
      }
    }
  };
  await Promise.all(Array.from({ length: job.conns }, (_, c) => loop(kinds[c % kinds.length]!)));
  client.close();
  return { seconds: (performance.now() - t0) / 1000, lat, errors, firstError };
}

process.once('message', (job: ReadLoadJob) => {
  run(job).then(
    (r) => process.send!(r, () => process.exit(0)),
    (err: unknown) => {
      process.stderr.write(`read load failed: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`);
      process.exit(1);
    },
  );
});
