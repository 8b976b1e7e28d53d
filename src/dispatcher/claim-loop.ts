import { MAX_RETRY_LOOKAHEAD_MS } from '../core/limits.js';
import { createOwnerId } from './owner-id.js';
import type { Logger } from '../core/logger.js';
import type { Store } from '../store/contract.js';
import { CompletionBatcher } from './completion-batcher.js';
import type { RunnerDeps } from './handler-runner.js';
import { LeaseRenewer } from './lease-renewer.js';
import { RetryAlarm } from './retry-alarm.js';
import { RetryBackoff, Wakeup } from './wakeup.js';

/** Added to the lookahead: launching a claimed batch, and timers that fire late. */
const RETRY_LOOKAHEAD_SLACK_MS = 5;

/**
 * The lookahead in claims as long as the longest recent one (`retryLookaheadMs`): a retried head due while a claim is
 * in progress waits for that claim and the next, and under CPU contention either may take twice as long as any recent
 * one (bench liveness cell: a claim of 241 ms after claims of 93 ms at most, and the retry it held up started 56 ms
 * after it was due with a lookahead of two claims).
 */
const RETRY_LOOKAHEAD_CLAIMS = 4;

/** The shortest claim cycle budget for followers (see `ClaimLoopConfig.followerCycleBudgetMs`). */
export const MIN_FOLLOWER_CYCLE_BUDGET_MS = 50;

/**
 * For how many budgets after a loop scheduled a retry its cycles stay under the budget (`ClaimLoop.followersNow`):
 * ten of its handlers' soonest first retries. Failures come in bursts (a dependency down), and each retry of the
 * burst is then due within a poll.
 */
const RETRY_WATCH_BUDGETS = 20;

/**
 * A retry of the loop due within this many budgets (one soonest first retry) holds the follower count (`claimTook`).
 * One due later is not waited for yet: the count may grow meanwhile, and the lookahead (four times the longest recent
 * claim) covers the longer cycles by the time it comes near. Holding it for any pending retry held it low for the whole
 * backoff, minutes at later attempts, and with failures now and then, for good.
 */
const RETRY_NEAR_BUDGETS = 2;

/** What a claim loop is built from: the dispatcher's shared parts and this loop's place. */
export interface ClaimLoopConfig<TTx> {
  readonly index: number;
  readonly ownerPrefix: string | undefined;
  readonly store: Store<TTx>;
  readonly leaseDurationMs: number;
  readonly completionBatchWindowMs: number;
  /** Completions written at once at most (a claim's batch, with its followers, is one write). */
  readonly maxCompletionBatch: number;
  /** Followers a claim may bring with each keyed head, at most (`DispatcherOptions.followers`). */
  readonly followers: number;
  /**
   * A claim cycle (the statement and the turns that launch its batch) longer than this halves the followers the loop's
   * next claim asks for; one shorter than half of it doubles them, up to `followers` (see `followersNow`).
   */
  readonly followerCycleBudgetMs: number;
  /** The batcher commits completions in the order they were asked for (`CompletionBatcherOptions.inOrder`). */
  readonly completionsInOrder: boolean;
  readonly logger: Logger;
  /** The runner's dependencies shared by every loop; the loop adds its own completion batcher. */
  readonly deps: Omit<RunnerDeps<TTx>, 'batcher'>;
  readonly random: (() => number) | undefined;
  readonly claimBackoff: RetryBackoff | undefined;
  readonly onLost: (loop: ClaimLoop<TTx>, lane: number, epoch: string, detectedBy: 'renewal' | 'claim') => void;
}

/**
 * The state of one claim loop of a dispatcher. Lanes are held per lease owner, so each loop has its own owner, the
 * renewer of its lanes, the completion batcher whose completions ride on its claims (a completed keyed delivery's
 * successor is in one of its lanes), its wake-up, its claim backoff and its takeover clock. The handler slots and
 * the runs are the dispatcher's, shared by its loops.
 */
export class ClaimLoop<TTx> {
  readonly index: number;
  readonly owner: string;
  readonly wakeup = new Wakeup();
  /** Wakes this loop when a delivery it rescheduled is due again (a dormant loop too: it claims once more). */
  readonly retryAlarm = new RetryAlarm(() => {
    this.dormant = false;
    this.retryDue = true;
    this.wakeup.wake();
  });
  /**
   * A delivery this loop rescheduled is due again (or about to be: the alarm rings a lookahead early) and no claim has
   * started since: followers leave the handler slots they free to that claim (`Dispatcher.#startFollower`).
   */
  retryDue = false;
  readonly batcher: CompletionBatcher;
  readonly renewer: LeaseRenewer;
  readonly deps: RunnerDeps<TTx>;
  readonly claimBackoff: RetryBackoff;
  /** When (config clock, ms) the last claim that asked to acquire lanes even when full succeeded. */
  lastAcquireWhenFullAt: number | undefined;
  /**
   * A second (or later) loop whose last claim found, completed and ran nothing: it holds no lane, so it waits until a
   * claim of the dispatcher comes back full (a backlog) instead of claiming beside the first loop on every wake-up.
   * The later loops start so: they join in once the first loop's claim comes back full, and not while other workers
   * hold lanes (they would only rest again after a claim or two: `Dispatcher.#rest`).
   */
  dormant: boolean;
  /**
   * With several loops, one whose last claim found, completed and ran nothing (a later one is dormant too unless a
   * backlog holds): a run that ends does not wake it (`Dispatcher.#wakeWorking`). Its siblings hold every lane with due
   * work, and a run ending there frees none; it claims again at its poll, on a publish's wake-up or its own retry's.
   * The first loop too: the lanes may have moved to a later loop (a lane is handed back when its holder runs nothing
   * for a moment, and the next claim to look takes it).
   */
  barren = false;
  /** This loop's last claim returned a busy batch (see `Dispatcher.#runEnded`). */
  busy = false;
  /** Runs of this loop that ended so far: a claim may leave a lane held for a run that ended while it was in progress. */
  runsEnded = 0;
  /** When the first of the current run of failed claims happened. */
  failingSince = 0;
  /**
   * A claim of this loop failed: it may have recorded deliveries in flight before its answer was lost, so before the
   * next claim the store forgets every one this dispatcher does not hold (`Store.forgetInFlight`).
   */
  mustForget = false;
  /** The running loop, once started. */
  done: Promise<void> = Promise.resolve();
  /**
   * When (performance.now()) this loop last let a claim take free lanes with due work (`ClaimParams.skipFreeLanes`);
   * undefined: the next claim does.
   */
  freeLanesScannedAt: number | undefined;
  /** When (performance.now()) this loop last scheduled a retry; -Infinity: never. */
  #retryScheduledAt = Number.NEGATIVE_INFINITY;
  /** The longest of this loop's recent claims (ms), decaying by a tenth a claim. */
  #recentClaimMs = 0;
  readonly #maxFollowers: number;
  readonly #followerCycleBudgetMs: number;
  readonly #logger: Logger;
  /** Followers per keyed head this loop's next claim asks for (`followersNow`). */
  #followers: number;

  constructor(config: ClaimLoopConfig<TTx>) {
    this.index = config.index;
    this.dormant = config.index > 0;
    this.owner = createOwnerId(config.ownerPrefix);
    this.claimBackoff = config.claimBackoff ?? new RetryBackoff(undefined, config.random);
    this.#maxFollowers = config.followers;
    this.#followerCycleBudgetMs = config.followerCycleBudgetMs;
    this.#logger = config.logger;
    // Starts low: the first cycles are also the ones a failing head fails in, and its retry waits for them.
    this.#followers = Math.min(1, config.followers);
    this.batcher = new CompletionBatcher({
      store: config.store,
      windowMs: config.completionBatchWindowMs,
      maxBatchSize: config.maxCompletionBatch,
      // Followers start once the completion before them is queued: completions must commit in that order.
      inOrder: config.completionsInOrder,
      now: config.deps.now,
      logger: config.logger,
      // A completed key's next delivery is due: claim it now rather than at the next wake-up or poll.
      onNextDue: () => this.wakeup.wake(),
    });
    this.renewer = new LeaseRenewer({
      store: config.store,
      owner: this.owner,
      leaseDurationMs: config.leaseDurationMs,
      intervalMs: Math.max(1, Math.floor(config.leaseDurationMs / 3)),
      now: config.deps.now,
      logger: config.logger,
      onLost: (lane, epoch, detectedBy) => config.onLost(this, lane, epoch, detectedBy),
    });
    this.deps = {
      ...config.deps,
      batcher: this.batcher,
      // Rung early enough for the claim after the one in progress to take the retried head before it is due (it
      // starts when due, see `retryLookaheadMs`), and when due, should that claim have missed it.
      retryScheduled: (delayMs) => {
        this.#retryScheduledAt = performance.now();
        this.retryAlarm.add(delayMs - this.retryLookaheadMs);
        this.retryAlarm.add(delayMs);
      },
    };
  }

  /** A claim of this loop took `ms`, launching its batch included. */
  claimTook(ms: number): void {
    this.#recentClaimMs = Math.max(ms, this.#recentClaimMs * 0.9);
    const before = this.#followers;
    // While a retried head is near its due time (or waits for its claim), cycles are kept under half the budget, and the
    // count doubles only after one under a quarter of it (doubled, still under half): doubling after every cycle from 1
    // reached 8 followers about when the liveness cell's retries came due, and on a loaded machine the cycle then in
    // progress started one up to 132 ms late. Never doubling held the count at its first value for as long as failures
    // kept coming (some retry is always near then).
    const budget = this.#followerCycleBudgetMs;
    const retryWaiting = this.retryDue || this.retryAlarm.dueWithin(RETRY_NEAR_BUDGETS * budget);
    // No retry of this loop lately: long cycles hold up no retried head, and under CPU contention (several workers on
    // few cores) they are long whatever the count; halving it then only made claims smaller and more numerous (4
    // processes on 2 cores: followers fell to 0-2, 0.72x the rate of one process, 0.98x without the halving).
    const watching = retryWaiting || performance.now() - this.#retryScheduledAt < budget * RETRY_WATCH_BUDGETS;
    const grow = () => Math.min(this.#maxFollowers, Math.max(1, before * 2));
    if (!watching) this.#followers = grow();
    else if (ms > (retryWaiting ? budget / 2 : budget)) this.#followers = Math.floor(before / 2);
    else if (ms < (retryWaiting ? budget / 4 : budget / 2)) this.#followers = grow();
    if (this.#followers !== before)
      this.#logger.debug('followers per keyed head changed', {
        owner: this.owner,
        followers: this.#followers,
        claimCycleMs: Math.round(ms),
        budgetMs: this.#followerCycleBudgetMs,
      });
  }

  /**
   * Followers per keyed head for this loop's next claim. Each brings up to that many rows a head, which makes the claim
   * and the turns that launch it longer: a retried head due meanwhile waits for them and for the claim after them (on a
   * loaded 2-core machine, cycles of 500 heads with 9 followers each took 600-770 ms, and retries due 500 ms after the
   * failure started 120-320 ms late). So the count starts at 1 and, once this loop has scheduled a retry (for
   * `RETRY_WATCH_BUDGETS` budgets after), follows the cycles: halved after one over the budget, doubled after one under
   * half of it, between 0 and `DispatcherOptions.followers`; while a retry of this loop is due within two budgets
   * (`RETRY_NEAR_BUDGETS`), halved after one over half the budget and doubled only after one under a quarter of it.
   * Otherwise it doubles after every cycle: the first failure after a quiet spell may wait for the cycle then in
   * progress.
   */
  get followersNow(): number {
    return this.#followers;
  }

  /**
   * How early this loop's claims may take a retried head (`ClaimParams.retryLookaheadMs`): a head that becomes due
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
