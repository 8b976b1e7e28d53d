import type { LiveWait } from '../store/contract.js';

/**
 * How fast `runReplay` takes events: a fixed rate, no limit, or (the yield) a rate that halves while live traffic
 * waits longer than a target and grows while it does not, so a replay goes as fast as the live deliveries beside it
 * allow. One object per run; the runner asks it how many events the next step takes and how long to wait after it,
 * and tells it what each step saw.
 */

/** With a rate, steps a second at most. */
export const PACES_PER_SECOND = 20;
/**
 * With a rate, a step takes at least this many events (fewer steps a second below 400 events/s): a step's own
 * statements cost about as much as a few of the deliveries it creates, and at a slow rate they would be most of what
 * the replay costs the live traffic beside it.
 */
export const MIN_PACED_STEP = 20;
/** Where a yielding replay starts, in events a second: low, as nothing is known yet of the live traffic beside it. */
export const YIELD_START_RATE = 250;
/** While no live delivery waits too long, a yielding replay's rate doubles in this long (ms). */
const YIELD_DOUBLING_MS = 2_000;
/**
 * ... but only in this long (ms) below twice the rate at which live deliveries last began to wait too long, while live
 * traffic flows: it comes back to that rate slowly, so it overshoots once in several seconds rather than every few.
 */
const YIELD_PROBE_DOUBLING_MS = 10_000;
/** A yielding replay's rate is cut at most this often (ms). */
const YIELD_CUT_SPACING_MS = 200;
/** Growth counts at most this long (ms) between two steps (a long wait between them is not a clear road). */
const MAX_GROWTH_STRETCH_MS = 500;
/** A yielding replay's slowest rate: one step a second. It never stops, so a handler behind for its own reasons (no
 *  worker runs it) slows a replay down but does not hold it forever. */
export const YIELD_FLOOR_RATE = MIN_PACED_STEP;

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
  /** The rate (events/s) at which live deliveries last began to wait too long; undefined before the first time. */
  #overshotAt: number | undefined;

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
   * small batches rather than one burst a second, which a claim would carry at once), at least `MIN_PACED_STEP`.
   */
  get perStep(): number {
    if (!Number.isFinite(this.#rate)) return this.#batchSize;
    return Math.min(this.#batchSize, Math.max(MIN_PACED_STEP, Math.floor(this.#rate / PACES_PER_SECOND)));
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
   * `YIELD_DOUBLING_MS` (in `YIELD_PROBE_DOUBLING_MS` below twice the rate it last overshot at, while some live wait is
   * seen), up to the rate given.
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
    const wasYielding = this.#yielding;
    this.#yielding = counted !== undefined;
    const sinceLast = Math.min(MAX_GROWTH_STRETCH_MS, now - (this.#lastObserved ?? now));
    this.#lastObserved = now;
    const rate = this.#rate;
    if (counted !== undefined) {
      if (now - this.#lastCut < YIELD_CUT_SPACING_MS) return counted;
      this.#lastCut = now;
      const elapsedS = this.#lastStart === undefined ? 0 : (now - this.#lastStart) / 1000;
      const achieved = elapsedS > 0 && this.#lastTaken > 0 ? this.#lastTaken / elapsedS : rate;
      if (!wasYielding) this.#overshotAt = Math.min(rate, achieved);
      this.#rate = Math.max(YIELD_FLOOR_RATE, Math.min(rate, achieved) / 2);
      return counted;
    }
    // Slowly only while live deliveries start at all (some wait is seen): once the traffic is gone it grows at once.
    const near = this.#overshotAt !== undefined && rate < 2 * this.#overshotAt && waits.length > 0;
    // Unlimited past four full batches a pace when no rate caps it: the steps then run back to back.
    const grown = rate * 2 ** (sinceLast / (near ? YIELD_PROBE_DOUBLING_MS : YIELD_DOUBLING_MS));
    this.#rate =
      this.#cap === undefined && grown >= this.#batchSize * PACES_PER_SECOND * 4
        ? Number.POSITIVE_INFINITY
        : Math.min(this.#cap ?? Number.POSITIVE_INFINITY, grown);
    return undefined;
  }
}
