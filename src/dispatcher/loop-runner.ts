import { setImmediate as nextTurn, setTimeout as sleep } from 'node:timers/promises';
import { isRetryableError } from '../core/errors.js';
import { describeError, type Logger } from '../core/logger.js';
import type { ResolvedDispatcherOptions } from '../core/options.js';
import type { ClaimedDelivery, DeliveryLease, Store } from '../store/contract.js';
import type { ClaimLoop } from './claim-loop.js';
import type { ClaimPolicy, LoopClaimState } from './claim-policy.js';
import type { HealthState } from './health.js';

/**
 * A claim loop's turns: ask the claim policy whether to claim (or rest, or wait), claim through the loop's claim
 * session with the policy's hints and the completions of the last batch riding, hand the batch to the dispatcher to
 * launch, tell the policy what came back, and wait for a wake-up or the poll. The handler slots, the runs and the
 * followers are the dispatcher's (`ClaimLoopHost`).
 *
 * Each turn claims at most the policy's limit of the free handler slots and reserves them, so the loops never claim
 * more than `concurrency` between them; it claims again at once when the claim came back full (more is probably due),
 * or waits up to `pollIntervalMs`: a wake-up, a run that ends while work flows, or a completed key's next delivery
 * due ends the wait early. A failed claim is logged once and retried after a capped exponential backoff (250 ms
 * doubling to 30 s, jittered; `STORE_RETRY_BACKOFF`), reset by the next successful claim; the loop feeds the bus's
 * health: unready after a failed claim, ready after a successful one, with one log line at each transition.
 */

/**
 * Claim at once when a publish commits (NOTIFY), instead of at the next poll; polling stays. Every loop is woken
 * (`wakeAll`): the published lane may be held by any of them (`ClaimPolicy.heard`). Resolves the unsubscribe.
 */
export async function listenForWakeups<TTx>(
  store: Store<TTx>,
  policy: ClaimPolicy,
  logger: Logger,
  wakeAll: () => void,
): Promise<(() => Promise<void>) | undefined> {
  if (store.subscribeWakeups === undefined) return undefined;
  try {
    const unsubscribe = await store.subscribeWakeups((lanes) => {
      policy.heard(lanes);
      wakeAll();
    });
    // A 'poll' store resolves a no-op: nothing is heard.
    policy.listening = store.capabilities.wakeups !== 'poll';
    return unsubscribe;
  } catch (error) {
    logger.warn('listening for new deliveries failed; the dispatcher polls only', { error: describeError(error) });
    return undefined;
  }
}

/** One claim of a dispatcher's loops at a time, while they claim in turn (other workers share the lanes). */
export class ClaimTurns {
  /** Settles when the claim that has the turn is over. */
  #taken: Promise<void> = Promise.resolve();

  /** Wait for the turn to claim; call the function returned when the claim is over. */
  async take(): Promise<() => void> {
    const previous = this.#taken;
    let release!: () => void;
    this.#taken = new Promise<void>((resolve) => {
      release = resolve;
    });
    await previous;
    return release;
  }
}

/** What a claim loop needs of its dispatcher: the handler slots, the runs, the followers and the shared parts. */
export interface ClaimLoopHost<TTx> {
  readonly options: ResolvedDispatcherOptions;
  readonly logger: Logger;
  readonly policy: ClaimPolicy;
  readonly health: HealthState;
  /** Aborted by `stop()`: ends a claim retry's backoff at once. */
  readonly stopSignal: AbortSignal;
  /** How many claim loops the dispatcher has. */
  readonly loops: number;
  /** The dispatcher is running (not stopping). */
  running(): boolean;
  /** Handler slots a claim may fill now (none held by a run or reserved by another loop's claim). */
  freeSlots(): number;
  /** A claim in progress may fill `slots`; `unreserve` when it is over. */
  reserve(slots: number): void;
  unreserve(slots: number): void;
  /** The loop waits because every handler slot is taken: a run that ends must wake it. */
  slotsShort(): void;
  /** Start the followers parked for a retried head's claim while slots are free. */
  startReady(): void;
  /** The turn to claim, while the loops claim in turn (`ClaimPolicy.claimsInTurn`). */
  readonly turns: ClaimTurns;
  /** Start the runs of a claim; its heads (followers do not count). */
  launch(loop: ClaimLoop<TTx>, claimed: readonly ClaimedDelivery[]): Promise<number>;
  /** Deliveries to release unrun when the dispatcher stops. */
  release(leases: readonly DeliveryLease[]): void;
  /** Whether a run the loop claimed is in progress, or a follower of it is parked. */
  runsIn(loop: ClaimLoop<TTx>): boolean;
  parkedIn(loop: ClaimLoop<TTx>): boolean;
  /** Followers wait for the delivery before them. */
  followersWaiting(): boolean;
  /** Every delivery the dispatcher holds (runs, followers, to release): what a failed claim's forget keeps. */
  holding(): string[];
  runCount(): number;
  reportActivity(): void;
  /** Wake these loops (a backlog began). */
  wake(loops: readonly LoopClaimState[]): void;
}

export async function runClaimLoop<TTx>(loop: ClaimLoop<TTx>, host: ClaimLoopHost<TTx>): Promise<void> {
  const { options, logger } = host;
  const { policy } = host;
  const claims = loop.claims;
  while (host.running()) {
    if (policy.mayRest(claims, loop.retryAlarm.pending, loop.mustForget)) {
      await rest(loop, host);
      continue;
    }
    if (policy.waits(claims)) {
      await loop.wakeup.wait(options.pollIntervalMs);
      continue;
    }
    if (loop.mustForget) {
      const failed = await forgetUnheld(loop, host);
      if (failed !== undefined) {
        await retryAfter(loop, host, failed.error);
        continue;
      }
    }
    // A slot is a running handler: a run whose handler returned and that only waits for its outcome
    // write (the completion batch) does not hold one, so the next claim overlaps that write. Those
    // waiting runs are bounded too, to one more `concurrency` (or what the loops' claims bring with their followers,
    // if more), should the writes fall behind. Slots another loop's claim in progress may fill are reserved.
    const free = host.freeSlots();
    if (free > 0) {
      const limit = policy.limit(free);
      const plan = policy.plan(claims, limit);
      // The completions of the last batch ride on this claim: one round trip, and their keys' next deliveries can
      // be claimed at once. Not on every claim (`ClaimPlan.carriesCompletions`): the batcher writes the others.
      if (!plan.carriesCompletions) loop.batcher.unhold();
      const riding = plan.carriesCompletions ? loop.batcher.take() : undefined;
      const runsEndedBefore = loop.runsEnded;
      let claimed: ClaimedDelivery[];
      let completedAny = false;
      host.reserve(limit);
      // This claim has its slots and looks up the retried heads due (the plan cleared the loop's retry due): followers
      // may take free slots again, the parked ones at once (started after the claim and its launch, they would wait a
      // whole cycle while most slots sit idle).
      host.startReady();
      const claimStarted = performance.now();
      // Other workers share the lanes: this worker's loops claim in turn. The wait counts as part of the claim: a
      // retried head due meanwhile waits for it too (`retryLookaheadMs`).
      const releaseTurn = policy.claimsInTurn() ? await host.turns.take() : undefined;
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
        await retryAfter(loop, host, error);
        continue;
      } finally {
        releaseTurn?.();
        host.unreserve(limit);
      }
      // Whether a replay runs, and the store's clock: the live lag the loop's runs measure (`LiveLag`).
      loop.deps.liveLag?.claimed(loop.session.replayClock);
      policy.claimed(claims, plan, claimed.length, peerLanes);
      succeeded(loop, host);
      if (claimed.length > 0)
        logger.debug('claimed deliveries', {
          count: claimed.length,
          limit,
          owner: loop.owner,
          completed: riding?.leases.length ?? 0,
          tookMs: Math.round(performance.now() - claimStarted),
          running: host.runCount(),
        });
      if (!host.running()) {
        host.release(claimed.map((delivery) => ({ deliveryId: delivery.id, leaseToken: delivery.leaseToken })));
        break;
      }
      const heads = await host.launch(loop, claimed);
      host.startReady();
      // The claim and the turns that launched it: a retried head due meanwhile waits for both (`retryLookaheadMs`).
      const tookMs = performance.now() - claimStarted;
      if (claims.claimTook(tookMs, heads >= limit))
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
        runsInLoop: host.runsIn(loop),
      });
      host.wake(wake);
      if (claimed.length > 0) host.reportActivity();
      if (heads >= limit) {
        // One turn of the event loop first: handlers that finish at once (and the followers they start) queue their
        // completions for this claim to carry, instead of a write of their own beside it.
        if (host.followersWaiting()) await nextTurn();
        continue;
      }
      if (claims.busy) {
        // Work is flowing but this claim was short: once the handlers that finish at once have, claim again with
        // their completions riding, rather than wait for a run to end, which takes their write of their own first.
        await nextTurn();
        if (loop.batcher.pending > 0 && host.running()) continue;
      }
      // The light claim went first, for the lanes a wake-up named; the look at free lanes is due (`ClaimPolicy`).
      if (claims.scanDeferred) continue;
    } else {
      host.slotsShort();
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
 * changing hands: resting them drains a shared backlog at least as fast. A resting loop claims again (a new session) once
 * no other worker holds a lane (a claim of the first loop reports it) and a claim comes back full, or when a head it
 * rescheduled is due again.
 */
async function rest<TTx>(loop: ClaimLoop<TTx>, host: ClaimLoopHost<TTx>): Promise<void> {
  const { options, logger } = host;
  // Nothing rides any more: what waits is written on its own.
  loop.batcher.unhold();
  if (host.runsIn(loop) || host.parkedIn(loop)) {
    await loop.wakeup.wait(options.pollIntervalMs);
    return;
  }
  try {
    await loop.batcher.flush();
    const lanes = await loop.closeSession();
    host.policy.rested(loop.claims);
    logger.debug('claim loop resting: other workers share the lanes', { owner: loop.owner, lanesHandedBack: lanes });
  } catch (error) {
    logger.warn('handing back the lanes of a resting claim loop failed; it tries again at its next poll', {
      owner: loop.owner,
      error: describeError(error),
    });
    await loop.wakeup.wait(options.pollIntervalMs);
  }
}

/**
 * Log a failed claim once (the first loop logs; the others fail alike against the same store), mark the bus
 * unready, and wait out the backoff (or until stop).
 */
async function retryAfter<TTx>(loop: ClaimLoop<TTx>, host: ClaimLoopHost<TTx>, error: unknown): Promise<void> {
  const delayMs = loop.claimBackoff.failed();
  const attempt = loop.claimBackoff.failures;
  if (attempt === 1) loop.failingSince = Date.now();
  const described = describeError(error);
  host.health.markUnready(described);
  const retryable = isRetryableError(error);
  const fields = {
    attempt,
    retryAt: new Date(Date.now() + delayMs).toISOString(),
    retryInMs: delayMs,
    error: described,
    ...(host.loops > 1 ? { owner: loop.owner } : {}),
  };
  const what = retryable
    ? attempt === 1
      ? 'database unreachable'
      : 'database still unreachable'
    : attempt === 1
      ? 'claiming deliveries failed'
      : 'claiming deliveries failed again';
  const message = `${what}; claiming again after a backoff`;
  if (loop.index > 0) host.logger.debug(message, fields);
  else if (retryable) host.logger.warn(message, fields);
  else host.logger.error(message, fields);
  try {
    await sleep(delayMs, undefined, { signal: host.stopSignal });
  } catch {
    // stop() ended the wait
  }
}

/**
 * After a failed claim of `loop`: have the store forget the deliveries in its lanes' in-flight lists that this
 * dispatcher does not hold (that claim may have recorded them before its answer was lost). Its failure, if it failed.
 */
export async function forgetUnheld<TTx>(
  loop: ClaimLoop<TTx>,
  host: Pick<ClaimLoopHost<TTx>, 'holding' | 'logger'>,
): Promise<{ error: unknown } | undefined> {
  const holding = host.holding();
  try {
    const forgotten = await loop.session.forgetInFlight(holding);
    loop.mustForget = false;
    if (forgotten > 0)
      host.logger.info('deliveries a failed claim had recorded in flight are claimable again', {
        owner: loop.owner,
        forgotten,
      });
    return undefined;
  } catch (error) {
    return { error };
  }
}

function succeeded<TTx>(loop: ClaimLoop<TTx>, host: ClaimLoopHost<TTx>): void {
  const failures = loop.claimBackoff.succeeded();
  const first = host.health.markReady();
  if (failures > 0 && loop.index === 0) {
    host.logger.info('database reachable again; claiming resumed', {
      failedAttempts: failures,
      unreachableForMs: Date.now() - loop.failingSince,
    });
  } else if (first) {
    host.logger.debug('first claim succeeded; the bus is ready', { owner: loop.owner });
  }
}
