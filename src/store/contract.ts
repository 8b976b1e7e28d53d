/**
 * The store contract: the only thing the bus and the dispatcher know about a database.
 *
 * Every store (Postgres, in-memory, later MongoDB) implements `Store<TTx>`, where `TTx` is the
 * caller's transaction type (a `pg` client, a Kysely transaction, ...). The contract suite in
 * `test/contract/` pins every rule written here; a third-party store is welcome to run it.
 *
 * Model. An event fans out to one delivery per handler. Deliveries live in 256 lanes (see
 * `core/lanes.ts`); a worker (identified by `owner`) leases lanes, never delivery rows. A claim
 * records the claimed delivery ids in the lane's in-flight list; a lease token `lane:epoch:claims`
 * (see `core/lease-token.ts`) proves which claim a worker holds. Rules:
 *
 * - Fenced writes (`completeMany`, `complete`, `reschedule`, `bury`, `release`) succeed only while
 *   the lane still has the token's epoch, still lists the delivery in flight, and the delivery's
 *   claims counter still equals the token's. Otherwise they return `false` and change nothing.
 *   They never throw for a lost lease; they throw `InvalidLeaseError` for a malformed token.
 * - Invalid input throws a `RelayBusError` before anything is written, and before any statement runs
 *   in the caller's transaction (a failed statement would abort it).
 * - A store error says whether the same call may succeed later (`RelayBusError.retryable`).
 * - No method sleeps; every time-dependent method takes `now` (default: the database's clock).
 * - Attempts are charged when a claim ends in failure (`reschedule`, `bury`: +1) or when a lane is
 *   taken over after its lease expired (+1 for every delivery that was in flight there; a delivery
 *   that reaches its `maxAttempts` that way is dead). `release` charges nothing.
 */

import type { PublishHandler, PublishParams, PublishResult } from '../core/publish-params.js';
import type { ClaimSession, ClaimSessionOptions } from './claim-session.js';

export type { PublishHandler, PublishParams, PublishResult };
export type { ClaimClock, ClaimHints, ClaimParams, ClaimSession, ClaimSessionOptions } from './claim-session.js';
import type {
  ListReplaysParams,
  LiveWait,
  ReplayParams,
  ReplayPlan,
  ReplayStepParams,
  ReplayStepResult,
  ReplayView,
} from './replay-contract.js';
export type {
  ListReplaysParams,
  ReplayFilter,
  ReplayMode,
  ReplayParams,
  ReplayPlan,
  ReplayState,
  ReplayStepParams,
  ReplayStepResult,
  LiveWait,
  ReplayView,
} from './replay-contract.js';

/** What a store can do; every field is required so no capability is assumed silently. */
export interface StoreCapabilities {
  /** Atomic publish in the caller's transaction and transactional handlers (`complete(lease, tx)`). */
  readonly transactions: boolean;
  /** Completed deliveries are kept in an append-only history (listable, counted). */
  readonly completionHistory: boolean;
  /** How idle workers learn about new work. Polling is always the correctness path. */
  readonly wakeups: 'listen-notify' | 'change-stream' | 'poll';
  /** Several connections can work at once (false for PGlite: one connection, no lock contention). */
  readonly concurrentConnections: boolean;
}

/** A handler's subscription to an event type: every publish of the type fans out to it, from any process. */
export interface Subscription {
  readonly eventType: string;
  readonly handler: string;
  /** Attempts before a delivery is dead-lettered (>= 1). */
  readonly maxAttempts: number;
  /** What the worker's retry policy is, for people reading the table (JSON); the worker applies its own. */
  readonly retry?: Readonly<Record<string, unknown>> | null;
}

/** A subscription as the store keeps it. */
export interface SubscriptionView extends Subscription {
  readonly retry: Readonly<Record<string, unknown>> | null;
  readonly createdAt: Date;
  readonly updatedAt: Date;
  /** When a worker running the handler last said so (`subscribe`); null when none ever did (`setup --subscriptions`). */
  readonly seenAt: Date | null;
  /** Deliveries of the handler for this type still pending (due, scheduled or in flight). */
  readonly pending: number;
}

export interface SubscribeOptions {
  /** A worker running the handlers says so (default true): `seenAt` = now. False: `seenAt` is left as it was. */
  readonly seen?: boolean;
  /** The time recorded (default: the store's clock). */
  readonly now?: Date;
}

export interface UnsubscribeParams {
  readonly handler: string;
  /** Only this event type's subscription (default: every type the handler subscribes to). */
  readonly eventType?: string;
  /**
   * Bury the handler's pending deliveries (of those types) with this reason. Without it, unsubscribing a handler that
   * still has pending deliveries is refused (`InvalidStateError`) and changes nothing.
   */
  readonly buryPending?: string;
  readonly now?: Date;
}

export interface UnsubscribeResult {
  /** Subscriptions removed. */
  readonly removed: number;
  /** Pending deliveries moved to the dead letters (with `buryPending`). */
  readonly buried: number;
}

/** What `completeManyReportingNext` wrote. */
export interface CompleteManyResult {
  /** As `completeMany`: `true` per lease that was still held, in input order. */
  readonly completed: boolean[];
  /** A completed keyed delivery's key has a next delivery that is due now. */
  readonly nextDue: boolean;
}

/** A delivery handed to a worker by `claim`. */
export interface ClaimedDelivery {
  readonly id: string;
  /** The lease token `lane:epoch:claims`; pass it unchanged to fenced writes. */
  readonly leaseToken: string;
  readonly lane: number;
  readonly eventId: string;
  readonly eventType: string;
  readonly handler: string;
  readonly key: string | null;
  /** Position in the key's commit order (null for unkeyed events). */
  readonly sequence: string | null;
  readonly payload: unknown;
  readonly headers: Readonly<Record<string, string>>;
  /** Attempts already charged before this one. */
  readonly attempts: number;
  readonly maxAttempts: number;
  readonly availableAt: Date;
  readonly createdAt: Date;
  /** Set when claimed before it was due (`ClaimHints.retryLookaheadMs`): start no handler before this time. */
  readonly notBefore?: Date;
  /**
   * Set on a follower (`ClaimHints.followers`): the id of the delivery of the same claim, of the same key, that comes
   * right before it. Start this one only after that one's handler succeeded; if it did not, release this one (and what
   * follows it) unrun.
   */
  readonly follows?: string;
}

/** A reference to a claimed delivery for fenced writes. */
export interface DeliveryLease {
  readonly deliveryId: string;
  /** The lease token `lane:epoch:claims` as returned by `claim`. */
  readonly leaseToken: string;
}

export interface ExtendLeaseParams {
  readonly owner: string;
  /** The lanes to renew, each with the epoch the worker holds it at. */
  readonly lanes: readonly { readonly lane: number; readonly epoch: string }[];
  readonly leaseDurationMs: number;
  readonly now?: Date;
}

export interface ExtendLeaseResult {
  /** Lanes whose lease was extended. */
  readonly extended: readonly number[];
  /** Lanes the owner no longer holds at that epoch: everything it had in flight there is fenced. */
  readonly lost: readonly number[];
}

export interface RescheduleParams {
  /** When the delivery becomes claimable again. */
  readonly availableAt: Date;
  /** The failure text to record (NUL characters are dropped: Postgres cannot store them). */
  readonly error: string;
  readonly now?: Date;
}

export interface BuryParams {
  /** The failure text to record (NUL characters are dropped: Postgres cannot store them). */
  readonly error: string;
  readonly now?: Date;
}

export interface RequeueParams {
  /** Requeue these dead deliveries ... */
  readonly deliveryIds?: readonly string[];
  /** ... or every dead delivery of this handler ... */
  readonly handler?: string;
  /** ... or of this event ... */
  readonly eventId?: string;
  /** ... or every dead delivery. At least one selector is required. Selectors combine with AND. */
  readonly all?: boolean;
  readonly now?: Date;
}

export interface CancelParams {
  /** The event whose pending deliveries to withdraw ... */
  readonly eventId: string;
  /** ... only this handler's (default: every handler's). */
  readonly handler?: string;
}

/**
 * What became of one handler's delivery of the event: `cancelled` (it was pending and no worker ran it: deleted),
 * `running` (a worker holds it in flight: left alone, it runs), `dead` (a dead letter: left alone) or `finished` (the
 * event had a delivery for this handler and has none any more: it completed, or was cancelled before).
 */
export type CancelOutcome = 'cancelled' | 'running' | 'dead' | 'finished';

export interface CancelledDelivery {
  /** The delivery; null for `finished` (its row is gone). */
  readonly deliveryId: string | null;
  readonly handler: string;
  readonly outcome: CancelOutcome;
}

export interface CancelResult {
  /** Whether the store knows the event: a delivery of it, or its events row. */
  readonly found: boolean;
  /** One entry per handler's delivery of the event (of `handler`, when given), by delivery id, `finished` ones last. */
  readonly deliveries: readonly CancelledDelivery[];
}

export interface PauseHandlerParams {
  /** The handler whose deliveries no worker claims from its next claim on, until it is resumed. */
  readonly handler: string;
  /** Why, for whoever looks (`relaybus handlers list`); at most 1,000 characters. */
  readonly reason?: string;
  readonly now?: Date;
}

export interface ResumeHandlerParams {
  /** The paused handler to resume: the next claim of any worker takes its deliveries again, each key's in order. */
  readonly handler: string;
}

/** A paused handler: since when, and why (null: no reason given). */
export interface PausedHandler {
  readonly handler: string;
  readonly pausedAt: Date;
  readonly reason: string | null;
}

export type DeliveryStatus = 'pending' | 'processing' | 'dead' | 'completed';

export interface ListDeliveriesParams {
  /** 'processing' = pending and in flight in a lane. 'completed' needs completion history. */
  readonly status?: DeliveryStatus;
  readonly handler?: string;
  readonly eventId?: string;
  readonly key?: string;
  /** Page size, 1..1000 (default 100). */
  readonly limit?: number;
  /** `nextCursor` of the previous page. */
  readonly cursor?: string;
  /**
   * Also return each delivery's event payload and headers (`DeliveryView.payload` / `headers`). Default false: a
   * listing of many deliveries (a lane scan, a count) reads no payloads.
   */
  readonly withPayload?: boolean;
}

export interface DeliveryView {
  readonly id: string;
  readonly eventId: string;
  readonly eventType: string;
  readonly handler: string;
  readonly key: string | null;
  readonly sequence: string | null;
  readonly lane: number;
  readonly status: DeliveryStatus;
  readonly attempts: number;
  readonly maxAttempts: number;
  readonly availableAt: Date;
  readonly lastError: string | null;
  readonly createdAt: Date;
  readonly updatedAt: Date;
  /**
   * The event's payload (parsed JSON) and headers, listed `withPayload: true`: from the event's row, or from the
   * delivery itself for an event published inline (no events row). Both absent without `withPayload`, and when no row
   * holds them any more (a completed delivery of the history whose event was purged).
   */
  readonly payload?: unknown;
  readonly headers?: Readonly<Record<string, string>>;
}

export interface Page<T> {
  readonly items: readonly T[];
  /** Pass as `cursor` for the next page; null on the last page. */
  readonly nextCursor: string | null;
}

export interface HandlerStatistics {
  /** Pending deliveries that are not in flight (due or scheduled). */
  readonly pending: number;
  /** Pending, not in flight, claimable now. */
  readonly due: number;
  /** Pending, not in flight, available later (delayed or backing off). */
  readonly scheduled: number;
  readonly inFlight: number;
  readonly dead: number;
  /** Completed deliveries in the history; 0 without completion history. */
  readonly completed: number;
  /** Age of the oldest due delivery in ms (now - availableAt); null when nothing is due. */
  readonly oldestDueAgeMs: number | null;
}

export interface Statistics extends HandlerStatistics {
  readonly handlers: Readonly<Record<string, HandlerStatistics>>;
  /** Lanes currently leased by some owner with a live lease. */
  readonly lanesLeased: number;
}

export interface PurgeParams {
  /** Events older than this with no deliveries left, and completion history older than this, are deleted. */
  readonly completedRetentionMs: number;
  /** Dead deliveries last updated longer ago than this are deleted. */
  readonly deadRetentionMs: number;
  readonly now?: Date;
}

export interface PurgeResult {
  readonly events: number;
  readonly deadDeliveries: number;
  readonly history: number;
}

/** What `completeAndClaim` returns. */
export interface CompleteAndClaimResult {
  /** Per lease, in input order: `true` when the delivery was completed, `false` when its lease was lost. */
  readonly completed: readonly boolean[];
  readonly claimed: ClaimedDelivery[];
  /**
   * How many lanes other workers (neither the session's owner nor its `siblingOwners`) hold under a lease not expired, when the store
   * looked (undefined: it did not). While other workers share the lanes, the dispatcher's claim loops claim in turn.
   */
  readonly peerLanes?: number;
}

/** A lane a worker holds, as `listLanes` reports it. */
export interface LaneView {
  readonly lane: number;
  /** The lease owner id (`prefix:pid:random`; one per claim loop of a worker). */
  readonly owner: string;
  /** Bumped each time the lane changes hands. */
  readonly epoch: string;
  /** When the lease ends unless renewed; in the past: expired, and the next claim of any worker takes the lane over. */
  readonly leaseExpiresAt: Date;
  /** Deliveries claimed in the lane and not finished yet. */
  readonly inFlight: number;
}

/** The contract every store implements. `TTx` is the caller's transaction type. */
export interface Store<TTx> {
  /** Which store this is; a third-party store names itself (the union stays open to it). */
  readonly kind: 'postgres' | 'mongodb' | 'memory' | (string & {});
  readonly capabilities: StoreCapabilities;

  /** Create or upgrade the store's tables; idempotent and safe to run from several processes at once. */
  setup(): Promise<void>;

  /**
   * Write events and one delivery per handler inside the caller's transaction `tx`. An event id that
   * exists already gets deliveries only for handlers it never had (completed ones included). Keyed
   * events take the next sequence of their key; the key stays locked until `tx` commits, so sequence
   * order is commit order. Results are in input order.
   *
   * An id that exists with a different type, key or payload (compared as JSON values) throws
   * `EventConflictError`; bad input (a NUL character anywhere, an over-long name, a date outside the
   * years 1-9999) throws `InvalidInputError` / `InvalidPayloadError`; a `tx` that is no longer in a
   * transaction throws `InvalidInputError`. In every such case nothing of the call is written and no
   * failing statement ran, so `tx` stays usable.
   */
  publish(tx: TTx, events: readonly PublishParams[], now?: Date): Promise<PublishResult[]>;

  /**
   * Record that the handlers run (upsert; active; `seenAt` = now): from then on every publish of each event type fans
   * out to them, whichever process publishes. Workers call it at start and then periodically; a deploy step
   * (`relaybus setup --subscriptions`) passes `{ seen: false }`, which leaves `seenAt` as it was (null when new).
   */
  subscribe(subscriptions: readonly Subscription[], options?: SubscribeOptions): Promise<void>;

  /** Every subscription, by event type and handler. */
  listSubscriptions(): Promise<SubscriptionView[]>;

  /** The lanes a worker holds, by lane (expired leases included): who holds which, and how much is in flight. */
  listLanes(): Promise<LaneView[]>;

  /**
   * Remove a handler's subscriptions. Never drops deliveries silently: pending ones are buried with
   * `buryPending` as their error, or the call is refused (`InvalidStateError`, nothing changed). Deliveries in flight
   * (a worker runs them now) always refuse it.
   */
  unsubscribe(params: UnsubscribeParams): Promise<UnsubscribeResult>;

  /**
   * Open the claim session of `owner` (see `ClaimSession`): a worker claims through it and closes it when it stops
   * claiming. Throws `InvalidInputError` for a bad owner or options, before anything is opened.
   */
  openClaims(owner: string, options?: ClaimSessionOptions): ClaimSession;

  /**
   * Call `onWake` whenever new work may be due (a publish committed: with the lanes it wrote, when the store knows
   * them, for `ClaimHints.preferLanes`), and after the store reconnected its listener; returns the unsubscribe. Stores whose `capabilities.wakeups` is 'poll' resolve a no-op. A wake-up is a hint only:
   * workers poll anyway, so a lost one costs latency, never a delivery.
   */
  subscribeWakeups?(onWake: (lanes?: readonly number[]) => void): Promise<() => Promise<void>>;

  /** Renew the lease of lanes the owner holds; reports the ones it lost. */
  extendLease(params: ExtendLeaseParams): Promise<ExtendLeaseResult>;

  /** Delete completed deliveries in one statement; `true` per lease that was still held, in input order. */
  completeMany(leases: readonly DeliveryLease[], now?: Date): Promise<boolean[]>;

  /**
   * `completeMany`, also saying whether a completed keyed delivery left its key a next delivery that is due now (its
   * new head: a claim would pick it). Optional: with it a dispatcher under a light load claims after a completion write
   * only when that pays; without it, after every completion write.
   */
  completeManyReportingNext?(leases: readonly DeliveryLease[], now?: Date): Promise<CompleteManyResult>;

  /** Complete one delivery inside `tx` (transactional handlers): commits with the handler's writes, or not at all. */
  complete(lease: DeliveryLease, tx: TTx, now?: Date): Promise<boolean>;

  /** The attempt failed: +1 attempt, claimable again at `availableAt`, error recorded. */
  reschedule(lease: DeliveryLease, params: RescheduleParams): Promise<boolean>;

  /** The attempt failed for good: +1 attempt, status dead (never claimed again until `requeue`). */
  bury(lease: DeliveryLease, params: BuryParams): Promise<boolean>;

  /** Give deliveries back without charging an attempt (graceful shutdown). */
  release(leases: readonly DeliveryLease[], now?: Date): Promise<boolean[]>;

  /** Move dead deliveries back to pending with a fresh attempt budget; returns how many. Keyed ones go to the end of their key's order. */
  requeue(params: RequeueParams): Promise<number>;

  /**
   * Withdraw an event's pending deliveries that no worker runs (a scheduled event, a delivery waiting for its turn or
   * a retry), fenced against a worker claiming them at the same moment: each one either runs or is cancelled, never
   * both. A cancelled delivery is deleted; publishing the same event id again does not bring it back.
   */
  cancel(params: CancelParams): Promise<CancelResult>;

  /**
   * Pause a handler for every worker of the store: from their next claim on, none claims its deliveries. Publishing is
   * unchanged (its deliveries are created and wait, nothing is lost or reordered); deliveries already claimed (in flight)
   * run to their end. Returns true when the handler was paused now, false when it already was (its first pause is kept).
   */
  pauseHandler(params: PauseHandlerParams): Promise<boolean>;

  /** Resume a paused handler: its deliveries are claimed again, each key's in order. Returns whether it was paused. */
  resumeHandler(params: ResumeHandlerParams): Promise<boolean>;

  /** The paused handlers, by name. */
  listPausedHandlers(): Promise<PausedHandler[]>;

  /** What `startReplay` with these parameters would create, per handler; changes nothing (the dry run). */
  planReplay(params: ReplayParams): Promise<ReplayPlan>;

  /**
   * Start a replay: records it (the audit record), plans its events and returns it `running`; creates no delivery yet
   * (`replayStep` does, in bounded steps; `runReplay` drives it). Refused with `InvalidStateError`
   * when one of its handlers already has a running replay, or it names a type a handler does not subscribe to.
   */
  startReplay(params: ReplayParams): Promise<ReplayView>;

  /**
   * Create the next deliveries of a running replay: up to `limit` events, each key's in its original commit order,
   * atomically with the replay's progress (after a crash the next step goes on from the last committed one: no event
   * skipped, none twice). A replay whose planned events are done, and whose late-committed ones are too, finishes.
   * Throws `InvalidInputError` for an id that is not a replay's; on a replay that is not running, changes nothing and
   * returns it.
   */
  replayStep(params: ReplayStepParams): Promise<ReplayStepResult>;

  /**
   * A worker's report, while a replay runs (a claim session's `replayClock` says so), of how long its live deliveries
   * had been due when their handlers started: per handler, the longest since its last report, the longest first. For
   * the replays that yield (`subscribeLiveLag`): the store's own sample (`ReplayStepResult.liveWaits`) sees deliveries
   * not claimed yet, not those claimed and waiting in a worker. A hint: a report nobody hears is dropped. Optional
   * (with `subscribeLiveLag`): a store without it yields to its own sample only.
   */
  reportLiveLag?(waits: readonly LiveWait[]): Promise<void>;

  /** Hear the workers' `reportLiveLag` reports (`runReplay` does while it yields); returns the unsubscribe. */
  subscribeLiveLag?(onReport: (waits: readonly LiveWait[]) => void): Promise<() => Promise<void>>;

  /** Stop a running replay (its created deliveries stay); returns it, or null when the id is unknown. */
  cancelReplay(replayId: string, now?: Date): Promise<ReplayView | null>;

  /** One replay, or null. */
  getReplay(replayId: string): Promise<ReplayView | null>;

  /** Replays, the newest first (the audit record of who replayed what and when). */
  listReplays(params?: ListReplaysParams): Promise<ReplayView[]>;

  listDeliveries(params?: ListDeliveriesParams): Promise<Page<DeliveryView>>;

  statistics(now?: Date): Promise<Statistics>;

  purgeExpired(params: PurgeParams): Promise<PurgeResult>;

  /**
   * Run `fn` in a new transaction of the store's own driver: commits when `fn` resolves, rolls back
   * when it throws. The dispatcher uses it for transactional handlers (`ctx.transaction`).
   */
  transaction<T>(fn: (tx: TTx) => Promise<T>): Promise<T>;

  /** Release what the store opened itself (never a pool the caller passed in). */
  close(): Promise<void>;
}
