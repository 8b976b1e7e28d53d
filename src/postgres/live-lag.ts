import type { LiveWait } from '../store/contract.js';
import { validateLiveWaits } from '../store/validate-replay.js';
import type { RowOf } from './rows.js';
import type { StoreContext } from './store-context.js';

/**
 * The workers' live start lag on the Postgres store (`Store.reportLiveLag`, `Store.subscribeLiveLag`): a NOTIFY on the
 * schema's lag channel, JSON `[[handler, ms], ...]`, heard by the replays that yield. Nothing is written.
 */

/** A NOTIFY payload must stay under 8,000 bytes; the reports kept are the longest waits that fit. */
const MAX_PAYLOAD_BYTES = 7_900;

/** `waits` (the longest first) as a payload: as many as fit. */
export function lagPayload(waits: readonly LiveWait[]): string {
  const kept: [string, number][] = [];
  let bytes = 2;
  for (const wait of waits) {
    const entry: [string, number] = [wait.handler, Math.round(wait.ms * 10) / 10];
    const size = Buffer.byteLength(JSON.stringify(entry)) + 1;
    if (bytes + size > MAX_PAYLOAD_BYTES) break;
    kept.push(entry);
    bytes += size;
  }
  return JSON.stringify(kept);
}

/** The waits of a payload; none for one that is not a report (a foreign NOTIFY on the channel). */
export function waitsOfPayload(payload: string): LiveWait[] {
  let parsed: unknown;
  try {
    parsed = JSON.parse(payload);
  } catch {
    return [];
  }
  if (!Array.isArray(parsed)) return [];
  const waits: LiveWait[] = [];
  for (const entry of parsed as unknown[]) {
    if (!Array.isArray(entry)) continue;
    const [handler, ms] = entry as unknown[];
    if (typeof handler === 'string' && typeof ms === 'number' && Number.isFinite(ms)) waits.push({ handler, ms });
  }
  return waits;
}

export async function reportLiveLag(context: StoreContext, waits: readonly LiveWait[]): Promise<void> {
  validateLiveWaits(waits);
  const { lagChannel, driver, run } = context;
  if (lagChannel === null || waits.length === 0) return;
  await run<RowOf<'report-live-lag'>>(driver.executor, 'report-live-lag', [lagChannel, lagPayload(waits)]);
}

export async function subscribeLiveLag(
  context: StoreContext,
  onReport: (waits: readonly LiveWait[]) => void,
): Promise<() => Promise<void>> {
  const { lagChannel, driver, listens } = context;
  if (!listens || lagChannel === null || driver.listen === undefined) return async () => {};
  return driver.listen(lagChannel, (payload) => {
    const waits = waitsOfPayload(payload);
    if (waits.length > 0) onReport(waits);
  });
}
