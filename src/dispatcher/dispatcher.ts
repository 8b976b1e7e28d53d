import { randomBytes } from 'node:crypto';
import { hostname } from 'node:os';
import { setTimeout as sleep } from 'node:timers/promises';
import type { Clock } from '../core/clock.js';
import type { TypedEmitter } from '../core/emitter.js';
import { InvalidStateError, isRetryableError } from '../core/errors.js';
import type { RelayBusEventMap, ResolvedHandler } from '../core/handlers.js';
import { parseLeaseToken } from '../core/lease-token.js';
import { describeError, type Logger } from '../core/logger.js';
import type { ResolvedDispatcherOptions } from '../core/options.js';
import type { ClaimedDelivery, ClaimParams, DeliveryLease, Store } from '../store/contract.js';
import { ActivityReport } from './activity-report.js';
import { CompletionBatcher } from './completion-batcher.js';
import { reportLeaseLost, runDelivery, RunningDelivery, type RunOutcome, type RunnerDeps } from './handler-runner.js';
import { LeaseRenewer } from './lease-renewer.js';
import { GracePeriod } from './shutdown.js';
import { RetryBackoff, Wakeup } from './wakeup.js';

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
 *   when a handler returns or a run ends, because a freed slot, or a completed head of an ordering
 *   key, may make a claim productive. Per-key deliveries never run
 *   concurrently: the store hands out only the head of each key, and a key lives in one lane that
 *   one owner holds. Meanwhile the lease renewer extends the lanes that have work in flight every
 *   `leaseDurationMs / 3`; a lane reported lost (or seen at a newer epoch in a later claim) aborts
 *   the handlers claimed in it and their results are dropped. Completions go through the
 *   completion batcher (one `completeMany` per `completionBatchWindowMs`). Once per lease duration
 *   (by the bus's clock) a claim sets `takeover`: even when this worker's own lanes fill the batch,
 *   the store takes a few other lanes, so a crashed worker's expired lanes are taken over while
 *   every worker is busy.
 * - `stopping` (`stop()`): no new claim starts; deliveries of a claim that was in progress are
 *   released unrun. Running handlers get up to `shutdownGraceMs` to finish (their outcomes are
 *   written normally). The rest are aborted through their signal and released (no attempt
 *   charged), pending completions are flushed, renewal stops and `relinquish(owner)` hands every
 *   lane back, so other workers take the lanes at once instead of after the lease.
 * - `stopped`: final. A dispatcher is not restarted; create a new one (a new owner id).
 *
 * A failed claim is logged once and retried after a capped exponential backoff (250 ms doubling to
 * 30 s, jittered; `STORE_RETRY_BACKOFF`), reset by the next successful claim; store failures never
 * crash the process. The claim loop feeds the bus's health: unready after a failed claim, ready
 * after a successful one, with one log line at each transition. Nothing here handles process
 * signals: the CLI maps SIGTERM onto `bus.stop()`.
 */

/** Whether a bus can reach its store; see `RelayBus.health()`. */
export interface RelayBusHealth {
  /** True while the dispatcher's last claim succeeded; false before the first one, after a failed one and once stopped. */
  readonly ready: boolean;
  /** When `ready` last changed (the bus's creation before that). */
  readonly since: Date;
  /** The failure that made the bus unready (its name and message); absent while ready. */
  readonly lastError?: string;
}

/** The health of one bus, written by its setup and its dispatcher, read through `bus.health()`. */
export class HealthState {
  #ready = false;
  #since = new Date();
  #lastError: string | undefined;

  /** A frozen copy of the current health. */
  snapshot(): RelayBusHealth {
    return Object.freeze({
      ready: this.#ready,
      since: this.#since,
      ...(this.#lastError === undefined ? {} : { lastError: this.#lastError }),
    });
  }

  /** A store call succeeded; true when that made the bus ready. */
  markReady(): boolean {
    if (this.#ready) return false;
    this.#ready = true;
    this.#since = new Date();
    this.#lastError = undefined;
    return true;
  }

  /** A store call failed (`error`), or the bus stopped (no error); true when that made the bus unready. */
  markUnready(error?: string): boolean {
    this.#lastError = error;
    if (!this.#ready) return false;
    this.#ready = false;
    this.#since = new Date();
    return true;
  }
}

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

/**
 * A unique lease owner id `prefix:pid:random` (prefix defaults to the host name), new for every
 * dispatcher instance so a restarted process never inherits a dead predecessor's lanes.
 */
export function createOwnerId(prefix?: string): string {
  const base = (prefix ?? hostname()) || 'relaybus';
  return `${base.slice(0, 100)}:${process.pid}:${randomBytes(6).toString('hex')}`;
}

/** The worker loop of one bus; see the module header for its states. Created by `bus.start()`. */
export class Dispatcher<TTx> {
  /** The lease owner id this dispatcher claims lanes as. */
  readonly owner: string;
  readonly #config: DispatcherConfig<TTx>;
  readonly #handlerNames: readonly string[];
  readonly #running = new Map<string, RunningDelivery<TTx>>();
  /** Runs of `#running` in phase `running` (the others only wait for their outcome write); changes with a run's phase. */
  #active = 0;
  #wakeQueued = false;
  readonly #wakeup = new Wakeup();
  readonly #grace = new GracePeriod();
  readonly #batcher: CompletionBatcher;
  readonly #renewer: LeaseRenewer;
  readonly #deps: RunnerDeps<TTx>;
  readonly #toRelease: DeliveryLease[] = [];
  readonly #health: HealthState;
  readonly #claimBackoff: RetryBackoff;
  readonly #activity: ActivityReport;
  /** Aborted by `stop()`: ends a claim retry's backoff at once. */
  readonly #stopSignal = new AbortController();
  /** When the first of the current run of failed claims happened. */
  #failingSince = 0;
  /** When (config clock, ms) the last claim that asked for a takeover succeeded; see `#takeoverDue`. */
  #lastTakeoverAt: number | undefined;
  #state: DispatcherState = 'idle';
  #loop: Promise<void> = Promise.resolve();
  /** Runs (by `#running` key) that the claim being launched has just completed; see the claim loop. */
  #justCompleted: Set<string> | undefined;
  /** The unsubscribe of the store's wake-ups, once subscribed. */
  #wakeups: Promise<(() => Promise<void>) | undefined> = Promise.resolve(undefined);
  #stopping: Promise<void> | undefined;

  constructor(config: DispatcherConfig<TTx>) {
    this.#config = config;
    this.#handlerNames = Object.freeze([...config.handlers.keys()]);
    this.owner = createOwnerId(config.options.ownerPrefix);
    this.#health = config.health ?? new HealthState();
    this.#claimBackoff = config.claimBackoff ?? new RetryBackoff(undefined, config.random);
    this.#activity = new ActivityReport(config.logger);
    const now = (): Date | undefined => config.clock?.now();
    this.#batcher = new CompletionBatcher({
      store: config.store,
      windowMs: config.options.completionBatchWindowMs,
      now,
      logger: config.logger,
    });
    this.#renewer = new LeaseRenewer({
      store: config.store,
      owner: this.owner,
      leaseDurationMs: config.options.leaseDurationMs,
      intervalMs: Math.max(1, Math.floor(config.options.leaseDurationMs / 3)),
      now,
      logger: config.logger,
      onLost: (lane, epoch, detectedBy) => this.#onLaneLost(lane, epoch, detectedBy),
    });
    this.#deps = {
      store: config.store,
      batcher: this.#batcher,
      emitter: config.emitter,
      logger: config.logger,
      now,
      wallNow: () => config.clock?.now() ?? new Date(),
      random: config.random,
      handlerEnded: () => this.#handlerEnded(),
    };
  }

  get state(): DispatcherState {
    return this.#state;
  }

  /** Start the claim loop. */
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
    this.#renewer.start();
    this.#config.logger.info('dispatcher started', {
      owner: this.owner,
      handlers: this.#handlerNames.length,
      ...this.#config.options,
    });
    this.#wakeups = this.#subscribeWakeups();
    this.#loop = this.#claimLoop();
  }

  /** Claim at once when a publish commits (NOTIFY), instead of at the next poll; polling stays. */
  async #subscribeWakeups(): Promise<(() => Promise<void>) | undefined> {
    const { store, logger } = this.#config;
    if (store.subscribeWakeups === undefined) return undefined;
    try {
      return await store.subscribeWakeups(() => this.#wakeup.wake());
    } catch (error) {
      logger.warn('listening for new deliveries failed; the dispatcher polls only', { error: describeError(error) });
      return undefined;
    }
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

  async #claimLoop(): Promise<void> {
    const { store, options, logger } = this.#config;
    while (this.#state === 'running') {
      // A slot is a running handler: a run whose handler returned and that only waits for its outcome
      // write (the completion batch) does not hold one, so the next claim overlaps that write. Those
      // waiting runs are bounded too, to one more `concurrency`, should the writes fall behind.
      const free = Math.min(options.concurrency - this.#active, 2 * options.concurrency - this.#running.size);
      if (free > 0) {
        const limit = Math.min(options.batchSize, free);
        const takeoverAt = this.#takeoverDue();
        const params: ClaimParams = {
          owner: this.owner,
          handlers: this.#handlerNames,
          limit,
          leaseDurationMs: options.leaseDurationMs,
          now: this.#deps.now(),
          ...(takeoverAt === undefined ? {} : { takeover: true }),
        };
        // The completions of the last batch ride on this claim: one round trip, and their keys' next deliveries can
        // be claimed at once.
        const riding = this.#batcher.take();
        let claimed: ClaimedDelivery[];
        try {
          if (riding === undefined) {
            claimed = await store.claim(params);
          } else {
            const result = await store.completeAndClaim(riding.leases, params);
            riding.settle(result.completed);
            claimed = result.claimed;
            // Those runs learn of their completion a few microtasks later; until then a lane the same statement
            // handed back and took again at a newer epoch must not report them lost (they are done).
            this.#justCompleted = new Set(
              riding.leases
                .filter((_, index) => result.completed[index] === true)
                .map((lease) => lease.lease + '/' + lease.deliveryId),
            );
          }
        } catch (error) {
          riding?.giveBack();
          await this.#retryClaimAfter(error);
          continue;
        }
        this.#claimSucceeded();
        if (takeoverAt !== undefined) this.#lastTakeoverAt = takeoverAt;
        if (claimed.length > 0) logger.debug('claimed deliveries', { count: claimed.length, limit });
        if (this.#state !== 'running') {
          this.#toRelease.push(...claimed.map((delivery) => ({ deliveryId: delivery.id, lease: delivery.lease })));
          break;
        }
        for (const delivery of claimed) this.#launch(delivery);
        this.#justCompleted = undefined;
        if (claimed.length > 0) this.#activity.maybeReport(Date.now(), this.#running.size);
        if (claimed.length >= limit) continue;
      }
      await this.#wakeup.wait(options.pollIntervalMs);
    }
  }

  /**
   * The clock reading (ms) when this claim should ask for a takeover, else undefined: the first claim, then the first
   * after each lease duration. Only then may a claim whose held lanes fill the batch take other lanes, so a crashed
   * worker's expired lanes are taken over within about two lease durations even when every worker is busy.
   */
  #takeoverDue(): number | undefined {
    const at = this.#deps.wallNow().getTime();
    const last = this.#lastTakeoverAt;
    return last === undefined || at - last >= this.#config.options.leaseDurationMs ? at : undefined;
  }

  /** Log a failed claim once, mark the bus unready, and wait out the backoff (or until stop). */
  async #retryClaimAfter(error: unknown): Promise<void> {
    const delayMs = this.#claimBackoff.failed();
    const attempt = this.#claimBackoff.failures;
    if (attempt === 1) this.#failingSince = Date.now();
    const described = describeError(error);
    this.#health.markUnready(described);
    const retryable = isRetryableError(error);
    const fields = {
      attempt,
      retryAt: new Date(Date.now() + delayMs).toISOString(),
      retryInMs: delayMs,
      error: described,
    };
    const what = retryable
      ? attempt === 1
        ? 'database unreachable'
        : 'database still unreachable'
      : attempt === 1
        ? 'claiming deliveries failed'
        : 'claiming deliveries failed again';
    const message = `${what}; claiming again after a backoff`;
    if (retryable) this.#config.logger.warn(message, fields);
    else this.#config.logger.error(message, fields);
    try {
      await sleep(delayMs, undefined, { signal: this.#stopSignal.signal });
    } catch {
      // stop() ended the wait
    }
  }

  #claimSucceeded(): void {
    const failures = this.#claimBackoff.succeeded();
    const first = this.#health.markReady();
    if (failures > 0) {
      this.#config.logger.info('database reachable again; claiming resumed', {
        failedAttempts: failures,
        unreachableForMs: Date.now() - this.#failingSince,
      });
    } else if (first) {
      this.#config.logger.debug('first claim succeeded; the bus is ready', { owner: this.owner });
    }
  }

  #launch(claimed: ClaimedDelivery): void {
    const { logger } = this.#config;
    const handler = this.#config.handlers.get(claimed.handler);
    let lane: number;
    let epoch: string;
    try {
      ({ lane, epoch } = parseLeaseToken(claimed.lease));
    } catch (error) {
      logger.error('the store returned a malformed lease; the delivery is skipped until its lane lease expires', {
        deliveryId: claimed.id,
        lease: claimed.lease,
        error: describeError(error),
      });
      return;
    }
    if (handler === undefined) {
      logger.error('the store returned a delivery of a handler this dispatcher did not ask for; releasing it', {
        deliveryId: claimed.id,
        handler: claimed.handler,
      });
      this.#releaseNow([{ deliveryId: claimed.id, lease: claimed.lease }]);
      return;
    }
    if (!this.#renewer.track(lane, epoch)) {
      logger.warn('a claim returned a lane at an older epoch than one already held; dropping the stale delivery', {
        deliveryId: claimed.id,
        lane,
        epoch,
      });
      return;
    }
    this.#activity.started(lane);
    const run = new RunningDelivery(claimed, handler, lane, epoch);
    this.#running.set(claimed.lease + '/' + claimed.id, run);
    this.#active += 1;
    run.done = runDelivery(run, this.#deps).then(
      (outcome) => this.#finish(run, outcome),
      (error: unknown) => {
        logger.error('a handler run failed unexpectedly', { deliveryId: claimed.id, error: describeError(error) });
        return this.#finish(run, 'unrecorded');
      },
    );
  }

  /** A run's handler is over: its slot is free. Wakes the claim loop once per turn of the event loop, not per run. */
  #handlerEnded(): void {
    this.#active -= 1;
    if (this.#wakeQueued) return;
    this.#wakeQueued = true;
    setImmediate(() => {
      this.#wakeQueued = false;
      this.#wakeup.wake();
    });
  }

  #finish(run: RunningDelivery<TTx>, outcome: RunOutcome): RunOutcome {
    // A run that ended without its runner ending the handler phase (an unexpected failure) frees its slot here.
    if (run.endHandler()) this.#active -= 1;
    run.end();
    this.#running.delete(run.claimed.lease + '/' + run.claimed.id);
    this.#renewer.untrack(run.lane, run.epoch);
    if (outcome === 'aborted') this.#toRelease.push(run.lease);
    this.#wakeup.wake();
    return outcome;
  }

  #onLaneLost(lane: number, epoch: string, detectedBy: 'renewal' | 'claim'): void {
    for (const [key, run] of this.#running) {
      if (run.lane === lane && run.epoch === epoch && this.#justCompleted?.has(key) !== true)
        reportLeaseLost(run, detectedBy, this.#deps);
    }
  }

  #releaseNow(leases: readonly DeliveryLease[]): void {
    this.#config.store.release(leases, this.#deps.now()).catch((error: unknown) => {
      this.#config.logger.warn('releasing deliveries failed; they run again once their lane lease expires', {
        count: leases.length,
        error: describeError(error),
      });
    });
  }

  async #shutdown(graceMs: number): Promise<void> {
    const { store, logger } = this.#config;
    logger.info('dispatcher stopping', { owner: this.owner, running: this.#running.size, graceMs });
    this.#wakeup.wake();
    await this.#loop;

    const drained = await this.#grace.wait(
      [...this.#running.values()].map((run) => run.done),
      graceMs,
    );
    const aborted = [...this.#running.values()];
    for (const run of aborted)
      run.abort('shutdown', new DOMException('relaybus is stopping and the grace period is over', 'AbortError'));
    await Promise.all(aborted.map((run) => run.done));
    this.#grace.dispose();

    const leases = this.#toRelease.splice(0);
    if (leases.length > 0) {
      try {
        const released = await store.release(leases, this.#deps.now());
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
    await this.#batcher.flush();
    await this.#renewer.stop();
    const unsubscribe = await this.#wakeups;
    await unsubscribe?.().catch((error: unknown) =>
      logger.warn('stopping the wake-up listener failed', { error: describeError(error) }),
    );
    try {
      const lanes = await store.relinquish(this.owner);
      logger.info('dispatcher stopped', {
        owner: this.owner,
        drained: drained === 'drained',
        aborted: aborted.length,
        lanesRelinquished: lanes,
      });
    } catch (error) {
      logger.error('relinquishing lanes failed; other workers take them once their leases expire', {
        owner: this.owner,
        error: describeError(error),
      });
    }
    this.#health.markUnready();
    this.#state = 'stopped';
  }
}
