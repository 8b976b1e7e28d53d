/**
 * Headless Chromium for the browser tests (the dashboard, the guide's site): Debian's `chromium` driven by
 * playwright-core. Where there is none, the tests report themselves skipped with `browserSkip` as the reason.
 */
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { type BrowserContext, chromium } from 'playwright-core';

export const CHROMIUM = process.env.RELAYBUS_CHROMIUM ?? '/usr/bin/chromium';

/** Why browser tests skip here, or undefined when Chromium is installed. */
export const browserSkip = existsSync(CHROMIUM)
  ? undefined
  : `no browser at ${CHROMIUM}: install Debian's chromium package (apt-get install chromium; .ci/run does) or set RELAYBUS_CHROMIUM`;

const CHROMIUM_FLAGS = [
  '--headless',
  '--no-sandbox',
  '--disable-gpu',
  '--disable-quic',
  '--no-first-run',
  '--disable-background-networking',
  '--disable-component-update',
  '--disable-sync',
];

/** A browser with a profile of its own; `close()` ends it and removes the profile. */
export async function launchChromium(viewport: {
  width: number;
  height: number;
}): Promise<{ context: BrowserContext; close(): Promise<void> }> {
  const profile = mkdtempSync(join(tmpdir(), 'relaybus-chromium-'));
  const context = await chromium.launchPersistentContext(profile, {
    executablePath: CHROMIUM,
    headless: true,
    args: CHROMIUM_FLAGS,
    viewport,
  });
  return {
    context,
    async close() {
      await context.close();
      rmSync(profile, { recursive: true, force: true });
    },
  };
}
