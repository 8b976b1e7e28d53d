import type { Logger } from '../core/logger.js';

/** How often a working dispatcher says at info what it has been doing. */
export const ACTIVITY_REPORT_MS = 60_000;

/**
 * The worker's periodic "what am I doing" line at info: the first deliveries it starts (and from how many lanes), then,
 * once per `ACTIVITY_REPORT_MS` in which it ran something, how many deliveries it started from how many lanes. Quiet
 * while idle, so an idle worker's log stays empty; the per-claim detail stays at debug.
 */
export class ActivityReport {
  readonly #logger: Logger;
  readonly #intervalMs: number;
  readonly #lanes = new Set<number>();
  #started = 0;
  #reportedAt: number | undefined;

  constructor(logger: Logger, intervalMs = ACTIVITY_REPORT_MS) {
    this.#logger = logger;
    this.#intervalMs = intervalMs;
  }

  /** A delivery of `lane` started. */
  started(lane: number): void {
    this.#started += 1;
    this.#lanes.add(lane);
  }

  /** After a claim: report when the first deliveries started, or when a period with work is over. */
  maybeReport(nowMs: number, running: number): void {
    if (this.#started === 0) return;
    if (this.#reportedAt === undefined) {
      this.#logger.info('first deliveries claimed', { deliveries: this.#started, lanes: this.#lanes.size, running });
    } else if (nowMs - this.#reportedAt >= this.#intervalMs) {
      this.#logger.info('working', {
        deliveriesStarted: this.#started,
        lanes: this.#lanes.size,
        running,
        periodMs: nowMs - this.#reportedAt,
      });
    } else {
      return;
    }
    this.#reportedAt = nowMs;
    this.#started = 0;
    this.#lanes.clear();
  }
}
