import { setImmediate as nextTurn, setTimeout as sleep } from 'node:timers/promises';
import type { Clock } from '../core/clock.js';
import type { TypedEmitter } from '../core/emitter.js';
import { InvalidStateError, isRetryableError } from '../core/errors.js';
import type { RelayBusEventMap, ResolvedHandler } from '../core/handlers.js';
import { parseLeaseToken } from '../core/lease-token.js';
import { describeError, type Logger } from '../core/logger.js';
import type { ResolvedDispatcherOptions } from '../core/options.js';
import type { ClaimedDelivery, DeliveryLease, Store } from '../store/contract.js';
import { ActivityReport } from './activity-report.js';
import { ClaimLoop } from './claim-loop.js';
import { EarlyStarts } from './early-starts.js';
import {
  reportLeaseLost,
  reportUnexpected,
  runAtOnce,
  runDelivery,
  RunningDelivery,
  type RunOutcome,
} from './handler-runner.js';
import { GracePeriod } from './shutdown.js';
import { HealthState } from './health.js';
import { ClaimPolicy } from './claim-policy.js';
import { Followers } from './followers.js';

export { HealthState, type RelayBusHealth } from './health.js';
import type { RetryBackoff } from './wakeup.js';

/**
 * The dispatcher: the worker loop that claims deliveries and runs their handlers. It knows the
 * store only through the `Store` contract.
 *
 * States:
 *
 *   idle ──start()──▶ running ──stop()──▶ stopping ──▶ stopped
 *
 * - `idle`: constructed, nothing claimed. `stop()` here just ends in `stopped`.
 * - `running`: the claim loop runs. Each turn it claims at most `min(batchSize, concurrency -
 *   running handlers)` deliveries (never more than free handler slots), starts a handler run for
 *   each, and then either claims again at once (the claim came back full: more is probably due) or
 *   waits up to `pollIntervalMs`. A slot frees when its handler returns (or fails), not when the
 *   outcome is written, so the next claim overlaps the completion batch of the previous one; runs
 *   that only wait for their outcome write are capped at another `concurrency`. The wait ends early
 *   when a wake-up names new work, and when a handler returns or a run ends while that may make a
 *   claim productive: work is flowing (a recent claim was busy), a loop waits for a slot, or the
 *   completion batcher reports that a completed key's next delivery is due. Under a light load a run
 *   that ends wakes nobody, so the loop is free for the next publish. Per-key deliveries never run
 *   concurrently: the store hands out only the head of each key, and a key lives in one lane that
 *   one owner holds. Meanwhile the lease renewer extends the lanes that have work in flight every
 *   `leaseDurationMs / 3`; a lane reported lost (or seen at a newer epoch in a later claim) aborts
 *   the handlers claimed in it and their results are dropped. Completions go through the
 *   completion batcher (one `completeMany` per `completionBatchWindowMs`). Once per lease duration
 *   (by the bus's clock) a claim sets `acquireWhenFull`: even when this worker's own lanes fill the batch,
 *   the store takes a few other lanes, so a crashed worker's expired lanes are taken over while
 *   every worker is busy.
 * - Claim loops (`claimLoops`, default 1): each loop claims as a lease owner of its own (lanes are held per owner),
 *   with its own renewer, completion batcher, wake-up and clock of acquiring when full (src/dispatcher/claim-loop.ts); the handler
 *   slots, the runs and the health are shared. A loop reserves the slots its claim may fill, so the loops never
 *   claim more than `concurrency` between them. With two, one loop's claim waits on Postgres while the other's
 *   handlers run.
 * - `stopping` (`stop()`): no new claim starts; deliveries of a claim that was in progress are
 *   released unrun. Running handlers get up to `shutdownGraceMs` to finish (their outcomes are
 *   written normally). The rest are aborted through their signal and released (no attempt
 *   charged), pending completions are flushed, renewal stops and `relinquish(owner)` of every loop hands
 *   every lane back, so other workers take the lanes at once instead of after the lease.
 * - `stopped`: final. A dispatcher is not restarted; create a new one (a new owner id).
 *
 * A failed claim is logged once and retried after a capped exponential backoff (250 ms doubling to
 * 30 s, jittered; `STORE_RETRY_BACKOFF`), reset by the next successful claim; store failures never
 * crash the process. The claim loop feeds the bus's health: unready after a failed claim, ready
 * after a successful one, with one log line at each transition. Nothing here handles process
 * signals: the CLI maps SIGTERM onto `bus.stop()`.
 */

/** Lifecycle state of a dispatcher; see the module header. */
export type DispatcherState = 'idle' | 'running' | 'stopping' | 'stopped';

/** Everything a dispatcher needs; the bus builds it. */
export interface DispatcherConfig<TTx> {
  readonly store: Store<TTx>;
  /** Handlers by name; the dispatcher claims deliveries of these handlers only. */
  readonly handlers: ReadonlyMap<string, ResolvedHandler<TTx>>;
  readonly options: ResolvedDispatcherOptions;
  readonly logger: Logger;
  /** Undefined: store calls use the store's clock. */
  readonly clock: Clock | undefined;
  readonly emitter: TypedEmitter<RelayBusEventMap>;
  /** Random source of the backoff jitter (tests). */
  readonly random?: () => number;
  /** Where the claim loop reports whether the store answers; a private one when absent. */
  readonly health?: HealthState;
  /** Delays between retries of a failing claim; `STORE_RETRY_BACKOFF` when absent (tests shorten it). */
  readonly claimBackoff?: RetryBackoff;
}

/** Options of `stop()`. */
export interface StopOptions {
  /** Override `shutdownGraceMs` for this stop; while a stop is in progress, cuts its grace period to this. */
  readonly graceMs?: number;
}

export { createOwnerId } from './owner-id.js';

/**
 * The completion batch is written at once when it reaches this size or twice a claim's batch with its followers,
 * whichever is larger (below that it waits for its window or rides on the next claim: a claim's whole batch must fit).
 */
const MIN_COMPLETION_BATCH = 1_000;

/**
 * Runs a claim launches in one turn of the event loop, followers included (see `#claimLoop`): 5,000 of a claim of 500
 * heads with 9 followers each, in one turn, held timers for 60 ms and more (a retried head started up to 180 ms late).
 */
const LAUNCH_TURN_RUNS = 500;

/**
 * Handler slots followers leave free while a retried head is due and its claim has not started (`#startFollower`): as
 * many as the probes one claim looks up (the Postgres store's limit).
 */
const RETRY_SLOTS = 64;

/** The worker loop of one bus; see the module header for its states. Created by `bus.start()`. */
export class Dispatcher<TTx> {
  /** The lease owner id of the first claim loop (each loop claims lanes as an owner of its own; see `owners`). */
  readonly owner: string;
  /** The lease owner ids of every claim loop. */
  readonly owners: readonly string[];
  readonly #config: DispatcherConfig<TTx>;
  readonly #handlerNames: readonly string[];
  readonly #loops: readonly ClaimLoop<TTx>[];
  /** Every run in progress, with the claim loop whose lane it was claimed in. */
  readonly #running = new Map<RunningDelivery<TTx>, ClaimLoop<TTx>>();
  /** The claim policy: claim now, with which hints, whom to wake (claim-policy.ts). */
  readonly #policy: ClaimPolicy;
  /** Settles when the claim that has the turn is over (only used while the loops claim in turn). */
  #turnTaken: Promise<void> = Promise.resolve();
  /** Runs at most, running or waiting for their outcome write (see `#claimLoop`). */
  readonly #maxRuns: number;
  /** Followers waiting for the delivery before them, and those parked for a retried head's claim (followers.ts). */
  readonly #followers = new Followers<ClaimLoop<TTx>>();
  /** Runs of `#running` in phase `running` (the others only wait for their outcome write); changes with a run's phase. */
  #active = 0;
  /** Handler slots a claim in progress may fill (so two loops never claim more than `concurrency` between them). */
  #reserved = 0;
  #wakeQueued = false;
  /** A loop waits because every handler slot is taken: a run that ends must wake it. */
  #slotsShort = false;
  readonly #grace = new GracePeriod();
  readonly #toRelease: DeliveryLease[] = [];
  readonly #health: HealthState;
  readonly #activity: ActivityReport;
  /** Aborted by `stop()`: ends a claim retry's backoff at once. */
  readonly #stopSignal = new AbortController();
  #state: DispatcherState = 'idle';
  /** The unsubscribe of the store's wake-ups, once subscribed. */
  #wakeups: Promise<(() => Promise<void>) | undefined> = Promise.resolve(undefined);
  #stopping: Promise<void> | undefined;
  readonly #now: () => Date | undefined;
  readonly #wallNow: () => Date;
  /** Runs claimed before they were due, waiting for their time: looked at on every handler end. */
  readonly #earlyStarts: EarlyStarts;

  constructor(config: DispatcherConfig<TTx>) {
    this.#config = config;
    this.#handlerNames = Object.freeze([...config.handlers.keys()]);
    this.#health = config.health ?? new HealthState();
    this.#activity = new ActivityReport(config.logger);
    this.#now = () => config.clock?.now();
    this.#wallNow = () => config.clock?.now() ?? new Date();
    // Read at every handler end while a run waits: Date.now() unless a clock is set (no Date made per look).
    const { clock } = config;
    this.#earlyStarts = new EarlyStarts(clock === undefined ? Date.now : () => clock.now().getTime());
    const { options } = config;
    /** The most deliveries one claim hands out: its batch and their followers. */
    const claimRows = options.batchSize * (1 + options.followers);
    this.#maxRuns = options.concurrency + Math.max(options.concurrency, options.claimLoops * claimRows);
    this.#policy = new ClaimPolicy({
      loops: options.claimLoops,
      handlers: this.#handlerNames,
      batchSize: options.batchSize,
      concurrency: options.concurrency,
      leaseDurationMs: options.leaseDurationMs,
      pollIntervalMs: options.pollIntervalMs,
      followers: options.followers,
      now: this.#now,
      wallNow: () => this.#wallNow().getTime(),
    });
    this.#loops = Array.from(
      { length: options.claimLoops },
      (_, index) =>
        new ClaimLoop<TTx>({
          index,
          ownerPrefix: options.ownerPrefix,
          store: config.store,
          leaseDurationMs: options.leaseDurationMs,
          completionBatchWindowMs: options.completionBatchWindowMs,
          maxCompletionBatch: Math.max(MIN_COMPLETION_BATCH, 2 * claimRows),
          claims: this.#policy.loops[index]!,
          completionsInOrder: options.followers > 0,
          logger: config.logger,
          deps: {
            store: config.store,
            emitter: config.emitter,
            logger: config.logger,
            now: this.#now,
            wallNow: this.#wallNow,
            random: config.random,
            earlyStarts: this.#earlyStarts,
            handlerEnded: () => this.#handlerEnded(),
            succeeded: (run) => this.#startFollower(run),
            finished: (run, outcome) => {
              const runLoop = this.#running.get(run);
              if (runLoop !== undefined) this.#finish(runLoop, run, outcome);
            },
          },
          random: config.random,
          claimBackoff: index === 0 ? config.claimBackoff : undefined,
          onLost: (loop, lane, epoch, detectedBy) => this.#onLaneLost(loop, lane, epoch, detectedBy),
        }),
    );
    this.owners = Object.freeze(this.#loops.map((loop) => loop.owner));
    this.owner = this.owners[0]!;
    for (const loop of this.#loops) loop.siblingOwners = this.owners.filter((owner) => owner !== loop.owner);
  }

  /** Wait for the turn to claim; call the function returned when the claim is over. */
  async #claimTurn(): Promise<() => void> {
    const previous = this.#turnTaken;
    let release!: () => void;
    this.#turnTaken = new Promise<void>((resolve) => {
      release = resolve;
    });
    await previous;
    return release;
  }

  get state(): DispatcherState {
    return this.#state;
  }

  /** Start the claim loops. */
  start(): void {
    if (this.#state !== 'idle')
      throw new InvalidStateError(
        `The dispatcher is ${this.#state}; a dispatcher starts once. Create a new bus to start again.`,
      );
    if (this.#handlerNames.length === 0)
      throw new InvalidStateError(
        'The dispatcher has no handlers to run; register them with bus.on(...) before start().',
      );
    this.#state = 'running';
    for (const loop of this.#loops) loop.renewer.start();
    this.#config.logger.info('dispatcher started', {
      owner: this.owner,
      ...(this.owners.length > 1 ? { owners: this.owners } : {}),
      handlers: this.#handlerNames.length,
      ...this.#config.options,
    });
    this.#wakeups = this.#subscribeWakeups();
    for (const loop of this.#loops) loop.done = this.#claimLoop(loop);
  }

  /** Claim at once when a publish commits (NOTIFY), instead of at the next poll; polling stays. */
  async #subscribeWakeups(): Promise<(() => Promise<void>) | undefined> {
    const { store, logger } = this.#config;
    if (store.subscribeWakeups === undefined) return undefined;
    try {
      // Every loop: the published lane may be held by any of them (`ClaimPolicy.heard`).
      const unsubscribe = await store.subscribeWakeups((lanes) => {
        this.#policy.heard(lanes);
        this.#wakeAll();
      });
      // A 'poll' store resolves a no-op: nothing is heard.
      this.#policy.listening = store.capabilities.wakeups !== 'poll';
      return unsubscribe;
    } catch (error) {
      logger.warn('listening for new deliveries failed; the dispatcher polls only', { error: describeError(error) });
      return undefined;
    }
  }

  #wakeAll(): void {
    for (const loop of this.#loops) loop.wakeup.wake();
  }

  /** Wake the loops a run that ended may give work to (`ClaimPolicy.toWake`). */
  #wakeWorking(): void {
    for (const claims of this.#policy.toWake()) this.#loops[claims.index]!.wakeup.wake();
  }

  /**
   * Stop gracefully: stop claiming, let running handlers finish within the grace period, abort and
   * release the rest (no attempt charged), then relinquish every lane. Idempotent.
   */
  stop(options: StopOptions = {}): Promise<void> {
    if (this.#stopping !== undefined) {
      if (options.graceMs !== undefined) this.#grace.cut(options.graceMs);
      return this.#stopping;
    }
    if (this.#state === 'idle') {
      this.#state = 'stopped';
      return (this.#stopping = Promise.resolve());
    }
    this.#state = 'stopping';
    this.#stopSignal.abort();
    this.#stopping = this.#shutdown(options.graceMs ?? this.#config.options.shutdownGraceMs);
    return this.#stopping;
  }

  async #claimLoop(loop: ClaimLoop<TTx>): Promise<void> {
    const { options, logger } = this.#config;
    const policy = this.#policy;
    const claims = loop.claims;
    while (this.#state === 'running') {
      if (policy.mayRest(claims, loop.retryAlarm.pending, loop.mustForget)) {
        await this.#rest(loop);
        continue;
      }
      if (policy.waits(claims)) {
        await loop.wakeup.wait(options.pollIntervalMs);
        continue;
      }
      if (loop.mustForget) {
        const failed = await this.#forgetUnheld(loop);
        if (failed !== undefined) {
          await this.#retryClaimAfter(loop, failed.error);
          continue;
        }
      }
      // A slot is a running handler: a run whose handler returned and that only waits for its outcome
      // write (the completion batch) does not hold one, so the next claim overlaps that write. Those
      // waiting runs are bounded too, to one more `concurrency` (or what the loops' claims bring with their followers,
      // if more), should the writes fall behind. Slots another loop's claim in progress may fill are reserved.
      const free = Math.min(options.concurrency - this.#active, this.#maxRuns - this.#running.size) - this.#reserved;
      if (free > 0) {
        const limit = policy.limit(free);
        const plan = policy.plan(claims, limit);
        // The completions of the last batch ride on this claim: one round trip, and their keys' next deliveries can
        // be claimed at once. Not on a light claim (`ClaimPlan.light`): the batcher writes them on their own.
        if (plan.light) loop.batcher.unhold();
        const riding = plan.light ? undefined : loop.batcher.take();
        const runsEndedBefore = loop.runsEnded;
        let claimed: ClaimedDelivery[];
        let completedAny = false;
        this.#reserved += limit;
        // This claim has its slots and looks up the retried heads due (the plan cleared the loop's retry due): followers
        // may take free slots again, the parked ones at once (started after the claim and its launch, they had waited a
        // whole cycle, with up to 750 of 1,000 slots idle in the bench's liveness cell).
        this.#startReady();
        const claimStarted = performance.now();
        // Other workers share the lanes: this worker's loops claim in turn. The wait counts as part of the claim: a
        // retried head due meanwhile waits for it too (`retryLookaheadMs`).
        const releaseTurn = policy.claimsInTurn() ? await this.#claimTurn() : undefined;
        let peerLanes: number | undefined;
        try {
          const session = loop.session;
          if (!policy.completesAndClaims(plan, riding !== undefined)) {
            claimed = await session.claim(plan.params);
          } else {
            const result = await session.completeAndClaim(riding?.leases ?? [], plan.params);
            riding?.settle(result.completed);
            claimed = result.claimed;
            completedAny = result.completed.includes(true);
            peerLanes = result.peerLanes;
          }
        } catch (error) {
          releaseTurn?.(); // before the backoff below
          riding?.giveBack();
          loop.mustForget = true;
          policy.claimFailed(claims);
          await this.#retryClaimAfter(loop, error);
          continue;
        } finally {
          releaseTurn?.();
          this.#reserved -= limit;
          if (this.#slotsShort) this.#runEnded();
        }
        policy.claimed(claims, plan, claimed.length, peerLanes);
        this.#claimSucceeded(loop);
        if (claimed.length > 0)
          logger.debug('claimed deliveries', {
            count: claimed.length,
            limit,
            owner: loop.owner,
            completed: riding?.leases.length ?? 0,
            tookMs: Math.round(performance.now() - claimStarted),
            running: this.#running.size,
          });
        if (this.#state !== 'running') {
          this.#toRelease.push(
            ...claimed.map((delivery) => ({ deliveryId: delivery.id, leaseToken: delivery.leaseToken })),
          );
          break;
        }
        const heads = await this.#launchClaimed(loop, claimed);
        this.#startReady();
        // The claim and the turns that launched it: a retried head due meanwhile waits for both (`retryLookaheadMs`).
        const tookMs = performance.now() - claimStarted;
        if (claims.claimTook(tookMs))
          logger.debug('followers per keyed head changed', {
            owner: loop.owner,
            followers: claims.followersNow,
            claimCycleMs: Math.round(tookMs),
          });
        // Empty only if no run of this loop ended meanwhile: the claim may have kept that run's lane held (it was still in
        // flight in its snapshot), and only this loop's next claim hands it back.
        const wake = policy.launched(claims, {
          full: heads >= limit,
          empty: claimed.length === 0 && !completedAny && loop.runsEnded === runsEndedBefore,
          runsInLoop: this.#runsIn(loop),
        });
        for (const other of wake) this.#loops[other.index]!.wakeup.wake();
        if (claimed.length > 0) this.#activity.maybeReport(Date.now(), this.#running.size);
        if (heads >= limit) {
          // One turn of the event loop first: handlers that finish at once (and the followers they start) queue their
          // completions for this claim to carry, instead of a write of their own beside it.
          if (this.#followers.waiting > 0) await nextTurn();
          continue;
        }
        if (claims.busy) {
          // Work is flowing but this claim was short: once the handlers that finish at once have, claim again with
          // their completions riding, rather than wait for a run to end, which takes their write of their own first.
          await nextTurn();
          if (loop.batcher.pending > 0 && this.#state === 'running') continue;
        }
        // The light claim went first, for the lanes a wake-up named; the look at free lanes is due (`ClaimPolicy`).
        if (claims.scanDeferred) continue;
      } else {
        this.#slotsShort = true;
      }
      loop.batcher.unhold();
      await loop.wakeup.wait(options.pollIntervalMs);
    }
    loop.batcher.unhold();
  }

  /**
   * While other workers hold lanes, a worker's later loops rest: each lets its runs end (their completions are written
   * on their own), closes its claim session (its lanes are handed back) and turns dormant, and the first loop (or
   * another worker) takes those lanes. A second loop overlaps a lone worker's handlers with its claims; beside other
   * workers, whose claims fill those gaps, its lanes only split the backlog into more, shorter claims and more lanes
   * changing hands. Measured on 2 cores (Postgres on the same machine), tuned keyed drain of 200k, interleaved with the
   * loops claiming in turn: 2 workers 51.3-55.9k deliveries/s against 47.7-55.4k (5 runs each, median 1.07x), 4
   * workers 37.9-41.6k against 35.8-42.2k (4 runs each: no difference). A resting loop claims again (a new session) once
   * no other worker holds a lane (a claim of the first loop reports it) and a claim comes back full, or when a head it
   * rescheduled is due again.
   */
  async #rest(loop: ClaimLoop<TTx>): Promise<void> {
    const { options, logger } = this.#config;
    // Nothing rides any more: what waits is written on its own.
    loop.batcher.unhold();
    if (this.#runsIn(loop) || this.#followers.parkedIn(loop)) {
      await loop.wakeup.wait(options.pollIntervalMs);
      return;
    }
    try {
      await loop.batcher.flush();
      const lanes = await loop.closeSession();
      this.#policy.rested(loop.claims);
      logger.debug('claim loop resting: other workers share the lanes', { owner: loop.owner, lanesHandedBack: lanes });
    } catch (error) {
      logger.warn('handing back the lanes of a resting claim loop failed; it tries again at its next poll', {
        owner: loop.owner,
        error: describeError(error),
      });
      await loop.wakeup.wait(options.pollIntervalMs);
    }
  }

  /** Whether any run claimed by `loop` is still in progress (its completion rides on that loop's claims). */
  #runsIn(loop: ClaimLoop<TTx>): boolean {
    for (const runLoop of this.#running.values()) if (runLoop === loop) return true;
    return false;
  }

  /**
   * Log a failed claim once (the first loop logs; the others fail alike against the same store), mark the bus
   * unready, and wait out the backoff (or until stop).
   */
  async #retryClaimAfter(loop: ClaimLoop<TTx>, error: unknown): Promise<void> {
    const delayMs = loop.claimBackoff.failed();
    const attempt = loop.claimBackoff.failures;
    if (attempt === 1) loop.failingSince = Date.now();
    const described = describeError(error);
    this.#health.markUnready(described);
    const retryable = isRetryableError(error);
    const fields = {
      attempt,
      retryAt: new Date(Date.now() + delayMs).toISOString(),
      retryInMs: delayMs,
      error: described,
      ...(this.#loops.length > 1 ? { owner: loop.owner } : {}),
    };
    const what = retryable
      ? attempt === 1
        ? 'database unreachable'
        : 'database still unreachable'
      : attempt === 1
        ? 'claiming deliveries failed'
        : 'claiming deliveries failed again';
    const message = `${what}; claiming again after a backoff`;
    if (loop.index > 0) this.#config.logger.debug(message, fields);
    else if (retryable) this.#config.logger.warn(message, fields);
    else this.#config.logger.error(message, fields);
    try {
      await sleep(delayMs, undefined, { signal: this.#stopSignal.signal });
    } catch {
      // stop() ended the wait
    }
  }

  /**
   * After a failed claim of `loop`: have the store forget the deliveries in its lanes' in-flight lists that this
   * dispatcher does not hold (that claim may have recorded them before its answer was lost). Its failure, if it failed.
   */
  async #forgetUnheld(loop: ClaimLoop<TTx>): Promise<{ error: unknown } | undefined> {
    const holding: string[] = [];
    for (const run of this.#running.keys()) holding.push(run.claimed.id);
    holding.push(...this.#followers.ids());
    for (const lease of this.#toRelease) holding.push(lease.deliveryId);
    try {
      const forgotten = await loop.session.forgetInFlight(holding);
      loop.mustForget = false;
      if (forgotten > 0)
        this.#config.logger.info('deliveries a failed claim had recorded in flight are claimable again', {
          owner: loop.owner,
          forgotten,
        });
      return undefined;
    } catch (error) {
      return { error };
    }
  }

  #claimSucceeded(loop: ClaimLoop<TTx>): void {
    const failures = loop.claimBackoff.succeeded();
    const first = this.#health.markReady();
    if (failures > 0 && loop.index === 0) {
      this.#config.logger.info('database reachable again; claiming resumed', {
        failedAttempts: failures,
        unreachableForMs: Date.now() - loop.failingSince,
      });
    } else if (first) {
      this.#config.logger.debug('first claim succeeded; the bus is ready', { owner: loop.owner });
    }
  }

  /**
   * Start the runs of a claim; returns its heads (followers come beyond the limit: only heads count). Followers wait
   * for the delivery before them (a handler that returns at once starts its follower from within #launch). The heads
   * go in turns of about LAUNCH_TURN_RUNS runs, followers included, so timers fire between turns; their completions
   * wait for the next claim meanwhile, rather than a write of their own at each turn. A retried head claimed before
   * it was due goes first: it waits for its time, which the later turns would miss.
   */
  async #launchClaimed(loop: ClaimLoop<TTx>, claimed: readonly ClaimedDelivery[]): Promise<number> {
    let heads = 0;
    for (const delivery of claimed)
      if (delivery.follows === undefined) heads += 1;
      else this.#followers.wait(loop, delivery);
    // Sized by the runs this claim brought per head: an unkeyed claim (no followers) launches in one turn.
    const perTurn = Math.max(1, Math.floor((LAUNCH_TURN_RUNS * heads) / Math.max(claimed.length, 1)));
    if (heads > perTurn) loop.batcher.hold();
    for (const delivery of claimed) if (delivery.notBefore !== undefined) this.#launch(loop, delivery);
    let launched = 0;
    for (const delivery of claimed) {
      if (delivery.follows !== undefined || delivery.notBefore !== undefined) continue;
      if (launched > 0 && launched % perTurn === 0) {
        await nextTurn();
        // Stopping: what is not launched goes back (its followers wait for #shutdown to release them).
        if (this.#state !== 'running') {
          this.#toRelease.push({ deliveryId: delivery.id, leaseToken: delivery.leaseToken });
          continue;
        }
      }
      this.#launch(loop, delivery);
      launched += 1;
    }
    return heads;
  }

  /** A run succeeded: start the follower waiting for it (when stopping, it waits to be released with the rest). */
  #startFollower(run: RunningDelivery<TTx>): void {
    if (this.#followers.waiting === 0 || this.#state !== 'running') return;
    const next = this.#followers.next(run.claimed.id, run.lane, run.epoch);
    if (next === undefined) return;
    if (this.#policy.retryWanted() && this.#freeSlots() <= RETRY_SLOTS) {
      // Its run would take the slot its predecessor freed, and runs of followers can hold every slot for many turns: no
      // claim would run, and a retried head due now would wait for a whole run to end (566 ms past due in the followers
      // test). The slot goes to the claim that looks it up; this one starts once that claim has its slots. Only while
      // few are free: parking every follower cost the liveness cell's healthy keys a quarter of their throughput.
      this.#followers.park(next);
      this.#runEnded();
      return;
    }
    this.#launch(next.loop, next.delivery);
  }

  /** Handler slots no run holds and no claim in progress reserved. */
  #freeSlots(): number {
    return this.#config.options.concurrency - this.#active - this.#reserved;
  }

  /** Start followers parked by `#startFollower` while slots are free, leaving `RETRY_SLOTS` to a retried head's claim. */
  #startReady(): void {
    while (
      this.#followers.ready > 0 &&
      this.#state === 'running' &&
      this.#freeSlots() > (this.#policy.retryWanted() ? RETRY_SLOTS : 0)
    ) {
      const next = this.#followers.takeReady()!;
      this.#launch(next.loop, next.delivery);
    }
  }

  #launch(loop: ClaimLoop<TTx>, claimed: ClaimedDelivery): void {
    const { logger } = this.#config;
    const handler = this.#config.handlers.get(claimed.handler);
    let lane: number;
    let epoch: string;
    try {
      ({ lane, epoch } = parseLeaseToken(claimed.leaseToken));
    } catch (error) {
      logger.error('the store returned a malformed lease; the delivery is skipped until its lane lease expires', {
        deliveryId: claimed.id,
        leaseToken: claimed.leaseToken,
        error: describeError(error),
      });
      return;
    }
    if (handler === undefined) {
      logger.error('the store returned a delivery of a handler this dispatcher did not ask for; releasing it', {
        deliveryId: claimed.id,
        handler: claimed.handler,
      });
      this.#releaseNow([
        { deliveryId: claimed.id, leaseToken: claimed.leaseToken },
        ...this.#followers.drop(claimed.id, lane, epoch),
      ]);
      return;
    }
    if (!loop.renewer.track(lane, epoch)) {
      logger.warn('a claim returned a lane at an older epoch than one already held; dropping the stale delivery', {
        deliveryId: claimed.id,
        lane,
        epoch,
      });
      this.#followers.drop(claimed.id, lane, epoch);
      return;
    }
    this.#activity.started(lane);
    const run = new RunningDelivery(claimed, handler, lane, epoch);
    this.#running.set(run, loop);
    this.#active += 1;
    if (runAtOnce(run, loop.deps)) return;
    run.done = runDelivery(run, loop.deps).then(
      (outcome) => this.#finish(loop, run, outcome),
      (error: unknown) => {
        reportUnexpected(run, loop.deps, error);
        return this.#finish(loop, run, 'unrecorded');
      },
    );
  }

  /** A run's handler is over: its slot is free. */
  #handlerEnded(): void {
    this.#active -= 1;
    this.#earlyStarts.startDue();
    this.#runEnded();
  }

  /**
   * A run ended (or a claim gave back the slots it reserved): wake the claim loops, once per turn of the event loop,
   * when the claim policy says so (`ClaimPolicy.wakeOnRunEnd`).
   */
  #runEnded(): void {
    if (this.#wakeQueued || !this.#policy.wakeOnRunEnd(this.#slotsShort, this.#followers.ready > 0)) return;
    this.#wakeQueued = true;
    setImmediate(() => {
      this.#wakeQueued = false;
      this.#slotsShort = false;
      this.#startReady();
      this.#wakeWorking();
    });
  }

  #finish(loop: ClaimLoop<TTx>, run: RunningDelivery<TTx>, outcome: RunOutcome): RunOutcome {
    // A run that ended without its runner ending the handler phase (an unexpected failure) frees its slot here.
    if (run.endHandler()) this.#active -= 1;
    run.end();
    this.#running.delete(run);
    loop.renewer.untrack(run.lane, run.epoch);
    loop.runsEnded += 1;
    if (outcome === 'aborted') this.#toRelease.push(run.lease);
    // A run that did not succeed keeps its key's head: what waits behind it goes back unrun (no attempt charged), in
    // order for a later claim (when stopping, with the rest, by #shutdown). Under a lost lease the lane's new holder
    // has them.
    if (outcome === 'lease-lost') this.#followers.drop(run.claimed.id, run.lane, run.epoch);
    else if (outcome !== 'delivered' && this.#state === 'running') {
      const followers = this.#followers.drop(run.claimed.id, run.lane, run.epoch);
      if (followers.length > 0) this.#releaseNow(followers);
    }
    // Under a light load a completion through the batcher (or riding on a claim) is the batcher's to report; any other
    // end may have made a key's next delivery its head (a transactional completion, a dead letter, a lost lease), and
    // while work flows every end is a reason to claim: wake the loops.
    if (outcome === 'delivered' && !run.handler.transactional && !this.#policy.flowing()) this.#runEnded();
    else this.#wakeWorking();
    return outcome;
  }

  /**
   * The lane `lane` at `epoch` is no longer this loop's (a renewal found it gone, or a claim returned it at a newer
   * epoch). What waits to start there is dropped and the handlers still running there are aborted. A run whose handler
   * is over is left alone: its outcome write is fenced, so that write's answer tells whether the lease held. Under a
   * backlog such a run is often done already: a claim (or a completion beside it) completed it and handed its lane back
   * while the renewal waited for the lane's lock, and the run learns so only when that answer arrives.
   */
  #onLaneLost(loop: ClaimLoop<TTx>, lane: number, epoch: string, detectedBy: 'renewal' | 'claim'): void {
    const dropped = this.#followers.dropLane(loop, lane, epoch);
    const aborted: RunningDelivery<TTx>[] = [];
    for (const [run, runLoop] of this.#running)
      if (runLoop === loop && run.lane === lane && run.epoch === epoch && run.phase === 'running') aborted.push(run);
    if (aborted.length === 0 && dropped === 0) return;
    this.#config.logger.warn('lost the lease of a lane; its running handlers are aborted and their results dropped', {
      lane,
      epoch,
      detectedBy,
      running: aborted.length,
      notStarted: dropped,
    });
    for (const run of aborted) reportLeaseLost(run, detectedBy, loop.deps);
  }

  #releaseNow(leases: readonly DeliveryLease[]): void {
    this.#config.store.release(leases, this.#now()).catch((error: unknown) => {
      this.#config.logger.warn('releasing deliveries failed; they run again once their lane lease expires', {
        count: leases.length,
        error: describeError(error),
      });
    });
  }

  async #shutdown(graceMs: number): Promise<void> {
    const { store, logger } = this.#config;
    logger.info('dispatcher stopping', { owner: this.owner, running: this.#running.size, graceMs });
    this.#wakeAll();
    await Promise.all(this.#loops.map((loop) => loop.done));
    // A retried head claimed before it was due has not started: it is released with the aborted runs, not started now.
    for (const run of this.#running.keys())
      if (run.waitingToStart) run.abort('shutdown', new DOMException('relaybus is stopping', 'AbortError'));

    const drained = await this.#grace.wait(
      [...this.#running.keys()].map((run) => run.done),
      graceMs,
    );
    const aborted = [...this.#running.keys()];
    for (const run of aborted)
      run.abort('shutdown', new DOMException('relaybus is stopping and the grace period is over', 'AbortError'));
    await Promise.all(aborted.map((run) => run.done));
    this.#grace.dispose();

    // Followers still waiting: their run ended while stopping (a success starts nothing new then), or did not.
    this.#toRelease.push(...this.#followers.drain());
    const leases = this.#toRelease.splice(0);
    if (leases.length > 0) {
      try {
        const released = await store.release(leases, this.#now());
        logger.info('released unfinished deliveries (no attempt charged)', {
          count: released.filter(Boolean).length,
          requested: leases.length,
        });
      } catch (error) {
        logger.error('releasing unfinished deliveries failed; they run again once their lane lease expires', {
          count: leases.length,
          error: describeError(error),
        });
      }
    }
    await Promise.all(this.#loops.map((loop) => loop.batcher.flush()));
    for (const loop of this.#loops) loop.retryAlarm.stop();
    await Promise.all(this.#loops.map((loop) => loop.renewer.stop()));
    const unsubscribe = await this.#wakeups;
    await unsubscribe?.().catch((error: unknown) =>
      logger.warn('stopping the wake-up listener failed', { error: describeError(error) }),
    );
    // Every loop's lanes, each on its own: one that fails still lets the others go (closing a claim session gives back
    // the connection it held for its claims, whatever happens).
    let lanes = 0;
    for (const loop of this.#loops) {
      try {
        // What a failed claim may have recorded would keep its lane from being handed back.
        const failed = loop.mustForget ? await this.#forgetUnheld(loop) : undefined;
        if (failed !== undefined)
          logger.warn(
            'forgetting the deliveries a failed claim may have recorded in flight failed; a lane that still lists them is taken over once its lease expires',
            { owner: loop.owner, error: describeError(failed.error) },
          );
        lanes += await loop.closeSession();
      } catch (error) {
        logger.error('relinquishing lanes failed; other workers take them once their leases expire', {
          owner: loop.owner,
          error: describeError(error),
        });
      }
    }
    logger.info('dispatcher stopped', {
      owner: this.owner,
      drained: drained === 'drained',
      aborted: aborted.length,
      lanesRelinquished: lanes,
    });
    this.#health.markUnready();
    this.#state = 'stopped';
  }
}
