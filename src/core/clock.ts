/**
 * Where the dispatcher reads the time it passes to the store. Production code usually leaves it
 * out, so every time-dependent store call uses the database's clock (one clock for every worker,
 * no skew between hosts); tests inject a stub they move by hand instead of sleeping.
 */

/** A source of the current instant. */
export interface Clock {
  now(): Date;
}

/** The process clock (`new Date()`). */
export const systemClock: Clock = Object.freeze({
  now: (): Date => new Date(),
});
