import { describeError, type Logger } from '../core/logger.js';
import type { ClaimClock, LiveWait, Store } from '../store/contract.js';
import { LongestWaits } from '../store/longest-waits.js';
import { MAX_LIVE_LAG_REPORTED } from '../store/validate-replay.js';

/**
 * A worker's live start lag while a replay runs: each claim says whether one runs and the store's clock then
 * (`ClaimSession.replayClock`); each handler that starts meanwhile adds how long its delivery had been due, on the
 * store's clock (the one `availableAt` is in: the worker's own may differ); every `LIVE_LAG_REPORT_MS` the longest per
 * handler goes to `Store.reportLiveLag`, which the replays that yield hear. Measured here because the store's own sample
 * sees only deliveries not claimed yet, and on a busy machine most of the wait comes after the claim (its round trip, a
 * core to run on). While no replay runs, a start costs one comparison.
 */

/** How often a worker reports while a replay runs (ms). */
export const LIVE_LAG_REPORT_MS = 100;
/** A replay is taken to run this long (ms) after the last claim that saw one. */
const REPLAY_SEEN_MS = 2_000;
/**
 * The clock offset is the least seen over this long (ms) and the span before: a claim whose statement began late (its
 * backend waited for a core) reads a later store time, which would overstate every wait after it.
 */
const OFFSET_SPAN_MS = 5_000;
/** Waits shorter than this (ms) are not reported: a yield's target is at least 1 ms. */
const REPORT_FLOOR_MS = 1;

/** The live lag of a dispatcher on `store`; undefined when the store takes no reports. */
export function liveLagOf(store: Pick<Store<unknown>, 'reportLiveLag'>, logger: Logger): LiveLag | undefined {
  const report = store.reportLiveLag?.bind(store);
  return report === undefined ? undefined : new LiveLag(report, logger);
}

export class LiveLag {
  readonly #report: (waits: readonly LiveWait[]) => Promise<void>;
  readonly #logger: Logger;
  /** Store ms minus `performance.now()`, the least in the current span and in the one before. */
  #offset = Number.POSITIVE_INFINITY;
  #previousOffset = Number.POSITIVE_INFINITY;
  #spanStart = Number.NEGATIVE_INFINITY;
  /** Until when (`performance.now()`) starts are measured: a replay was seen running. */
  #seenUntil = Number.NEGATIVE_INFINITY;
  /** The longest wait per handler since the last report. */
  readonly #longest = new LongestWaits();
  #timer: NodeJS.Timeout | undefined;
  #sending = false;

  constructor(report: (waits: readonly LiveWait[]) => Promise<void>, logger: Logger) {
    this.#report = report;
    this.#logger = logger;
  }

  /** After each claim: its session's `replayClock` (undefined: no replay ran then). */
  claimed(clock: ClaimClock | undefined): void {
    if (clock === undefined) return;
    const now = performance.now();
    if (now - this.#spanStart >= OFFSET_SPAN_MS) {
      this.#previousOffset = this.#offset;
      this.#offset = Number.POSITIVE_INFINITY;
      this.#spanStart = now;
    }
    this.#offset = Math.min(this.#offset, clock.storeMs - clock.sentAt);
    this.#seenUntil = now + REPLAY_SEEN_MS;
    if (this.#timer !== undefined) return;
    this.#logger.info('a replay is running: this worker reports how long its live deliveries wait to start', {
      everyMs: LIVE_LAG_REPORT_MS,
    });
    this.#timer = setInterval(() => this.#tick(), LIVE_LAG_REPORT_MS);
    this.#timer.unref();
  }

  /** A handler starts at `at` (`performance.now()`) on a delivery due since `availableAt` (the store's clock). */
  started(handler: string, availableAt: Date, at: number): void {
    if (at > this.#seenUntil) return;
    const waited = at + Math.min(this.#offset, this.#previousOffset) - availableAt.getTime();
    if (waited >= REPORT_FLOOR_MS) this.#longest.add(handler, waited);
  }

  /** Stop reporting and forget what was measured (the dispatcher stops, or no replay runs any more). */
  stop(): void {
    clearInterval(this.#timer);
    this.#timer = undefined;
    this.#seenUntil = Number.NEGATIVE_INFINITY;
    this.#offset = this.#previousOffset = Number.POSITIVE_INFINITY;
    this.#longest.clear();
  }

  #tick(): void {
    if (performance.now() > this.#seenUntil) {
      this.stop();
      this.#logger.info("no replay is running any more: this worker stops reporting its live deliveries' waits");
      return;
    }
    // One report at a time: the waits of a slow one are in the next.
    if (this.#longest.size === 0 || this.#sending) return;
    const waits = this.#longest.take(MAX_LIVE_LAG_REPORTED);
    this.#sending = true;
    this.#report(waits)
      .catch((error: unknown) =>
        this.#logger.debug('reporting live start lag failed; the next report follows', { error: describeError(error) }),
      )
      .finally(() => {
        this.#sending = false;
      });
  }
}
