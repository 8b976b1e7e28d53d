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
 * - `replays`: each replay's audit record and plan. While one runs, its handlers' keyed deliveries that no replay
 *   created wait (the hold), so each key's replayed history runs first.
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
 *
 * Modules: memory-state.ts (the records, transactions, the fence), memory-publish.ts, memory-claims.ts (claim
 * sessions), memory-fenced.ts (fenced writes), memory-admin.ts (listings, statistics, requeue, purge),
 * memory-replay.ts (replay). This class is the contract's face.
 */
import { InvalidOptionsError } from '../core/errors.js';
import type {
  BuryParams,
  ClaimSession,
  ClaimSessionOptions,
  DeliveryLease,
  DeliveryView,
  ExtendLeaseParams,
  ExtendLeaseResult,
  LaneView,
  ListDeliveriesParams,
  Page,
  PublishParams,
  PublishResult,
  PurgeParams,
  PurgeResult,
  RequeueParams,
  CancelParams,
  CancelResult,
  PauseHandlerParams,
  PausedHandler,
  ReplayParams,
  ReplayPlan,
  ReplayView,
  ReplayStepParams,
  ReplayStepResult,
  ListReplaysParams,
  LiveWait,
  ResumeHandlerParams,
  RescheduleParams,
  Statistics,
  Store,
  StoreCapabilities,
  SubscribeOptions,
  Subscription,
  SubscriptionView,
  UnsubscribeParams,
  UnsubscribeResult,
} from '../store/contract.js';
import { validateClaimSession } from '../store/validate.js';
import { MemoryAdmin } from './memory-admin.js';
import { MemoryClaimSession } from './memory-claims.js';
import { MemoryFenced } from './memory-fenced.js';
import { MemoryPublish } from './memory-publish.js';
import { MemoryReplay } from './memory-replay.js';
import { MemoryState, type MemoryTransaction } from './memory-state.js';

export type { MemoryTransaction } from './memory-state.js';

export interface MemoryStoreOptions {
  /**
   * Keep completed deliveries in a completion history (listable with status 'completed', counted), as
   * `postgresStore({ completionHistory })` does. Default false.
   */
  readonly completionHistory?: boolean;
}

class MemoryStore implements Store<MemoryTransaction> {
  readonly kind = 'memory' as const;
  readonly capabilities: StoreCapabilities;
  readonly #data: MemoryState;
  readonly #publish: MemoryPublish;
  readonly #fenced: MemoryFenced;
  readonly #admin: MemoryAdmin;
  readonly #replay: MemoryReplay;

  constructor(completionHistory: boolean) {
    this.capabilities = Object.freeze({
      transactions: true,
      completionHistory,
      wakeups: 'poll',
      concurrentConnections: false,
    });
    this.#data = new MemoryState(completionHistory);
    this.#publish = new MemoryPublish(this.#data);
    this.#fenced = new MemoryFenced(this.#data);
    this.#admin = new MemoryAdmin(this.#data);
    this.#replay = new MemoryReplay(this.#data);
  }

  async setup(): Promise<void> {
    this.#data.assertOpen();
  }

  async close(): Promise<void> {
    this.#data.closed = true;
  }

  transaction<T>(fn: (tx: MemoryTransaction) => Promise<T>): Promise<T> {
    return this.#data.transaction(fn);
  }

  publish(tx: MemoryTransaction, events: readonly PublishParams[], now?: Date): Promise<PublishResult[]> {
    return this.#publish.publish(tx, events, now);
  }

  /** A claim session of `owner` (memory-claims.ts). */
  openClaims(owner: string, options?: ClaimSessionOptions): ClaimSession {
    this.#data.assertOpen();
    validateClaimSession(owner, options);
    return new MemoryClaimSession(this.#data, owner, options, (leases, now) => this.#fenced.completeMany(leases, now));
  }

  // memory-fenced.ts

  extendLease(params: ExtendLeaseParams): Promise<ExtendLeaseResult> {
    return this.#fenced.extendLease(params);
  }

  completeMany(leases: readonly DeliveryLease[], now?: Date): Promise<boolean[]> {
    return this.#fenced.completeMany(leases, now);
  }

  complete(lease: DeliveryLease, tx: MemoryTransaction, now?: Date): Promise<boolean> {
    return this.#fenced.complete(lease, tx, now);
  }

  reschedule(lease: DeliveryLease, params: RescheduleParams): Promise<boolean> {
    return this.#fenced.reschedule(lease, params);
  }

  bury(lease: DeliveryLease, params: BuryParams): Promise<boolean> {
    return this.#fenced.bury(lease, params);
  }

  release(leases: readonly DeliveryLease[], now?: Date): Promise<boolean[]> {
    return this.#fenced.release(leases, now);
  }

  // memory-admin.ts

  subscribe(subscriptions: readonly Subscription[], options?: SubscribeOptions): Promise<void> {
    return this.#admin.subscribe(subscriptions, options);
  }

  listLanes(): Promise<LaneView[]> {
    return this.#admin.listLanes();
  }

  listSubscriptions(): Promise<SubscriptionView[]> {
    return this.#admin.listSubscriptions();
  }

  unsubscribe(params: UnsubscribeParams): Promise<UnsubscribeResult> {
    return this.#admin.unsubscribe(params);
  }

  requeue(params: RequeueParams): Promise<number> {
    return this.#admin.requeue(params);
  }

  cancel(params: CancelParams): Promise<CancelResult> {
    return this.#admin.cancel(params);
  }

  pauseHandler(params: PauseHandlerParams): Promise<boolean> {
    return this.#admin.pauseHandler(params);
  }

  resumeHandler(params: ResumeHandlerParams): Promise<boolean> {
    return this.#admin.resumeHandler(params);
  }

  listPausedHandlers(): Promise<PausedHandler[]> {
    return this.#admin.listPausedHandlers();
  }

  // memory-replay.ts

  planReplay(params: ReplayParams): Promise<ReplayPlan> {
    return this.#replay.planReplay(params);
  }

  startReplay(params: ReplayParams): Promise<ReplayView> {
    return this.#replay.startReplay(params);
  }

  replayStep(params: ReplayStepParams): Promise<ReplayStepResult> {
    return this.#replay.replayStep(params);
  }

  reportLiveLag(waits: readonly LiveWait[]): Promise<void> {
    return this.#replay.reportLiveLag(waits);
  }

  subscribeLiveLag(onReport: (waits: readonly LiveWait[]) => void): Promise<() => Promise<void>> {
    return this.#replay.subscribeLiveLag(onReport);
  }

  cancelReplay(replayId: string, now?: Date): Promise<ReplayView | null> {
    return this.#replay.cancelReplay(replayId, now);
  }

  getReplay(replayId: string): Promise<ReplayView | null> {
    return this.#replay.getReplay(replayId);
  }

  listReplays(params?: ListReplaysParams): Promise<ReplayView[]> {
    return this.#replay.listReplays(params);
  }

  listDeliveries(params?: ListDeliveriesParams): Promise<Page<DeliveryView>> {
    return this.#admin.listDeliveries(params);
  }

  statistics(now?: Date): Promise<Statistics> {
    return this.#admin.statistics(now);
  }

  purgeExpired(params: PurgeParams): Promise<PurgeResult> {
    return this.#admin.purgeExpired(params);
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
