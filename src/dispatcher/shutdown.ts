import { describeError, type Logger } from '../core/logger.js';
import type { DeliveryLease, Store } from '../store/contract.js';
import type { ClaimLoop } from './claim-loop.js';
import type { RunningDelivery } from './running-delivery.js';
import { type ClaimLoopHost, forgetUnheld } from './loop-runner.js';

/**
 * The grace period of a graceful stop: wait until every running handler has settled, or the grace
 * time is over, or a caller cuts it short (`stop({ graceMs: 0 })` while stopping, e.g. the CLI on a
 * second SIGTERM). What happens next (abort, release, close the claim sessions) is the dispatcher's `stop()`, with
 * the steps below. No process signals are handled here or anywhere in the library.
 */
export class GracePeriod {
  #cut: (() => void) | undefined;
  #cutRequested = false;
  #timers: NodeJS.Timeout[] = [];

  /** Resolves `drained` when every promise settled first, `expired` otherwise. */
  async wait(running: readonly Promise<unknown>[], graceMs: number): Promise<'drained' | 'expired'> {
    if (running.length === 0) return 'drained';
    if (this.#cutRequested) return 'expired';
    let timer: NodeJS.Timeout | undefined;
    const expired = new Promise<'expired'>((resolve) => {
      this.#cut = () => resolve('expired');
      timer = setTimeout(() => resolve('expired'), graceMs);
    });
    try {
      return await Promise.race([Promise.allSettled(running).then(() => 'drained' as const), expired]);
    } finally {
      clearTimeout(timer);
      this.#cut = undefined;
    }
  }

  /** End the grace period after `afterMs` (0: now) if it is still running then. */
  cut(afterMs = 0): void {
    const cut = (): void => {
      this.#cutRequested = true;
      this.#cut?.();
    };
    if (afterMs <= 0) cut();
    else this.#timers.push(setTimeout(cut, afterMs));
  }

  /** Clear timers set by `cut(afterMs)`. */
  dispose(): void {
    for (const timer of this.#timers) clearTimeout(timer);
    this.#timers = [];
  }
}

/**
 * The runs of a stopping dispatcher: a retried head claimed before it was due is aborted at once (released with the
 * others, not started now); the rest get `graceMs` (or until the grace is cut) to finish, then are aborted and awaited.
 * `running` is read at each step: a run leaves it when it ends. Whether every run finished in time, and how many were
 * aborted at the end.
 */
export async function endRuns<TTx>(
  running: () => Iterable<RunningDelivery<TTx>>,
  grace: GracePeriod,
  graceMs: number,
): Promise<{ drained: boolean; aborted: number }> {
  for (const run of running())
    if (run.waitingToStart) run.abort('shutdown', new DOMException('relaybus is stopping', 'AbortError'));
  const drained = await grace.wait(
    [...running()].map((run) => run.done),
    graceMs,
  );
  const aborted = [...running()];
  for (const run of aborted)
    run.abort('shutdown', new DOMException('relaybus is stopping and the grace period is over', 'AbortError'));
  await Promise.all(aborted.map((run) => run.done));
  grace.dispose();
  return { drained: drained === 'drained', aborted: aborted.length };
}

/** Stop listening for wake-ups (once the subscription, if any, is made); a failure is logged, never thrown. */
export async function stopListening(
  wakeups: Promise<(() => Promise<void>) | undefined>,
  logger: Logger,
): Promise<void> {
  const unsubscribe = await wakeups;
  await unsubscribe?.().catch((error: unknown) =>
    logger.warn('stopping the wake-up listener failed', { error: describeError(error) }),
  );
}

/** Release what a stopping dispatcher did not finish (no attempt charged); a failure is logged, never thrown. */
export async function releaseUnfinished<TTx>(
  store: Store<TTx>,
  leases: readonly DeliveryLease[],
  now: Date | undefined,
  logger: Logger,
): Promise<void> {
  if (leases.length === 0) return;
  try {
    const released = await store.release(leases, now);
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

/**
 * Close every loop's claim session, each on its own: one that fails still lets the others go (closing a session gives
 * back the connection it held for its claims, whatever happens). Returns how many lanes were handed back.
 */
export async function closeSessions<TTx>(
  loops: readonly ClaimLoop<TTx>[],
  host: Pick<ClaimLoopHost<TTx>, 'holding' | 'logger'>,
): Promise<number> {
  const { logger } = host;
  let lanes = 0;
  for (const loop of loops) {
    try {
      // What a failed claim may have recorded would keep its lane from being handed back.
      const failed = loop.mustForget ? await forgetUnheld(loop, host) : undefined;
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
  return lanes;
}
