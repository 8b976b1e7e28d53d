/**
 * What this store keeps of an owner's failed claims until its worker forgets what they may have recorded
 * (`Store.forgetInFlight`, sql/forget-in-flight.sql).
 *
 * A failed claim statement may have committed before its answer was lost: the deliveries it recorded in flight would
 * then stay there, unrun, for as long as the owner keeps their lanes. The owner's own lanes are found by owner; the
 * free lanes the statement named are kept here, since it may have taken them. A claim of several statements hands
 * over what the ones before the failure got, so its caller sees no failure: the failure is kept and the owner's next
 * claim rejects with it, before running anything, so the worker forgets first.
 */
export class FailedClaims {
  /** Free lanes failed claim statements named, by owner. */
  readonly #namedLanes = new Map<string, Set<number>>();
  /** A failure a claim hid (it handed over what it got), by owner: the next claim's. */
  readonly #hidden = new Map<string, unknown>();

  /** A claim statement of `owner` that named the free lanes `named` failed. */
  failed(owner: string, named: readonly number[]): void {
    const lanes = this.#namedLanes.get(owner) ?? new Set<number>();
    for (const lane of named) lanes.add(lane);
    this.#namedLanes.set(owner, lanes);
  }

  /** A claim of `owner` handed over what it got despite `error`: its next claim rejects with it. */
  hide(owner: string, error: unknown): void {
    this.#hidden.set(owner, error);
  }

  /** Reject now with the failure a claim of `owner` hid, once. */
  throwHidden(owner: string): void {
    if (this.#hidden.size === 0 || !this.#hidden.has(owner)) return;
    const error = this.#hidden.get(owner);
    this.#hidden.delete(owner);
    throw error;
  }

  /** The free lanes `owner`'s failed claims named (none failed: empty). */
  namedLanes(owner: string): number[] {
    return [...(this.#namedLanes.get(owner) ?? [])];
  }

  /** `owner`'s worker forgot what its failed claims may have recorded, or handed back its lanes. */
  forgotten(owner: string): void {
    this.#namedLanes.delete(owner);
    this.#hidden.delete(owner);
  }
}
