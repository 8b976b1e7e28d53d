import { InvalidStateError } from '../core/errors.js';
import { acquireRounds, TAKEOVER_ROUND } from '../store/acquire.js';
import type {
  ClaimClock,
  ClaimedDelivery,
  ClaimParams,
  ClaimSession,
  ClaimSessionOptions,
  CompleteAndClaimResult,
  DeliveryLease,
} from '../store/contract.js';
import { validateClaim, validateForgetInFlight } from '../store/validate.js';
import { byDueOrder, headKey, timeOf, type DeliveryRecord, type MemoryState } from './memory-state.js';

/**
 * A claim session of the memory store (`Store.openClaims`): one owner's claims. What it keeps between claims is the
 * lanes its last claim took (the next claim's first round, `acquireRounds`); the lanes themselves are the store's.
 */
export class MemoryClaimSession implements ClaimSession {
  readonly owner: string;
  readonly #siblingOwners: readonly string[];
  readonly data: MemoryState;
  readonly #completeMany: (leases: readonly DeliveryLease[], now?: Date) => Promise<boolean[]>;
  /** Lanes the last claim that took any took in all: the next claim's first round (`acquireRounds`). */
  #lanesTakenLast: number | undefined;
  /** The store's clock at the last claim, while a replay runs (`ClaimSession.replayClock`). */
  replayClock: ClaimClock | undefined;
  #closed = false;

  constructor(
    data: MemoryState,
    owner: string,
    options: ClaimSessionOptions | undefined,
    completeMany: (leases: readonly DeliveryLease[], now?: Date) => Promise<boolean[]>,
  ) {
    this.data = data;
    this.owner = owner;
    this.#siblingOwners = options?.siblingOwners ?? [];
    this.#completeMany = completeMany;
  }

  async completeAndClaim(leases: readonly DeliveryLease[], params: ClaimParams): Promise<CompleteAndClaimResult> {
    this.#assertOpen();
    validateClaim(params);
    const completed = await this.#completeMany(leases, params.now);
    const claimed = await this.claim(params);
    return { completed, claimed, peerLanes: this.#peerLanes(params) };
  }

  /** Lanes held under a lease not expired by owners other than the claim's and its siblings'. */
  #peerLanes(params: ClaimParams): number {
    const own = new Set([this.owner, ...this.#siblingOwners]);
    const now = timeOf(params.now);
    let peers = 0;
    for (const lane of this.data.lanes)
      if (lane.owner !== null && !own.has(lane.owner) && lane.leaseExpiresAt !== null && lane.leaseExpiresAt > now)
        peers += 1;
    return peers;
  }

  async claim(params: ClaimParams): Promise<ClaimedDelivery[]> {
    this.#assertOpen();
    validateClaim(params);
    const now = timeOf(params.now);
    const replaying = [...this.data.replays.values()].some((replay) => replay.state === 'running');
    this.replayClock = replaying ? { storeMs: now, sentAt: performance.now() } : undefined;
    // The runnable handlers: those asked for, less the paused ones (read once per claim, as the Postgres statements do).
    const handlers = new Set(params.handlers.filter((handler) => !this.data.pausedHandlers.has(handler)));
    const picks: ClaimedDelivery[] = [];

    // 1. Work from the lanes the owner already holds; hand back the ones that run nothing.
    const held = this.data.lanesOwnedBy(this.owner);
    for (const lane of held) this.data.pruneInFlight(lane);
    const busy = this.#pickFromHeldLanes(params, handlers, now, picks);
    for (const lane of held) {
      if (!busy.has(lane) && this.data.lanes[lane]!.inFlight.size === 0) this.data.handBack(lane);
    }

    // 2. Take free (or expired) lanes with due work, doubling per round from what the owner's last claim took (or 32
    //    when it took none: `acquireRounds`), until the batch is full. A full batch takes a few lanes only when the
    //    caller asks (`acquireWhenFull`); their work comes with the next claim.
    if (picks.length >= params.limit) {
      if (params.acquireWhenFull === true) this.#acquireFreeLanes(params, handlers, now, TAKEOVER_ROUND);
      return picks;
    }
    let takenInAll = 0;
    for (const take of acquireRounds(this.#lanesTakenLast)) {
      const taken = this.#acquireFreeLanes(params, handlers, now, take);
      takenInAll += taken;
      if (taken === 0) break;
      if (this.#pickFromHeldLanes(params, handlers, now, picks).size === 0 || picks.length >= params.limit) break;
    }
    this.#lanesTakenLast = takenInAll > 0 ? takenInAll : undefined;
    return picks;
  }

  /**
   * Pick due, pending, not-in-flight deliveries of `handlers` from the owner's lanes, oldest first, skipping keyed
   * deliveries that are not the head of their (handler, key) or that a running replay holds. Records the picks in the
   * lanes, renews the lease of lanes that got picks, appends to `picks`; returns those lanes.
   */
  #pickFromHeldLanes(
    params: ClaimParams,
    handlers: ReadonlySet<string>,
    now: number,
    picks: ClaimedDelivery[],
  ): Set<number> {
    const held = new Set(this.data.lanesOwnedBy(this.owner));
    const picked = new Set<number>();
    if (held.size === 0 || picks.length >= params.limit) return picked;
    const heads = this.data.keyHeads();
    const hold = this.data.replayHold();
    const candidates = [...this.data.deliveries.values()]
      .filter((d) => held.has(d.lane) && d.status === 'pending' && handlers.has(d.handler) && d.availableAt <= now)
      .filter((d) => hold.allows(d))
      .filter((d) => !this.data.lanes[d.lane]!.inFlight.has(d.id))
      .sort(byDueOrder);
    for (const delivery of candidates) {
      if (picks.length >= params.limit) break;
      if (delivery.key !== null && heads.get(headKey(delivery.handler, delivery.key)) !== delivery.sequence) continue;
      const lane = this.data.lanes[delivery.lane]!;
      lane.inFlight.add(delivery.id);
      picked.add(delivery.lane);
      picks.push(this.data.claimed(delivery, lane.epoch));
    }
    for (const lane of picked) this.data.lanes[lane]!.leaseExpiresAt = now + params.leaseDurationMs;
    return picked;
  }

  /**
   * Acquire up to `batch` free or expired lanes that have due pending work of `handlers`: the preferred ones
   * (`params.preferLanes`) first, then oldest work first.
   */
  #acquireFreeLanes(params: ClaimParams, handlers: ReadonlySet<string>, now: number, batch: number): number {
    const locked = new Set(this.data.locked.values());
    const hold = this.data.replayHold();
    const oldest = new Map<number, DeliveryRecord>();
    for (const d of this.data.deliveries.values()) {
      if (d.status !== 'pending' || !handlers.has(d.handler) || d.availableAt > now) continue;
      if (!hold.drawsLane(d)) continue;
      if (locked.has(d.lane) || !this.#isFree(d.lane, now)) continue;
      const current = oldest.get(d.lane);
      if (!current || byDueOrder(d, current) < 0) oldest.set(d.lane, d);
    }
    const preferred = new Set(params.preferLanes ?? []);
    const lanes = [...oldest.entries()]
      .sort(([laneA, a], [laneB, b]) => Number(preferred.has(laneB)) - Number(preferred.has(laneA)) || byDueOrder(a, b))
      .slice(0, batch)
      .map(([lane]) => lane);
    for (const lane of lanes) this.#acquire(lane, now, params.leaseDurationMs);
    return lanes.length;
  }

  #isFree(lane: number, now: number): boolean {
    const record = this.data.lanes[lane]!;
    if (record.owner === null) return true;
    return record.owner !== this.owner && (record.leaseExpiresAt ?? 0) <= now;
  }

  /** The lane changes hands: new epoch, and a taken-over lane charges one attempt to everything it had in flight. */
  #acquire(lane: number, now: number, leaseDurationMs: number): void {
    const record = this.data.lanes[lane]!;
    for (const id of record.inFlight) {
      const delivery = this.data.deliveries.get(id);
      if (delivery?.status !== 'pending') continue;
      delivery.attempts += 1;
      delivery.claims += 1;
      delivery.lastError = `lease expired: lane ${lane} was taken over`;
      if (delivery.attempts >= delivery.maxAttempts) delivery.status = 'dead';
      delivery.updatedAt = now;
    }
    record.inFlight.clear();
    record.epoch += 1n;
    record.owner = this.owner;
    record.leaseExpiresAt = now + leaseDurationMs;
  }

  // ----- lease renewal -----------------------------------------------------------------------

  async forgetInFlight(holding: readonly string[]): Promise<number> {
    this.data.assertOpen();
    validateForgetInFlight(holding);
    const held = new Set(holding);
    let forgotten = 0;
    for (const lane of this.data.lanesOwnedBy(this.owner)) {
      const { inFlight } = this.data.lanes[lane]!;
      for (const id of inFlight) {
        if (held.has(id)) continue;
        inFlight.delete(id);
        if (this.data.deliveries.get(id)?.status === 'pending') forgotten += 1;
      }
    }
    return forgotten;
  }

  async close(): Promise<number> {
    this.data.assertOpen();
    this.#closed = true;
    this.#lanesTakenLast = undefined;
    let count = 0;
    for (const lane of this.data.lanesOwnedBy(this.owner)) {
      this.data.pruneInFlight(lane);
      if (this.data.lanes[lane]!.inFlight.size > 0) continue;
      this.data.handBack(lane);
      count += 1;
    }
    return count;
  }

  #assertOpen(): void {
    this.data.assertOpen();
    if (this.#closed)
      throw new InvalidStateError(
        `The claim session of ${this.owner} is closed; open another with store.openClaims(owner) to claim again.`,
      );
  }
}
