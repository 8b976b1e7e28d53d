import { backoffDelayMs, type BackoffOptions } from '../core/retry-policy.js';

/** Retries of a failing store call: 250 ms, 500 ms, 1 s, ... capped at 30 s, +-20%. */
export const STORE_RETRY_BACKOFF: BackoffOptions = Object.freeze({
  initialDelayMs: 250,
  maxDelayMs: 30_000,
  multiplier: 2,
  jitter: 0.2,
});

/**
 * The dispatcher's idle wait: sleep up to the poll interval, or less when something happens that
 * may have made work claimable (a handler slot freed, a completion committed and a key's next
 * delivery became its head). A `wake()` with nobody waiting is remembered, so the next wait returns
 * at once and no wake-up is lost between a claim and the wait that follows it.
 */
export class Wakeup {
  #pending = false;
  #resolve: (() => void) | undefined;
  #timer: NodeJS.Timeout | undefined;

  /** End the current wait now, or the next one as soon as it starts. */
  wake(): void {
    const resolve = this.#resolve;
    if (resolve === undefined) {
      this.#pending = true;
      return;
    }
    this.#settle();
    resolve();
  }

  /** Resolve after `ms`, or earlier on `wake()`. Only one wait at a time. */
  wait(ms: number): Promise<void> {
    if (this.#pending) {
      this.#pending = false;
      return Promise.resolve();
    }
    return new Promise<void>((resolve) => {
      this.#resolve = resolve;
      this.#timer = setTimeout(() => {
        this.#settle();
        resolve();
      }, ms);
    });
  }

  #settle(): void {
    clearTimeout(this.#timer);
    this.#timer = undefined;
    this.#resolve = undefined;
    this.#pending = false;
  }
}

/**
 * Delays between retries of a store call that keeps failing (the claim loop, the CLI worker's
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
