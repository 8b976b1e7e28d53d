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

export type { PublishHandler, PublishParams, PublishResult };

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

/**
 * The hints a claim may carry: each tunes how a store finds work, none changes what a claim may return. A store may
 * ignore any of them (the memory store ignores most). The dispatcher's claim policy (`dispatcher/claim-policy.ts`)
 * chooses them; nothing else does.
 */
export interface ClaimHints {
  /**
   * Take a few free or expired lanes with due work even when the lanes the owner holds fill the batch (default
   * false: then other lanes are taken only while the batch is not full). Without it a worker whose own lanes always
   * fill its batch never looks at other lanes, so a crashed worker's lanes would wait until some worker has a short
   * claim. Work found in the lanes taken is claimed from the next claim on. The dispatcher sets it once per lease
   * duration; the store keeps no clock of its own for this.
   */
  readonly acquireWhenFull?: boolean;
  /**
   * Lanes to try first when taking free lanes (0..255, at most 256): the lanes a wake-up named. Other lanes with due
   * work are still taken.
   */
  readonly preferLanes?: readonly number[];
  /**
   * A retried head this store rescheduled may be claimed up to this many milliseconds before it is due (default 0;
   * at most 1,000). It comes with `notBefore` and no handler may start before then: the key is held in flight
   * meanwhile, so nothing else of it runs. The dispatcher sets it to cover its claims in progress, so a retry starts
   * when it is due instead of one or two claims later.
   */
  readonly retryLookaheadMs?: number;
  /**
   * Where free lanes come in (default: after the held lanes, while the batch is still short).
   * - `'skip'`: take no free lane this claim does not name (`preferLanes`, a retried head's lane), even when the held
   *   lanes leave the batch short. The dispatcher sets it while it hears wake-ups, on all but one claim per poll
   *   interval: every publish then names its lanes, so a free lane gets work unannounced only from a delayed delivery
   *   coming due, a crashed worker's expired lease or a lost notification, which that claim looks for.
   * - `'first'`: the caller is under a light load, its held lanes will likely not fill the batch: take free lanes with
   *   due work first, then claim from every held lane at once, the completions riding on that claim.
   */
  readonly freeLanes?: 'skip' | 'first';
  /**
   * With each keyed head it claims, the store may also claim up to this many of that key's next deliveries (default
   * 0; at most 100), beyond `limit`, as long as each is due: they come with `follows`, in key order. One read of a
   * key's run instead of a claim per delivery, for deep per-key backlogs. A claim returns at most `limit` x (1 + this)
   * deliveries; with fewer heads than `limit` a store may give each more followers (the Postgres store shares the room
   * among them, up to 100 a head).
   */
  readonly followers?: number;
}

/** One claim of a claim session: what a store must know, and the hints (`ClaimHints`). */
export interface ClaimParams extends ClaimHints {
  /** Handlers this worker runs; deliveries of other handlers are never returned. */
  readonly handlers: readonly string[];
  /** Most deliveries to return (>= 1). */
  readonly limit: number;
  /** Lease of every lane the claim records work in. */
  readonly leaseDurationMs: number;
  readonly now?: Date;
}

/** Options of `Store.openClaims`. */
export interface ClaimSessionOptions {
  /**
   * The owners of this worker's other claim sessions: lanes they hold are not counted in
   * `CompleteAndClaimResult.peerLanes`.
   */
  readonly siblingOwners?: readonly string[];
  /**
   * The session may keep a connection for its claims until `close()` (the Postgres store, see
   * `PostgresStoreOptions.holdClaimConnections`; the dispatcher's sessions do). Default false: each claim gives back
   * what it used. A store may ignore it.
   */
  readonly holdConnection?: boolean;
}

/**
 * One worker's claims, as one lease owner: everything a store remembers between an owner's claims lives here, and
 * nowhere else, so `close()` forgets all of it at once. What a session may keep: where each held lane's walk over its
 * keys resumes, the lanes its claims recorded work in, what its failed claims named (and a failure a claim hid, see
 * `forgetInFlight`), the lanes its last claim took, whether it likely holds lanes, and a held connection
 * (`holdConnection`). All of it is a hint: a store may keep none, and a claim is correct with any of it lost. Claims
 * of one session may run concurrently. A worker keeps one open session per owner (two sessions of one owner share its
 * lanes, not what each keeps).
 *
 * ```ts
 * const claims = store.openClaims(ownerId);
 * const batch = await claims.claim({ handlers: ['send-receipt'], limit: 10, leaseDurationMs: 30_000 });
 * // ... run them, complete them ...
 * await claims.close(); // hands back the lanes that run nothing
 * ```
 */
export interface ClaimSession {
  /** The lease owner id (unique per worker instance, never reused by a restarted process). */
  readonly owner: string;

  /**
   * Claim up to `limit` due deliveries of `handlers`: keep the lanes the owner holds, take free (or
   * expired) lanes with due work a few at a time, charge an attempt to everything a taken-over lane
   * had in flight, and record the batch in the lanes. A keyed delivery is returned only when no
   * earlier delivery of its handler and key is pending (in flight or not). Lanes the owner holds
   * that run nothing are handed back. Delivery rows are not written. When the held lanes fill the
   * batch, no other lane is taken unless `acquireWhenFull` is set: then a few free or expired lanes with due
   * work are taken as well (charging their takeovers as above) and their work comes with the next
   * claim. Callers set it about once per lease duration, so an expired lane is taken over even when
   * every worker is busy. Rejects with `InvalidStateError` once the session is closed.
   */
  claim(params: ClaimParams): Promise<ClaimedDelivery[]>;

  /**
   * `completeMany(leases)`, then `claim(params)`, as one call: a store that can do both in one round trip does (the
   * dispatcher hands the completions of the last batch to its next claim). A completed keyed delivery's successor
   * (the next pending delivery of its handler and key) may be claimed in the same call: it is its key's head now.
   * `completed` is in the order of `leases`, as `completeMany` returns it. Completions that succeed are kept even
   * when the claim part fails after them; a failure of the completion part rejects the whole call.
   */
  completeAndClaim(leases: readonly DeliveryLease[], params: ClaimParams): Promise<CompleteAndClaimResult>;

  /**
   * After a claim of this session failed: take every delivery the worker does not hold (`holding`: running, waiting to
   * start, their outcome being written) out of the in-flight lists of the owner's lanes, so it is claimable again (no
   * attempt charged). That claim may have recorded deliveries before its answer was lost; nothing would run or
   * complete them, and every claim skips a delivery in flight, for as long as the owner keeps the lane. Returns how
   * many pending deliveries were forgotten. A store whose claim ran several statements and had one fail after others
   * succeeded hands over what it got and rejects the session's next claim with that failure, before doing anything,
   * so the worker forgets first.
   */
  forgetInFlight(holding: readonly string[]): Promise<number>;

  /**
   * End the session: hand back every lane of the owner that runs nothing, forget what the session kept and give back
   * its connection (whatever happens). Returns how many lanes were handed back. Safe to call again (it hands back
   * again). A worker that claims again later opens a new session (the same owner may).
   */
  close(): Promise<number>;
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
