import { existsSync, mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { chromium, type BrowserContext, type Page } from 'playwright-core';

/** Debian's Chromium; CI installs it with infra/browser/install-chromium.sh. */
export const CHROMIUM_PATH = '/usr/bin/chromium';

/** Headless, no sandbox (root in containers), and nothing that talks to the network on its own. */
export const CHROMIUM_ARGS = [
  '--headless',
  '--no-sandbox',
  '--disable-gpu',
  '--disable-quic',
  '--no-first-run',
  '--disable-background-networking',
  '--disable-component-update',
  '--disable-sync',
];

export const SCREENSHOT_DIR = resolve(import.meta.dirname, '..', '..', 'test-output', 'screenshots');

export interface Browser {
  context: BrowserContext;
  page: Page;
  close(): Promise<void>;
}

/**
 * Real headless Chromium with a fresh user data directory (no cookies,
 * storage or cache from an earlier run). Fails with the fix in the message
 * when Chromium is not installed.
 */
export async function launchBrowser(opts: { permissions?: string[] } = {}): Promise<Browser> {
  if (!existsSync(CHROMIUM_PATH)) {
    throw new Error(`Chromium is not installed at ${CHROMIUM_PATH}: run infra/browser/install-chromium.sh`);
  }
  const userDataDir = mkdtempSync(join(tmpdir(), 'va-chromium-'));
  const context = await chromium.launchPersistentContext(userDataDir, {
    executablePath: CHROMIUM_PATH,
    args: CHROMIUM_ARGS,
    headless: true,
    viewport: { width: 1280, height: 900 },
    locale: 'en-US',
    timezoneId: 'UTC',
    permissions: opts.permissions ?? [],
  });
  const page = context.pages()[0] ?? (await context.newPage());
  return {
    context,
    page,
    async close() {
      await context.close().catch(() => {});
      rmSync(userDataDir, { recursive: true, force: true });
    },
  };
}

/** A full-page PNG under test-output/screenshots/ for a person to look at. */
export async function screenshot(page: Page, name: string): Promise<string> {
  mkdirSync(SCREENSHOT_DIR, { recursive: true });
  const path = join(SCREENSHOT_DIR, `${name}.png`);
  // Let charts and fonts settle; a screenshot of a half-drawn page helps nobody.
  await page.evaluate('document.fonts.ready');
  await page.screenshot({ path, fullPage: true });
  return path;
}

/**
 * Every form control on the page that has no <label> (by `for` or nesting),
 * described as `tag#id`: an empty list means all are labelled.
 */
export async function unlabelledControls(page: Page): Promise<string[]> {
  return page.evaluate(`
    [...document.querySelectorAll('input:not([type=hidden]), select, textarea')]
      .filter((el) => el.labels.length === 0)
      .map((el) => el.tagName.toLowerCase() + '#' + (el.id || '?'))
  `);
}

type WriteFn = (...args: unknown[]) => unknown;

/**
 * Records everything this process writes to stdout and stderr, so a test can
 * check that no credential was ever logged. Start it before the stack: pino
 * writes through process.stdout.write when that was replaced before the
 * logger was created (as here, and as vitest does in its workers), and
 * through its own fd writer otherwise. Lines below error level are kept out
 * of the test output unless TEST_LOG_LEVEL is set.
 */
export function captureProcessOutput(): { text(): string; restore(): void } {
  const chunks: string[] = [];
  const verbose = Boolean(process.env.TEST_LOG_LEVEL);
  const textOf = (data: unknown): string =>
    typeof data === 'string' ? data : ArrayBuffer.isView(data) ? Buffer.from(data.buffer, data.byteOffset, data.byteLength).toString('utf8') : String(data);
  const shown = (text: string) =>
    verbose
      ? text
      : text
          .split('\n')
          .filter((line) => !/^\{"level":(10|20|30|40),/.test(line))
          .join('\n');
  const wrap = (stream: NodeJS.WriteStream) => {
    const before = stream.write;
    const original = before.bind(stream) as WriteFn;
    stream.write = ((chunk: unknown, ...rest: unknown[]) => {
      const text = textOf(chunk);
      chunks.push(text);
      const out = shown(text);
      if (out === text) return original(chunk, ...rest);
      if (out.trim()) return original(out, ...rest);
      const cb = rest.find((r) => typeof r === 'function') as (() => void) | undefined;
      if (cb) process.nextTick(cb);
      return true;
    }) as typeof stream.write;
    return () => {
      stream.write = before;
    };
  };
  const restoreStdout = wrap(process.stdout);
  const restoreStderr = wrap(process.stderr);
  return {
    text: () => chunks.join(''),
    restore() {
      restoreStdout();
      restoreStderr();
    },
  };
}
