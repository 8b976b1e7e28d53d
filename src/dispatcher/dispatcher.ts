import { setImmediate as nextTurn } from 'node:timers/promises';
import { InvalidStateError } from '../core/errors.js';
import { parseLeaseToken } from '../core/lease-token.js';
import { describeError } from '../core/logger.js';
import type { ClaimedDelivery, DeliveryLease } from '../store/contract.js';
import { ActivityReport } from './activity-report.js';
import { ClaimLoop } from './claim-loop.js';
import { ClaimPolicy } from './claim-policy.js';
import type { DispatcherConfig, DispatcherState, StopOptions } from './dispatcher-config.js';
import { EarlyStarts } from './early-starts.js';
import { Followers } from './followers.js';
import {
  reportLeaseLost,
  reportUnexpected,
  runAtOnce,
  runDelivery,
  RunningDelivery,
  type RunOutcome,
} from './handler-runner.js';
import { HealthState } from './health.js';
import { type LiveLag, liveLagOf } from './live-lag.js';
import { type ClaimLoopHost, ClaimTurns, listenForWakeups, runClaimLoop } from './loop-runner.js';
import { closeSessions, endRuns, GracePeriod, releaseUnfinished, stopListening } from './shutdown.js';

export type { DispatcherConfig, DispatcherState, StopOptions } from './dispatcher-config.js';
export { HealthState, type RelayBusHealth } from './health.js';
export { createOwnerId } from './owner-id.js';

/**
 * The dispatcher: the worker that claims deliveries and runs their handlers. It knows the store only through the
 * `Store` contract. It keeps the handler slots, the runs, the followers and shutdown; its claim loops
 * (claim-loop.ts, their turns in loop-runner.ts) claim when the claim policy (claim-policy.ts) says so, with its hints,
 * each through a claim session of its own.
 *
 * States:
 *
 *   idle ──start()──▶ running ──stop()──▶ stopping ──▶ stopped
 *
 * - `idle`: constructed, nothing claimed. `stop()` here just ends in `stopped`.
 * - `running`: the claim loops run. A claim never asks for more deliveries than free handler slots; a slot frees when
 *   its handler returns (or fails), not when the outcome is written, so the next claim overlaps the completion batch
 *   of the previous one; runs that only wait for their outcome write are capped at another `concurrency`. Per-key
 *   deliveries never run concurrently: the store hands out only the head of each key (and its followers, which start
 *   one after another), and a key lives in one lane that one owner holds. Meanwhile each loop's lease renewer extends
 *   the lanes that have work in flight every `leaseDurationMs / 3`; a lane reported lost (or seen at a newer epoch in
 *   a later claim) aborts the handlers claimed in it and their results are dropped. Completions go through each
 *   loop's completion batcher (one `completeMany` per `completionBatchWindowMs`, or riding on the loop's next claim).
 * - Claim loops (`claimLoops`, default 1): each claims as a lease owner of its own (lanes are held per owner), with its
 *   own claim session, renewer, completion batcher and wake-up; the handler slots, the runs and the health are shared.
 *   With two, one loop's claim waits on Postgres while the other's handlers run.
 * - `stopping` (`stop()`): no new claim starts; deliveries of a claim that was in progress are released unrun.
 *   Running handlers get up to `shutdownGraceMs` to finish (their outcomes are written normally). The rest are
 *   aborted through their signal and released (no attempt charged), pending completions are flushed, renewal stops
 *   and every loop's claim session is closed, which hands its lanes back, so other workers take them at once instead
 *   of after the lease.
 * - `stopped`: final. A dispatcher is not restarted; create a new one (a new owner id).
 *
 * Store failures never crash the process (a failed claim is retried after a backoff, see loop-runner.ts). Nothing
 * here handles process signals: the CLI maps SIGTERM onto `bus.stop()`.
 */

/**
 * Runs a claim launches in one turn of the event loop, followers included (see `#claimLoop`): launching a whole large
 * claim (heads and their followers) in one turn held timers back long enough to start a retried head late.
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
  /** What the claim loops use of this dispatcher (loop-runner.ts). */
  readonly #host: ClaimLoopHost<TTx>;
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
  /** The live deliveries' start lag, reported while a replay runs; undefined when the store takes no reports. */
  readonly #liveLag: LiveLag | undefined;

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
    this.#liveLag = liveLagOf(config.store, config.logger);
    const { options } = config;
    // Runs at most: the handler slots, and as many again (or what the loops' claims bring with their followers).
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
    this.#host = this.#loopHost();
    this.#loops = Array.from(
      { length: options.claimLoops },
      (_, index) =>
        new ClaimLoop<TTx>({
          index,
          options,
          store: config.store,
          claims: this.#policy.loops[index]!,
          logger: config.logger,
          deps: {
            store: config.store,
            emitter: config.emitter,
            logger: config.logger,
            now: this.#now,
            wallNow: this.#wallNow,
            random: config.random,
            earlyStarts: this.#earlyStarts,
            liveLag: this.#liveLag,
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

  /** The handler slots, the runs and the followers as the claim loops see them (`ClaimLoopHost`). */
  #loopHost(): ClaimLoopHost<TTx> {
    const { options, logger } = this.#config;
    return {
      options,
      logger,
      policy: this.#policy,
      health: this.#health,
      stopSignal: this.#stopSignal.signal,
      loops: options.claimLoops,
      running: () => this.#state === 'running',
      freeSlots: () =>
        Math.min(options.concurrency - this.#active, this.#maxRuns - this.#running.size) - this.#reserved,
      reserve: (slots) => {
        this.#reserved += slots;
      },
      unreserve: (slots) => {
        this.#reserved -= slots;
        if (this.#slotsShort) this.#runEnded();
      },
      slotsShort: () => {
        this.#slotsShort = true;
      },
      startReady: () => this.#startReady(),
      turns: new ClaimTurns(),
      launch: (loop, claimed) => this.#launchClaimed(loop, claimed),
      release: (leases) => {
        this.#toRelease.push(...leases);
      },
      runsIn: (loop) => this.#runsIn(loop),
      parkedIn: (loop) => this.#followers.parkedIn(loop),
      followersWaiting: () => this.#followers.waiting > 0,
      holding: () => {
        const holding: string[] = [];
        for (const run of this.#running.keys()) holding.push(run.claimed.id);
        holding.push(...this.#followers.ids());
        for (const lease of this.#toRelease) holding.push(lease.deliveryId);
        return holding;
      },
      runCount: () => this.#running.size,
      reportActivity: () => this.#activity.maybeReport(Date.now(), this.#running.size),
      wake: (loops) => {
        for (const other of loops) this.#loops[other.index]!.wakeup.wake();
      },
    };
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
    this.#wakeups = listenForWakeups(this.#config.store, this.#policy, this.#config.logger, () => this.#wakeAll());
    for (const loop of this.#loops) loop.done = runClaimLoop(loop, this.#host);
  }

  #wakeAll(): void {
    for (const loop of this.#loops) loop.wakeup.wake();
  }

  /** Wake the loops a run that ended may give work to (`ClaimPolicy.toWake`). */
  #wakeWorking(): void {
    // Every delivery that ends under a backlog comes here: the policy is asked per loop, no array is made.
    for (const loop of this.#loops) if (this.#policy.wakes(loop.claims)) loop.wakeup.wake();
  }

  /**
   * Stop gracefully: stop claiming, let running handlers finish within the grace period, abort and
   * release the rest (no attempt charged), then close every claim session (its lanes are handed back). Idempotent.
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

  /** Whether any run claimed by `loop` is still in progress (its completion rides on that loop's claims). */
  #runsIn(loop: ClaimLoop<TTx>): boolean {
    for (const runLoop of this.#running.values()) if (runLoop === loop) return true;
    return false;
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
    const { drained, aborted } = await endRuns(() => this.#running.keys(), this.#grace, graceMs);

    // Followers still waiting: their run ended while stopping (a success starts nothing new then), or did not.
    this.#toRelease.push(...this.#followers.drain());
    await releaseUnfinished(store, this.#toRelease.splice(0), this.#now(), logger);
    await Promise.all(this.#loops.map((loop) => loop.batcher.flush()));
    for (const loop of this.#loops) loop.retryAlarm.stop();
    this.#liveLag?.stop();
    await Promise.all(this.#loops.map((loop) => loop.renewer.stop()));
    await stopListening(this.#wakeups, logger);
    const lanes = await closeSessions(this.#loops, this.#host);
    logger.info('dispatcher stopped', {
      owner: this.owner,
      drained,
      aborted,
      lanesRelinquished: lanes,
    });
    this.#health.markUnready();
    this.#state = 'stopped';
  }
}
