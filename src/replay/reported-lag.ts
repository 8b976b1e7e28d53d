import { LongestWaits } from '../store/longest-waits.js';
import type { LiveWait } from '../store/contract.js';

/**
 * The workers' reports of their live deliveries' start lag (`Store.subscribeLiveLag`) heard between two steps of a
 * replay, the longest per handler, merged with what the step itself saw (`ReplayStepResult.liveWaits`): the step sees
 * deliveries not claimed yet, the workers those claimed and waiting for them. What `ReplayPace` yields to.
 */
export class ReportedLag {
  readonly #longest = new LongestWaits();

  heard(waits: readonly LiveWait[]): void {
    for (const { handler, ms } of waits) this.#longest.add(handler, ms);
  }

  /**
   * The step's waits with the reports heard since the last step, the longest per handler, the longest first; the
   * replay's own handlers left out (their live keyed deliveries wait for history by design). Forgets the reports.
   */
  withStep(stepWaits: readonly LiveWait[], replayHandlers: readonly string[]): readonly LiveWait[] {
    if (this.#longest.size === 0) return stepWaits;
    for (const handler of replayHandlers) this.#longest.delete(handler);
    this.heard(stepWaits);
    return this.#longest.take();
  }
}
