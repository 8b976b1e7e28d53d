import { InvalidInputError, InvalidStateError } from '../core/errors.js';
import { LANE_COUNT, laneOf } from '../core/lanes.js';
import { formatLeaseToken } from '../core/lease-token.js';
import type { ClaimedDelivery, HandlerStatistics, ReplayFilter, ReplayMode, ReplayState } from '../store/contract.js';
import type { ParsedLease } from '../store/validate.js';

/**
 * The memory store's data (see memory-store.ts for the model) and what several of its modules share: transactions and
 * their commit, the lanes' bookkeeping, the fence. Every module of the store works on one `MemoryState`.
 */

declare const memoryTransactionBrand: unique symbol;

/** The memory store's transaction: an opaque handle passed to `publish` and `complete` inside `store.transaction(fn)`. */
export interface MemoryTransaction {
  readonly [memoryTransactionBrand]: true;
}

// ---------------------------------------------------------------------------------------------
// Records
// ---------------------------------------------------------------------------------------------

export interface LaneRecord {
  epoch: bigint;
  owner: string | null;
  leaseExpiresAt: number | null;
  /** Ids of the deliveries the owner claimed; ids of deleted deliveries linger until the next claim prunes them. */
  inFlight: Set<string>;
}

export interface EventRecord {
  readonly id: string;
  readonly type: string;
  readonly key: string | null;
  readonly payloadJson: string;
  readonly headers: Readonly<Record<string, string>>;
  readonly handlers: string[];
  /** The key-order value the event got at its first publish (keyed events; null for unkeyed): a replay's order. */
  readonly sequence: bigint | null;
  readonly createdAt: number;
}

export interface DeliveryRecord {
  readonly id: string;
  readonly eventId: string;
  readonly eventType: string;
  readonly handler: string;
  readonly lane: number;
  readonly key: string | null;
  sequence: bigint | null;
  /** The replay that created it; null for a published one. */
  readonly replayId: string | null;
  status: 'pending' | 'dead';
  attempts: number;
  readonly maxAttempts: number;
  /** Bumped whenever a claim ends without completion; part of the lease token. */
  claims: number;
  availableAt: number;
  lastError: string | null;
  readonly createdAt: number;
  updatedAt: number;
}

export interface HistoryRecord {
  readonly delivery: DeliveryRecord;
  readonly completedAt: number;
}

export interface SubscriptionRecord {
  maxAttempts: number;
  retry: Readonly<Record<string, unknown>> | null;
  readonly createdAt: number;
  updatedAt: number;
  seenAt: number | null;
}

/** One planned event of a replay: its handlers' items, in the replay's order. */
export interface ReplayItem {
  readonly eventId: string;
  readonly handlers: readonly string[];
  /** The replayed deliveries' sequence: the event's key-order value (null for unkeyed). */
  readonly sequence: bigint | null;
}

export interface ReplayRecord {
  readonly id: string;
  readonly mode: ReplayMode;
  readonly handlers: readonly string[];
  readonly filter: ReplayFilter;
  readonly requestedBy: string | null;
  readonly reason: string | null;
  state: ReplayState;
  readonly createdAt: number;
  updatedAt: number;
  finishedAt: number | null;
  total: number;
  created: number;
  skipped: number;
  /** The types each handler is replayed, fixed at the start (a late look selects with them too). */
  readonly types: ReadonlyMap<string, ReadonlySet<string>>;
  /** The planned events; `cursor` is how many of them steps took. */
  readonly plan: ReplayItem[];
  cursor: number;
  /** Transactions open at the start: until they end, a publish lacking a handler may still commit. */
  readonly openAtStart: ReadonlySet<TransactionState>;
  /** Each key's last key-order value at the start: a later publish gets a larger one (see `ReplayHold`). */
  readonly keyOrderAtStart: ReadonlyMap<string, bigint>;
}

/** A publish staged by an open transaction; applied at commit. */
export interface StagedPublish {
  readonly id: string;
  readonly type: string;
  readonly key: string | null;
  readonly payloadJson: string;
  readonly headers: Readonly<Record<string, string>>;
  readonly handlers: readonly { readonly name: string; readonly maxAttempts: number }[];
  readonly availableAt: number;
  readonly now: number;
}

/** A transactional completion staged by an open transaction; the delivery is locked until the transaction ends. */
export interface StagedCompletion {
  readonly lease: ParsedLease;
  readonly now: number;
}

export interface TransactionState {
  open: boolean;
  readonly publishes: StagedPublish[];
  readonly completions: StagedCompletion[];
}

// ---------------------------------------------------------------------------------------------
// Small pure helpers
// ---------------------------------------------------------------------------------------------

export function timeOf(now: Date | undefined): number {
  return (now ?? new Date()).getTime();
}

/** Equality of two parsed JSON values as Postgres jsonb compares them: object key order does not matter. */
export function jsonEqual(a: unknown, b: unknown): boolean {
  if (a === b) return true;
  if (typeof a !== 'object' || typeof b !== 'object' || a === null || b === null) return false;
  if (Array.isArray(a) !== Array.isArray(b)) return false;
  const aKeys = Object.keys(a);
  if (aKeys.length !== Object.keys(b).length) return false;
  return aKeys.every(
    (key) =>
      Object.hasOwn(b, key) && jsonEqual((a as Record<string, unknown>)[key], (b as Record<string, unknown>)[key]),
  );
}

export function compareText(a: string, b: string): number {
  return a < b ? -1 : a > b ? 1 : 0;
}

export function compareIds(a: string, b: string): number {
  const x = BigInt(a);
  const y = BigInt(b);
  return x < y ? -1 : x > y ? 1 : 0;
}

export function compareSequences(a: bigint | null, b: bigint | null): number {
  const x = a ?? -1n;
  const y = b ?? -1n;
  return x < y ? -1 : x > y ? 1 : 0;
}

/** Claim order: oldest availableAt first, then id. */
export function byDueOrder(a: DeliveryRecord, b: DeliveryRecord): number {
  return a.availableAt - b.availableAt || compareIds(a.id, b.id);
}

export function headKey(handler: string, key: string): string {
  return JSON.stringify([handler, key]);
}

export type MutableHandlerStatistics = { -readonly [K in keyof HandlerStatistics]: HandlerStatistics[K] };

export function emptyHandlerStatistics(): MutableHandlerStatistics {
  return { pending: 0, due: 0, scheduled: 0, inFlight: 0, dead: 0, completed: 0, oldestDueAgeMs: null };
}

export function newLanes(): LaneRecord[] {
  return Array.from({ length: LANE_COUNT }, () => ({
    epoch: 0n,
    owner: null,
    leaseExpiresAt: null,
    inFlight: new Set<string>(),
  }));
}

// ---------------------------------------------------------------------------------------------
// The store
// ---------------------------------------------------------------------------------------------

/** The store's records and what its modules share. */
export class MemoryState {
  readonly completionHistory: boolean;
  readonly events = new Map<string, EventRecord>();
  /** In id order: ids only grow and a Map keeps insertion order. */
  readonly deliveries = new Map<string, DeliveryRecord>();
  readonly lanes = newLanes();
  readonly keySequences = new Map<string, bigint>();
  /** Subscriptions by event type, then handler. */
  readonly subscriptions = new Map<string, Map<string, SubscriptionRecord>>();
  readonly history: HistoryRecord[] = [];
  /** Paused handlers (`pauseHandler`): when and why; no claim takes their deliveries. */
  readonly pausedHandlers = new Map<string, { readonly pausedAt: number; readonly reason: string | null }>();
  readonly transactions = new WeakMap<MemoryTransaction, TransactionState>();
  /** Deliveries completed by an open transaction: delivery id -> lane. */
  readonly locked = new Map<string, number>();
  /** Transactions not ended yet: a replay waits for those open at its start (their publishes may lack its handler). */
  readonly openTransactions = new Set<TransactionState>();
  /** Replays by id (memory-replay.ts), in id order. */
  readonly replays = new Map<string, ReplayRecord>();
  nextReplayId = 1n;
  nextDeliveryId = 1n;
  closed = false;

  constructor(completionHistory: boolean) {
    this.completionHistory = completionHistory;
  }

  // ----- transactions ------------------------------------------------------------------------

  async transaction<T>(fn: (tx: MemoryTransaction) => Promise<T>): Promise<T> {
    this.assertOpen();
    const state: TransactionState = { open: true, publishes: [], completions: [] };
    this.openTransactions.add(state);
    const tx = Object.freeze({}) as MemoryTransaction;
    this.transactions.set(tx, state);
    let result: T;
    try {
      result = await fn(tx);
    } catch (error) {
      this.endTransaction(state);
      throw error;
    }
    if (this.closed) {
      this.endTransaction(state);
      throw new InvalidStateError('The memory store was closed while a transaction was open; nothing was committed.');
    }
    this.endTransaction(state);
    for (const staged of state.publishes) this.applyPublish(staged);
    for (const staged of state.completions) this.applyCompletion(staged.lease, staged.now);
    return result;
  }

  /** Close the transaction and unlock what it completed (a commit applies the staging right after). */
  endTransaction(state: TransactionState): void {
    state.open = false;
    this.openTransactions.delete(state);
    for (const staged of state.completions) this.locked.delete(staged.lease.deliveryId);
  }

  openTransaction(tx: unknown): TransactionState {
    const state = typeof tx === 'object' && tx !== null ? this.transactions.get(tx as MemoryTransaction) : undefined;
    if (!state)
      throw new InvalidInputError(
        'Expected a transaction of this memory store: call it inside store.transaction(async (tx) => ...).',
      );
    if (!state.open) throw new InvalidStateError('This memory transaction has already committed or rolled back.');
    return state;
  }

  /** Commit one staged publish: create the event if needed and one delivery per handler it does not have yet. */
  applyPublish(staged: StagedPublish): void {
    let event = this.events.get(staged.id);
    let firstSequence: bigint | null = null;
    if (!event) {
      // A keyed event takes its key-order value at its first commit, the one its first deliveries get.
      firstSequence = staged.key === null ? null : this.nextSequence(staged.key);
      event = {
        id: staged.id,
        type: staged.type,
        key: staged.key,
        payloadJson: staged.payloadJson,
        headers: staged.headers,
        handlers: [],
        sequence: firstSequence,
        createdAt: staged.now,
      };
      this.events.set(event.id, event);
    }
    const handlers = staged.handlers.filter((h) => !event.handlers.includes(h.name));
    if (handlers.length === 0) return;
    const sequence = event.key === null ? null : (firstSequence ?? this.nextSequence(event.key));
    for (const handler of handlers) {
      event.handlers.push(handler.name);
      const delivery: DeliveryRecord = {
        id: this.newDeliveryId(),
        eventId: event.id,
        eventType: event.type,
        handler: handler.name,
        lane: laneOf(event.key, event.id),
        key: event.key,
        sequence,
        replayId: null,
        status: 'pending',
        attempts: 0,
        maxAttempts: handler.maxAttempts,
        claims: 0,
        availableAt: staged.availableAt,
        lastError: null,
        createdAt: staged.now,
        updatedAt: staged.now,
      };
      this.deliveries.set(delivery.id, delivery);
    }
  }

  newDeliveryId(): string {
    const id = this.nextDeliveryId;
    this.nextDeliveryId += 1n;
    return id.toString();
  }

  nextSequence(key: string): bigint {
    const next = (this.keySequences.get(key) ?? 0n) + 1n;
    this.keySequences.set(key, next);
    return next;
  }

  /** The hold of the running replays, as a claim made now sees it. */
  replayHold(): ReplayHold {
    return new ReplayHold(this);
  }

  lanesOwnedBy(owner: string): number[] {
    const owned: number[] = [];
    this.lanes.forEach((lane, index) => {
      if (lane.owner === owner) owned.push(index);
    });
    return owned;
  }

  /** In flight means: still an existing pending delivery. Completed (deleted) ids are dropped here. */
  pruneInFlight(lane: number): void {
    const record = this.lanes[lane]!;
    for (const id of record.inFlight) {
      if (this.deliveries.get(id)?.status !== 'pending') record.inFlight.delete(id);
    }
  }

  handBack(lane: number): void {
    const record = this.lanes[lane]!;
    record.owner = null;
    record.leaseExpiresAt = null;
    record.inFlight.clear();
  }

  /** The lowest sequence of every (handler, key) among pending deliveries (in flight or not, due or not). */
  keyHeads(): Map<string, bigint> {
    const heads = new Map<string, bigint>();
    for (const d of this.deliveries.values()) {
      if (d.status !== 'pending' || d.key === null || d.sequence === null) continue;
      const k = headKey(d.handler, d.key);
      const current = heads.get(k);
      if (current === undefined || d.sequence < current) heads.set(k, d.sequence);
    }
    return heads;
  }

  claimed(delivery: DeliveryRecord, epoch: bigint): ClaimedDelivery {
    const event = this.events.get(delivery.eventId)!;
    return {
      id: delivery.id,
      leaseToken: formatLeaseToken({ lane: delivery.lane, epoch: epoch.toString(), claims: delivery.claims }),
      lane: delivery.lane,
      eventId: delivery.eventId,
      eventType: delivery.eventType,
      handler: delivery.handler,
      key: delivery.key,
      sequence: delivery.sequence?.toString() ?? null,
      payload: JSON.parse(event.payloadJson) as unknown,
      headers: { ...event.headers },
      attempts: delivery.attempts,
      maxAttempts: delivery.maxAttempts,
      availableAt: new Date(delivery.availableAt),
      createdAt: new Date(delivery.createdAt),
    };
  }

  // ----- fenced writes -----------------------------------------------------------------------

  /** The delivery a lease still holds, or undefined when the lease is stale (or the delivery is locked by an open transaction). */
  fenced(lease: ParsedLease): DeliveryRecord | undefined {
    const lane = this.lanes[lease.lane]!;
    if (lane.epoch.toString() !== lease.epoch || !lane.inFlight.has(lease.deliveryId)) return undefined;
    if (this.locked.has(lease.deliveryId)) return undefined;
    const delivery = this.deliveries.get(lease.deliveryId);
    if (delivery?.status !== 'pending' || delivery.claims !== lease.claims || delivery.lane !== lease.lane)
      return undefined;
    return delivery;
  }

  /** Ends a claim without completion: the next claim of the delivery gets a new token. */
  endClaim(delivery: DeliveryRecord, now: number): void {
    delivery.claims += 1;
    delivery.updatedAt = now;
    this.lanes[delivery.lane]!.inFlight.delete(delivery.id);
  }

  /** Delete a delivery whose lease is still held (and record it in the history when retained). */
  applyCompletion(lease: ParsedLease, now: number): boolean {
    const delivery = this.fenced(lease);
    if (!delivery) return false;
    this.deliveries.delete(delivery.id);
    if (this.completionHistory) this.history.push({ delivery: { ...delivery, updatedAt: now }, completedAt: now });
    return true;
  }

  assertOpen(): void {
    if (this.closed) throw new InvalidStateError('This memory store is closed; create a new one with memoryStore().');
  }
}

/**
 * The hold of the running replays: a keyed delivery of one of their handlers that no replay created waits unless its
 * key-order value was given before the replay started and is below its key's next planned item (the items are taken
 * in key order): each key's replayed history runs before its live deliveries, and a delivery published before the
 * start is not held behind history that follows it. Unkeyed deliveries have no order to keep.
 */
export class ReplayHold {
  /** Per held handler: its replay's key-order values at the start, and each key's lowest planned item not taken. */
  readonly #byHandler = new Map<string, { atStart: ReadonlyMap<string, bigint>; next: ReadonlyMap<string, bigint> }>();

  constructor(data: MemoryState) {
    for (const replay of data.replays.values()) {
      if (replay.state !== 'running') continue;
      const next = nextPlanned(replay, data);
      for (const handler of replay.handlers) this.#byHandler.set(handler, { atStart: replay.keyOrderAtStart, next });
    }
  }

  /**
   * Whether the delivery is work a free lane is taken for: not a row the hold spares (those run when their lane is
   * taken for other work, or after the replay), as the Postgres store's acquire-lanes judges.
   */
  drawsLane(delivery: DeliveryRecord): boolean {
    return delivery.key === null || delivery.replayId !== null || !this.#byHandler.has(delivery.handler);
  }

  allows(delivery: DeliveryRecord): boolean {
    if (delivery.key === null || delivery.replayId !== null) return true;
    const hold = this.#byHandler.get(delivery.handler);
    if (hold === undefined) return true;
    if (delivery.sequence === null || delivery.sequence > (hold.atStart.get(delivery.key) ?? 0n)) return false;
    const next = hold.next.get(delivery.key);
    return next === undefined || delivery.sequence < next;
  }
}

/** Each running replay's `nextPlanned`, kept while its cursor and plan stay as they were (a step or a late look moves them). */
const planned = new WeakMap<ReplayRecord, { cursor: number; length: number; next: ReadonlyMap<string, bigint> }>();

/**
 * Each key's lowest planned key-order value not yet taken by `replay`'s steps. Every claim asks while a replay runs,
 * and the steps move between many claims: it is worked out once per step, not once per claim over the whole plan.
 */
function nextPlanned(replay: ReplayRecord, data: MemoryState): ReadonlyMap<string, bigint> {
  const kept = planned.get(replay);
  if (kept !== undefined && kept.cursor === replay.cursor && kept.length === replay.plan.length) return kept.next;
  const next = new Map<string, bigint>();
  for (let index = replay.cursor; index < replay.plan.length; index += 1) {
    const item = replay.plan[index]!;
    const key = data.events.get(item.eventId)?.key ?? null;
    if (key === null || item.sequence === null) continue;
    const lowest = next.get(key);
    if (lowest === undefined || item.sequence < lowest) next.set(key, item.sequence);
  }
  planned.set(replay, { cursor: replay.cursor, length: replay.plan.length, next });
  return next;
}
