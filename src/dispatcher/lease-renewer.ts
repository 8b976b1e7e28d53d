import { isLaterEpoch } from '../core/lease-token.js';
import { describeError, type Logger } from '../core/logger.js';
import type { Store } from '../store/contract.js';

/**
 * Keeps the lane leases of running work alive. The dispatcher tracks every claimed delivery's
 * (lane, epoch); every `intervalMs` (a third of the lease by default) the renewer extends the lease
 * of each lane that has work in flight, in one `extendLease` call. Lanes the store reports lost,
 * and lanes a newer claim returned at a higher epoch (the lane changed hands in between), are
 * reported through `onLost`: the dispatcher aborts the handlers still running there and drops their results (a run
 * whose handler is over waits for its fenced outcome write instead, whose answer tells whether the lease held).
 */

/** What the renewer needs: the store's `extendLease`, the owner, the lease and the loss callback. */
export interface LeaseRenewerOptions {
  readonly store: Pick<Store<unknown>, 'extendLease'>;
  readonly owner: string;
  readonly leaseDurationMs: number;
  readonly intervalMs: number;
  readonly now: () => Date | undefined;
  readonly logger: Logger;
  /** Everything claimed at `epoch` in `lane` is no longer ours. */
  readonly onLost: (lane: number, epoch: string, detectedBy: 'renewal' | 'claim') => void;
}

interface HeldLane {
  epoch: string;
  inFlight: number;
}

/** Renews the lanes that have work in flight and reports lost ones. */
export class LeaseRenewer {
  readonly #options: LeaseRenewerOptions;
  readonly #lanes = new Map<number, HeldLane>();
  #timer: NodeJS.Timeout | undefined;
  #tick: Promise<void> | undefined;
  #running = false;

  constructor(options: LeaseRenewerOptions) {
    this.#options = options;
  }

  /** Lanes with work in flight, for tests and statistics. */
  get lanes(): ReadonlyMap<number, { readonly epoch: string; readonly inFlight: number }> {
    return this.#lanes;
  }

  /**
   * Record one more delivery in flight in `lane` at `epoch`. Returns false when `epoch` is older
   * than the one already tracked: that claim is stale and its delivery must not run.
   */
  track(lane: number, epoch: string): boolean {
    const held = this.#lanes.get(lane);
    if (held === undefined) {
      this.#lanes.set(lane, { epoch, inFlight: 1 });
      return true;
    }
    if (held.epoch === epoch) {
      held.inFlight += 1;
      return true;
    }
    if (isLaterEpoch(held.epoch, epoch)) return false;
    // The lane changed hands since the older claim: whatever runs at the old epoch is fenced.
    const lostEpoch = held.epoch;
    this.#lanes.set(lane, { epoch, inFlight: 1 });
    this.#options.onLost(lane, lostEpoch, 'claim');
    return true;
  }

  /** One delivery claimed in `lane` at `epoch` is done (or was dropped). */
  untrack(lane: number, epoch: string): void {
    const held = this.#lanes.get(lane);
    if (held === undefined || held.epoch !== epoch) return;
    held.inFlight -= 1;
    if (held.inFlight <= 0) this.#lanes.delete(lane);
  }

  /** Renew every `intervalMs` until `stop()`. */
  start(): void {
    if (this.#running) return;
    this.#running = true;
    this.#schedule();
  }

  /** Stop renewing; waits for a renewal in progress. */
  async stop(): Promise<void> {
    this.#running = false;
    clearTimeout(this.#timer);
    this.#timer = undefined;
    await this.#tick;
  }

  /** Renew now (the timer calls this; tests may too). */
  renew(): Promise<void> {
    this.#tick ??= this.#renew().finally(() => {
      this.#tick = undefined;
    });
    return this.#tick;
  }

  #schedule(): void {
    if (!this.#running) return;
    this.#timer = setTimeout(() => {
      void this.renew().finally(() => this.#schedule());
    }, this.#options.intervalMs);
    this.#timer.unref();
  }

  async #renew(): Promise<void> {
    if (this.#lanes.size === 0) return;
    const sent = [...this.#lanes].map(([lane, held]) => ({ lane, epoch: held.epoch }));
    let lost: readonly number[];
    try {
      const result = await this.#options.store.extendLease({
        owner: this.#options.owner,
        lanes: sent,
        leaseDurationMs: this.#options.leaseDurationMs,
        now: this.#options.now(),
      });
      lost = result.lost;
    } catch (error) {
      this.#options.logger.warn('renewing lane leases failed; retrying at the next interval', {
        lanes: sent.length,
        error: describeError(error),
      });
      return;
    }
    for (const lane of lost) {
      const epoch = sent.find((item) => item.lane === lane)?.epoch;
      const held = this.#lanes.get(lane);
      if (epoch === undefined || held === undefined || held.epoch !== epoch) continue;
      this.#lanes.delete(lane);
      this.#options.onLost(lane, epoch, 'renewal');
    }
  }
}
