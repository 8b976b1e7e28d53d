import { isLaterEpoch, parseLeaseToken } from '../core/lease-token.js';
import type { ClaimedDelivery, DeliveryLease } from '../store/contract.js';

/**
 * The followers of a dispatcher (`ClaimedDelivery.follows`): deliveries claimed with their key's head, waiting for the
 * delivery before them to succeed, holding no handler slot. One whose predecessor succeeded while a retried head was
 * due and few slots were free is parked (`ready`) until a claim has its slots. The dispatcher decides when one starts
 * (`Dispatcher.#startFollower`); this module keeps them and finds them.
 */

/** A follower waiting for the delivery before it, with the claim loop (`L`) whose lane it was claimed in. */
export interface Waiting<L> {
  readonly delivery: ClaimedDelivery;
  readonly loop: L;
  /** Its lane and the epoch it was claimed at (the one before it has the same). */
  readonly lane: number;
  readonly epoch: string;
}

/** Whether `waiting` was claimed in `lane` at `epoch`. */
const claimedAt = (waiting: Waiting<unknown>, lane: number, epoch: string): boolean =>
  waiting.lane === lane && waiting.epoch === epoch;

const leaseOf = (delivery: ClaimedDelivery): DeliveryLease => ({
  deliveryId: delivery.id,
  leaseToken: delivery.leaseToken,
});

export class Followers<L> {
  /**
   * Followers by the id of the delivery before them (claimed in the same lane at the same epoch). Keyed by the id alone:
   * a string made per follower to add the lease to the key was a visible share of the dispatcher's allocations. Two
   * followers of one id are of two claims of it at two epochs of its lane, the older one lost: only the later one is
   * kept (`wait`), and a lookup checks the epoch.
   */
  readonly #waiting = new Map<string, Waiting<L>>();
  /** Followers whose delivery before them succeeded while a retried head was due: started by `takeReady`. */
  readonly #ready: Waiting<L>[] = [];

  /** Followers waiting for the delivery before them (not the parked ones). */
  get waiting(): number {
    return this.#waiting.size;
  }

  /** Followers parked until a claim has its slots. */
  get ready(): number {
    return this.#ready.length;
  }

  /** Park a follower until the delivery before it succeeds (`next`) or does not (`drop`). */
  wait(loop: L, delivery: ClaimedDelivery): void {
    let lane: number;
    let epoch: string;
    try {
      ({ lane, epoch } = parseLeaseToken(delivery.leaseToken));
    } catch {
      return; // the launch would log and skip it alike; its lane lease expiring frees it
    }
    const before = delivery.follows!;
    const held = this.#waiting.get(before);
    if (held !== undefined && isLaterEpoch(held.epoch, epoch)) return;
    this.#waiting.set(before, { delivery, loop, lane, epoch });
  }

  /** The follower waiting for delivery `id` claimed in `lane` at `epoch`, taken off the wait; undefined: none. */
  next(id: string, lane: number, epoch: string): Waiting<L> | undefined {
    if (this.#waiting.size === 0) return undefined;
    const next = this.#waiting.get(id);
    if (next === undefined || !claimedAt(next, lane, epoch)) return undefined;
    this.#waiting.delete(id);
    return next;
  }

  /** Park a follower whose predecessor succeeded until a claim has its slots (`takeReady`). */
  park(follower: Waiting<L>): void {
    this.#ready.push(follower);
  }

  /** The parked follower to start next, first in first out. */
  takeReady(): Waiting<L> | undefined {
    return this.#ready.shift();
  }

  /** Whether a follower of `loop` is parked. */
  parkedIn(loop: L): boolean {
    return this.#ready.some((waiting) => waiting.loop === loop);
  }

  /** Take the followers waiting behind delivery `id` (each behind the one before it) off the wait: their leases. */
  drop(id: string, lane: number, epoch: string): DeliveryLease[] {
    const leases: DeliveryLease[] = [];
    if (this.#waiting.size === 0) return leases;
    let before = id;
    for (
      let next = this.#waiting.get(before);
      next !== undefined && claimedAt(next, lane, epoch);
      next = this.#waiting.get(before)
    ) {
      this.#waiting.delete(before);
      leases.push(leaseOf(next.delivery));
      before = next.delivery.id;
    }
    return leases;
  }

  /** `loop` lost `lane` at `epoch`: drop every follower claimed there (waiting or parked); how many. */
  dropLane(loop: L, lane: number, epoch: string): number {
    let dropped = 0;
    for (const [key, waiting] of this.#waiting)
      if (waiting.loop === loop && claimedAt(waiting, lane, epoch)) {
        this.#waiting.delete(key);
        dropped += 1;
      }
    for (let index = this.#ready.length - 1; index >= 0; index -= 1) {
      const ready = this.#ready[index]!;
      if (ready.loop === loop && claimedAt(ready, lane, epoch)) {
        this.#ready.splice(index, 1);
        dropped += 1;
      }
    }
    return dropped;
  }

  /** The ids of every follower held (waiting or parked): the worker holds them (`ClaimSession.forgetInFlight`). */
  ids(): string[] {
    const ids: string[] = [];
    for (const { delivery } of this.#waiting.values()) ids.push(delivery.id);
    for (const { delivery } of this.#ready) ids.push(delivery.id);
    return ids;
  }

  /** Every follower's lease, all taken off (the dispatcher stops: they are released unrun). */
  drain(): DeliveryLease[] {
    const leases = [...this.#ready, ...this.#waiting.values()].map(({ delivery }) => leaseOf(delivery));
    this.#ready.length = 0;
    this.#waiting.clear();
    return leases;
  }
}
