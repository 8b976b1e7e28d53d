import type { TypedEmitter } from '../core/emitter.js';
import type { DeliveryInfo, HandlerContext, RelayBusEventMap, ResolvedHandler } from '../core/handlers.js';
import { describeError, type Logger } from '../core/logger.js';
import { decideRetry } from '../core/retry-policy.js';
import type { ClaimedDelivery, DeliveryLease, Store } from '../store/contract.js';
import type { CompletionBatcher } from './completion-batcher.js';

/**
 * Runs one claimed delivery's handler and turns what happened into exactly one store write:
 *
 * | what happened                                  | write                                   | result       |
 * | ---------------------------------------------- | --------------------------------------- | ------------ |
 * | handler returned                               | completion batcher (`completeMany`)     | `delivered`  |
 * | transactional handler returned                 | `complete(lease, tx)` in its transaction | `delivered`  |
 * | handler threw or timed out, attempts left      | `reschedule` after backoff              | `failed`     |
 * | handler threw or timed out, last attempt       | `bury`                                  | `dead`       |
 * | lane lease lost (renewal, newer claim, fence)  | none: the late result is dropped        | `lease-lost` |
 * | aborted by a graceful stop                     | none here: the dispatcher `release`s it | `aborted`    |
 * | the write itself failed (database down)        | `release` attempted                     | `unrecorded` |
 *
 * Abort. The handler's `ctx.signal` aborts on timeout, lease loss or shutdown, and the runner stops
 * waiting for the handler at that moment: a handler that ignores its signal keeps running, but its
 * result is ignored (for a transactional handler the transaction is rolled back at once).
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
}

/** Longest error text recorded with a failed delivery. */
const MAX_ERROR_LENGTH = 4_000;

/** A claimed delivery while it runs: its handler, its abort controller and what stopped it. */
export class RunningDelivery<TTx> {
  readonly claimed: ClaimedDelivery;
  readonly handler: ResolvedHandler<TTx>;
  readonly lane: number;
  readonly epoch: string;
  readonly info: DeliveryInfo;
  readonly controller = new AbortController();
  /** The first reason the signal was aborted. */
  abortKind: AbortKind | undefined;
  /** The lane lease is known to be lost (reported once). */
  leaseLost = false;
  /** Settles when the run has ended and its outcome is written. */
  done: Promise<RunOutcome> = Promise.resolve('aborted');

  constructor(claimed: ClaimedDelivery, handler: ResolvedHandler<TTx>, lane: number, epoch: string) {
    this.claimed = claimed;
    this.handler = handler;
    this.lane = lane;
    this.epoch = epoch;
    this.info = Object.freeze({
      id: claimed.id,
      eventId: claimed.eventId,
      eventType: claimed.eventType,
      handler: claimed.handler,
      key: claimed.key,
      sequence: claimed.sequence,
      attempt: claimed.attempts + 1,
      maxAttempts: claimed.maxAttempts,
      headers: Object.freeze({ ...claimed.headers }),
      createdAt: claimed.createdAt,
    });
  }

  /** The lease of this claim, for fenced writes. */
  get lease(): DeliveryLease {
    return { deliveryId: this.claimed.id, lease: this.claimed.lease };
  }

  /** Abort the handler's signal; the first kind wins. */
  abort(kind: AbortKind, reason: unknown): void {
    if (this.abortKind !== undefined) return;
    this.abortKind = kind;
    this.controller.abort(reason);
  }
}

/**
 * Mark a delivery's lease lost: emit `lease-lost` once and abort its handler. Called by the
 * dispatcher when the renewer or a newer claim reports the lane, and here when a fenced write fails.
 */
export function reportLeaseLost<TTx>(run: RunningDelivery<TTx>, detectedBy: 'renewal' | 'claim' | 'outcome', deps: Pick<RunnerDeps<TTx>, 'emitter' | 'logger'>): void {
  if (run.leaseLost) return;
  run.leaseLost = true;
  deps.logger.warn('lease lost: the delivery runs again on another worker; this result is dropped', {
    deliveryId: run.claimed.id, handler: run.claimed.handler, lane: run.lane, detectedBy,
  });
  run.abort('lease-lost', new DOMException(`relaybus lost the lease of lane ${run.lane}; the delivery will run again elsewhere`, 'AbortError'));
  deps.emitter.emit('lease-lost', { delivery: run.info, detectedBy });
}

/** The transactional path rolled back because the completion was fenced. */
class LeaseLostSignal extends Error {
  constructor() {
    super('the lane lease was lost before the completion; the transaction was rolled back');
  }
}

/** The runner stopped waiting for the handler because its signal was aborted. */
class StoppedWaiting extends Error {}

/** Resolve or reject with `promise`, or reject with `StoppedWaiting` as soon as `signal` aborts. */
function untilAborted<T>(promise: Promise<T>, signal: AbortSignal, onLate: (outcome: string) => void): Promise<T> {
  if (signal.aborted) {
    promise.then(() => onLate('resolved'), () => onLate('rejected'));
    return Promise.reject(new StoppedWaiting());
  }
  return new Promise<T>((resolve, reject) => {
    let stopped = false;
    const onAbort = (): void => {
      stopped = true;
      reject(new StoppedWaiting());
    };
    signal.addEventListener('abort', onAbort, { once: true });
    promise.then(
      (value) => {
        signal.removeEventListener('abort', onAbort);
        if (stopped) onLate('resolved');
        else resolve(value);
      },
      (error: unknown) => {
        signal.removeEventListener('abort', onAbort);
        if (stopped) onLate('rejected');
        else reject(error);
      },
    );
  });
}

function invoke<TTx>(run: RunningDelivery<TTx>, transaction: TTx | undefined, deps: RunnerDeps<TTx>): Promise<unknown> {
  const context: HandlerContext & { transaction?: TTx } = run.handler.transactional
    ? Object.freeze({ delivery: run.info, signal: run.controller.signal, transaction })
    : Object.freeze({ delivery: run.info, signal: run.controller.signal });
  const handlerPromise = new Promise<unknown>((resolve) => resolve(run.handler.fn(run.claimed.payload, context)));
  return untilAborted(handlerPromise, run.controller.signal, (late) => {
    deps.logger.debug('a handler settled after relaybus stopped waiting for it; its result was ignored', {
      deliveryId: run.claimed.id, handler: run.claimed.handler, abortedBy: run.abortKind, late,
    });
  });
}

function errorText(error: unknown): string {
  const text = describeError(error);
  return text.length > MAX_ERROR_LENGTH ? `${text.slice(0, MAX_ERROR_LENGTH - 1)}…` : text;
}

/** Run the handler of `run` and write its outcome. Never rejects. */
export async function runDelivery<TTx>(run: RunningDelivery<TTx>, deps: RunnerDeps<TTx>): Promise<RunOutcome> {
  const started = performance.now();
  const elapsed = (): number => Math.round((performance.now() - started) * 1000) / 1000;
  const { handler, claimed } = run;

  if (claimed.eventType !== handler.eventType) {
    const error = new Error(`handler "${handler.name}" is registered for event type "${handler.eventType}" but was handed a delivery of "${claimed.eventType}"; a handler name must not move between event types`);
    return writeFailure(run, deps, error, elapsed, true);
  }

  const timer = setTimeout(() => {
    run.abort('timeout', new DOMException(`handler "${handler.name}" did not finish within ${handler.timeoutMs} ms (timeoutMs)`, 'TimeoutError'));
  }, handler.timeoutMs);

  let succeeded = false;
  let thrown: unknown;
  try {
    if (handler.transactional) {
      await deps.store.transaction(async (tx) => {
        await invoke(run, tx, deps);
        if (run.leaseLost) throw new LeaseLostSignal();
        const completed = await deps.store.complete(run.lease, tx, deps.now());
        if (!completed) {
          // Flag first: a store may wrap what the transaction callback throws.
          reportLeaseLost(run, 'outcome', deps);
          throw new LeaseLostSignal();
        }
      });
    } else {
      await invoke(run, undefined, deps);
    }
    succeeded = true;
  } catch (error) {
    thrown = error;
  } finally {
    clearTimeout(timer);
  }

  if (succeeded) {
    if (handler.transactional) return delivered(run, deps, elapsed());
    if (run.leaseLost) return 'lease-lost';
    let completed: boolean;
    try {
      completed = await deps.batcher.complete(run.lease);
    } catch (error) {
      return unrecorded(run, deps, 'complete', error);
    }
    if (!completed) {
      reportLeaseLost(run, 'outcome', deps);
      return 'lease-lost';
    }
    return delivered(run, deps, elapsed());
  }

  if (thrown instanceof LeaseLostSignal || run.leaseLost) {
    reportLeaseLost(run, 'outcome', deps);
    return 'lease-lost';
  }
  if (run.abortKind === 'shutdown') return 'aborted';
  const error: unknown = run.abortKind === 'timeout' ? run.controller.signal.reason : thrown;
  return writeFailure(run, deps, error, elapsed, false);
}

function delivered<TTx>(run: RunningDelivery<TTx>, deps: RunnerDeps<TTx>, durationMs: number): RunOutcome {
  deps.logger.debug('delivered', { deliveryId: run.claimed.id, handler: run.claimed.handler, durationMs });
  deps.emitter.emit('delivered', { delivery: run.info, durationMs });
  return 'delivered';
}

async function writeFailure<TTx>(run: RunningDelivery<TTx>, deps: RunnerDeps<TTx>, error: unknown, elapsed: () => number, permanent: boolean): Promise<RunOutcome> {
  const { claimed, handler } = run;
  const decision = permanent
    ? ({ action: 'bury' } as const)
    : decideRetry({ attempt: claimed.attempts + 1, maxAttempts: claimed.maxAttempts, backoff: handler.backoff, now: deps.wallNow(), random: deps.random });
  const fields = {
    deliveryId: claimed.id, handler: claimed.handler, eventType: claimed.eventType, attempt: claimed.attempts + 1,
    maxAttempts: claimed.maxAttempts, error: describeError(error), stack: error instanceof Error ? error.stack : undefined,
  };
  const durationMs = elapsed();
  let written: boolean;
  try {
    written = decision.action === 'reschedule'
      ? await deps.store.reschedule(run.lease, { availableAt: decision.availableAt, error: errorText(error), now: deps.now() })
      : await deps.store.bury(run.lease, { error: errorText(error), now: deps.now() });
  } catch (writeError) {
    return unrecorded(run, deps, decision.action, writeError);
  }
  if (!written) {
    reportLeaseLost(run, 'outcome', deps);
    return 'lease-lost';
  }
  if (decision.action === 'reschedule') {
    deps.logger.warn('handler failed; retrying later', { ...fields, retryAt: decision.availableAt.toISOString() });
    deps.emitter.emit('failed', { delivery: run.info, error, durationMs, retryAt: decision.availableAt });
    return 'failed';
  }
  deps.logger.error('handler failed on its last attempt; the delivery is dead until requeued', fields);
  deps.emitter.emit('dead', { delivery: run.info, error, durationMs });
  return 'dead';
}

/** The outcome could not be written: give the delivery back if possible, otherwise its lease expiry will. */
async function unrecorded<TTx>(run: RunningDelivery<TTx>, deps: RunnerDeps<TTx>, write: string, error: unknown): Promise<RunOutcome> {
  const fields = { deliveryId: run.claimed.id, handler: run.claimed.handler, write, error: describeError(error) };
  try {
    await deps.store.release([run.lease], deps.now());
    deps.logger.error('could not record the outcome of a delivery; released it, it will run again', fields);
  } catch {
    deps.logger.error('could not record the outcome of a delivery; it will run again once its lane lease expires', fields);
  }
  return 'unrecorded';
}
