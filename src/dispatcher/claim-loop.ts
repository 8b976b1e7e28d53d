import { createOwnerId } from './owner-id.js';
import type { Logger } from '../core/logger.js';
import type { ResolvedDispatcherOptions } from '../core/options.js';
import type { ClaimSession, Store } from '../store/contract.js';
import type { LoopClaimState } from './claim-policy.js';
import { CompletionBatcher } from './completion-batcher.js';
import type { RunnerDeps } from './handler-runner.js';
import { LeaseRenewer } from './lease-renewer.js';
import { RetryAlarm } from './retry-alarm.js';
import { RetryBackoff } from '../core/retry-backoff.js';
import { Wakeup } from './wakeup.js';

/**
 * The completion batch is written at once when it reaches this size or twice a claim's batch with its followers,
 * whichever is larger (below that it waits for its window or rides on the next claim: a claim's whole batch must fit).
 */
const MIN_COMPLETION_BATCH = 1_000;

/** What a claim loop is built from: the dispatcher's shared parts and this loop's place. */
export interface ClaimLoopConfig<TTx> {
  readonly index: number;
  readonly options: ResolvedDispatcherOptions;
  readonly store: Store<TTx>;
  /** The claim policy's state of this loop (claim-policy.ts). */
  readonly claims: LoopClaimState;
  readonly logger: Logger;
  /** The runner's dependencies shared by every loop; the loop adds its own completion batcher. */
  readonly deps: Omit<RunnerDeps<TTx>, 'batcher'>;
  readonly random: (() => number) | undefined;
  readonly claimBackoff: RetryBackoff | undefined;
  readonly onLost: (loop: ClaimLoop<TTx>, lane: number, epoch: string, detectedBy: 'renewal' | 'claim') => void;
}

/**
 * One claim loop of a dispatcher: lanes are held per lease owner, so each loop has its own owner and claim session,
 * the renewer of its lanes, the completion batcher whose completions ride on its claims (a completed keyed delivery's
 * successor is in one of its lanes), its wake-up, its retry alarm and its claim backoff. What the claim policy knows of
 * the loop is `claims` (claim-policy.ts); the handler slots and the runs are the dispatcher's, shared by its loops.
 */
export class ClaimLoop<TTx> {
  readonly index: number;
  readonly owner: string;
  readonly claims: LoopClaimState;
  readonly wakeup = new Wakeup();
  /** Wakes this loop when a delivery it rescheduled is due again (a dormant loop too: it claims once more). */
  readonly retryAlarm = new RetryAlarm(() => {
    this.claims.retryCame();
    this.wakeup.wake();
  });
  readonly batcher: CompletionBatcher;
  readonly renewer: LeaseRenewer;
  readonly deps: RunnerDeps<TTx>;
  readonly claimBackoff: RetryBackoff;
  /** Runs of this loop that ended so far: a claim may leave a lane held for a run that ended while it was in progress. */
  runsEnded = 0;
  /** When the first of the current run of failed claims happened. */
  failingSince = 0;
  /**
   * A claim of this loop failed: it may have recorded deliveries in flight before its answer was lost, so before the
   * next claim the store forgets every one this dispatcher does not hold (`ClaimSession.forgetInFlight`).
   */
  mustForget = false;
  /** The running loop, once started. */
  done: Promise<void> = Promise.resolve();
  readonly #store: Store<TTx>;
  /** The loop's claim session, opened at its first claim and again after it rested (`session`). */
  #session: ClaimSession | undefined;
  /** The owners of the dispatcher's other loops (`ClaimSessionOptions.siblingOwners`). */
  siblingOwners: readonly string[] = [];

  constructor(config: ClaimLoopConfig<TTx>) {
    this.index = config.index;
    this.claims = config.claims;
    this.#store = config.store;
    const { options } = config;
    this.owner = createOwnerId(options.ownerPrefix);
    this.claimBackoff = config.claimBackoff ?? new RetryBackoff(undefined, config.random);
    this.batcher = new CompletionBatcher({
      store: config.store,
      windowMs: options.completionBatchWindowMs,
      // A claim's whole batch, with its followers, is one write.
      maxBatchSize: Math.max(MIN_COMPLETION_BATCH, 2 * options.batchSize * (1 + options.followers)),
      // Followers start once the completion before them is queued: completions must commit in that order.
      inOrder: options.followers > 0,
      now: config.deps.now,
      logger: config.logger,
      // A completed key's next delivery is due: claim it now rather than at the next wake-up or poll.
      onNextDue: () => this.wakeup.wake(),
    });
    this.renewer = new LeaseRenewer({
      store: config.store,
      owner: this.owner,
      leaseDurationMs: options.leaseDurationMs,
      intervalMs: Math.max(1, Math.floor(options.leaseDurationMs / 3)),
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
        this.retryAlarm.add(delayMs - this.claims.retryLookaheadMs);
        this.retryAlarm.add(delayMs);
      },
    };
  }

  /**
   * The loop's claim session: opened at its first claim (each loop holds a connection for its claims where the store
   * can), and again after the loop rested and closed it.
   */
  get session(): ClaimSession {
    this.#session ??= this.#store.openClaims(this.owner, { siblingOwners: this.siblingOwners, holdConnection: true });
    return this.#session;
  }

  /**
   * Close the loop's claim session (when it rests, and when the dispatcher stops): its lanes that run nothing are
   * handed back, and what the store kept for its claims is forgotten. Returns how many lanes were handed back.
   */
  async closeSession(): Promise<number> {
    const session = this.session;
    this.#session = undefined;
    return session.close();
  }
}
