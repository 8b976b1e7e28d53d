import { randomInt } from 'node:crypto';
import { StoreUnavailableError } from '../core/errors.js';
import { LANE_COUNT } from '../core/lanes.js';
import { acquireRounds, TAKEOVER_ROUND } from '../store/acquire.js';
import type { ClaimedDelivery, ClaimParams, CompleteAndClaimResult } from '../store/contract.js';
import type { ParsedLease } from '../store/validate.js';
import { leaseArrays, toClaimed } from './claimed-deliveries.js';
import type { PgClaimSession } from './pg-claim-session.js';
import type { RowOf } from './rows.js';
import type { StoreContext } from './store-context.js';

/**
 * One claim of a Postgres claim session: complete `leases` and claim from the held lanes in one statement
 * (claim-held-lanes), then, while the batch is not full, take free lanes in doubling rounds (`acquireRounds`,
 * acquire-lanes) and claim from them; with `acquireWhenFull`, a full batch still takes a few lanes (their work comes
 * with the next claim). An owner that likely holds no lane, or a caller under a light load (`freeLanes: 'first'`),
 * takes free lanes first. A light claim (`freeLanes: 'skip'`, nothing riding, no retried head to look up) runs
 * claim-light instead of claim-held-lanes. A light load's look for unannounced work (`freeLanes: 'when-due'`, nothing
 * riding, no retried head to look up) first runs look-due, and when that finds no due work nobody announced, it hands
 * back the lanes with nothing in flight and is a light claim of the lanes a wake-up named (none: it claims nothing);
 * otherwise it goes on as 'first'.
 *
 * States, in `run`: free lanes first (`#acquireAndClaim(true)`), or held lanes first (`#claimHeld`) then free lanes
 * while short (`#acquireAndClaim(false)`) or a takeover round when full. What a statement after the first failed
 * leaves is handed over and the failure kept for the session's next claim (`FailedClaims.hide`).
 */

type ClaimRow = RowOf<'claim-held-lanes'>;

/**
 * How long work must have been due before look-due counts it as unannounced (ms): a publish's wake-up reaches the
 * worker and its light claim within a few milliseconds, and under a steady stream of publishes one is nearly always on
 * its way; counted, it made the full claim follow look-due every third time at 1,000 deliveries a second. Unannounced
 * work is found a poll interval and this much after it came due, at the latest.
 */
const LOOK_DUE_GRACE_MS = 20;

/** Rows of a lane that claim-light reads at most (a light load leaves a few pending rows in a lane). */
const LIGHT_ROWS_PER_LANE = 256;

/** What one claim statement brought. */
interface Claimed {
  readonly claimedRows: ClaimedDelivery[];
  /** Of `claimedRows`, those that count against the limit (not followers). */
  readonly heads: number;
  readonly completed: boolean[];
  readonly skippedLanes: number;
  readonly peerLanes: number | undefined;
}

export class ClaimCycle {
  readonly #context: StoreContext;
  readonly #session: PgClaimSession;
  readonly #params: ClaimParams;
  readonly #leases: readonly ParsedLease[];
  readonly #now: string | null;
  readonly #lookaheadMs: number;
  /** claim-light rather than claim-held-lanes (see the module header); also after a look-due that found nothing. */
  #light: boolean;
  /** look-due before the rest (see the module header). */
  readonly #looksFirst: boolean;
  /** The most rows this claim hands out, heads and followers, over all its statements. */
  readonly #rowsAtMost: number;
  readonly #claimed: ClaimedDelivery[] = [];
  /** The deliveries of `#claimed` that count against the limit (not followers). */
  #heads = 0;
  /** Lanes other workers hold, as the last claim of the held lanes saw them (undefined: none ran, or claim-light). */
  #peerLanes: number | undefined;
  /** Which of the leases the first claim of `#acquireAndClaim` completed (undefined: none ran). */
  #completedFirst: boolean[] | undefined;

  constructor(context: StoreContext, session: PgClaimSession, params: ClaimParams, leases: readonly ParsedLease[]) {
    this.#context = context;
    this.#session = session;
    this.#params = params;
    this.#leases = leases;
    this.#now = params.now === undefined ? null : params.now.toISOString();
    this.#lookaheadMs = params.retryLookaheadMs ?? 0;
    this.#rowsAtMost = params.limit * (1 + (params.followers ?? 0));
    const nothingRides =
      leases.length === 0 &&
      context.probes.due((params.now ?? new Date()).getTime(), this.#lookaheadMs)[0].length === 0;
    this.#light = nothingRides && params.freeLanes === 'skip';
    this.#looksFirst = nothingRides && params.freeLanes === 'when-due';
  }

  async run(): Promise<CompleteAndClaimResult> {
    const session = this.#session;
    const params = this.#params;
    const leases = this.#leases;
    session.failedClaims.throwHidden();
    // The free lanes a wake-up named and those of retried heads due again (handed back while the head waited out its
    // backoff) are claimed from in the same statement as the held lanes, and taken when they give work: one statement
    // for a delivery published into a free lane, and a retried head comes back first even when the batch is full.
    const named = [...(params.preferLanes ?? []), ...this.#retryLanes()];
    // A light load's look that finds nothing due unannounced leaves a light claim of the lanes a wake-up named, if any.
    if (this.#looksFirst && (await this.#nothingDue())) {
      if (named.length === 0) return { claimed: [], completed: [], peerLanes: this.#peerLanes! };
      this.#light = true;
    }
    let completed: boolean[];
    const scanFree = params.freeLanes !== 'skip' && !this.#light;
    const freeFirst =
      scanFree &&
      ((leases.length === 0 && !session.mayHoldLanes && named.length === 0) ||
        params.freeLanes === 'first' ||
        params.freeLanes === 'when-due');
    if (freeFirst) {
      // The owner is new, or its last claim found nothing, so it likely holds no lane (a claim hands back lanes that run
      // nothing), or the caller is under a light load (its held lanes will not fill the batch, so free lanes would be
      // looked at anyway): take free lanes first, then claim from every held lane, the completions riding on that
      // claim. Two statements when free lanes have work instead of three, and a worker's first claim does not ask for
      // lanes it cannot hold yet; a lane still held is asked all the same.
      try {
        await this.#acquireAndClaim(true, leases, named);
      } catch (error) {
        // As below: what was claimed or completed is recorded, so it is handed over; the next claim rejects with the
        // failure.
        if (this.#claimed.length === 0 && (leases.length === 0 || this.#completedFirst === undefined)) throw error;
        session.failedClaims.hide(error);
      }
      completed = this.#completedFirst ?? leases.map(() => false);
    } else {
      const first = await this.#claimHeld(params.limit, leases, named);
      this.#claimed.push(...first.claimedRows);
      this.#heads = first.heads;
      completed = first.completed;
      this.#peerLanes = first.peerLanes ?? this.#peerLanes;
      try {
        if (this.#heads < params.limit) {
          // Shallow queue: the held lanes did not fill the batch. Unless the caller leaves free lanes to its poll's claim
          // (freeLanes 'skip'), take free lanes with due work, doubling each round, unless the held lanes' runs took every
          // row this claim may bring. Also when a wake-up's lanes gave work: work no publish named (a delayed delivery
          // come due, a crashed worker's expired lane, a publish without NOTIFY) is found by no other claim, and under a
          // steady stream of publishes every claim that looks is one a wake-up named lanes to (it waited 10 s and more).
          if (scanFree && this.#claimed.length < this.#rowsAtMost) await this.#acquireAndClaim(false);
        } else if (params.acquireWhenFull === true) {
          // Deep backlog: the caller asks (once per lease duration) for a few lanes anyway, so the lanes of a crashed
          // worker are taken over (and its work re-run) while everyone is busy.
          await this.#acquire(TAKEOVER_ROUND);
        }
      } catch (error) {
        // What was claimed (and completed) is recorded: hand it over, or it would stay stuck in flight in this owner's
        // lanes while the owner lives. The failed statement may have recorded more: the next claim rejects with the
        // failure, so the worker forgets that first (FailedClaims).
        if (this.#claimed.length === 0 && leases.length === 0) throw error;
        session.failedClaims.hide(error);
      }
    }
    session.mayHoldLanes = this.#claimed.length > 0 || completed.includes(true);
    const claimed = this.#claimed;
    return this.#peerLanes === undefined ? { claimed, completed } : { claimed, completed, peerLanes: this.#peerLanes };
  }

  /**
   * The one row of a claim statement, and what it claimed. The walks move on, then the lanes it handed back lose their
   * cursors (in that order: a handed-back lane may have walked in the same claim).
   */
  #readClaim(
    rows: readonly ClaimRow[],
    sentAt: number,
  ): { summary: ClaimRow; claimedRows: ClaimedDelivery[]; heads: number } {
    const [summary] = rows;
    if (summary === undefined)
      throw new StoreUnavailableError('a claim statement returned no row; it always returns one');
    if (summary.walk_ends) this.#session.walks.move(summary.walk_ends);
    this.#noteLanes(summary.replay_clock, sentAt, summary.lane_epochs, summary.handed_back);
    const claimedRows = toClaimed(summary.claimed, summary.lane_epochs);
    // What counts against the limit: followers come beyond it.
    let heads = 0;
    for (const row of claimedRows) if (row.follows === undefined) heads += 1;
    return { summary, claimedRows, heads };
  }

  /**
   * What a statement about this owner's lanes answered besides its rows (a claim, look-due): the store's clock while a
   * replay runs, the lanes it recorded deliveries in (`lane:epoch`) and those it handed back, whose walks end.
   */
  #noteLanes(
    replayClock: number | null,
    sentAt: number,
    recorded: readonly string[],
    handedBack: readonly string[],
  ): void {
    const session = this.#session;
    session.replayClock = replayClock === null ? undefined : { storeMs: replayClock, sentAt };
    if (handedBack.length > 0) session.walks.drop(handedBack);
    session.recordedLanes.claimed(recorded, handedBack);
  }

  /**
   * Claim from the held lanes and from the free lanes of `take` (taken when they give work): `want` heads at most,
   * `room` rows with their followers.
   */
  async #claimHeldOnce(
    want: number,
    room: number,
    complete: readonly ParsedLease[],
    take: readonly number[],
  ): Promise<Claimed> {
    const params = this.#params;
    const session = this.#session;
    const probes = this.#context.probes;
    const sentAt = performance.now();
    const rows = await this.#session.run<ClaimRow>('claim-held-lanes', [
      session.owner,
      params.handlers,
      want,
      params.leaseDurationMs,
      this.#now,
      ...session.walks.parameters(),
      ...leaseArrays(complete),
      this.#context.history,
      ...probes.due((params.now ?? new Date()).getTime(), this.#lookaheadMs),
      take,
      this.#lookaheadMs,
      params.followers ?? 0,
      session.siblingOwners,
      room,
    ]);
    const { summary, claimedRows, heads } = this.#readClaim(rows, sentAt);
    probes.claimed(claimedRows);
    // No ids back: every lease listed was completed. A lease listed twice succeeds once, as it would in two calls.
    const ids = summary.completed_ids === null ? undefined : new Set(summary.completed_ids);
    return {
      claimedRows,
      heads,
      completed: complete.map((lease) => ids === undefined || ids.delete(lease.deliveryId)),
      skippedLanes: summary.skipped_lanes,
      peerLanes: summary.peer_lanes ?? undefined,
    };
  }

  /**
   * claim-light: a claim with nothing riding on it and no retried head to look up, from a caller under a light
   * load (it leaves free lanes to its poll: `freeLanes: 'skip'`). A third of claim-held-lanes's plan, which under a
   * light load cost more to set up than to run; a lane whose keys need more than LIGHT_ROWS_PER_LANE rows is read in
   * part, and its other heads wait for the next claim-held-lanes (at least one per poll interval: the one that
   * looks at free lanes).
   */
  async #claimLightOnce(want: number, take: readonly number[]): Promise<Claimed> {
    const session = this.#session;
    const sentAt = performance.now();
    const rows = await this.#session.run<ClaimRow>('claim-light', [
      session.owner,
      this.#params.handlers,
      want,
      this.#params.leaseDurationMs,
      this.#now,
      LIGHT_ROWS_PER_LANE,
      take,
      session.recordedLanes.of(take),
    ]);
    const { summary, claimedRows, heads } = this.#readClaim(rows, sentAt);
    return { claimedRows, heads, completed: [], skippedLanes: summary.skipped_lanes, peerLanes: undefined };
  }

  #claimOnce(want: number, room: number, complete: readonly ParsedLease[], take: readonly number[]): Promise<Claimed> {
    return this.#light ? this.#claimLightOnce(want, take) : this.#claimHeldOnce(want, room, complete, take);
  }

  /**
   * Claim up to `want` more heads, within the rows this claim may still hand out: a claim's statements together bring
   * at most `limit` x (1 + followers) rows (`ClaimHints.followers`), though each gives its heads the room the heads it
   * did not find leave.
   */
  async #claimHeld(want: number, complete: readonly ParsedLease[], take: readonly number[] = []): Promise<Claimed> {
    const room = this.#rowsAtMost - this.#claimed.length;
    try {
      const first = await this.#claimOnce(Math.min(want, room), room, complete, take);
      const roomLeft = room - first.claimedRows.length;
      if (first.skippedLanes === 0 || first.heads >= want || roomLeft <= 0) return first;
      // Held lanes changed while the claim waited for them (a renewal, a reschedule, another loop of this owner): it
      // left them alone rather than trust its older snapshot. Ask them again at once, or their due work would wait
      // for the next wake-up or poll.
      const again = await this.#claimOnce(Math.min(want - first.heads, roomLeft), roomLeft, [], take);
      return {
        ...first,
        claimedRows: [...first.claimedRows, ...again.claimedRows],
        heads: first.heads + again.heads,
      };
    } catch (error) {
      this.#session.failedClaims.failed(take);
      throw error;
    }
  }

  #acquire(
    take: number,
    prefer: readonly number[] = this.#params.preferLanes ?? [],
  ): Promise<RowOf<'acquire-lanes'>[]> {
    const params = this.#params;
    return this.#session.run<RowOf<'acquire-lanes'>>('acquire-lanes', [
      this.#session.owner,
      params.handlers,
      take,
      randomInt(LANE_COUNT),
      params.leaseDurationMs,
      this.#now,
      prefer,
    ]);
  }

  /**
   * look-due (`freeLanes: 'when-due'`): whether no lane this owner could claim from has due work nobody announced; then
   * it handed back the owner's lanes with nothing in flight, which leave the session's walks and recorded lanes as a
   * claim's do. Reads the other workers' lanes too (`peerLanes`), and the replay clock as a claim does.
   */
  async #nothingDue(): Promise<boolean> {
    const session = this.#session;
    const sentAt = performance.now();
    const [look] = await session.run<RowOf<'look-due'>>('look-due', [
      session.owner,
      this.#params.handlers,
      LOOK_DUE_GRACE_MS,
      session.siblingOwners,
      this.#now,
    ]);
    if (look === undefined) throw new StoreUnavailableError('look-due returned no row; it always returns one');
    this.#noteLanes(look.replay_clock, sentAt, [], look.handed_back);
    this.#peerLanes = look.peer_lanes;
    return !look.due;
  }

  /** Lanes of retried heads due again that the last claim did not return: their lanes are not held by this owner. */
  #retryLanes(): number[] {
    return this.#context.probes.dueLanes((this.#params.now ?? new Date()).getTime(), this.#lookaheadMs);
  }

  /**
   * Take free lanes with due work, `acquireRounds()` lanes at a time, and claim from the held lanes after each round,
   * until the batch is full, a claim finds nothing, or a round took fewer lanes than it asked (no more free lanes with
   * due work). With `alwaysClaim`, the held lanes are asked once even when the first round took no lane. `complete`
   * rides on the first claim, which also takes the free lanes of `namedLanes` that give work (a retried head's lane,
   * whose head an acquire does not see before it is due).
   */
  async #acquireAndClaim(
    alwaysClaim: boolean,
    complete: readonly ParsedLease[] = [],
    namedLanes: readonly number[] = [],
  ): Promise<void> {
    const session = this.#session;
    const { limit } = this.#params;
    let takenInAll = 0;
    let first = true;
    try {
      for (const take of acquireRounds(session.lanesTakenLast)) {
        if (this.#claimed.length >= this.#rowsAtMost) break;
        // Lanes of retried heads due again are tried first, after those a wake-up named.
        const [acquired] = await this.#acquire(take, [...(this.#params.preferLanes ?? []), ...this.#retryLanes()]);
        const taken = acquired ? Number(acquired.lanes) : 0;
        takenInAll += taken;
        if (taken === 0 && !(alwaysClaim && first)) break;
        const more = await this.#claimHeld(limit - this.#heads, first ? complete : [], first ? namedLanes : []);
        if (first) this.#completedFirst = more.completed;
        first = false;
        this.#claimed.push(...more.claimedRows);
        this.#heads += more.heads;
        this.#peerLanes = more.peerLanes;
        if (taken < take || more.heads === 0 || this.#heads >= limit) break;
      }
    } finally {
      session.lanesTakenLast = takenInAll > 0 ? takenInAll : undefined;
    }
  }
}
