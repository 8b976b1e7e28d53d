import type { ClaimedDelivery, CompleteAndClaimResult, DeliveryLease } from './contract.js';

/**
 * A claim session (`Store.openClaims`): the part of the store contract a worker claims through, with what a claim
 * must say (`ClaimParams`) and the hints it may carry (`ClaimHints`). The rest of the contract is contract.ts.
 */

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
   * - `'when-due'`: the claim of a light load that looks for unannounced work while wake-ups are heard (the one per
   *   poll interval `'skip'` leaves it to). A store may first look whether any lane it could claim from has work due
   *   for more than a moment that nobody announced; when none has, it hands back the owner's lanes with nothing in
   *   flight and claims as with `'skip'` (only from the lanes the claim names); otherwise as with `'first'`. The
   *   Postgres store: one short statement instead of two several times its length, which a publish arriving meanwhile
   *   waits for.
   */
  readonly freeLanes?: 'skip' | 'first' | 'when-due';
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

/** The store's clock at a claim (`ClaimSession.replayClock`), tied to the worker's. */
export interface ClaimClock {
  /** The store's time at the claim, in ms since the epoch: the clock `ClaimedDelivery.availableAt` is in. */
  readonly storeMs: number;
  /** `performance.now()` when the claim was sent: the worker's clock then, so `storeMs - sentAt` converts it. */
  readonly sentAt: number;
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
   * Set by each claim: the store's clock at that claim while a replay runs (any handler's), undefined while none
   * does. The worker measures its live deliveries' start lag on it and reports it (`Store.reportLiveLag`). Optional:
   * a store that leaves it undefined gets no reports.
   */
  readonly replayClock?: ClaimClock;

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
