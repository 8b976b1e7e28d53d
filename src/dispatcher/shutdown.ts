/**
 * The grace period of a graceful stop: wait until every running handler has settled, or the grace
 * time is over, or a caller cuts it short (`stop({ graceMs: 0 })` while stopping, e.g. the CLI on a
 * second SIGTERM). What happens next (abort, release, relinquish) is the dispatcher's `stop()`.
 * No process signals are handled here or anywhere in the library.
 */
export class GracePeriod {
  #cut: (() => void) | undefined;
  #cutRequested = false;
  #timers: NodeJS.Timeout[] = [];

  /** Resolves `drained` when every promise settled first, `expired` otherwise. */
  async wait(running: readonly Promise<unknown>[], graceMs: number): Promise<'drained' | 'expired'> {
    if (running.length === 0) return 'drained';
    if (this.#cutRequested) return 'expired';
    let timer: NodeJS.Timeout | undefined;
    const expired = new Promise<'expired'>((resolve) => {
      this.#cut = () => resolve('expired');
      timer = setTimeout(() => resolve('expired'), graceMs);
    });
    try {
      return await Promise.race([Promise.allSettled(running).then(() => 'drained' as const), expired]);
    } finally {
      clearTimeout(timer);
      this.#cut = undefined;
    }
  }

  /** End the grace period after `afterMs` (0: now) if it is still running then. */
  cut(afterMs = 0): void {
    const cut = (): void => {
      this.#cutRequested = true;
      this.#cut?.();
    };
    if (afterMs <= 0) cut();
    else this.#timers.push(setTimeout(cut, afterMs));
  }

  /** Clear timers set by `cut(afterMs)`. */
  dispose(): void {
    for (const timer of this.#timers) clearTimeout(timer);
    this.#timers = [];
  }
}
