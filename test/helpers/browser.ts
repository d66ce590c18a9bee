// Headless Chromium (Debian's, installed by scripts/ensure-monitoring.sh) driven by playwright-core, for
// screenshots of web UIs on loopback. Never downloads a browser. Background networking is off, or
// Chromium keeps knocking on the closed network.
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Browser, Page } from 'playwright-core';

export const CHROMIUM = process.env.SWERL_CHROMIUM ?? '/usr/bin/chromium';

export const CHROMIUM_ARGS = [
  '--headless',
  '--no-sandbox',
  '--disable-gpu',
  '--disable-quic',
  '--no-first-run',
  '--disable-background-networking',
  '--disable-component-update',
  '--disable-sync',
  '--disable-dev-shm-usage',
];

export interface HeadlessBrowser {
  page(width?: number, height?: number): Promise<Page>;
  close(): Promise<void>;
}

export async function launchChromium(): Promise<HeadlessBrowser> {
  if (!existsSync(CHROMIUM)) throw new Error(`${CHROMIUM} is missing: run \`bash scripts/setup.sh --test\` (installs Debian's chromium)`);
  const { chromium } = await import('playwright-core');
  const profile = mkdtempSync(join(tmpdir(), 'swerl-chromium-'));
  // a persistent context on a new, empty profile directory of our own
  const context = await chromium.launchPersistentContext(profile, {
    executablePath: CHROMIUM,
    headless: true,
    args: CHROMIUM_ARGS,
    viewport: { width: 1600, height: 1000 },
  });
  return {
    async page(width = 1600, height = 1000) {
      const p = await context.newPage();
      await p.setViewportSize({ width, height });
      // generous: a loaded 2-core machine renders the UI slowly
      p.setDefaultTimeout(120_000);
      return p;
    },
    async close() {
      await context.close().catch(() => undefined);
      rmSync(profile, { recursive: true, force: true });
    },
  };
}

export type { Browser, Page };
