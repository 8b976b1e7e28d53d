import { MAX_RETRY_LOOKAHEAD_MS } from '../core/limits.js';
import { describeError } from '../core/logger.js';
import { type RunOutcome, type RunnerDeps, type RunningDelivery, reportLeaseLost } from './running-delivery.js';
import { LeaseLostSignal, invoke } from './handler-call.js';
import {
  BatchedCompletion,
  completeThroughBatcher,
  delivered,
  endHandler,
  endWith,
  failedOutcome,
  msSince,
  writeFailure,
} from './run-outcome.js';

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

export {
  type AbortKind,
  reportLeaseLost,
  type RunnerDeps,
  RunningDelivery,
  type RunOutcome,
  type RunPhase,
} from './running-delivery.js';

/**
 * Wait until `notBefore` (the bus's clock) for a delivery claimed before it was due (a retried head,
 * `ClaimParams.retryLookaheadMs`), or until the run is aborted: a timer, or a handler end that finds the time has come
 * (`EarlyStarts`), whichever is first. Never early: a timer may fire before the clock reads
 * its time (whole milliseconds), and is then set again for the rest. At most `MAX_RETRY_LOOKAHEAD_MS` in all: the
 * store claims no earlier than that, so a clock that does not move (a test's) cannot hold a run for longer.
 */
export async function untilStart<TTx>(
  run: RunningDelivery<TTx>,
  notBefore: number,
  deps: RunnerDeps<TTx>,
): Promise<void> {
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

/** Abort `run` with a TimeoutError after `ms` (at once when none is left). */
export function armTimeout<TTx>(run: RunningDelivery<TTx>, ms: number): NodeJS.Timeout {
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
  deps.liveLag?.started(claimed.handler, claimed.availableAt, started);

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
export interface Settled {
  readonly succeeded: boolean;
  readonly thrown?: unknown;
}

/** Wait for `work` (started here) with the run's timeout armed for `ms`: armed only while something can still end. */
export async function withinTimeout<TTx>(
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

/**
 * Run a delivery whose handler needs nothing first (not transactional, due, of its handler's event type, a valid
 * payload) and report its outcome to `deps.finished`; false, and nothing done, for any other (`runDelivery` runs it).
 * A handler that returns at once (not a promise) and succeeds is the common case under a backlog, and thousands of its
 * runs wait at a time for the claim that carries their completions: here such a run waits as its completion in the
 * batch, without the promises, the async function's frame and the callbacks `runDelivery` keeps alive per run (the
 * garbage collector copies what stays alive, a large part of a dispatcher's CPU in a keyed drain).
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
  deps.liveLag?.started(claimed.handler, claimed.availableAt, started);
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
export function callHandler<TTx>(
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
export async function untilSettled<TTx>(
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

/** A run failed where nothing should (a bug, or a logger that throws): it ends `unrecorded`, and this says why. */
export function reportUnexpected<TTx>(
  run: RunningDelivery<TTx>,
  deps: Pick<RunnerDeps<TTx>, 'logger'>,
  error: unknown,
): void {
  deps.logger.error('a handler run failed unexpectedly', { deliveryId: run.claimed.id, error: describeError(error) });
}
