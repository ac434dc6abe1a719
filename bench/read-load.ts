/**
 * Child process of the reads-concurrency phase: the mixed run's reads, a
 * closed loop of `conns` connections over a list of paths, in a process of
 * its own so that their client does not share an event loop with the
 * intake's sender, whose latencies are the figure being measured.
 *
 * IPC: receives one ReadLoadJob, answers one ReadLoadResult, exits.
 */
import { HttpClient } from './http-client.ts';

export interface ReadLoadJob {
  url: string;
  headers: Record<string, string>;
  /** Asked in turn across the connections; `kind` groups the latencies. */
  paths: { kind: string; path: string }[];
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
  for (const p of job.paths) lat[p.kind] ??= [];
  let errors = 0;
  let firstError: string | undefined;
  let i = 0;
  const t0 = performance.now();
  const end = t0 + job.ms;
  const loop = async () => {
    while (performance.now() < end) {
      const { kind, path } = job.paths[i++ % job.paths.length]!;
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
  await Promise.all(Array.from({ length: job.conns }, loop));
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
