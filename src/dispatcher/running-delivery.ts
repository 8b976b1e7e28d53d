import type { TypedEmitter } from '../core/emitter.js';
import type { DeliveryInfo, RelayBusEventMap, ResolvedHandler } from '../core/handlers.js';
import type { Logger } from '../core/logger.js';
import type { ClaimedDelivery, DeliveryLease, Store } from '../store/contract.js';
import type { CompletionBatcher } from './completion-batcher.js';
import type { EarlyStarts } from './early-starts.js';
import type { LiveLag } from './live-lag.js';

/**
 * A claimed delivery while it runs (`RunningDelivery`), the runner's dependencies (`RunnerDeps`) and how a run ends
 * (`RunOutcome`); the runner itself is handler-runner.ts.
 */

/** Why a running delivery's signal was aborted. */
export type AbortKind = 'timeout' | 'lease-lost' | 'shutdown';

/** How a run ended; see the table in the module header. */
export type RunOutcome = 'delivered' | 'failed' | 'dead' | 'lease-lost' | 'aborted' | 'unrecorded';

/** What the runner needs from the dispatcher. */
export interface RunnerDeps<TTx> {
  readonly store: Store<TTx>;
  readonly batcher: CompletionBatcher;
  readonly emitter: TypedEmitter<RelayBusEventMap>;
  readonly logger: Logger;
  /** The time passed to store calls (undefined: the store's own clock). */
  readonly now: () => Date | undefined;
  /** The time retries are scheduled from. */
  readonly wallNow: () => Date;
  readonly random?: () => number;
  /**
   * Called once when the handler's part of a run is over (it returned, threw, timed out or was
   * aborted; a transactional handler's transaction has ended), before its outcome is written. Its
   * handler slot is free from then on: writing the outcome runs no user code.
   */
  readonly handlerEnded?: (run: RunningDelivery<TTx>) => void;
  /** Where a run claimed before it was due waits for its time besides its timer (`EarlyStarts`). */
  readonly earlyStarts?: EarlyStarts;
  /** Told when each handler starts: how long its delivery waited, reported while a replay runs (`LiveLag`). */
  readonly liveLag?: LiveLag;
  /** Called once a reschedule is written: the delivery is due again `delayMs` from now. */
  readonly retryScheduled?: (delayMs: number) => void;
  /**
   * Called once the handler succeeded and its completion is on its way (queued in the completion batch; a
   * transactional handler's: committed): what follows it in its key may start (`ClaimedDelivery.follows`).
   */
  readonly succeeded?: (run: RunningDelivery<TTx>) => void;
  /**
   * Called once with a run's outcome when `runAtOnce` took it (a run through `runDelivery` reports it by the promise
   * that returns).
   */
  readonly finished?: (run: RunningDelivery<TTx>, outcome: RunOutcome) => void;
}

/**
 * Where a run is. Moves one way only: `running` (its handler holds a slot) -> `writing` (the handler's part is over,
 * its outcome is being written; the slot is free) -> `done` (the outcome is written or dropped).
 */
export type RunPhase = 'running' | 'writing' | 'done';

/**
 * A claimed delivery while it runs: its handler, its abort signal, what stopped it, and its phase. This module owns
 * every change of its state; the dispatcher reads it and asks for the two transitions it observes (`endHandler` when
 * a run ends without the runner having ended its handler phase, `end`).
 */
export class RunningDelivery<TTx> {
  readonly claimed: ClaimedDelivery;
  readonly handler: ResolvedHandler<TTx>;
  readonly lane: number;
  readonly epoch: string;
  readonly info: DeliveryInfo;
  /** Set by `done`'s setter or made on first read (a run that `runAtOnce` ended at once may never be asked). */
  #done: Promise<RunOutcome> | undefined;
  #outcome: RunOutcome | undefined;
  #resolveDone: ((outcome: RunOutcome) => void) | undefined;
  /** Stops the runner's wait for the handler (set by the runner while it waits). */
  onAbort: (() => void) | undefined;
  /** Claimed before it was due, it waits for `claimed.notBefore`; its handler has not started (set by the runner). */
  waitingToStart = false;
  #phase: RunPhase = 'running';
  #abortKind: AbortKind | undefined;
  #abortReason: unknown;
  #leaseLost = false;
  /** Created on first use of `signal`: most handlers never read it, and a controller costs more than the rest of a run. */
  #controller: AbortController | undefined;

  constructor(claimed: ClaimedDelivery, handler: ResolvedHandler<TTx>, lane: number, epoch: string) {
    this.claimed = claimed;
    this.handler = handler;
    this.lane = lane;
    this.epoch = epoch;
    // Read-only by type; neither frozen nor copied: this object is built for every delivery (a hot path), and
    // nothing relaybus writes reads it back.
    this.info = {
      id: claimed.id,
      eventId: claimed.eventId,
      eventType: claimed.eventType,
      handler: claimed.handler,
      key: claimed.key,
      sequence: claimed.sequence,
      attempt: claimed.attempts + 1,
      maxAttempts: claimed.maxAttempts,
      headers: claimed.headers,
      createdAt: claimed.createdAt,
    };
  }

  get phase(): RunPhase {
    return this.#phase;
  }

  /**
   * Settles when the run has ended and its outcome is written: the promise whoever starts the run sets, else (a run
   * `runAtOnce` took) one made when first asked, settled by `settle`.
   */
  get done(): Promise<RunOutcome> {
    if (this.#done === undefined) {
      const outcome = this.#outcome;
      this.#done =
        outcome === undefined
          ? new Promise<RunOutcome>((resolve) => {
              this.#resolveDone = resolve;
            })
          : Promise.resolve(outcome);
    }
    return this.#done;
  }

  set done(promise: Promise<RunOutcome>) {
    this.#done = promise;
  }

  /** The outcome of a run that `runAtOnce` took: `done` settles with it. */
  settle(outcome: RunOutcome): void {
    this.#outcome = outcome;
    this.#resolveDone?.(outcome);
  }

  /** The first reason the signal was aborted. */
  get abortKind(): AbortKind | undefined {
    return this.#abortKind;
  }

  /** What the signal was (or will be) aborted with. */
  get abortReason(): unknown {
    return this.#abortReason;
  }

  /** The lane lease is known to be lost. */
  get leaseLost(): boolean {
    return this.#leaseLost;
  }

  /** The handler's part is over: `running` -> `writing`. True only for the call that made the change. */
  endHandler(): boolean {
    if (this.#phase !== 'running') return false;
    this.#phase = 'writing';
    return true;
  }

  /** The run is over. */
  end(): void {
    this.#phase = 'done';
  }

  /** The handler's abort signal; already aborted if the run was. */
  get signal(): AbortSignal {
    if (this.#controller === undefined) {
      this.#controller = new AbortController();
      if (this.#abortKind !== undefined) this.#controller.abort(this.#abortReason);
    }
    return this.#controller.signal;
  }

  /** The lease of this claim, for fenced writes. */
  get lease(): DeliveryLease {
    return { deliveryId: this.claimed.id, leaseToken: this.claimed.leaseToken };
  }

  /** Mark the lane lease lost; true only for the first call (report it once). */
  markLeaseLost(): boolean {
    if (this.#leaseLost) return false;
    this.#leaseLost = true;
    return true;
  }

  /** Abort the handler's signal; the first kind wins. */
  abort(kind: AbortKind, reason: unknown): void {
    if (this.#abortKind !== undefined) return;
    this.#abortKind = kind;
    this.#abortReason = reason;
    this.#controller?.abort(reason);
    const onAbort = this.onAbort;
    this.onAbort = undefined;
    onAbort?.();
  }
}

/**
 * Mark a delivery's lease lost: emit `lease-lost` once and abort its handler. Called by the
 * dispatcher when the renewer or a newer claim reports the lane, and here when a fenced write fails.
 */
export function reportLeaseLost<TTx>(
  run: RunningDelivery<TTx>,
  detectedBy: 'renewal' | 'claim' | 'outcome',
  deps: Pick<RunnerDeps<TTx>, 'emitter' | 'logger'>,
): void {
  if (!run.markLeaseLost()) return;
  deps.logger.warn('lease lost: the delivery runs again on another worker; this result is dropped', {
    deliveryId: run.claimed.id,
    handler: run.claimed.handler,
    attempt: run.info.attempt,
    lane: run.lane,
    detectedBy,
  });
  run.abort(
    'lease-lost',
    new DOMException(
      `relaybus lost the lease of lane ${run.lane}; the delivery will run again elsewhere`,
      'AbortError',
    ),
  );
  deps.emitter.emit('lease-lost', { delivery: run.info, detectedBy });
}
