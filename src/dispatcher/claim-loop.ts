import { MAX_RETRY_LOOKAHEAD_MS } from '../core/limits.js';
import { createOwnerId } from './owner-id.js';
import type { Logger } from '../core/logger.js';
import type { Store } from '../store/contract.js';
import { CompletionBatcher } from './completion-batcher.js';
import type { RunnerDeps } from './handler-runner.js';
import { LeaseRenewer } from './lease-renewer.js';
import { RetryAlarm } from './retry-alarm.js';
import { RetryBackoff } from '../core/retry-backoff.js';
import { Wakeup } from './wakeup.js';

/** Added to the lookahead: launching a claimed batch, and timers that fire late. */
const RETRY_LOOKAHEAD_SLACK_MS = 5;

/**
 * The lookahead in claims as long as the longest recent one (`retryLookaheadMs`): a retried head due while a claim is
 * in progress waits for that claim and the next, and under CPU contention either may take twice as long as any recent
 * one (bench liveness cell: a claim of 241 ms after claims of 93 ms at most, and the retry it held up started 56 ms
 * after it was due with a lookahead of two claims).
 */
const RETRY_LOOKAHEAD_CLAIMS = 4;

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
  /**
   * The claim that looks at free lanes was due when a wake-up named lanes, and a light claim of those lanes went first
   * (`Dispatcher.#skipFreeLanes`): the next claim looks, at once.
   */
  scanDeferred = false;
  /** The longest of this loop's recent claims (ms), decaying by a tenth a claim. */
  #recentClaimMs = 0;
  readonly #maxFollowers: number;
  readonly #logger: Logger;
  /** Followers per keyed head this loop's next claim asks for (`followersNow`). */
  #followers: number;

  constructor(config: ClaimLoopConfig<TTx>) {
    this.index = config.index;
    this.dormant = config.index > 0;
    this.owner = createOwnerId(config.ownerPrefix);
    this.claimBackoff = config.claimBackoff ?? new RetryBackoff(undefined, config.random);
    this.#maxFollowers = config.followers;
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
        this.retryAlarm.add(delayMs - this.retryLookaheadMs);
        this.retryAlarm.add(delayMs);
      },
    };
  }

  /** A claim of this loop took `ms`, launching its batch included. */
  claimTook(ms: number): void {
    this.#recentClaimMs = Math.max(ms, this.#recentClaimMs * 0.9);
    const before = this.#followers;
    this.#followers = Math.min(this.#maxFollowers, Math.max(1, before * 2));
    if (this.#followers !== before)
      this.#logger.debug('followers per keyed head changed', {
        owner: this.owner,
        followers: this.#followers,
        claimCycleMs: Math.round(ms),
      });
  }

  /**
   * Followers per keyed head for this loop's next claim: 1 at first, doubled after every claim up to
   * `DispatcherOptions.followers`. Each brings up to that many rows a head, which makes claims longer; a retried head is
   * not held up by them, as the claims take it ahead of its due time (`retryLookaheadMs`, which follows their length)
   * and it starts at its time. Holding the count down after a retry (halved after cycles over half the soonest first
   * retry, for ten such retries after) cost the bench's liveness cell's healthy keys 4-10% of their deliveries/s
   * (0.72-0.79x against 0.81-0.82x without, three interleaved runs of 6-8 repetitions on 2 cores), and the retries
   * started at most 7.7-12.4 ms after due with it, 11.0-19.4 without: within the poll interval (50 ms) either way.
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
