/**
 * The replay part of the store contract (`Store.planReplay` ... `Store.listReplays` in contract.ts): what a replay
 * selects, how it is asked for, and what the store reports of it. See docs/guide/replay.md.
 */

/**
 * Which kept events a replay takes (every selector optional; they combine with AND). Only events that have an events
 * row can be replayed: every event of a store with `keepEvents`, otherwise those published with an id of the caller's,
 * a large payload or completion history (see docs/guide/guarantees.md, "Which events are kept").
 */
export interface ReplayFilter {
  /**
   * These event types only. Default: every type each handler subscribes to (an active subscription). A type a handler
   * does not subscribe to is refused (`InvalidStateError`): its worker would not run the replayed deliveries.
   */
  readonly eventTypes?: readonly string[];
  /** Events published at or after this time ... */
  readonly since?: Date;
  /** ... and before this time. */
  readonly until?: Date;
  /** Events whose id is at or after this one in the ids' text order ... */
  readonly fromEventId?: string;
  /** ... and at or before this one. */
  readonly toEventId?: string;
  /** Events of this ordering key only. */
  readonly key?: string;
}

/**
 * `backfill`: a delivery for each selected event the handler never had one for (a handler added after the events were
 * published). `redrive`: a delivery again for each selected event the handler had one for and has none pending or dead
 * now (it ran: "run these again").
 */
export type ReplayMode = 'backfill' | 'redrive';

export interface ReplayParams extends ReplayFilter {
  readonly mode: ReplayMode;
  /** The handlers to replay to, at least one. */
  readonly handlers: readonly string[];
  /** Who asked, for the audit record (`relaybus replay` records the OS user and host); at most 200 characters. */
  readonly requestedBy?: string;
  /** Why, for the audit record; at most 1,000 characters. */
  readonly reason?: string;
  readonly now?: Date;
}

/** What a replay would create (`planReplay`, the dry run), per handler. */
export interface ReplayPlan {
  readonly mode: ReplayMode;
  /** Selected events, whatever each handler's count. */
  readonly events: number;
  /** Deliveries the replay would create, per handler (every handler asked for, 0 included). */
  readonly deliveries: Readonly<Record<string, number>>;
}

/**
 * `running`: creating its deliveries; while it runs, its handlers' keyed deliveries that are not the replay's wait
 * (each key's history comes before its live events). `finished`: every delivery created (they may still be running).
 * `cancelled`: stopped by `cancelReplay`; the deliveries it created stay.
 */
export type ReplayState = 'running' | 'finished' | 'cancelled';

/** A replay, as the store keeps it: the audit record and the progress. */
export interface ReplayView {
  /** The store's id of the replay (decimal text). */
  readonly id: string;
  readonly mode: ReplayMode;
  readonly handlers: readonly string[];
  /** The filter it was started with (dates as given). */
  readonly filter: ReplayFilter;
  readonly requestedBy: string | null;
  readonly reason: string | null;
  readonly state: ReplayState;
  readonly createdAt: Date;
  /** When it last created deliveries or changed state: an old one on a running replay means no process drives it. */
  readonly updatedAt: Date;
  readonly finishedAt: Date | null;
  /** Deliveries to create, as planned at its start (events that committed later add to it). */
  readonly total: number;
  /** Deliveries created so far. */
  readonly created: number;
  /** Planned deliveries left out when their turn came (the handler got one meanwhile). */
  readonly skipped: number;
}

export interface ReplayStepParams {
  readonly replayId: string;
  /** Events to take in this step, 0..10,000 (default 500); 0 creates nothing and reports where the replay stands. */
  readonly limit?: number;
  readonly now?: Date;
}

/** What one `replayStep` did, and where the replay stands. */
export interface ReplayStepResult {
  readonly replay: ReplayView;
  /** Deliveries created by this step. */
  readonly created: number;
  /**
   * Why this step created nothing while the replay still runs: `in-flight` (its handlers still run keyed deliveries
   * claimed before the replay started; history must not overtake them) or `draining` (the planned events are done
   * and the step waits for the replay's deliveries to finish before it looks for events that committed late).
   * Call again after a short wait.
   */
  readonly waiting?: 'in-flight' | 'draining';
  /** The replay's deliveries not finished yet (pending or running): what a throttle keeps bounded. */
  readonly outstanding: number;
  /**
   * Live traffic held up beside the replay: per handler (the longest first, at most 16), how long its longest-waiting
   * delivery has been due without starting, among the newest deliveries; paused handlers, replayed deliveries and the
   * replay's own handlers left out. Empty when none waits. What `runReplay`'s yield slows down for.
   */
  readonly liveWaits: readonly LiveWait[];
}

/** A handler's live deliveries due and not started yet: how long the longest-waiting one has been due. */
export interface LiveWait {
  readonly handler: string;
  readonly ms: number;
}

export interface ListReplaysParams {
  /** Only replays in this state. */
  readonly state?: ReplayState;
  /** The newest first, at most this many (1..1000, default 100). */
  readonly limit?: number;
}
