import type { LiveWait } from '../store/contract.js';

/**
 * How fast `runReplay` takes events: a fixed rate, no limit, or (the yield) a rate that halves while live traffic
 * waits longer than a target and grows while it does not, so a replay goes as fast as the live deliveries beside it
 * allow. One object per run; the runner asks it how many events the next step takes and how long to wait after it,
 * and tells it what each step saw.
 */

/** With a rate, steps a second (at most: a step never takes less than one event). */
export const PACES_PER_SECOND = 20;
/** Where a yielding replay starts, in events a second: low, as nothing is known yet of the live traffic beside it. */
export const YIELD_START_RATE = 1_000;
/** While no live delivery waits too long, a yielding replay's rate doubles in this long (ms). */
const YIELD_DOUBLING_MS = 2_000;
/** A yielding replay's rate is cut at most this often (ms). */
const YIELD_CUT_SPACING_MS = 200;
/** Growth counts at most this long (ms) between two steps (a long wait between them is not a clear road). */
const MAX_GROWTH_STRETCH_MS = 500;
/** A yielding replay's slowest rate: one event a step. It never stops, so a handler behind for its own reasons (no
 *  worker runs it) slows a replay down but does not hold it forever. */
export const YIELD_FLOOR_RATE = PACES_PER_SECOND;

/** What the pace is now, for progress reports. */
export interface ReplayPaceView {
  /** Events a second the replay is allowed now; null when unlimited. */
  readonly eventsPerSecond: number | null;
  /** The last step saw a live delivery wait longer than the yield's target, and the rate was cut for it. */
  readonly yielding: boolean;
  /** Handlers the yield leaves out: their live deliveries already waited too long when it first looked. */
  readonly leftOut: readonly string[];
}

export class ReplayPace {
  readonly #batchSize: number;
  /** The rate given (events/s), undefined for none. */
  readonly #cap: number | undefined;
  /** The yield's target (ms), undefined when the replay does not yield. */
  readonly #liveWaitMs: number | undefined;
  /** Events a second allowed now; Infinity when unlimited. */
  #rate: number;
  #yielding = false;
  /** Handlers whose live deliveries already waited too long at the first look: left out until they catch up. */
  readonly #behind = new Set<string>();
  /** When (performance.now) the last step that took events started, and how many it took: the rate achieved. */
  #lastStart: number | undefined;
  #lastTaken = 0;
  /** When (performance.now) the last step was observed, and the rate last cut. */
  #lastObserved: number | undefined;
  #lastCut = Number.NEGATIVE_INFINITY;

  constructor(batchSize: number, rate: number | undefined, liveWaitMs: number | undefined) {
    this.#batchSize = batchSize;
    this.#cap = rate;
    this.#liveWaitMs = liveWaitMs;
    const given = rate ?? Number.POSITIVE_INFINITY;
    this.#rate = liveWaitMs === undefined ? given : Math.min(given, YIELD_START_RATE);
  }

  get view(): ReplayPaceView {
    return {
      eventsPerSecond: Number.isFinite(this.#rate) ? Math.round(this.#rate) : null,
      yielding: this.#yielding,
      leftOut: [...this.#behind],
    };
  }

  /**
   * Events the next step may take: a batch, or with a rate a twentieth of a second's worth (the deliveries come in
   * small batches rather than one burst a second, which a claim would carry at once).
   */
  get perStep(): number {
    if (!Number.isFinite(this.#rate)) return this.#batchSize;
    return Math.min(this.#batchSize, Math.max(1, Math.floor(this.#rate / PACES_PER_SECOND)));
  }

  /** A step that takes `taken` events starts at `now`. */
  started(taken: number, now: number): void {
    this.#lastStart = now;
    this.#lastTaken = taken;
  }

  /** How long to wait (ms) after the step last started, for the rate: its events' share of a second, less its time. */
  waitAfter(now: number): number {
    if (!Number.isFinite(this.#rate) || this.#lastStart === undefined) return 0;
    return (this.#lastTaken / this.#rate) * 1000 - (now - this.#lastStart);
  }

  /**
   * What a step saw of the live traffic; returns the wait it slows down for, if any. Handlers already waiting too
   * long at the first look (before the replay took anything: behind for their own reasons, such as no worker running
   * them) are left out until they have caught up. Over the target, the rate halves (from what the steps achieved, when
   * that is lower: an unlimited replay's first cut lands at once), at most once per `YIELD_CUT_SPACING_MS` (a cut shows
   * in the live waits only after the deliveries already created have run); otherwise it grows, doubling in
   * `YIELD_DOUBLING_MS`, up to the rate given.
   */
  observe(waits: readonly LiveWait[], now: number): LiveWait | undefined {
    const target = this.#liveWaitMs;
    if (target === undefined) return undefined;
    const over = waits.filter((wait) => wait.ms > target);
    const first = this.#lastObserved === undefined;
    for (const handler of this.#behind)
      if (!over.some((wait) => wait.handler === handler)) this.#behind.delete(handler);
    if (first) for (const wait of over) this.#behind.add(wait.handler);
    const counted = over.find((wait) => !this.#behind.has(wait.handler));
    this.#yielding = counted !== undefined;
    const sinceLast = Math.min(MAX_GROWTH_STRETCH_MS, now - (this.#lastObserved ?? now));
    this.#lastObserved = now;
    const rate = this.#rate;
    if (counted !== undefined) {
      if (now - this.#lastCut < YIELD_CUT_SPACING_MS) return counted;
      this.#lastCut = now;
      const elapsedS = this.#lastStart === undefined ? 0 : (now - this.#lastStart) / 1000;
      const achieved = elapsedS > 0 && this.#lastTaken > 0 ? this.#lastTaken / elapsedS : rate;
      this.#rate = Math.max(YIELD_FLOOR_RATE, Math.min(rate, achieved) / 2);
      return counted;
    }
    // Unlimited past four full batches a pace when no rate caps it: the steps then run back to back.
    const grown = rate * 2 ** (sinceLast / YIELD_DOUBLING_MS);
    this.#rate =
      this.#cap === undefined && grown >= this.#batchSize * PACES_PER_SECOND * 4
        ? Number.POSITIVE_INFINITY
        : Math.min(this.#cap ?? Number.POSITIVE_INFINITY, grown);
    return undefined;
  }
}
