import { cpSync, mkdirSync, readdirSync } from 'node:fs';
import { createRequire } from 'node:module';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

const require = createRequire(import.meta.url);
const ROOT = fileURLToPath(new URL('../..', import.meta.url));

/**
 * node_modules/kafkajs copied to `dir` as every patch of patches/ but
 * `patchFile` leaves it, by patch-package's own reader and applier: the
 * whole sequence reversed (last first), then the others applied again in
 * order. Answers the copy's root. Throws when a later patch edits the same
 * lines and cannot go on without it (010 after 004), with a message that
 * says "does not apply without".
 */
export function kafkajsWithout(dir: string, patchFile: string): string {
  const { readPatch } = require('patch-package/dist/patch/read');
  const { reversePatch } = require('patch-package/dist/patch/reverse');
  const { executeEffects } = require('patch-package/dist/patch/apply');
  const { getPackageDetailsFromPatchFilename } = require('patch-package/dist/PackageDetails');
  mkdirSync(join(dir, 'node_modules'), { recursive: true });
  cpSync(join(ROOT, 'node_modules/kafkajs'), join(dir, 'node_modules/kafkajs'), { recursive: true });
  const files = readdirSync(join(ROOT, 'patches')).filter((f) => f.startsWith('kafkajs+') && f.endsWith('.patch')).sort();
  const read = (file: string) => readPatch({ patchFilePath: join(ROOT, 'patches', file), patchDetails: getPackageDetailsFromPatchFilename(file), patchDir: 'patches' });
  const run = (effects: unknown, what: string) => {
    try {
      executeEffects(effects, { dryRun: true, cwd: dir, bestEffort: false });
    } catch {
      throw new Error(what);
    }
    executeEffects(effects, { dryRun: false, cwd: dir, bestEffort: false });
  };
  for (const file of [...files].reverse()) run(reversePatch(read(file)), `node_modules/kafkajs does not hold patches/${file} as it is now: run npm ci`);
  for (const file of files) if (file !== patchFile) run(read(file), `patches/${file} does not apply without ${patchFile}`);
  return join(dir, 'node_modules/kafkajs');
}

/** A small deterministic generator of numbers in [0, 1), so a failing input can be replayed from its seed. */
export function seededRandom(seed: number): () => number {
  let s = seed >>> 0;
  return () => {
    s = (Math.imul(s, 1664525) + 1013904223) >>> 0;
    return s / 2 ** 32;
  };
}
