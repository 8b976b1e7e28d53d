/**
 * The in-memory store: the executable specification of the store contract (`store/contract.ts`).
 *
 * It keeps the same model as the Postgres store, in plain maps, so that users' unit tests (and the
 * dispatcher's) see exactly the behaviour production will show:
 *
 * - `events`: one record per event id, with `handlers`, every handler the event ever had a delivery
 *   for. Republishing an id adds deliveries only for handlers that are not listed (inbox dedup), so
 *   a completed handler never runs twice. An id republished with a different type, key or payload
 *   (JSON equality, as Postgres jsonb) is an `EventConflictError`, checked before anything is staged.
 * - `deliveries`: one record per (event, handler), from publish until completion deletes it. Status
 *   is `pending` or `dead`; "processing" is not stored, it means "pending and listed in flight in
 *   its lane".
 * - `lanes`: 256 lanes `{ epoch, owner, leaseExpiresAt, inFlight }`. A claim writes only lanes; the
 *   lease token `lane:epoch:claims` proves which claim a worker holds, and every fenced write checks
 *   the epoch, the in-flight list and the delivery's `claims` counter.
 * - `keySequences`: the per-key counter behind per-key ordering.
 * - `history`: completed deliveries, only with `completionHistory`.
 *
 * Transactions stage their writes. `publish` computes its result at once (against committed state
 * plus what the same transaction staged) but inserts nothing until the transaction's function
 * resolves; a throw discards the staging. Keyed events take their sequence at commit, so sequence
 * order is commit order, as the Postgres key lock guarantees. `complete(lease, tx)` checks the fence
 * at once and locks the delivery until the transaction ends: a takeover claim skips the lane (as
 * `FOR UPDATE SKIP LOCKED` skips a lane row under `FOR KEY SHARE`) and other fenced writes of that
 * delivery return false, so a transactional completion and a takeover never both win.
 *
 * Every method validates its input with `store/validate.ts` before it changes anything, uses
 * `now ?? new Date()`, does all its work synchronously (so calls are atomic with respect to each
 * other) and returns copies, never internal records.
 */
import { randomUUID } from 'node:crypto';
import { EventConflictError, InvalidInputError, InvalidOptionsError, InvalidStateError } from '../core/errors.js';
import { LANE_COUNT, laneOf } from '../core/lanes.js';
import { formatLeaseToken } from '../core/lease-token.js';
import type {
  BuryParams,
  ClaimedDelivery,
  CompleteAndClaimResult,
  ClaimParams,
  DeliveryLease,
  DeliveryStatus,
  DeliveryView,
  ExtendLeaseParams,
  ForgetInFlightParams,
  ExtendLeaseResult,
  HandlerStatistics,
  ListDeliveriesParams,
  Page,
  PublishParams,
  PublishResult,
  PurgeParams,
  PurgeResult,
  RequeueParams,
  RescheduleParams,
  Statistics,
  Store,
  StoreCapabilities,
  SubscribeOptions,
  Subscription,
  LaneView,
  SubscriptionView,
  UnsubscribeParams,
  UnsubscribeResult,
} from '../store/contract.js';
import { echo as echoValue } from '../core/limits.js';
import { acquireRounds, TAKEOVER_ROUND } from '../store/acquire.js';
import {
  assertName,
  assertOptionalDate,
  noHandlersError,
  parseLease,
  parseLeases,
  unsubscribeRefusal,
  validateBury,
  validateClaim,
  validateExtendLease,
  validateForgetInFlight,
  validateList,
  validatePublish,
  validatePurge,
  validateRequeue,
  validateReschedule,
  validateSubscriptions,
  validateUnsubscribe,
  type ParsedLease,
} from '../store/validate.js';
import { withTotals } from '../store/statistics.js';

export interface MemoryStoreOptions {
  /**
   * Keep completed deliveries in a completion history (listable with status 'completed', counted), as
   * `postgresStore({ completionHistory })` does. Default false.
   */
  readonly completionHistory?: boolean;
}

declare const memoryTransactionBrand: unique symbol;

/** The memory store's transaction: an opaque handle passed to `publish` and `complete` inside `store.transaction(fn)`. */
export interface MemoryTransaction {
  readonly [memoryTransactionBrand]: true;
}

// ---------------------------------------------------------------------------------------------
// Records
// ---------------------------------------------------------------------------------------------

interface LaneRecord {
  epoch: bigint;
  owner: string | null;
  leaseExpiresAt: number | null;
  /** Ids of the deliveries the owner claimed; ids of deleted deliveries linger until the next claim prunes them. */
  inFlight: Set<string>;
}

interface EventRecord {
  readonly id: string;
  readonly type: string;
  readonly key: string | null;
  readonly payloadJson: string;
  readonly headers: Readonly<Record<string, string>>;
  readonly handlers: string[];
  readonly createdAt: number;
}

interface DeliveryRecord {
  readonly id: string;
  readonly eventId: string;
  readonly eventType: string;
  readonly handler: string;
  readonly lane: number;
  readonly key: string | null;
  sequence: bigint | null;
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

interface HistoryRecord {
  readonly delivery: DeliveryRecord;
  readonly completedAt: number;
}

interface SubscriptionRecord {
  maxAttempts: number;
  retry: Readonly<Record<string, unknown>> | null;
  readonly createdAt: number;
  updatedAt: number;
  seenAt: number | null;
}

/** A publish staged by an open transaction; applied at commit. */
interface StagedPublish {
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
interface StagedCompletion {
  readonly lease: ParsedLease;
  readonly now: number;
}

interface TransactionState {
  open: boolean;
  readonly publishes: StagedPublish[];
  readonly completions: StagedCompletion[];
}

// ---------------------------------------------------------------------------------------------
// Small pure helpers
// ---------------------------------------------------------------------------------------------

function timeOf(now: Date | undefined): number {
  return (now ?? new Date()).getTime();
}

/** Equality of two parsed JSON values as Postgres jsonb compares them: object key order does not matter. */
function jsonEqual(a: unknown, b: unknown): boolean {
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

function compareText(a: string, b: string): number {
  return a < b ? -1 : a > b ? 1 : 0;
}

function compareIds(a: string, b: string): number {
  const x = BigInt(a);
  const y = BigInt(b);
  return x < y ? -1 : x > y ? 1 : 0;
}

function compareSequences(a: bigint | null, b: bigint | null): number {
  const x = a ?? -1n;
  const y = b ?? -1n;
  return x < y ? -1 : x > y ? 1 : 0;
}

/** Claim order: oldest availableAt first, then id. */
function byDueOrder(a: DeliveryRecord, b: DeliveryRecord): number {
  return a.availableAt - b.availableAt || compareIds(a.id, b.id);
}

function headKey(handler: string, key: string): string {
  return JSON.stringify([handler, key]);
}

type MutableHandlerStatistics = { -readonly [K in keyof HandlerStatistics]: HandlerStatistics[K] };

function emptyHandlerStatistics(): MutableHandlerStatistics {
  return { pending: 0, due: 0, scheduled: 0, inFlight: 0, dead: 0, completed: 0, oldestDueAgeMs: null };
}

function newLanes(): LaneRecord[] {
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

class MemoryStore implements Store<MemoryTransaction> {
  readonly kind = 'memory' as const;
  readonly capabilities: StoreCapabilities;

  readonly #completionHistory: boolean;
  readonly #events = new Map<string, EventRecord>();
  /** In id order: ids only grow and a Map keeps insertion order. */
  readonly #deliveries = new Map<string, DeliveryRecord>();
  readonly #lanes = newLanes();
  readonly #keySequences = new Map<string, bigint>();
  /** Subscriptions by event type, then handler. */
  readonly #subscriptions = new Map<string, Map<string, SubscriptionRecord>>();
  readonly #history: HistoryRecord[] = [];
  readonly #transactions = new WeakMap<MemoryTransaction, TransactionState>();
  /** Deliveries completed by an open transaction: delivery id -> lane. */
  readonly #locked = new Map<string, number>();
  /** Lanes each owner's last claim that took any took in all: its next claim's first round (`acquireRounds`). */
  readonly #lanesTakenLast = new Map<string, number>();
  #nextDeliveryId = 1n;
  #closed = false;

  constructor(completionHistory: boolean) {
    this.#completionHistory = completionHistory;
    this.capabilities = Object.freeze({
      transactions: true,
      completionHistory,
      wakeups: 'poll',
      concurrentConnections: false,
    });
  }

  async setup(): Promise<void> {
    this.#assertOpen();
  }

  async close(): Promise<void> {
    this.#closed = true;
  }

  // ----- transactions ------------------------------------------------------------------------

  async transaction<T>(fn: (tx: MemoryTransaction) => Promise<T>): Promise<T> {
    this.#assertOpen();
    const state: TransactionState = { open: true, publishes: [], completions: [] };
    const tx = Object.freeze({}) as MemoryTransaction;
    this.#transactions.set(tx, state);
    let result: T;
    try {
      result = await fn(tx);
    } catch (error) {
      this.#endTransaction(state);
      throw error;
    }
    if (this.#closed) {
      this.#endTransaction(state);
      throw new InvalidStateError('The memory store was closed while a transaction was open; nothing was committed.');
    }
    this.#endTransaction(state);
    for (const staged of state.publishes) this.#applyPublish(staged);
    for (const staged of state.completions) this.#applyCompletion(staged.lease, staged.now);
    return result;
  }

  /** Close the transaction and unlock what it completed (a commit applies the staging right after). */
  #endTransaction(state: TransactionState): void {
    state.open = false;
    for (const staged of state.completions) this.#locked.delete(staged.lease.deliveryId);
  }

  #openTransaction(tx: unknown): TransactionState {
    const state = typeof tx === 'object' && tx !== null ? this.#transactions.get(tx as MemoryTransaction) : undefined;
    if (!state)
      throw new InvalidInputError(
        'Expected a transaction of this memory store: call it inside store.transaction(async (tx) => ...).',
      );
    if (!state.open) throw new InvalidStateError('This memory transaction has already committed or rolled back.');
    return state;
  }

  // ----- publish -----------------------------------------------------------------------------

  async publish(tx: MemoryTransaction, events: readonly PublishParams[], now?: Date): Promise<PublishResult[]> {
    this.#assertOpen();
    const payloads = validatePublish(events, now);
    const state = this.#openTransaction(tx);
    const at = timeOf(now);
    const ids = events.map((event) => event.id ?? randomUUID());
    // The process's handlers, then the subscriptions of the type it does not name (its own registration wins).
    const fanned = events.map((event) => ({ ...event, handlers: this.#fanout(event) }));
    // Every event is checked before any is staged: a conflict (or an event with no handler) stages nothing.
    fanned.forEach((event, i) => {
      if (event.handlers.length === 0) throw noHandlersError(event, i);
    });
    fanned.forEach((event, i) => this.#assertNoConflict(state, ids[i]!, event, payloads[i]!));
    return fanned.map((event, i) => this.#stagePublish(state, ids[i]!, event, payloads[i]!, at));
  }

  #fanout(event: PublishParams): PublishParams['handlers'] {
    const subscribed = this.#subscriptions.get(event.type);
    if (subscribed === undefined) return event.handlers;
    const named = new Set(event.handlers.map((h) => h.name));
    const added = [...subscribed]
      .filter(([handler]) => !named.has(handler))
      .map(([name, s]) => ({ name, maxAttempts: s.maxAttempts }));
    return [...event.handlers, ...added];
  }

  // ----- subscriptions -----------------------------------------------------------------------

  async subscribe(subscriptions: readonly Subscription[], options?: SubscribeOptions): Promise<void> {
    this.#assertOpen();
    validateSubscriptions(subscriptions, options);
    const at = timeOf(options?.now);
    const seen = options?.seen ?? true;
    for (const { eventType, handler, maxAttempts, retry } of subscriptions) {
      const byHandler = this.#subscriptions.get(eventType) ?? new Map<string, SubscriptionRecord>();
      this.#subscriptions.set(eventType, byHandler);
      const stored = byHandler.get(handler);
      const description = retry ?? null;
      if (stored === undefined) {
        byHandler.set(handler, {
          maxAttempts,
          retry: description,
          createdAt: at,
          updatedAt: at,
          seenAt: seen ? at : null,
        });
        continue;
      }
      if (stored.maxAttempts !== maxAttempts || !jsonEqual(stored.retry, description)) stored.updatedAt = at;
      stored.maxAttempts = maxAttempts;
      stored.retry = description;
      if (seen) stored.seenAt = at;
    }
  }

  async listLanes(): Promise<LaneView[]> {
    this.#assertOpen();
    const views: LaneView[] = [];
    this.#lanes.forEach((record, lane) => {
      if (record.owner === null) return;
      let inFlight = 0;
      for (const id of record.inFlight) if (this.#deliveries.get(id)?.status === 'pending') inFlight += 1;
      views.push({
        lane,
        owner: record.owner,
        epoch: record.epoch.toString(),
        leaseExpiresAt: new Date(record.leaseExpiresAt ?? 0),
        inFlight,
      });
    });
    return views;
  }

  async listSubscriptions(): Promise<SubscriptionView[]> {
    this.#assertOpen();
    const pending = new Map<string, number>();
    for (const d of this.#deliveries.values()) {
      if (d.status !== 'pending') continue;
      const k = JSON.stringify([d.eventType, d.handler]);
      pending.set(k, (pending.get(k) ?? 0) + 1);
    }
    return [...this.#subscriptions]
      .sort(([a], [b]) => compareText(a, b))
      .flatMap(([eventType, byHandler]) =>
        [...byHandler]
          .sort(([a], [b]) => compareText(a, b))
          .map(([handler, s]) => ({
            eventType,
            handler,
            maxAttempts: s.maxAttempts,
            retry: s.retry,
            createdAt: new Date(s.createdAt),
            updatedAt: new Date(s.updatedAt),
            seenAt: s.seenAt === null ? null : new Date(s.seenAt),
            pending: pending.get(JSON.stringify([eventType, handler])) ?? 0,
          })),
      );
  }

  async unsubscribe(params: UnsubscribeParams): Promise<UnsubscribeResult> {
    this.#assertOpen();
    validateUnsubscribe(params);
    const at = timeOf(params.now);
    const pending = [...this.#deliveries.values()].filter(
      (d) =>
        d.status === 'pending' &&
        d.handler === params.handler &&
        (params.eventType === undefined || d.eventType === params.eventType),
    );
    const inFlight = pending.filter((d) => this.#lanes[d.lane]!.inFlight.has(d.id)).length;
    const refused = unsubscribeRefusal(params, pending.length, inFlight);
    if (refused !== undefined) throw refused;
    for (const d of pending) {
      d.status = 'dead';
      d.lastError = params.buryPending!;
      d.claims += 1;
      d.updatedAt = at;
    }
    let removed = 0;
    for (const [eventType, byHandler] of this.#subscriptions) {
      if (params.eventType !== undefined && eventType !== params.eventType) continue;
      if (byHandler.delete(params.handler)) removed += 1;
      if (byHandler.size === 0) this.#subscriptions.delete(eventType);
    }
    return { removed, buried: pending.length };
  }

  /** An existing id (committed, or staged by this transaction) must name the same type, key and payload. */
  #assertNoConflict(state: TransactionState, id: string, event: PublishParams, payloadJson: string): void {
    const stored = this.#events.get(id) ?? state.publishes.find((p) => p.id === id);
    if (!stored) return;
    const key = event.key ?? null;
    const differences = [
      ...(stored.type === event.type ? [] : ['type']),
      ...(stored.key === key ? [] : ['key']),
      ...(jsonEqual(JSON.parse(stored.payloadJson), JSON.parse(payloadJson)) ? [] : ['payload']),
    ];
    if (differences.length === 0) return;
    const parts = differences.map((field) =>
      field === 'type'
        ? `type ${echoValue(stored.type)} was published again as ${echoValue(event.type)}`
        : field === 'key'
          ? `key ${echoValue(stored.key)} was published again as ${echoValue(key)}`
          : 'the payload differs',
    );
    throw new EventConflictError(
      `Event id ${echoValue(id)} is taken by a different event: ${parts.join('; ')}. An event id names one event; ` +
        'publish a different event under a new id. Nothing was written; your transaction is still usable.',
      id,
      differences,
    );
  }

  /** Compute the result against committed state plus this transaction's staging, and stage the new deliveries. */
  #stagePublish(
    state: TransactionState,
    id: string,
    event: PublishParams,
    payloadJson: string,
    now: number,
  ): PublishResult {
    const committed = this.#events.get(id);
    const staged = state.publishes.filter((p) => p.id === id);
    const known = new Set([...(committed?.handlers ?? []), ...staged.flatMap((p) => p.handlers.map((h) => h.name))]);
    const added = event.handlers
      .filter((h) => !known.has(h.name))
      .map((h) => ({ name: h.name, maxAttempts: h.maxAttempts }));
    if (added.length > 0) {
      state.publishes.push({
        id,
        type: event.type,
        key: event.key ?? null,
        payloadJson,
        headers: { ...(event.headers ?? {}) },
        handlers: added,
        availableAt: event.availableAt?.getTime() ?? now,
        now,
      });
    }
    return {
      eventId: id,
      addedHandlers: added.map((h) => h.name),
      duplicate: committed !== undefined || staged.length > 0,
    };
  }

  /** Commit one staged publish: create the event if needed and one delivery per handler it does not have yet. */
  #applyPublish(staged: StagedPublish): void {
    let event = this.#events.get(staged.id);
    if (!event) {
      event = {
        id: staged.id,
        type: staged.type,
        key: staged.key,
        payloadJson: staged.payloadJson,
        headers: staged.headers,
        handlers: [],
        createdAt: staged.now,
      };
      this.#events.set(event.id, event);
    }
    const handlers = staged.handlers.filter((h) => !event.handlers.includes(h.name));
    if (handlers.length === 0) return;
    const sequence = event.key === null ? null : this.#nextSequence(event.key);
    for (const handler of handlers) {
      event.handlers.push(handler.name);
      const delivery: DeliveryRecord = {
        id: this.#newDeliveryId(),
        eventId: event.id,
        eventType: event.type,
        handler: handler.name,
        lane: laneOf(event.key, event.id),
        key: event.key,
        sequence,
        status: 'pending',
        attempts: 0,
        maxAttempts: handler.maxAttempts,
        claims: 0,
        availableAt: staged.availableAt,
        lastError: null,
        createdAt: staged.now,
        updatedAt: staged.now,
      };
      this.#deliveries.set(delivery.id, delivery);
    }
  }

  #newDeliveryId(): string {
    const id = this.#nextDeliveryId;
    this.#nextDeliveryId += 1n;
    return id.toString();
  }

  #nextSequence(key: string): bigint {
    const next = (this.#keySequences.get(key) ?? 0n) + 1n;
    this.#keySequences.set(key, next);
    return next;
  }

  // ----- claim -------------------------------------------------------------------------------

  async completeAndClaim(leases: readonly DeliveryLease[], params: ClaimParams): Promise<CompleteAndClaimResult> {
    validateClaim(params);
    const completed = await this.completeMany(leases, params.now);
    const claimed = await this.claim(params);
    return { completed, claimed, peerLanes: this.#peerLanes(params) };
  }

  /** Lanes held under a lease not expired by owners other than the claim's and its siblings'. */
  #peerLanes(params: ClaimParams): number {
    const own = new Set([params.owner, ...(params.siblingOwners ?? [])]);
    const now = timeOf(params.now);
    let peers = 0;
    for (const lane of this.#lanes)
      if (lane.owner !== null && !own.has(lane.owner) && lane.leaseExpiresAt !== null && lane.leaseExpiresAt > now)
        peers += 1;
    return peers;
  }

  async claim(params: ClaimParams): Promise<ClaimedDelivery[]> {
    this.#assertOpen();
    validateClaim(params);
    const now = timeOf(params.now);
    const handlers = new Set(params.handlers);
    const picks: ClaimedDelivery[] = [];

    // 1. Work from the lanes the owner already holds; hand back the ones that run nothing.
    const held = this.#lanesOwnedBy(params.owner);
    for (const lane of held) this.#pruneInFlight(lane);
    const busy = this.#pickFromHeldLanes(params, handlers, now, picks);
    for (const lane of held) {
      if (!busy.has(lane) && this.#lanes[lane]!.inFlight.size === 0) this.#handBack(lane);
    }

    // 2. Take free (or expired) lanes with due work, doubling per round from what the owner's last claim took (or 32
    //    when it took none: `acquireRounds`), until the batch is full. A full batch takes a few lanes only when the
    //    caller asks (`acquireWhenFull`); their work comes with the next claim.
    if (picks.length >= params.limit) {
      if (params.acquireWhenFull === true) this.#acquireFreeLanes(params, handlers, now, TAKEOVER_ROUND);
      return picks;
    }
    let takenInAll = 0;
    for (const take of acquireRounds(this.#lanesTakenLast.get(params.owner))) {
      const taken = this.#acquireFreeLanes(params, handlers, now, take);
      takenInAll += taken;
      if (taken === 0) break;
      if (this.#pickFromHeldLanes(params, handlers, now, picks).size === 0 || picks.length >= params.limit) break;
    }
    if (takenInAll > 0) this.#lanesTakenLast.set(params.owner, takenInAll);
    else this.#lanesTakenLast.delete(params.owner);
    return picks;
  }

  #lanesOwnedBy(owner: string): number[] {
    const owned: number[] = [];
    this.#lanes.forEach((lane, index) => {
      if (lane.owner === owner) owned.push(index);
    });
    return owned;
  }

  /** In flight means: still an existing pending delivery. Completed (deleted) ids are dropped here. */
  #pruneInFlight(lane: number): void {
    const record = this.#lanes[lane]!;
    for (const id of record.inFlight) {
      if (this.#deliveries.get(id)?.status !== 'pending') record.inFlight.delete(id);
    }
  }

  #handBack(lane: number): void {
    const record = this.#lanes[lane]!;
    record.owner = null;
    record.leaseExpiresAt = null;
    record.inFlight.clear();
  }

  /**
   * Pick due, pending, not-in-flight deliveries of `handlers` from the owner's lanes, oldest first,
   * skipping keyed deliveries that are not the head of their (handler, key). Records the picks in
   * the lanes, renews the lease of lanes that got picks, appends to `picks`; returns those lanes.
   */
  #pickFromHeldLanes(
    params: ClaimParams,
    handlers: ReadonlySet<string>,
    now: number,
    picks: ClaimedDelivery[],
  ): Set<number> {
    const held = new Set(this.#lanesOwnedBy(params.owner));
    const picked = new Set<number>();
    if (held.size === 0 || picks.length >= params.limit) return picked;
    const heads = this.#keyHeads();
    const candidates = [...this.#deliveries.values()]
      .filter((d) => held.has(d.lane) && d.status === 'pending' && handlers.has(d.handler) && d.availableAt <= now)
      .filter((d) => !this.#lanes[d.lane]!.inFlight.has(d.id))
      .sort(byDueOrder);
    for (const delivery of candidates) {
      if (picks.length >= params.limit) break;
      if (delivery.key !== null && heads.get(headKey(delivery.handler, delivery.key)) !== delivery.sequence) continue;
      const lane = this.#lanes[delivery.lane]!;
      lane.inFlight.add(delivery.id);
      picked.add(delivery.lane);
      picks.push(this.#claimed(delivery, lane.epoch));
    }
    for (const lane of picked) this.#lanes[lane]!.leaseExpiresAt = now + params.leaseDurationMs;
    return picked;
  }

  /** The lowest sequence of every (handler, key) among pending deliveries (in flight or not, due or not). */
  #keyHeads(): Map<string, bigint> {
    const heads = new Map<string, bigint>();
    for (const d of this.#deliveries.values()) {
      if (d.status !== 'pending' || d.key === null || d.sequence === null) continue;
      const k = headKey(d.handler, d.key);
      const current = heads.get(k);
      if (current === undefined || d.sequence < current) heads.set(k, d.sequence);
    }
    return heads;
  }

  /**
   * Acquire up to `batch` free or expired lanes that have due pending work of `handlers`: the preferred ones
   * (`params.preferLanes`) first, then oldest work first.
   */
  #acquireFreeLanes(params: ClaimParams, handlers: ReadonlySet<string>, now: number, batch: number): number {
    const locked = new Set(this.#locked.values());
    const oldest = new Map<number, DeliveryRecord>();
    for (const d of this.#deliveries.values()) {
      if (d.status !== 'pending' || !handlers.has(d.handler) || d.availableAt > now) continue;
      if (locked.has(d.lane) || !this.#isFree(d.lane, params.owner, now)) continue;
      const current = oldest.get(d.lane);
      if (!current || byDueOrder(d, current) < 0) oldest.set(d.lane, d);
    }
    const preferred = new Set(params.preferLanes ?? []);
    const lanes = [...oldest.entries()]
      .sort(([laneA, a], [laneB, b]) => Number(preferred.has(laneB)) - Number(preferred.has(laneA)) || byDueOrder(a, b))
      .slice(0, batch)
      .map(([lane]) => lane);
    for (const lane of lanes) this.#acquire(lane, params.owner, now, params.leaseDurationMs);
    return lanes.length;
  }

  #isFree(lane: number, owner: string, now: number): boolean {
    const record = this.#lanes[lane]!;
    if (record.owner === null) return true;
    return record.owner !== owner && (record.leaseExpiresAt ?? 0) <= now;
  }

  /** The lane changes hands: new epoch, and a taken-over lane charges one attempt to everything it had in flight. */
  #acquire(lane: number, owner: string, now: number, leaseDurationMs: number): void {
    const record = this.#lanes[lane]!;
    for (const id of record.inFlight) {
      const delivery = this.#deliveries.get(id);
      if (delivery?.status !== 'pending') continue;
      delivery.attempts += 1;
      delivery.claims += 1;
      delivery.lastError = `lease expired: lane ${lane} was taken over`;
      if (delivery.attempts >= delivery.maxAttempts) delivery.status = 'dead';
      delivery.updatedAt = now;
    }
    record.inFlight.clear();
    record.epoch += 1n;
    record.owner = owner;
    record.leaseExpiresAt = now + leaseDurationMs;
  }

  #claimed(delivery: DeliveryRecord, epoch: bigint): ClaimedDelivery {
    const event = this.#events.get(delivery.eventId)!;
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

  // ----- lease renewal -----------------------------------------------------------------------

  async forgetInFlight(params: ForgetInFlightParams): Promise<number> {
    this.#assertOpen();
    validateForgetInFlight(params);
    const holding = new Set(params.holding);
    let forgotten = 0;
    for (const lane of this.#lanesOwnedBy(params.owner)) {
      const { inFlight } = this.#lanes[lane]!;
      for (const id of inFlight) {
        if (holding.has(id)) continue;
        inFlight.delete(id);
        if (this.#deliveries.get(id)?.status === 'pending') forgotten += 1;
      }
    }
    return forgotten;
  }

  async extendLease(params: ExtendLeaseParams): Promise<ExtendLeaseResult> {
    this.#assertOpen();
    validateExtendLease(params);
    const now = timeOf(params.now);
    const extended: number[] = [];
    const lost: number[] = [];
    for (const { lane, epoch } of params.lanes) {
      const record = this.#lanes[lane]!;
      if (record.owner === params.owner && record.epoch === BigInt(epoch)) {
        record.leaseExpiresAt = now + params.leaseDurationMs;
        extended.push(lane);
      } else {
        lost.push(lane);
      }
    }
    return { extended, lost };
  }

  // ----- fenced writes -----------------------------------------------------------------------

  /** The delivery a lease still holds, or undefined when the lease is stale (or the delivery is locked by an open transaction). */
  #fenced(lease: ParsedLease): DeliveryRecord | undefined {
    const lane = this.#lanes[lease.lane]!;
    if (lane.epoch.toString() !== lease.epoch || !lane.inFlight.has(lease.deliveryId)) return undefined;
    if (this.#locked.has(lease.deliveryId)) return undefined;
    const delivery = this.#deliveries.get(lease.deliveryId);
    if (delivery?.status !== 'pending' || delivery.claims !== lease.claims || delivery.lane !== lease.lane)
      return undefined;
    return delivery;
  }

  /** Ends a claim without completion: the next claim of the delivery gets a new token. */
  #endClaim(delivery: DeliveryRecord, now: number): void {
    delivery.claims += 1;
    delivery.updatedAt = now;
    this.#lanes[delivery.lane]!.inFlight.delete(delivery.id);
  }

  async completeMany(leases: readonly DeliveryLease[], now?: Date): Promise<boolean[]> {
    this.#assertOpen();
    const parsed = parseLeases(leases);
    assertOptionalDate(now, 'now');
    const at = timeOf(now);
    return parsed.map((lease) => this.#applyCompletion(lease, at));
  }

  async complete(lease: DeliveryLease, tx: MemoryTransaction, now?: Date): Promise<boolean> {
    this.#assertOpen();
    const parsed = parseLease(lease);
    assertOptionalDate(now, 'now');
    const state = this.#openTransaction(tx);
    if (!this.#fenced(parsed)) return false;
    this.#locked.set(parsed.deliveryId, parsed.lane);
    state.completions.push({ lease: parsed, now: timeOf(now) });
    return true;
  }

  /** Delete a delivery whose lease is still held (and record it in the history when retained). */
  #applyCompletion(lease: ParsedLease, now: number): boolean {
    const delivery = this.#fenced(lease);
    if (!delivery) return false;
    this.#deliveries.delete(delivery.id);
    if (this.#completionHistory) this.#history.push({ delivery: { ...delivery, updatedAt: now }, completedAt: now });
    return true;
  }

  async reschedule(lease: DeliveryLease, params: RescheduleParams): Promise<boolean> {
    this.#assertOpen();
    const parsed = parseLease(lease);
    const error = validateReschedule(params);
    const delivery = this.#fenced(parsed);
    if (!delivery) return false;
    delivery.attempts += 1;
    delivery.availableAt = params.availableAt.getTime();
    delivery.lastError = error;
    this.#endClaim(delivery, timeOf(params.now));
    return true;
  }

  async bury(lease: DeliveryLease, params: BuryParams): Promise<boolean> {
    this.#assertOpen();
    const parsed = parseLease(lease);
    const error = validateBury(params);
    const delivery = this.#fenced(parsed);
    if (!delivery) return false;
    delivery.attempts += 1;
    delivery.status = 'dead';
    delivery.lastError = error;
    this.#endClaim(delivery, timeOf(params.now));
    return true;
  }

  async release(leases: readonly DeliveryLease[], now?: Date): Promise<boolean[]> {
    this.#assertOpen();
    const parsed = parseLeases(leases);
    assertOptionalDate(now, 'now');
    const at = timeOf(now);
    return parsed.map((lease) => {
      const delivery = this.#fenced(lease);
      if (!delivery) return false;
      this.#endClaim(delivery, at);
      return true;
    });
  }

  async relinquish(owner: string): Promise<number> {
    this.#assertOpen();
    assertName(owner, 'owner');
    this.#lanesTakenLast.delete(owner);
    let count = 0;
    for (const lane of this.#lanesOwnedBy(owner)) {
      this.#pruneInFlight(lane);
      if (this.#lanes[lane]!.inFlight.size > 0) continue;
      this.#handBack(lane);
      count += 1;
    }
    return count;
  }

  // ----- admin -------------------------------------------------------------------------------

  async requeue(params: RequeueParams): Promise<number> {
    this.#assertOpen();
    validateRequeue(params);
    const now = timeOf(params.now);
    const ids = params.deliveryIds ? new Set(params.deliveryIds) : null;
    const selected = [...this.#deliveries.values()]
      .filter((d) => d.status === 'dead')
      .filter(
        (d) =>
          (ids === null || ids.has(d.id)) &&
          (params.handler === undefined || d.handler === params.handler) &&
          (params.eventId === undefined || d.eventId === params.eventId),
      )
      // Requeued deliveries of one key keep their relative order at the back of the key.
      .sort((a, b) => compareSequences(a.sequence, b.sequence) || compareIds(a.id, b.id));
    for (const delivery of selected) {
      delivery.status = 'pending';
      delivery.attempts = 0;
      delivery.claims += 1;
      delivery.availableAt = now;
      delivery.updatedAt = now;
      if (delivery.key !== null) delivery.sequence = this.#nextSequence(delivery.key);
    }
    return selected.length;
  }

  async listDeliveries(params: ListDeliveriesParams = {}): Promise<Page<DeliveryView>> {
    this.#assertOpen();
    const { limit, cursor } = validateList(params);
    const views = this.#allViews(params.status)
      .filter(
        (v) =>
          (params.status === undefined || v.status === params.status) &&
          (params.handler === undefined || v.handler === params.handler) &&
          (params.eventId === undefined || v.eventId === params.eventId) &&
          (params.key === undefined || v.key === params.key) &&
          (cursor === null || compareIds(v.id, cursor) > 0),
      )
      .sort((a, b) => compareIds(a.id, b.id));
    const items = views.slice(0, limit);
    const nextCursor = views.length > limit ? items[items.length - 1]!.id : null;
    return { items: params.withPayload ? items.map((view) => this.#withPayload(view)) : items, nextCursor };
  }

  /** The view with its event's payload and headers, while the event is kept. */
  #withPayload(view: DeliveryView): DeliveryView {
    const event = this.#events.get(view.eventId);
    if (event === undefined) return view;
    return { ...view, payload: JSON.parse(event.payloadJson) as unknown, headers: { ...event.headers } };
  }

  #allViews(status: DeliveryStatus | undefined): DeliveryView[] {
    const views = [...this.#deliveries.values()].map((d) => this.#view(d, this.#statusOf(d)));
    if (status === undefined || status === 'completed') {
      for (const entry of this.#history) views.push(this.#view(entry.delivery, 'completed'));
    }
    return views;
  }

  #statusOf(delivery: DeliveryRecord): DeliveryStatus {
    if (delivery.status === 'dead') return 'dead';
    return this.#lanes[delivery.lane]!.inFlight.has(delivery.id) ? 'processing' : 'pending';
  }

  #view(d: DeliveryRecord, status: DeliveryStatus): DeliveryView {
    return {
      id: d.id,
      eventId: d.eventId,
      eventType: d.eventType,
      handler: d.handler,
      key: d.key,
      sequence: d.sequence?.toString() ?? null,
      lane: d.lane,
      status,
      attempts: d.attempts,
      maxAttempts: d.maxAttempts,
      availableAt: new Date(d.availableAt),
      lastError: d.lastError,
      createdAt: new Date(d.createdAt),
      updatedAt: new Date(d.updatedAt),
    };
  }

  async statistics(now?: Date): Promise<Statistics> {
    this.#assertOpen();
    assertOptionalDate(now, 'now');
    const at = timeOf(now);
    const perHandler = new Map<string, MutableHandlerStatistics>();
    const statsOf = (handler: string) => {
      let stats = perHandler.get(handler);
      if (!stats) perHandler.set(handler, (stats = emptyHandlerStatistics()));
      return stats;
    };
    for (const d of this.#deliveries.values()) {
      const stats = statsOf(d.handler);
      const status = this.#statusOf(d);
      if (status === 'dead') stats.dead += 1;
      else if (status === 'processing') stats.inFlight += 1;
      else if (d.availableAt <= at) {
        stats.due += 1;
        stats.oldestDueAgeMs = Math.max(stats.oldestDueAgeMs ?? 0, at - d.availableAt);
      } else stats.scheduled += 1;
    }
    for (const entry of this.#history) statsOf(entry.delivery.handler).completed += 1;
    const handlers: Record<string, HandlerStatistics> = {};
    for (const [name, stats] of [...perHandler.entries()].sort(([a], [b]) => a.localeCompare(b))) {
      stats.pending = stats.due + stats.scheduled;
      handlers[name] = stats;
    }
    const lanesLeased = this.#lanes.filter((l) => l.owner !== null && (l.leaseExpiresAt ?? 0) > at).length;
    return withTotals(handlers, lanesLeased);
  }

  async purgeExpired(params: PurgeParams): Promise<PurgeResult> {
    this.#assertOpen();
    validatePurge(params);
    const now = timeOf(params.now);
    const deadBefore = now - params.deadRetentionMs;
    const completedBefore = now - params.completedRetentionMs;

    let deadDeliveries = 0;
    for (const d of [...this.#deliveries.values()]) {
      if (d.status === 'dead' && d.updatedAt < deadBefore) {
        this.#deliveries.delete(d.id);
        deadDeliveries += 1;
      }
    }
    const withDeliveries = new Set([...this.#deliveries.values()].map((d) => d.eventId));
    let events = 0;
    for (const event of [...this.#events.values()]) {
      if (event.createdAt < completedBefore && !withDeliveries.has(event.id)) {
        this.#events.delete(event.id);
        events += 1;
      }
    }
    const kept = this.#history.filter((entry) => entry.completedAt >= completedBefore);
    const history = this.#history.length - kept.length;
    this.#history.splice(0, this.#history.length, ...kept);
    return { events, deadDeliveries, history };
  }

  #assertOpen(): void {
    if (this.#closed) throw new InvalidStateError('This memory store is closed; create a new one with memoryStore().');
  }
}

/**
 * An in-memory store that follows the store contract exactly: for unit tests and demos. Nothing is
 * persisted; every instance is independent.
 */
export function memoryStore(options: MemoryStoreOptions = {}): Store<MemoryTransaction> {
  if (typeof options !== 'object' || options === null)
    throw new InvalidOptionsError('memoryStore() takes an options object, e.g. { completionHistory: true }.');
  const completionHistory = options.completionHistory ?? false;
  if (typeof completionHistory !== 'boolean') {
    throw new InvalidOptionsError(
      `memoryStore(): completionHistory must be a boolean, got ${JSON.stringify(completionHistory)}.`,
    );
  }
  return new MemoryStore(completionHistory);
}
