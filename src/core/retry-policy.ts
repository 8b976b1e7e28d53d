/**
 * What happens after a failed attempt: retry later (reschedule) with exponential backoff and
 * jitter, capped, or give up (bury, the dead letter) once the attempt budget is spent. Pure: the
 * caller passes the time and, in tests, the random source.
 */

/** Exponential backoff: `initialDelayMs * multiplier^(attempt - 1)`, capped at `maxDelayMs`, then jittered. */
export interface BackoffOptions {
  /** Delay after the first failed attempt. */
  readonly initialDelayMs: number;
  /** Upper bound of any delay, jitter included. */
  readonly maxDelayMs: number;
  /** Growth per attempt (>= 1; 1 = constant delay). */
  readonly multiplier: number;
  /** Random spread as a fraction of the delay, 0..1: 0.2 means +-20%. Spreads retries of a burst of failures. */
  readonly jitter: number;
}

/** The outcome of a failed attempt. */
export type RetryDecision =
  | { readonly action: 'reschedule'; readonly delayMs: number; readonly availableAt: Date }
  | { readonly action: 'bury' };

/** The facts `decideRetry` decides from. */
export interface RetryInput {
  /** The attempt that just failed, 1-based. */
  readonly attempt: number;
  /** Attempts allowed in total; the attempt that reaches it is the last. */
  readonly maxAttempts: number;
  readonly backoff: BackoffOptions;
  readonly now: Date;
  /** A source of uniform numbers in [0, 1); `Math.random` by default. */
  readonly random?: () => number;
}

/**
 * The delay before attempt `attempt + 1`, given that attempt `attempt` (1-based) failed.
 *
 * ```ts
 * backoffDelayMs(3, { initialDelayMs: 1000, maxDelayMs: 60_000, multiplier: 2, jitter: 0 }); // 4000
 * ```
 */
export function backoffDelayMs(attempt: number, backoff: BackoffOptions, random: () => number = Math.random): number {
  const exponent = Math.max(0, attempt - 1);
  const raw = backoff.initialDelayMs * backoff.multiplier ** exponent;
  const capped = Math.min(backoff.maxDelayMs, Number.isFinite(raw) ? raw : backoff.maxDelayMs);
  const spread = backoff.jitter * (2 * random() - 1);
  return Math.max(0, Math.min(backoff.maxDelayMs, Math.round(capped * (1 + spread))));
}

/**
 * Decide what a failed attempt becomes: `bury` when it was the last allowed one, otherwise
 * `reschedule` at `now + backoff`.
 *
 * ```ts
 * decideRetry({ attempt: 1, maxAttempts: 3, backoff, now: new Date() }); // { action: 'reschedule', ... }
 * decideRetry({ attempt: 3, maxAttempts: 3, backoff, now: new Date() }); // { action: 'bury' }
 * ```
 */
export function decideRetry(input: RetryInput): RetryDecision {
  if (input.attempt >= input.maxAttempts) return { action: 'bury' };
  const delayMs = backoffDelayMs(input.attempt, input.backoff, input.random);
  return { action: 'reschedule', delayMs, availableAt: new Date(input.now.getTime() + delayMs) };
}
