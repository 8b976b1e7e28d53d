import { backoffDelayMs, type BackoffOptions } from './retry-policy.js';

/** Retries of a failing store call: 250 ms, 500 ms, 1 s, ... capped at 30 s, +-20%. */
export const STORE_RETRY_BACKOFF: BackoffOptions = Object.freeze({
  initialDelayMs: 250,
  maxDelayMs: 30_000,
  multiplier: 2,
  jitter: 0.2,
});

/**
 * Delays between retries of a store call that keeps failing (the claim loop, a broker inbox, the CLI worker's
 * setup): `initialDelayMs` doubling up to `maxDelayMs`, with jitter so that many workers cut off by
 * one outage do not reconnect in step. `failed()` counts a failure and returns the next delay;
 * `succeeded()` resets the count.
 */
export class RetryBackoff {
  readonly #options: BackoffOptions;
  readonly #random: () => number;
  #failures = 0;

  constructor(options: BackoffOptions = STORE_RETRY_BACKOFF, random: () => number = Math.random) {
    this.#options = options;
    this.#random = random;
  }

  /** Failures since the last success. */
  get failures(): number {
    return this.#failures;
  }

  /** Count one more failure; the delay before the next try, in ms. */
  failed(): number {
    this.#failures += 1;
    return backoffDelayMs(this.#failures, this.#options, this.#random);
  }

  /** The call succeeded: the next failure starts from `initialDelayMs` again. Returns the failures this ends. */
  succeeded(): number {
    const failures = this.#failures;
    this.#failures = 0;
    return failures;
  }
}
