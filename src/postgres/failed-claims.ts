/**
 * What this store keeps of an owner's failed claims until its worker forgets what they may have recorded
 * (`ClaimSession.forgetInFlight`, sql/hot-path/forget-in-flight.sql).
 *
 * A failed claim statement may have committed before its answer was lost: the deliveries it recorded in flight would
 * then stay there, unrun, for as long as the owner keeps their lanes. The owner's own lanes are found by owner; the
 * free lanes the statement named are kept here, since it may have taken them. A claim of several statements hands
 * over what the ones before the failure got, so its caller sees no failure: the failure is kept and the session's next
 * claim rejects with it, before running anything, so the worker forgets first.
 */
export class FailedClaims {
  /** Free lanes failed claim statements named. */
  readonly #namedLanes = new Set<number>();
  /** A failure a claim hid (it handed over what it got): the next claim's. */
  #hidden: { readonly error: unknown } | undefined;

  /** A claim statement that named the free lanes `named` failed. */
  failed(named: readonly number[]): void {
    for (const lane of named) this.#namedLanes.add(lane);
  }

  /** A claim handed over what it got despite `error`: the next claim rejects with it. */
  hide(error: unknown): void {
    this.#hidden = { error };
  }

  /** Reject now with the failure a claim hid, once. */
  throwHidden(): void {
    const hidden = this.#hidden;
    if (hidden === undefined) return;
    this.#hidden = undefined;
    throw hidden.error;
  }

  /** The free lanes failed claims named (none failed: empty). */
  namedLanes(): number[] {
    return [...this.#namedLanes];
  }

  /** The worker forgot what its failed claims may have recorded. */
  forgotten(): void {
    this.#namedLanes.clear();
    this.#hidden = undefined;
  }
}
