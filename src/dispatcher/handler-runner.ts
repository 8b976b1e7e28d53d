import type { TypedEmitter } from '../core/emitter.js';
import { RelayBusError } from '../core/errors.js';
import type { DeliveryInfo, HandlerContext, RelayBusEventMap, ResolvedHandler } from '../core/handlers.js';
import { MAX_RETRY_LOOKAHEAD_MS } from '../core/limits.js';
import { describeError, type Logger } from '../core/logger.js';
import { deadLogLine, isPermanentFailure } from '../core/permanent-failure.js';
import { decideRetry } from '../core/retry-policy.js';
import type { ClaimedDelivery, DeliveryLease, Store } from '../store/contract.js';
import type { CompletionAnswer, CompletionBatcher, CompletionWaiter } from './completion-batcher.js';
import type { EarlyStarts } from './early-starts.js';

/**
 * Runs one claimed delivery's handler and turns what happened into exactly one store write:
 *
 * | what happened                                  | write                                   | result       |
 * | ---------------------------------------------- | --------------------------------------- | ------------ |
 * | handler returned                               | completion batcher (`completeMany`)     | `delivered`  |
 * | transactional handler returned                 | `complete(lease, tx)` in its transaction | `delivered`  |
 * | handler threw or timed out, attempts left      | `reschedule` after backoff              | `failed`     |
 * | handler threw or timed out, last attempt       | `bury`                                  | `dead`       |
 * | handler threw a permanent failure (any attempt) | `bury`                                  | `dead`       |
 * | lane lease lost (renewal, newer claim, fence)  | none: the late result is dropped        | `lease-lost` |
 * | aborted by a graceful stop                     | none here: the dispatcher `release`s it | `aborted`    |
 * | the write itself failed (database down)        | `release` attempted                     | `unrecorded` |
 * | reschedule/bury failed for good (not retryable) | `bury` with the write's error instead   | `dead`       |
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
  /**
   * Called once when the handler's part of a run is over (it returned, threw, timed out or was
   * aborted; a transactional handler's transaction has ended), before its outcome is written. Its
   * handler slot is free from then on: writing the outcome runs no user code.
   */
  readonly handlerEnded?: (run: RunningDelivery<TTx>) => void;
  /** Where a run claimed before it was due waits for its time besides its timer (`EarlyStarts`). */
  readonly earlyStarts?: EarlyStarts;
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

/** Longest error text recorded with a failed delivery. */
const MAX_ERROR_LENGTH = 4_000;

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

/** The transactional path rolled back because the completion was fenced. */
class LeaseLostSignal extends Error {
  constructor() {
    super('the lane lease was lost before the completion; the transaction was rolled back');
  }
}

/** The runner stopped waiting for the handler because its signal was aborted. */
class StoppedWaiting extends Error {}

/** Resolve or reject with `promise`, or reject with `StoppedWaiting` as soon as `run` is aborted. */
function untilAborted<TTx, T>(
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
class RunContext<TTx> implements HandlerContext {
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
class TransactionalRunContext<TTx> extends RunContext<TTx> {
  readonly transaction: TTx;

  constructor(run: RunningDelivery<TTx>, transaction: TTx) {
    super(run);
    this.transaction = transaction;
  }
}

/** The handler's context: one small object per run, its `signal` getter on the prototype. */
function contextOf<TTx>(
  run: RunningDelivery<TTx>,
  transaction: TTx | undefined,
): HandlerContext & { transaction?: TTx } {
  return run.handler.transactional ? new TransactionalRunContext(run, transaction as TTx) : new RunContext(run);
}

/**
 * Call the handler. A handler that returns a plain value (or throws) synchronously is done at once;
 * only a returned promise (thenable) is raced against the abort.
 */
function invoke<TTx>(run: RunningDelivery<TTx>, transaction: TTx | undefined, deps: RunnerDeps<TTx>): unknown {
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
function isThenable(value: unknown): value is PromiseLike<unknown> {
  return (
    value !== null &&
    (typeof value === 'object' || typeof value === 'function') &&
    typeof (value as PromiseLike<unknown>).then === 'function'
  );
}

/** A handler settled after the runner stopped waiting for it (timeout, lease loss, stop): its result was ignored. */
function reportLate<TTx>(run: RunningDelivery<TTx>, deps: RunnerDeps<TTx>, late: string): void {
  deps.logger.debug('a handler settled after relaybus stopped waiting for it; its result was ignored', {
    deliveryId: run.claimed.id,
    handler: run.claimed.handler,
    attempt: run.info.attempt,
    lane: run.lane,
    abortedBy: run.abortKind,
    late,
  });
}

/**
 * Wait until `notBefore` (the bus's clock) for a delivery claimed before it was due (a retried head,
 * `ClaimParams.retryLookaheadMs`), or until the run is aborted: a timer, or a handler end that finds the time has come
 * (`EarlyStarts`), whichever is first. Never early: a timer may fire before the clock reads
 * its time (whole milliseconds), and is then set again for the rest. At most `MAX_RETRY_LOOKAHEAD_MS` in all: the
 * store claims no earlier than that, so a clock that does not move (a test's) cannot hold a run for longer.
 */
async function untilStart<TTx>(run: RunningDelivery<TTx>, notBefore: number, deps: RunnerDeps<TTx>): Promise<void> {
  const deadline = performance.now() + MAX_RETRY_LOOKAHEAD_MS;
  for (;;) {
    const ms = Math.min(notBefore - deps.wallNow().getTime(), deadline - performance.now());
    if (ms <= 0 || run.abortKind !== undefined) return;
    run.waitingToStart = true;
    await new Promise<void>((resolve) => {
      const done = (): void => {
        clearTimeout(timer);
        if (early !== undefined) deps.earlyStarts?.cancel(early);
        run.onAbort = undefined;
        run.waitingToStart = false;
        resolve();
      };
      const timer = setTimeout(done, Math.ceil(ms));
      const early = deps.earlyStarts?.add(notBefore, done);
      run.onAbort = done;
    });
  }
}

/** At most MAX_ERROR_LENGTH characters, without NULs (Postgres cannot store them; the stores strip them too). */
function clip(text: string): string {
  const clean = text.includes('\0') ? text.replaceAll('\0', '') : text;
  return clean.length > MAX_ERROR_LENGTH ? `${clean.slice(0, MAX_ERROR_LENGTH - 1)}…` : clean;
}

function errorText(error: unknown): string {
  return clip(describeError(error));
}

/** A store error that the same write, repeated, will hit again (a plain Error of a third-party store is not assumed so). */
function isPermanent(error: unknown): boolean {
  return error instanceof RelayBusError && !error.retryable;
}

/** Milliseconds since `started` (performance.now()), to the microsecond. */
function msSince(started: number): number {
  return Math.round((performance.now() - started) * 1000) / 1000;
}

/** Abort `run` with a TimeoutError after `ms` (at once when none is left). */
function armTimeout<TTx>(run: RunningDelivery<TTx>, ms: number): NodeJS.Timeout {
  const { handler } = run;
  return setTimeout(
    () =>
      run.abort(
        'timeout',
        new DOMException(
          `handler "${handler.name}" did not finish within ${handler.timeoutMs} ms (timeoutMs)`,
          'TimeoutError',
        ),
      ),
    Math.max(0, ms),
  );
}

/** Run the handler of `run` and write its outcome. Never rejects. */
export async function runDelivery<TTx>(run: RunningDelivery<TTx>, deps: RunnerDeps<TTx>): Promise<RunOutcome> {
  if (run.claimed.notBefore !== undefined) {
    await untilStart(run, run.claimed.notBefore.getTime(), deps);
    if (run.abortKind !== undefined) {
      // Nothing ran: a lost lease leaves the delivery to the lane's new holder, a stop releases it (no attempt).
      endHandler(run, deps);
      return run.leaseLost ? 'lease-lost' : 'aborted';
    }
  }
  const started = performance.now();
  const { handler, claimed } = run;

  if (claimed.eventType !== handler.eventType) {
    const error = new Error(
      `handler "${handler.name}" is registered for event type "${handler.eventType}" but was handed a delivery of "${claimed.eventType}"; a handler name must not move between event types`,
    );
    endHandler(run, deps);
    return writeFailure(run, deps, error, started, true);
  }
  // A payload published through SQL (relaybus_publish, a trigger) was never checked against the event's schema: one
  // that breaks it is dead at once, with the rules it breaks (a retry would break them again).
  const issues = handler.payloadIssues(claimed.payload);
  if (issues.length > 0) {
    const shown = issues.map((issue) => `${issue.path}: ${issue.message}`).join('; ');
    const error = new Error(
      `the payload of event "${claimed.eventId}" does not match the schema of "${claimed.eventType}" (${shown}); it was published without that check (from SQL?). Fix the publisher, then requeue the delivery`,
    );
    endHandler(run, deps);
    return writeFailure(run, deps, error, started, true);
  }

  if (!handler.transactional) return callHandler(run, deps, started) ?? completeThroughBatcher(run, deps, started);

  const { succeeded, thrown } = await withinTimeout(run, handler.timeoutMs, () =>
    deps.store.transaction(async (tx) => {
      await invoke(run, tx, deps);
      if (run.leaseLost) throw new LeaseLostSignal();
      const completed = await deps.store.complete(run.lease, tx, deps.now());
      if (!completed) {
        // Flag first: a store may wrap what the transaction callback throws.
        reportLeaseLost(run, 'outcome', deps);
        throw new LeaseLostSignal();
      }
    }),
  );
  endHandler(run, deps);
  if (!succeeded) return failedOutcome(run, deps, thrown, started);
  deps.succeeded?.(run);
  return delivered(run, deps, msSince(started));
}

/** What `withinTimeout` waited for did: succeeded, or threw `thrown` (a timeout or an abort included). */
interface Settled {
  readonly succeeded: boolean;
  readonly thrown?: unknown;
}

/** Wait for `work` (started here) with the run's timeout armed for `ms`: armed only while something can still end. */
async function withinTimeout<TTx>(
  run: RunningDelivery<TTx>,
  ms: number,
  work: () => PromiseLike<unknown>,
): Promise<Settled> {
  const timer = armTimeout(run, ms);
  try {
    await work();
    return { succeeded: true };
  } catch (error) {
    return { succeeded: false, thrown: error };
  } finally {
    clearTimeout(timer);
  }
}

/** A handler that is not transactional succeeded (its handler's part is over): its completion through the batcher. */
async function completeThroughBatcher<TTx>(
  run: RunningDelivery<TTx>,
  deps: RunnerDeps<TTx>,
  started: number,
): Promise<RunOutcome> {
  if (run.leaseLost) return 'lease-lost';
  let answer: CompletionAnswer;
  try {
    const completion = deps.batcher.complete(run.lease);
    // Queued before the next delivery of this key starts, so its completion is never written in an earlier batch.
    deps.succeeded?.(run);
    answer = await completion;
  } catch (error) {
    return unrecorded(run, deps, 'complete', error);
  }
  return answeredOutcome(run, deps, answer, started);
}

/** What a completion through the batcher ends the run with: delivered, its lease was lost, or a lookup decides. */
function answeredOutcome<TTx>(
  run: RunningDelivery<TTx>,
  deps: RunnerDeps<TTx>,
  answer: CompletionAnswer,
  started: number,
): RunOutcome | Promise<RunOutcome> {
  if (answer === 'completed') return delivered(run, deps, msSince(started));
  if (answer === 'unconfirmed') return confirmedOutcome(run, deps, started);
  reportLeaseLost(run, 'outcome', deps);
  return 'lease-lost';
}

/**
 * A completion refused after an earlier write of it failed (the connection dropped): that write may have committed
 * before its answer was lost. The delivery still there (pending, or buried by a takeover) means the lease was lost
 * and this result is dropped; gone (or kept as completed history), it is done: by this completion's earlier write, or
 * by another worker's run after a takeover, and this run delivered it.
 */
async function confirmedOutcome<TTx>(
  run: RunningDelivery<TTx>,
  deps: RunnerDeps<TTx>,
  started: number,
): Promise<RunOutcome> {
  const { eventId, handler } = run.info;
  let stillThere: boolean;
  try {
    const page = await deps.store.listDeliveries({ eventId, handler, limit: 1 });
    stillThere = page.items.some((d) => d.id === run.claimed.id && d.status !== 'completed');
  } catch (error) {
    deps.logger.warn(
      'could not look up a delivery whose completion was refused after a failed write; taken as a lost lease',
      {
        deliveryId: run.claimed.id,
        handler,
        error: describeError(error),
      },
    );
    stillThere = true;
  }
  if (stillThere) return answeredOutcome(run, deps, 'lease-lost', started);
  deps.logger.info(
    'completion confirmed: the delivery is done (an earlier write committed before its answer was lost)',
    {
      deliveryId: run.claimed.id,
      handler,
      lane: run.lane,
    },
  );
  return delivered(run, deps, msSince(started));
}

/** A handler that threw, timed out, lost its lease or was stopped (its handler's part is over): what is written. */
function failedOutcome<TTx>(
  run: RunningDelivery<TTx>,
  deps: RunnerDeps<TTx>,
  thrown: unknown,
  started: number,
): RunOutcome | Promise<RunOutcome> {
  if (thrown instanceof LeaseLostSignal || run.leaseLost) {
    reportLeaseLost(run, 'outcome', deps);
    return 'lease-lost';
  }
  if (run.abortKind === 'shutdown') return 'aborted';
  const error: unknown = run.abortKind === 'timeout' ? run.abortReason : thrown;
  return writeFailure(run, deps, error, started, isPermanentFailure(error));
}

/**
 * Run a delivery whose handler needs nothing first (not transactional, due, of its handler's event type, a valid
 * payload) and report its outcome to `deps.finished`; false, and nothing done, for any other (`runDelivery` runs it).
 * A handler that returns at once (not a promise) and succeeds is the common case under a backlog, and thousands of its
 * runs wait at a time for the claim that carries their completions: here such a run waits as its completion in the
 * batch, without the promises, the async function's frame and the callbacks `runDelivery` keeps alive per run (the
 * garbage collector copies what stays alive: a third of a dispatcher's CPU in a keyed drain went to it).
 */
export function runAtOnce<TTx>(run: RunningDelivery<TTx>, deps: RunnerDeps<TTx>): boolean {
  const { handler, claimed } = run;
  if (
    deps.finished === undefined ||
    handler.transactional ||
    claimed.notBefore !== undefined ||
    claimed.eventType !== handler.eventType ||
    handler.payloadIssues(claimed.payload).length > 0
  )
    return false;
  const started = performance.now();
  const ended = callHandler(run, deps, started);
  if (ended !== undefined) {
    endWith(run, deps, ended);
    return true;
  }
  if (run.leaseLost) {
    endWith(run, deps, 'lease-lost');
    return true;
  }
  deps.batcher.enqueue(new BatchedCompletion(run, deps, started));
  // Queued before the next delivery of this key starts, so its completion is never written in an earlier batch.
  deps.succeeded?.(run);
  return true;
}

/**
 * Call a handler that is not transactional. Undefined when it returned at once (its part is over: its completion is
 * the caller's to queue); else what the run ends with: it threw, or returned a promise (waited for here).
 */
function callHandler<TTx>(
  run: RunningDelivery<TTx>,
  deps: RunnerDeps<TTx>,
  started: number,
): RunOutcome | Promise<RunOutcome> | undefined {
  let result: unknown;
  try {
    result = invoke(run, undefined, deps);
  } catch (error) {
    endHandler(run, deps);
    return failedOutcome(run, deps, error, started);
  }
  // A handler that returns synchronously is over before any timer could fire: no timer, no wait for its result.
  if (result instanceof Promise) return untilSettled(run, deps, result, started);
  endHandler(run, deps);
  return undefined;
}

/** The rest of a run whose handler (not transactional) returned a promise: wait for it within the timeout. */
async function untilSettled<TTx>(
  run: RunningDelivery<TTx>,
  deps: RunnerDeps<TTx>,
  result: Promise<unknown>,
  started: number,
): Promise<RunOutcome> {
  // What the handler's synchronous part took counts against its timeout.
  const { succeeded, thrown } = await withinTimeout(
    run,
    run.handler.timeoutMs - (performance.now() - started),
    () => result,
  );
  endHandler(run, deps);
  return succeeded ? completeThroughBatcher(run, deps, started) : failedOutcome(run, deps, thrown, started);
}

/** End a `runAtOnce` run with `outcome` (a run that fails unexpectedly ends `unrecorded`, logged). */
function endWith<TTx>(
  run: RunningDelivery<TTx>,
  deps: RunnerDeps<TTx>,
  outcome: RunOutcome | Promise<RunOutcome>,
): void {
  if (typeof outcome === 'string') {
    run.settle(outcome);
    deps.finished!(run, outcome);
    return;
  }
  run.done = outcome.then(
    (settled) => {
      deps.finished!(run, settled);
      return settled;
    },
    (error: unknown) => {
      reportUnexpected(run, deps, error);
      deps.finished!(run, 'unrecorded');
      return 'unrecorded' as const;
    },
  );
}

/** A run failed where nothing should (a bug, or a logger that throws): it ends `unrecorded`, and this says why. */
export function reportUnexpected<TTx>(
  run: RunningDelivery<TTx>,
  deps: Pick<RunnerDeps<TTx>, 'logger'>,
  error: unknown,
): void {
  deps.logger.error('a handler run failed unexpectedly', { deliveryId: run.claimed.id, error: describeError(error) });
}

/** The completion of a `runAtOnce` run in the batch: it ends the run when its write settles. */
class BatchedCompletion<TTx> implements CompletionWaiter {
  readonly lease: DeliveryLease;
  readonly #run: RunningDelivery<TTx>;
  readonly #deps: RunnerDeps<TTx>;
  readonly #started: number;

  constructor(run: RunningDelivery<TTx>, deps: RunnerDeps<TTx>, started: number) {
    this.lease = run.lease;
    this.#run = run;
    this.#deps = deps;
    this.#started = started;
  }

  resolve(answer: CompletionAnswer): void {
    let outcome: RunOutcome | Promise<RunOutcome>;
    try {
      outcome = answeredOutcome(this.#run, this.#deps, answer, this.#started);
    } catch (error) {
      // The run must end all the same: stop() waits for it.
      reportUnexpected(this.#run, this.#deps, error);
      outcome = 'unrecorded';
    }
    endWith(this.#run, this.#deps, outcome);
  }

  reject(error: unknown): void {
    endWith(this.#run, this.#deps, unrecorded(this.#run, this.#deps, 'complete', error));
  }
}

/** The handler's part of the run is over: its slot is free before the outcome is written. */
function endHandler<TTx>(run: RunningDelivery<TTx>, deps: RunnerDeps<TTx>): void {
  if (run.endHandler()) deps.handlerEnded?.(run);
}

function delivered<TTx>(run: RunningDelivery<TTx>, deps: RunnerDeps<TTx>, durationMs: number): RunOutcome {
  deps.logger.debug('delivered', {
    deliveryId: run.claimed.id,
    handler: run.claimed.handler,
    attempt: run.info.attempt,
    lane: run.lane,
    durationMs,
  });
  if (deps.emitter.has('delivered')) deps.emitter.emit('delivered', { delivery: run.info, durationMs });
  return 'delivered';
}

async function writeFailure<TTx>(
  run: RunningDelivery<TTx>,
  deps: RunnerDeps<TTx>,
  error: unknown,
  started: number,
  permanent: boolean,
): Promise<RunOutcome> {
  const { claimed, handler } = run;
  const decision = permanent
    ? ({ action: 'bury' } as const)
    : decideRetry({
        attempt: claimed.attempts + 1,
        maxAttempts: claimed.maxAttempts,
        backoff: handler.backoff,
        now: deps.wallNow(),
        random: deps.random,
      });
  const fields = {
    deliveryId: claimed.id,
    handler: claimed.handler,
    eventType: claimed.eventType,
    attempt: claimed.attempts + 1,
    lane: run.lane,
    maxAttempts: claimed.maxAttempts,
    error: describeError(error),
    stack: error instanceof Error ? error.stack : undefined,
  };
  const durationMs = msSince(started);
  let written: boolean;
  try {
    written =
      decision.action === 'reschedule'
        ? await deps.store.reschedule(run.lease, {
            availableAt: decision.availableAt,
            error: errorText(error),
            now: deps.now(),
          })
        : await deps.store.bury(run.lease, { error: errorText(error), now: deps.now() });
  } catch (writeError) {
    if (isPermanent(writeError)) return buryInstead(run, deps, decision.action, writeError, error, fields, durationMs);
    return unrecorded(run, deps, decision.action, writeError);
  }
  if (!written) {
    reportLeaseLost(run, 'outcome', deps);
    return 'lease-lost';
  }
  if (decision.action === 'reschedule') {
    deps.retryScheduled?.(decision.availableAt.getTime() - deps.wallNow().getTime());
    deps.logger.warn('handler failed; retrying later', { ...fields, retryAt: decision.availableAt.toISOString() });
    deps.emitter.emit('failed', { delivery: run.info, error, durationMs, retryAt: decision.availableAt });
    return 'failed';
  }
  deps.logger.error(deadLogLine(permanent), fields);
  deps.emitter.emit('dead', { delivery: run.info, error, durationMs });
  return 'dead';
}

/**
 * A reschedule or bury failed with an error a retry repeats (data the database refuses, a constraint, a
 * privilege): releasing the delivery would run it, fail and fail to record, forever. Bury it instead, with
 * the write's error recorded next to the handler's; if even that fails, with the write's error alone; if
 * that fails too, release it and say clearly that an operator must act.
 */
async function buryInstead<TTx>(
  run: RunningDelivery<TTx>,
  deps: RunnerDeps<TTx>,
  write: 'reschedule' | 'bury',
  writeError: unknown,
  error: unknown,
  fields: Record<string, unknown>,
  durationMs: number,
): Promise<RunOutcome> {
  const cause = `relaybus could not record this failure with ${write} (${describeError(writeError)}), so the delivery was buried`;
  const texts = [
    clip(`${describeError(error)} [${cause}]`),
    clip(`${cause}; the handler's error is in the worker log`),
  ];
  let last: unknown = writeError;
  for (const text of texts) {
    let buried: boolean;
    try {
      buried = await deps.store.bury(run.lease, { error: text, now: deps.now() });
    } catch (buryError) {
      last = buryError;
      if (isPermanent(buryError)) continue;
      return unrecorded(run, deps, 'bury', buryError);
    }
    if (!buried) {
      reportLeaseLost(run, 'outcome', deps);
      return 'lease-lost';
    }
    deps.logger.error(
      'could not record a failed delivery (the error is not retryable); buried it instead, the delivery is dead until requeued',
      {
        ...fields,
        write,
        writeError: describeError(writeError),
      },
    );
    deps.emitter.emit('dead', { delivery: run.info, error, durationMs });
    return 'dead';
  }
  return unrecorded(run, deps, write, last);
}

/** The outcome could not be written: give the delivery back if possible, otherwise its lease expiry will. */
async function unrecorded<TTx>(
  run: RunningDelivery<TTx>,
  deps: RunnerDeps<TTx>,
  write: string,
  error: unknown,
): Promise<RunOutcome> {
  const permanent = isPermanent(error);
  const fields = {
    deliveryId: run.claimed.id,
    handler: run.claimed.handler,
    attempt: run.info.attempt,
    lane: run.lane,
    write,
    error: describeError(error),
    retryable: !permanent,
  };
  // A write that fails for good fails again on every run of the delivery: say so, an operator must act.
  const again = permanent
    ? ' The error is not retryable: it will fail the same way until the database or the delivery is fixed.'
    : '';
  try {
    await deps.store.release([run.lease], deps.now());
    deps.logger.error(`could not record the outcome of a delivery; released it, it will run again.${again}`, fields);
  } catch {
    deps.logger.error(
      `could not record the outcome of a delivery; it will run again once its lane lease expires.${again}`,
      fields,
    );
  }
  return 'unrecorded';
}
