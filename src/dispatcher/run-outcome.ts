import { RelayBusError } from '../core/errors.js';
import { describeError } from '../core/logger.js';
import { deadLogLine, isPermanentFailure } from '../core/permanent-failure.js';
import { decideRetry } from '../core/retry-policy.js';
import type { DeliveryLease } from '../store/contract.js';
import type { CompletionAnswer, CompletionWaiter } from './completion-batcher.js';
import { type RunOutcome, type RunnerDeps, type RunningDelivery, reportLeaseLost } from './running-delivery.js';
import { LeaseLostSignal } from './handler-call.js';
import { reportUnexpected } from './handler-runner.js';

/**
 * The outcome writes of a run (see the table in handler-runner.ts): a completion through the batcher and its
 * confirmation, a reschedule or bury after a failure (a bury instead when the reschedule fails for good), and the
 * release of a run whose write could not be made.
 */

/** Longest error text recorded with a failed delivery. */
export const MAX_ERROR_LENGTH = 4_000;

/** At most MAX_ERROR_LENGTH characters, without NULs (Postgres cannot store them; the stores strip them too). */
export function clip(text: string): string {
  const clean = text.includes('\0') ? text.replaceAll('\0', '') : text;
  return clean.length > MAX_ERROR_LENGTH ? `${clean.slice(0, MAX_ERROR_LENGTH - 1)}…` : clean;
}

export function errorText(error: unknown): string {
  return clip(describeError(error));
}

/** A store error that the same write, repeated, will hit again (a plain Error of a third-party store is not assumed so). */
export function isPermanent(error: unknown): boolean {
  return error instanceof RelayBusError && !error.retryable;
}

/** Milliseconds since `started` (performance.now()), to the microsecond. */
export function msSince(started: number): number {
  return Math.round((performance.now() - started) * 1000) / 1000;
}

/** A handler that is not transactional succeeded (its handler's part is over): its completion through the batcher. */
export async function completeThroughBatcher<TTx>(
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
export function answeredOutcome<TTx>(
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
export async function confirmedOutcome<TTx>(
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
export function failedOutcome<TTx>(
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

/** End a `runAtOnce` run with `outcome` (a run that fails unexpectedly ends `unrecorded`, logged). */
export function endWith<TTx>(
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

/** The completion of a `runAtOnce` run in the batch: it ends the run when its write settles. */
export class BatchedCompletion<TTx> implements CompletionWaiter {
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
export function endHandler<TTx>(run: RunningDelivery<TTx>, deps: RunnerDeps<TTx>): void {
  if (run.endHandler()) deps.handlerEnded?.(run);
}

export function delivered<TTx>(run: RunningDelivery<TTx>, deps: RunnerDeps<TTx>, durationMs: number): RunOutcome {
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

export async function writeFailure<TTx>(
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
export async function buryInstead<TTx>(
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
export async function unrecorded<TTx>(
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
