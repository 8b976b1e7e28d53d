import type { LiveWait } from './replay-contract.js';

/**
 * The longest wait per handler, kept until taken: what a worker gathers between two live lag reports
 * (`Store.reportLiveLag`) and what a replay hears between two steps.
 */
export class LongestWaits {
  readonly #ms = new Map<string, number>();

  get size(): number {
    return this.#ms.size;
  }

  add(handler: string, ms: number): void {
    if (ms > (this.#ms.get(handler) ?? 0)) this.#ms.set(handler, ms);
  }

  delete(handler: string): void {
    this.#ms.delete(handler);
  }

  clear(): void {
    this.#ms.clear();
  }

  /** The waits, the longest first (at most `limit`); forgets them. */
  take(limit = Number.POSITIVE_INFINITY): LiveWait[] {
    const waits = [...this.#ms].map(([handler, ms]) => ({ handler, ms })).sort((a, b) => b.ms - a.ms);
    this.clear();
    return waits.slice(0, limit);
  }
}
