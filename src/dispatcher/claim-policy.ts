import { MAX_RETRY_LOOKAHEAD_MS } from '../core/limits.js';
import type { ClaimParams } from '../store/contract.js';

/**
 * The dispatcher's claim policy, in one place: it answers "claim now?", "with which hints?" and "whom to wake?" from
 * its own state, and nothing else in the dispatcher decides them. The dispatcher keeps the handler slots, the runs,
 * the followers and shutdown, and tells the policy what happened (a claim's result, a wake-up, a retry due); the
 * store's claim session keeps what the store remembers between claims. No store and no timer here: the clocks are
 * injected, so the policy is unit-tested on its own (test/unit/claim-policy.test.ts).
 *
 * State, per claim loop (`LoopClaimState`): busy (its last claim returned a busy batch), barren (it found, completed
 * and ran nothing), dormant (a later loop that waits for a backlog), a retried head due, the clock of acquiring when
 * full, the clock of looking at free lanes, and the length of its recent claims (which sets the retry lookahead and
 * the followers per head). Shared: whether other workers hold lanes (the loops claim in turn, the later ones rest),
 * whether a backlog holds (every loop claims), whether wake-ups are heard, and the lanes wake-ups named.
 */

/** Added to the lookahead: launching a claimed batch, and timers that fire late. */
const RETRY_LOOKAHEAD_SLACK_MS = 5;

/**
 * The lookahead in claims as long as the longest recent one (`retryLookaheadMs`): a retried head due while a claim is
 * in progress waits for that claim and the next, and under CPU contention either may take two or three times as long
 * as any recent one: a lookahead of two claims let such a retry start late. See docs/guide/guarantees.md.
 */
const RETRY_LOOKAHEAD_CLAIMS = 4;

/** At most this many lanes named by wake-ups are remembered until the next claim (beyond, the claim looks everywhere). */
export const MAX_HINTED_LANES = 64;

/**
 * A claim that returned at least this many deliveries (or a full batch of fewer) marks its loop busy; while any loop is
 * busy, every run that ends wakes the loops (see `wakeOnRunEnd`), and its claims look at free lanes every time (see
 * `#skipFreeLanes`). Lower, a steady light load feeds itself: a claim that looks at free lanes is slow enough to come
 * back with that many, so the next one looks too, and latency grows; drains are no faster for it.
 */
export const BUSY_CLAIM = 32;

/** No loop to wake (one array for every claim that wakes none). */
const NONE: readonly LoopClaimState[] = Object.freeze([]);

/** What the policy needs to know of the dispatcher's settings, and its clocks. */
export interface ClaimPolicyConfig {
  /** Claim loops of the dispatcher (`DispatcherOptions.claimLoops`). */
  readonly loops: number;
  /** Handlers the dispatcher runs (`ClaimParams.handlers`). */
  readonly handlers: readonly string[];
  readonly batchSize: number;
  readonly concurrency: number;
  readonly leaseDurationMs: number;
  readonly pollIntervalMs: number;
  /** Followers a claim may bring with each keyed head, at most (`DispatcherOptions.followers`). */
  readonly followers: number;
  /** The `now` of a claim: the bus's clock, undefined for the store's. */
  readonly now: () => Date | undefined;
  /** The clock (ms) of acquiring when full: the bus's clock, else the wall clock. */
  readonly wallNow: () => number;
  /** Real time (ms) of looking at free lanes, as the poll's wait is (default `performance.now`). */
  readonly realNow?: () => number;
}

/** The policy's state of one claim loop. */
export class LoopClaimState {
  readonly index: number;
  /**
   * A second (or later) loop whose last claim found, completed and ran nothing: it holds no lane, so it waits until a
   * claim of the dispatcher comes back full (a backlog) instead of claiming beside the first loop on every wake-up.
   * The later loops start so: they join in once the first loop's claim comes back full, and not while other workers
   * hold lanes (they would only rest again after a claim or two: `ClaimPolicy.mayRest`).
   */
  dormant: boolean;
  /**
   * With several loops, one whose last claim found, completed and ran nothing (a later one is dormant too unless a
   * backlog holds): a run that ends does not wake it (`ClaimPolicy.toWake`). Its siblings hold every lane with due
   * work, and a run ending there frees none; it claims again at its poll, on a publish's wake-up or its own retry's.
   * The first loop too: the lanes may have moved to a later loop (a lane is handed back when its holder runs nothing
   * for a moment, and the next claim to look takes it).
   */
  barren = false;
  /** This loop's last claim returned a busy batch (`BUSY_CLAIM`). */
  busy = false;
  /**
   * A delivery this loop rescheduled is due again (or about to be: the alarm rings a lookahead early) and no claim has
   * started since: followers leave the handler slots they free to that claim (`ClaimPolicy.retryWanted`).
   */
  retryDue = false;
  /** When (the `wallNow` clock, ms) the last claim that asked to acquire lanes even when full succeeded. */
  lastAcquireWhenFullAt: number | undefined;
  /**
   * When (the `realNow` clock, ms) this loop last let a claim take free lanes with due work (`freeLanes` not 'skip');
   * undefined: the next claim does.
   */
  freeLanesScannedAt: number | undefined;
  /**
   * The claim that looks at free lanes was due when a wake-up named lanes, and a light claim of those lanes went first
   * (`#skipFreeLanes`): the next claim looks, at once.
   */
  scanDeferred = false;
  /** The longest of this loop's recent claims (ms), decaying by a tenth a claim. */
  #recentClaimMs = 0;
  readonly #maxFollowers: number;
  /** Followers per keyed head this loop's next claim asks for (`followersNow`). */
  #followers: number;

  constructor(index: number, maxFollowers: number) {
    this.index = index;
    this.dormant = index > 0;
    this.#maxFollowers = maxFollowers;
    // Starts low: the first cycles are also the ones a failing head fails in, and its retry waits for them.
    this.#followers = Math.min(1, maxFollowers);
  }

  /** A delivery this loop rescheduled is due again: a dormant loop claims once more, and followers leave it slots. */
  retryCame(): void {
    this.dormant = false;
    this.retryDue = true;
  }

  /**
   * A claim of this loop took `ms`, launching its batch included, and its heads filled the limit or not (`full`); true
   * when the followers per head changed.
   */
  claimTook(ms: number, full: boolean): boolean {
    this.#recentClaimMs = Math.max(ms, this.#recentClaimMs * 0.9);
    const before = this.#followers;
    this.#followers = full ? this.#maxFollowers : Math.min(this.#maxFollowers, Math.max(1, before * 2));
    return this.#followers !== before;
  }

  /**
   * Followers per keyed head for this loop's next claim: 1 at first, doubled after every claim up to
   * `DispatcherOptions.followers`, and the most at once after a full claim (a backlog: doubling took five claims of a
   * fraction of the size, a fifth of a process's share of a drain beside three others). Each brings up to that many
   * rows a head, which makes claims longer; a retried head is not held up by them, as the claims take it ahead of its
   * due time (`retryLookaheadMs`, which follows their length) and it starts at its time. Holding the count down after
   * a retry slowed the healthy keys beside the retried ones and did not make retries start sooner: the lookahead
   * already keeps them within the poll interval.
   */
  get followersNow(): number {
    return this.#followers;
  }

  /**
   * How early this loop's claims may take a retried head (`ClaimHints.retryLookaheadMs`): a head that becomes due
   * while a claim is in progress is taken by the next one, so it waits for about two claims. Claims of 500 took 30-80
   * ms on a loaded 2-core machine, longer than the poll interval a retry is meant to start within, and one now and then
   * two or three times as long (`RETRY_LOOKAHEAD_CLAIMS`). A head claimed early costs little: it holds a slot and its
   * key, whose later deliveries wait for it anyway.
   */
  get retryLookaheadMs(): number {
    return Math.min(
      MAX_RETRY_LOOKAHEAD_MS,
      Math.ceil(RETRY_LOOKAHEAD_CLAIMS * this.#recentClaimMs) + RETRY_LOOKAHEAD_SLACK_MS,
    );
  }
}

/** One claim as the policy planned it. */
export interface ClaimPlan {
  readonly params: ClaimParams;
  /**
   * A light claim (`freeLanes: 'skip'`): nothing rides on it (the completion batcher writes on its own, and its report
   * of a due next delivery wakes the loop), so the store can run its light claim, which is what a publish waits for.
   */
  readonly light: boolean;
  /**
   * The completions waiting ride on this claim: not on a light claim, nor on a light load's look for unannounced work
   * (`freeLanes: 'when-due'`), which then costs one short statement when it finds none.
   */
  readonly carriesCompletions: boolean;
  /** The `wallNow` reading when the claim asks to acquire lanes even when full; undefined: it does not. */
  readonly acquireAt: number | undefined;
}

/** What a claim brought, as the policy needs it once its batch is launched. */
export interface ClaimOutcome {
  /** Its heads filled the limit (followers do not count). */
  readonly full: boolean;
  /** It claimed and completed nothing, and no run of the loop ended while it was in progress. */
  readonly empty: boolean;
  /** Runs the loop claimed are still in progress. */
  readonly runsInLoop: boolean;
}

export class ClaimPolicy {
  readonly loops: readonly LoopClaimState[];
  readonly #config: ClaimPolicyConfig;
  readonly #realNow: () => number;
  /**
   * Other workers held lanes at this worker's last claim that looked (`CompleteAndClaimResult.peerLanes`). A second loop
   * overlaps this worker's handlers with its claims; with other workers, their claims fill those gaps, and claims of
   * several loops at once cost the shared server more than they overlap. So then the loops take turns: one claim of
   * this worker at a time, each loop still on its own lanes. Alone, a worker's loops still claim side by side, which
   * drains faster there (see bench/README.md, "Looking inside a run").
   */
  peersHoldLanes = false;
  /** The last claim came back full: work is backing up, so every loop claims (see `LoopClaimState.dormant`). */
  backlog = false;
  /** The store's wake-ups are heard: every publish names its lanes (see `#skipFreeLanes`). */
  listening = false;
  /** Lanes wake-ups named since the last claim: the next claim tries them first (`ClaimHints.preferLanes`). */
  readonly #hintedLanes = new Set<number>();

  constructor(config: ClaimPolicyConfig) {
    this.#config = config;
    this.#realNow = config.realNow ?? (() => performance.now());
    this.loops = Array.from({ length: config.loops }, (_, index) => new LoopClaimState(index, config.followers));
  }

  // ----- whom to wake -------------------------------------------------------------------------------------------

  /**
   * A wake-up was heard, with the lanes a publish wrote when the store knows them. The caller wakes every loop: the
   * published lane may be held by any of them (a loop that finds nothing costs one acquire; waking them in turn
   * measured no better, and left a delivery in a busy loop's lane until that loop claimed again).
   */
  heard(lanes: readonly number[] | undefined): void {
    const remembered = lanes !== undefined && this.#hintedLanes.size < MAX_HINTED_LANES;
    if (remembered) for (const lane of lanes) this.#hintedLanes.add(lane);
    // No lanes named (the listener reconnected, or a foreign payload), or more than are remembered: publishes may
    // have gone unheard, or their lanes are named to no claim, so the next claims look at the free lanes too.
    if (!remembered) for (const loop of this.loops) loop.freeLanesScannedAt = undefined;
  }

  /**
   * The loops a run that ended may give work to: not a barren one (its own loop never is, it had the run in flight at
   * its last claim). Woken by every run end under a backlog, a loop whose sibling holds every lane with work would claim
   * again and again and find nothing, each claim reserving handler slots its sibling's claim could have filled.
   */
  toWake(): LoopClaimState[] {
    return this.loops.filter((loop) => this.wakes(loop));
  }

  /** Whether a run that ended wakes `loop` (`toWake`, one loop at a time: called per delivery, it allocates nothing). */
  wakes(loop: LoopClaimState): boolean {
    return !loop.barren;
  }

  /** Work is flowing: some loop's last claim was busy (`BUSY_CLAIM`). */
  flowing(): boolean {
    for (const loop of this.loops) if (loop.busy) return true;
    return false;
  }

  /**
   * Whether a run that ended (or a claim that gave back the slots it reserved) wakes the loops: while work is flowing
   * (the next claim rides the completions and likely finds more), a loop waits for a slot (`slotsShort`), or followers
   * wait for a slot (`readyWaiting`). Under a light load nobody is woken: the completion is written by the batcher,
   * which wakes its loop when a completed key's next delivery is due. A claim per ended run would keep the loop busy
   * with claims that find nothing, and a publish would wait for them (higher commit-to-handler latency).
   */
  wakeOnRunEnd(slotsShort: boolean, readyWaiting: boolean): boolean {
    return slotsShort || this.flowing() || readyWaiting;
  }

  /** A loop has a retried head due and no claim started since (`LoopClaimState.retryDue`). */
  retryWanted(): boolean {
    for (const loop of this.loops) if (loop.retryDue) return true;
    return false;
  }

  // ----- claim now? ---------------------------------------------------------------------------------------------

  /**
   * Whether a later loop should stop claiming and hand its lanes back (`Dispatcher.#rest`): other workers hold lanes,
   * and it waits for no retried head of its own (`retryPending`: its alarm is set; `mustForget`: a failed claim's
   * records are still to forget).
   */
  mayRest(loop: LoopClaimState, retryPending: boolean, mustForget: boolean): boolean {
    return loop.index > 0 && this.peersHoldLanes && !loop.dormant && !loop.retryDue && !retryPending && !mustForget;
  }

  /**
   * A dormant loop waits (at its poll) rather than claim: one loop keeps up with a shallow queue at the lowest latency,
   * the others would only add claims that find nothing. They join in as soon as a claim comes back full, unless other
   * workers share the lanes.
   */
  waits(loop: LoopClaimState): boolean {
    return loop.dormant && (!this.backlog || this.peersHoldLanes);
  }

  /** The loop rested: it handed its lanes back and waits (`Dispatcher.#rest`). */
  rested(loop: LoopClaimState): void {
    loop.dormant = true;
  }

  /** Whether this worker's loops claim one at a time (other workers share the lanes: see `peersHoldLanes`). */
  claimsInTurn(): boolean {
    return this.peersHoldLanes && this.loops.length > 1;
  }

  /**
   * The most deliveries a claim with `free` handler slots may ask for: a loop claims at most its share of the slots, so
   * the others find free slots while its handlers run; beside other workers the later loops rest, and the first has
   * them all.
   */
  limit(free: number): number {
    const { batchSize, concurrency } = this.#config;
    const claimers = this.peersHoldLanes ? 1 : this.loops.length;
    return Math.min(batchSize, free, Math.ceil(concurrency / claimers));
  }

  // ----- with which hints? --------------------------------------------------------------------------------------

  /**
   * Plan `loop`'s next claim of at most `limit` heads. Uses up the lanes wake-ups named, and clears the loop's retry
   * due: this claim looks the retried heads up (followers may take free slots again).
   */
  plan(loop: LoopClaimState, limit: number): ClaimPlan {
    const config = this.#config;
    const acquireAt = this.#acquireWhenFullDue(loop);
    // The look of every poll interval, rather than one a wake-up without lanes, a failed claim or the first claim asks
    // for.
    const periodic = loop.freeLanesScannedAt !== undefined;
    const light = this.#skipFreeLanes(loop);
    const freeLanes = this.#freeLanes(loop, light, periodic);
    const params: ClaimParams = {
      handlers: config.handlers,
      limit,
      leaseDurationMs: config.leaseDurationMs,
      now: config.now(),
      retryLookaheadMs: loop.retryLookaheadMs,
      ...(freeLanes === undefined ? {} : { freeLanes }),
      ...(acquireAt === undefined ? {} : { acquireWhenFull: true }),
      ...(config.followers > 0 ? { followers: loop.followersNow } : {}),
      ...(this.#hintedLanes.size === 0 ? {} : { preferLanes: [...this.#hintedLanes] }),
    };
    this.#hintedLanes.clear();
    loop.retryDue = false;
    return { params, light, carriesCompletions: !light && freeLanes !== 'when-due', acquireAt };
  }

  /** Where free lanes come in for `loop`'s next claim (`ClaimHints.freeLanes`). */
  #freeLanes(loop: LoopClaimState, light: boolean, periodic: boolean): ClaimParams['freeLanes'] {
    if (light) return 'skip';
    // A loop that is not busy will not fill its batch from its held lanes, so a claim that looks at free lanes takes
    // them first and claims every lane in one statement after: one round trip fewer, a shorter latency tail. Not beside
    // other workers, where it would take lanes a peer is about to drain.
    if (loop.busy || this.peersHoldLanes) return undefined;
    // While wake-ups are heard, the look of every poll interval is for work nobody announced, of which there is mostly
    // none: the store looks whether there is first. Not a look a wake-up without lanes asked for: what it announced was
    // just published, and the store's first look leaves work that new to the wake-up.
    return this.listening && periodic ? 'when-due' : 'first';
  }

  /**
   * Whether the claim carries completions and asks whether other workers hold lanes (`completeAndClaim`) rather than
   * claims alone: with completions riding, and with several loops even with none (a completeAndClaim of no lease), so
   * the first claim of a worker already keeps its later loops dormant beside other workers instead of waking them to
   * claim once or twice before they rest.
   */
  completesAndClaims(plan: ClaimPlan, riding: boolean): boolean {
    return riding || !(plan.light || this.loops.length === 1);
  }

  // ----- what a claim brought -----------------------------------------------------------------------------------

  /** A claim of `loop` failed: the next one looks at the free lanes. */
  claimFailed(loop: LoopClaimState): void {
    loop.freeLanesScannedAt = undefined;
  }

  /**
   * A claim of `loop` succeeded with `claimed` deliveries (followers included) out of `limit`; `peerLanes` as the store
   * reported it (undefined: it did not look). Busy by what it hands out: a few heads with long runs behind them are work
   * flowing.
   */
  claimed(loop: LoopClaimState, plan: ClaimPlan, claimed: number, peerLanes: number | undefined): void {
    if (peerLanes !== undefined) this.peersHoldLanes = peerLanes > 0;
    if (plan.acquireAt !== undefined) loop.lastAcquireWhenFullAt = plan.acquireAt;
    loop.busy = claimed >= Math.min(BUSY_CLAIM, plan.params.limit);
  }

  /**
   * After a claim's batch is launched: a full one means a backlog (every loop claims; returns the dormant loops to wake),
   * a short one from the first loop means none; a loop whose claim found and completed nothing and that runs nothing is
   * barren, and a later one turns dormant then.
   */
  launched(loop: LoopClaimState, outcome: ClaimOutcome): readonly LoopClaimState[] {
    if (this.loops.length === 1) return NONE;
    let wake: readonly LoopClaimState[] = NONE;
    if (outcome.full && !this.backlog) {
      this.backlog = true;
      // Beside other workers the dormant loops stay asleep (see `waits`): no wake-up to look and sleep again.
      if (!this.peersHoldLanes) wake = this.loops.filter((other) => other.dormant);
    } else if (!outcome.full && loop.index === 0) {
      this.backlog = false;
    }
    loop.barren = outcome.empty && !outcome.runsInLoop;
    loop.dormant = loop.index > 0 && loop.barren && !this.backlog;
    return wake;
  }

  /**
   * Whether this loop's next claim leaves free lanes it does not name alone (`freeLanes: 'skip'`): under a light load
   * (its last claim was not busy) while wake-ups are heard, every publish names its lanes, so one claim per poll
   * interval looks at the free lanes (for a delayed delivery come due, a crashed worker's expired lease, a lost
   * notification) and the others do not. Nearly every claim is short then, and looking at up to 256 free lanes each
   * time was a large part of it. A busy loop looks every time: under a backlog a short claim means it holds too few
   * lanes, and a drain that took new lanes only once per poll was much slower.
   */
  #skipFreeLanes(loop: LoopClaimState): boolean {
    const at = this.#realNow();
    const last = loop.freeLanesScannedAt;
    if (this.listening && !loop.busy && last !== undefined) {
      if (at - last < this.#config.pollIntervalMs) return true;
      // The look is due, and a wake-up named lanes: the publish that woke the loop is claimed first, by the light claim,
      // and the look follows at once (the loop does not wait in between), instead of the publish waiting for the full
      // claim, two statements of several times a light one's length.
      if (this.#hintedLanes.size > 0 && !loop.scanDeferred) {
        loop.scanDeferred = true;
        return true;
      }
    }
    loop.scanDeferred = false;
    loop.freeLanesScannedAt = at;
    return false;
  }

  /**
   * The clock reading (ms) when this loop's claim should acquire lanes even when full, else undefined: the first claim,
   * then the first after each lease duration. Only then may a claim whose held lanes fill the batch take other lanes, so
   * a crashed worker's expired lanes are taken over within about two lease durations even when every worker is busy.
   */
  #acquireWhenFullDue(loop: LoopClaimState): number | undefined {
    const at = this.#config.wallNow();
    const last = loop.lastAcquireWhenFullAt;
    return last === undefined || at - last >= this.#config.leaseDurationMs ? at : undefined;
  }
}
