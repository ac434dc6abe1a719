import { mkdirSync, mkdtempSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { privateDataDir } from './data-dir.ts';

const mode = (path: string) => statSync(path).mode & 0o777;

describe('privateDataDir', () => {
  const root = mkdtempSync(join(tmpdir(), 'va-data-dir-'));
  afterAll(() => rmSync(root, { recursive: true, force: true }));

  it('creates the directory for its owner only', () => {
    const dir = join(root, 'new', 'data');
    privateDataDir(dir);
    expect(mode(dir)).toBe(0o700);
  });

  it('takes group and other access away from an existing directory and what the service keeps in it', () => {
    const dir = join(root, 'old');
    mkdirSync(join(dir, 'clickhouse'), { recursive: true, mode: 0o755 });
    writeFileSync(join(dir, 'admin-token'), 'adm_x\n', { mode: 0o644 });
    writeFileSync(join(dir, 'secrets-key'), 'k\n', { mode: 0o666 });
    writeFileSync(join(dir, 'operator-notes.sh'), '#!/bin/sh\n', { mode: 0o755 });
    privateDataDir(dir);
    expect(mode(dir)).toBe(0o700);
    expect(mode(join(dir, 'clickhouse'))).toBe(0o700);
    expect(mode(join(dir, 'admin-token'))).toBe(0o600);
    expect(mode(join(dir, 'secrets-key'))).toBe(0o600);
    // Not the service's: left as it was (the directory's own mode already keeps others out).
    expect(mode(join(dir, 'operator-notes.sh'))).toBe(0o755);
  });
});
