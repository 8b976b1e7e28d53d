import type { DeliveryInfo, HandlerContext } from '../core/handlers.js';
import type { RunnerDeps, RunningDelivery } from './running-delivery.js';

/**
 * Calling a handler: its context (`ctx.signal`, `ctx.transaction` for a transactional handler), the wait that ends
 * when the run is aborted, and the report of a run that started late.
 */

/** The transactional path rolled back because the completion was fenced. */
export class LeaseLostSignal extends Error {
  constructor() {
    super('the lane lease was lost before the completion; the transaction was rolled back');
  }
}

/** The runner stopped waiting for the handler because its signal was aborted. */
export class StoppedWaiting extends Error {}

/** Resolve or reject with `promise`, or reject with `StoppedWaiting` as soon as `run` is aborted. */
export function untilAborted<TTx, T>(
  promise: PromiseLike<T>,
  run: RunningDelivery<TTx>,
  onLate: (outcome: string) => void,
): Promise<T> {
  if (run.abortKind !== undefined) {
    promise.then(
      () => onLate('resolved'),
      () => onLate('rejected'),
    );
    return Promise.reject(new StoppedWaiting());
  }
  return new Promise<T>((resolve, reject) => {
    let stopped = false;
    run.onAbort = () => {
      stopped = true;
      reject(new StoppedWaiting());
    };
    promise.then(
      (value) => {
        run.onAbort = undefined;
        if (stopped) onLate('resolved');
        else resolve(value);
      },
      (error: unknown) => {
        run.onAbort = undefined;
        if (stopped) onLate('rejected');
        else reject(error);
      },
    );
  });
}

/** The handler's context; `signal` is read through the run so its controller exists only when a handler asks for it. */
export class RunContext<TTx> implements HandlerContext {
  readonly delivery: DeliveryInfo;
  readonly #run: RunningDelivery<TTx>;

  constructor(run: RunningDelivery<TTx>) {
    this.#run = run;
    this.delivery = run.info;
  }

  /** Read through the run: its AbortController is made only when a handler asks for the signal. */
  get signal(): AbortSignal {
    return this.#run.signal;
  }
}

/** The context of a transactional handler: the same, plus `transaction`. */
export class TransactionalRunContext<TTx> extends RunContext<TTx> {
  readonly transaction: TTx;

  constructor(run: RunningDelivery<TTx>, transaction: TTx) {
    super(run);
    this.transaction = transaction;
  }
}

/** The handler's context: one small object per run, its `signal` getter on the prototype. */
export function contextOf<TTx>(
  run: RunningDelivery<TTx>,
  transaction: TTx | undefined,
): HandlerContext & { transaction?: TTx } {
  return run.handler.transactional ? new TransactionalRunContext(run, transaction as TTx) : new RunContext(run);
}

/**
 * Call the handler. A handler that returns a plain value (or throws) synchronously is done at once;
 * only a returned promise (thenable) is raced against the abort.
 */
export function invoke<TTx>(run: RunningDelivery<TTx>, transaction: TTx | undefined, deps: RunnerDeps<TTx>): unknown {
  let result: unknown;
  const { instrumentation } = run.handler;
  try {
    result =
      instrumentation?.runHandler === undefined
        ? run.handler.fn(run.claimed.payload, contextOf(run, transaction))
        : instrumentation.runHandler({ delivery: run.info, lane: run.lane }, () =>
            run.handler.fn(run.claimed.payload, contextOf(run, transaction)),
          );
  } catch (error) {
    if (run.abortKind === undefined) throw error;
    reportLate(run, deps, 'rejected');
    throw new StoppedWaiting();
  }
  if (!isThenable(result)) {
    if (run.abortKind === undefined) return result;
    reportLate(run, deps, 'resolved');
    throw new StoppedWaiting();
  }
  // Adopt the thenable as a promise would, so a thenable whose `then` throws rejects the run.
  return untilAborted(new Promise<unknown>((resolve) => resolve(result)), run, (late) => reportLate(run, deps, late));
}

/** A promise or any object with a `then` method (what `await` would adopt). */
export function isThenable(value: unknown): value is PromiseLike<unknown> {
  return (
    value !== null &&
    (typeof value === 'object' || typeof value === 'function') &&
    typeof (value as PromiseLike<unknown>).then === 'function'
  );
}

/** A handler settled after the runner stopped waiting for it (timeout, lease loss, stop): its result was ignored. */
export function reportLate<TTx>(run: RunningDelivery<TTx>, deps: RunnerDeps<TTx>, late: string): void {
  deps.logger.debug('a handler settled after relaybus stopped waiting for it; its result was ignored', {
    deliveryId: run.claimed.id,
    handler: run.claimed.handler,
    attempt: run.info.attempt,
    lane: run.lane,
    abortedBy: run.abortKind,
    late,
  });
}
