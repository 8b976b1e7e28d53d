/**
 * Runs claimed before they were due (a retried head, `ClaimParams.retryLookaheadMs`) wait here for their time. A timer
 * alone fires only in the event loop's timers phase, once a turn of the loop, and under a backlog one turn runs the ends
 * of up to `concurrency` handlers: tens of milliseconds on a loaded machine with many slots, which a retried head
 * would start late by. The dispatcher looks here at every handler end too (`startDue`), so a waiting run starts within
 * one handler end of its time. Empty, a look costs one size check.
 */
export class EarlyStarts {
  readonly #waiting = new Set<EarlyStart>();
  readonly #now: () => number;

  /** `now`: the clock the runs' times are on (ms), the bus's wall clock. */
  constructor(now: () => number) {
    this.#now = now;
  }

  /** Call `start` once the clock reads `at` or later, at the next `startDue` that sees it; `cancel` to stop waiting. */
  add(at: number, start: () => void): EarlyStart {
    const entry: EarlyStart = { at, start };
    this.#waiting.add(entry);
    return entry;
  }

  cancel(entry: EarlyStart): void {
    this.#waiting.delete(entry);
  }

  /** Start every waiting run whose time has come. */
  startDue(): void {
    if (this.#waiting.size === 0) return;
    const now = this.#now();
    for (const entry of this.#waiting)
      if (now >= entry.at) {
        this.#waiting.delete(entry);
        entry.start();
      }
  }
}

/** A run waiting in `EarlyStarts`. */
export interface EarlyStart {
  readonly at: number;
  readonly start: () => void;
}
