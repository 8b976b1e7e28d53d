import { randomInt, randomUUID } from 'node:crypto';
import {
  EventConflictError,
  InvalidInputError,
  InvalidOptionsError,
  RelayBusError,
  StoreUnavailableError,
} from '../core/errors.js';
import { laneOf, LANE_COUNT } from '../core/lanes.js';
import { formatLeaseToken } from '../core/lease-token.js';
import type {
  BuryParams,
  ClaimParams,
  ClaimedDelivery,
  CompleteAndClaimResult,
  DeliveryLease,
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
  SubscribeOptions,
  Subscription,
  LaneView,
  SubscriptionView,
  UnsubscribeParams,
  UnsubscribeResult,
} from '../store/contract.js';
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
import { isRetryableDatabaseError, sqlStateOf } from './retryable-errors.js';
import { assertSchemaName, DEFAULT_SCHEMA } from './schema-sql.js';
import { KeyWalkCursors } from './key-walk-cursors.js';
import { RecordedLanes } from './recorded-lanes.js';
import { ClaimSessions } from './claim-sessions.js';
import { FailedClaims } from './failed-claims.js';
import { RetryProbes } from './retry-probes.js';
import { missingSchemaError, PublishProbe } from './publish-probe.js';
import { claimedTuples, type RowOf } from './rows.js';
import { setupPostgres } from './setup.js';
import type { PostgresDriver, SqlExecutor } from './sql-client.js';
import { loadStatements, type StatementName } from './statements.js';

/**
 * The Postgres store, written once against `PostgresDriver` for every driver. Each contract method
 * runs the statements of `sql/` (one file each); two methods may run more than one. The claim first
 * claims from the lanes the owner holds and, while the batch is not full, takes free lanes in doubling
 * rounds (`acquireRounds`) and claims from them. Publish runs `publish-guard` (pipelined with the next
 * statement) and `publish-new-one` (one event, plain parameters) or `publish-new` (a batch, as typed
 * arrays), which write only when every id is new, every event has a handler (its own or a
 * subscription) and the guard's marker shows a transaction block, and then, only when an id exists
 * already, `publish` (inbox dedup and conflict check) for the whole batch. Publish never runs a
 * statement that fails on bad input: a refusal leaves the caller's transaction usable.
 */

export interface PostgresStoreOptions<TTx> {
  /** The driver: `fromPg(pool)`, `fromPglite(db)`, ... */
  readonly driver: PostgresDriver<TTx>;
  /** Postgres schema of the relaybus tables (default `relaybus`). */
  readonly schema?: string;
  /** Keep an append-only history of completed deliveries (one extra insert per completion; default false). */
  readonly completionHistory?: boolean;
  /**
   * Wake idle workers at once (default true): every publishing transaction sends one NOTIFY at commit, and each
   * dispatcher LISTENs on one connection of its own (where the driver can hold one). Polling stays the correctness
   * path. Turn it off behind a transaction-mode pooler (PgBouncer: no LISTEN), or when many concurrent single-event
   * publishers matter more than latency (NOTIFY serialises commits on a global lock).
   */
  readonly notify?: boolean;
  /**
   * Each claim loop of a worker holds one connection of the pool for its claim statements (default true), where the
   * driver can lend one (`fromPg`, `fromKysely` with its pool, `fromDrizzle` over a node-postgres pool; elsewhere they
   * run on the pool: postgres.js's reserved connections do not survive a terminated backend, see `fromPostgresJs`).
   * Postgres plans them once there, generically from the first call, instead of six times on every connection a claim
   * lands on. Measured: 1.04x and 1.08x the deliveries/s of a 50k drain by 1 and 4 processes (bench/README.md). Holds at most half the pool's connections (the listening one
   * counted); a claim loop gives its connection back when it stops or rests, or when a statement on it fails, so
   * `pool.end()` after `bus.stop()` returns at once. Only claims that say they will relinquish their owner hold one
   * (`ClaimParams.holdConnection`: the dispatcher's do): calling `claim` yourself holds nothing unless you ask.
   * Set it to false behind a transaction-mode pooler (PgBouncer) unless the driver runs without prepared statements:
   * the generic-plan setting is the connection's, and the held connection runs named prepared statements.
   */
  readonly holdClaimConnections?: boolean;
}

const UNDEFINED_TABLE = '42P01';

/**
 * Every driver error becomes a `RelayBusError` here, once: `retryable` comes from the one
 * classification (`retryable-errors.ts`), and only a retryable error says a retry is safe.
 */
function toStoreError(error: unknown, statement: string, schema: string): RelayBusError {
  if (error instanceof RelayBusError) return error;
  const sqlState = sqlStateOf(error);
  const detail = error instanceof Error ? error.message : String(error);
  if (sqlState === UNDEFINED_TABLE) {
    return missingSchemaError(schema, detail, error);
  }
  const retryable = isRetryableDatabaseError(error);
  const state = sqlState === undefined ? '' : ` (SQLSTATE ${sqlState})`;
  const advice = retryable ? ' It is safe to retry.' : '';
  return new StoreUnavailableError(`Postgres statement "${statement}" failed${state}: ${detail}.${advice}`, {
    cause: error,
    retryable,
  });
}

/** The value `publish-guard` sets in the caller's transaction and the publish statements look for. */
const GUARD_MARKER = 'on';

/**
 * The most characters of JSON (payload and headers) an event may have to be published inline: without an events row,
 * carried by each of its deliveries. Below Postgres's TOAST threshold (about 2 kB a row), so a delivery stays one
 * heap tuple; a larger event is written once, in its events row.
 */
const INLINE_EVENT_LIMIT = 1_500;

/** A publish-new row: an event it inserted (with its handlers), or (handlers null) why it wrote nothing. */
type LeanRow = RowOf<'publish-new' | 'publish-new-one'>;

type FullRow = RowOf<'publish'>;

/** What a publish statement did for one event: its result, whether it inserted the event, whether it raced. */
interface Published extends PublishResult {
  /** Inserted by this call (not an existing event that only got handlers). */
  readonly inserted: boolean;
  /** Its id was inserted by a concurrent transaction while the statement ran: nothing was decided for it yet. */
  readonly raced: boolean;
}

/** The results of the full publish statement, after its refusals (no transaction, no handler, a conflict) threw. */
function fullResults(rows: readonly FullRow[], events: readonly PublishParams[]): Published[] {
  if (rows.some((row) => row.no_transaction)) throw notInTransaction();
  const unserved = rows.find((row) => row.no_handlers);
  if (unserved !== undefined) throw noHandlersError(events[unserved.ord - 1]!, unserved.ord - 1);
  if (rows.some((row) => row.conflict !== null)) throw conflictError(rows, events);
  return rows.map((row) => ({
    eventId: row.id,
    addedHandlers: row.added,
    duplicate: row.duplicate,
    inserted: !row.duplicate,
    raced: row.raced,
  }));
}

function notInTransaction(): InvalidInputError {
  return new InvalidInputError(
    'publish() got a transaction that is not in a transaction block (it ended, or never began), so nothing was written. ' +
      'Publish inside the transaction callback, before it returns.',
  );
}

const quote = (value: string | null): string =>
  value === null ? 'null' : JSON.stringify(value.length > 60 ? `${value.slice(0, 60)}...` : value);

/** The conflict error of the first conflicting row (all of them are named in the message). */
function conflictError(rows: readonly FullRow[], events: readonly PublishParams[]): EventConflictError {
  const conflicting = rows.filter((row) => row.conflict !== null);
  const [first] = conflicting;
  const event = events[first!.ord - 1]!;
  const parts = first!.conflict!.map((field) =>
    field === 'type'
      ? `type ${quote(first!.stored_type)} was published again as ${quote(event.type)}`
      : field === 'key'
        ? `key ${quote(first!.stored_key)} was published again as ${quote(event.key ?? null)}`
        : 'the payload differs',
  );
  const others =
    conflicting.length > 1
      ? ` (and ${conflicting.length - 1} more event id(s) of this call: ${conflicting
          .slice(1, 6)
          .map((r) => quote(r.id))
          .join(', ')})`
      : '';
  return new EventConflictError(
    `Event id ${quote(first!.id)} is taken by a different event: ${parts.join('; ')}${others}. An event id names one event; ` +
      'publish a different event under a new id. Nothing was written; your transaction is still usable.',
    first!.id,
    first!.conflict!,
  );
}

/** The lanes a publish named in its NOTIFY payload (`3,17,200`); undefined for an empty or foreign payload. */
export function lanesOfPayload(payload: string): number[] | undefined {
  if (payload === '') return undefined;
  const lanes = payload.split(',').map(Number);
  return lanes.every((lane) => Number.isInteger(lane) && lane >= 0 && lane < LANE_COUNT) ? lanes : undefined;
}

const iso = (date: Date | undefined): string | null => (date === undefined ? null : date.toISOString());
/** A timestamp as the drivers hand it back (a Date, or its text), or as milliseconds since the epoch. */
const toDate = (value: unknown): Date =>
  value instanceof Date ? value : new Date(typeof value === 'number' ? value : String(value));
const toInt = (value: unknown): number => Number(value);

// Row types come from the column descriptions of rows.ts, which a test checks against what Postgres describes.
type ClaimRow = RowOf<'claim-held-lanes'>;
type DeliveryRow = RowOf<'list-deliveries'>;
type SubscriptionRow = RowOf<'list-subscriptions'>;
type StatisticsRow = RowOf<'statistics'>;

/** Rows of a lane that claim-light reads at most (a light load leaves a few pending rows in a lane). */
const LIGHT_ROWS_PER_LANE = 256;

function leaseArrays(leases: readonly ParsedLease[]): [string[], number[], string[], number[]] {
  return [
    leases.map((l) => l.deliveryId),
    leases.map((l) => l.lane),
    leases.map((l) => l.epoch),
    leases.map((l) => l.claims),
  ];
}

/**
 * The deliveries of a claim's JSON text (see `ClaimedTuple`); none when it is NULL. Each one's lease is under the epoch
 * its lane was recorded under (`lane_epochs`, `lane:epoch` each); a delivery of a lane not recorded in flight is not
 * claimed (the statement never returns one: its lanes are locked and unchanged since its snapshot).
 */
function toClaimed(text: string | null, laneEpochs: readonly string[]): ClaimedDelivery[] {
  const tuples = claimedTuples(text);
  if (tuples.length === 0) return [];
  const epochs: string[] = [];
  for (const laneEpoch of laneEpochs) {
    const colon = laneEpoch.indexOf(':');
    epochs[Number(laneEpoch.slice(0, colon))] = laneEpoch.slice(colon + 1);
  }
  // The lease token of a lane's deliveries never claimed before (claims 0, nearly all of them): one string a lane, not one
  // a delivery.
  const firstTokens: string[] = [];
  const claimed: ClaimedDelivery[] = [];
  for (let index = 0; index < tuples.length; index += 1) {
    const [
      id,
      lane,
      claims,
      [eventId, eventType, handler, key],
      sequence,
      payload,
      headers,
      attempts,
      maxAttempts,
      availableAt,
      createdAt,
      early,
      after,
    ] = tuples[index]!;
    const epoch = epochs[lane];
    if (epoch === undefined) continue;
    const leaseToken =
      claims === 0
        ? (firstTokens[lane] ??= formatLeaseToken({ lane, epoch, claims }))
        : formatLeaseToken({ lane, epoch, claims });
    const delivery: ClaimedDelivery = {
      id,
      leaseToken,
      lane,
      eventId,
      eventType,
      handler,
      key,
      sequence,
      payload,
      headers: headers ?? {},
      attempts,
      maxAttempts,
      availableAt: new Date(availableAt),
      createdAt: new Date(createdAt),
    };
    // Set on the object made above rather than spread into a copy: a claim of followers is mostly followers.
    if (after !== null) (delivery as { follows?: string }).follows = after;
    claimed.push(early ? { ...delivery, notBefore: new Date(availableAt) } : delivery);
  }
  return claimed;
}

function toView(row: DeliveryRow): DeliveryView {
  return {
    id: row.id,
    eventId: row.event_id,
    eventType: row.event_type,
    handler: row.handler,
    key: row.key,
    sequence: row.sequence,
    lane: toInt(row.lane),
    status: row.status,
    attempts: toInt(row.attempts),
    maxAttempts: toInt(row.max_attempts),
    availableAt: toDate(row.available_at),
    lastError: row.last_error,
    createdAt: toDate(row.created_at),
    updatedAt: toDate(row.updated_at),
    // Headers are an object whenever the payload was read (a payload may be JSON null itself).
    ...(row.headers === null ? {} : { payload: row.payload, headers: row.headers }),
  };
}

/** The parameters of publish-new and publish: one array per column, the process's handlers flattened per event. */
function publishArrays(
  events: readonly PublishParams[],
  ids: readonly string[],
  payloads: readonly string[],
  headers: readonly string[],
): unknown[] {
  const handlerOrd: number[] = [];
  const handlerName: string[] = [];
  const handlerAttempts: number[] = [];
  events.forEach((event, index) => {
    for (const handler of event.handlers) {
      handlerOrd.push(index + 1);
      handlerName.push(handler.name);
      handlerAttempts.push(handler.maxAttempts);
    }
  });
  return [
    ids,
    events.map((event) => event.type),
    events.map((event) => event.key ?? null),
    payloads,
    headers,
    events.map((event, index) => laneOf(event.key, ids[index]!)),
    events.map((event) => iso(event.availableAt)),
    handlerOrd,
    handlerName,
    handlerAttempts,
  ];
}

/** A Postgres store: the lane-lease delivery path over one schema. */
export interface PostgresStore<TTx> extends Store<TTx> {
  readonly kind: 'postgres';
  /** The Postgres schema the tables live in. */
  readonly schema: string;
  /**
   * Subscribe to dropped-connection errors the driver kept from crashing the process (for logging;
   * the statement in progress has failed already). Returns the unsubscribe function; a no-op for
   * drivers that never emit them (postgres.js, PGlite).
   */
  onConnectionError(listener: (error: Error) => void): () => void;
}

/**
 * Create the Postgres store.
 *
 * ```ts
 * import pg from 'pg';
 * import { postgresStore, fromPg } from 'relaybus/postgres';
 * const store = postgresStore({ driver: fromPg(new pg.Pool({ connectionString: process.env.DATABASE_URL })) });
 * await store.setup();
 * ```
 */
export function postgresStore<TTx>(options: PostgresStoreOptions<TTx>): PostgresStore<TTx> {
  if (typeof options !== 'object' || options === null || typeof options.driver?.unwrap !== 'function') {
    throw new InvalidOptionsError('postgresStore() needs { driver }, e.g. postgresStore({ driver: fromPg(pool) }).');
  }
  const schema = options.schema ?? DEFAULT_SCHEMA;
  assertSchemaName(schema);
  if (options.completionHistory !== undefined && typeof options.completionHistory !== 'boolean') {
    throw new InvalidOptionsError(
      `completionHistory must be a boolean, got ${JSON.stringify(options.completionHistory)}.`,
    );
  }
  const { driver } = options;
  const history = options.completionHistory ?? false;
  const statements = loadStatements(schema);
  const walks = new KeyWalkCursors();
  const recordedLanes = new RecordedLanes();
  const probes = new RetryProbes();
  /** Until the tables are seen, a publish checks for them first, so their absence leaves the caller's transaction usable. */
  const publishProbe = new PublishProbe(schema, statements);
  const failedClaims = new FailedClaims();
  /**
   * Owners that may hold lanes: their last claim claimed or completed something. One not here (new, relinquished, or
   * its last claim found nothing) likely holds none, so its claim takes free lanes first (see claimCycle).
   */
  const mayHoldLanes = new Set<string>();
  /** Lanes each owner's last claim that took any took in all: its next claim's first round (`acquireRounds`). */
  const lanesTakenLast = new Map<string, number>();
  if (options.notify !== undefined && typeof options.notify !== 'boolean') {
    throw new InvalidOptionsError(`notify must be a boolean, got ${JSON.stringify(options.notify)}.`);
  }
  const notify = options.notify ?? true;
  if (options.holdClaimConnections !== undefined && typeof options.holdClaimConnections !== 'boolean') {
    throw new InvalidOptionsError(
      `holdClaimConnections must be a boolean, got ${JSON.stringify(options.holdClaimConnections)}.`,
    );
  }
  /** The NOTIFY channel of this schema (an unquoted identifier: schema names are plain, and channels stop at 63 bytes). */
  const channel = notify ? `relaybus_${schema}`.slice(0, 63) : null;
  const listens = notify && driver.listen !== undefined;

  async function run<Row extends object>(
    executor: SqlExecutor,
    name: StatementName,
    params: readonly unknown[],
  ): Promise<Row[]> {
    try {
      return await executor.run<Row>(statements[name], params);
    } catch (error) {
      throw toStoreError(error, name, schema);
    }
  }
  const runOwned = <Row extends object>(name: StatementName, params: readonly unknown[]) =>
    run<Row>(driver.executor, name, params);
  /** A claim loop's connection, where the driver lends one (the listening connection is held besides). */
  const sessions = new ClaimSessions(options.holdClaimConnections === false ? undefined : driver, listens ? 1 : 0);

  /** Run a fenced single-delivery write; true when the statement returned its row. */
  async function fenced(name: StatementName, lease: ParsedLease, extra: readonly unknown[]): Promise<boolean> {
    const rows = await runOwned(name, [lease.deliveryId, lease.lane, lease.epoch, lease.claims, ...extra]);
    return rows.length > 0;
  }

  /** Run a fenced write of many deliveries (`extra`: the statement's parameters after the lease arrays). */
  async function fencedMany<Name extends 'complete-many' | 'release'>(
    name: Name,
    leases: readonly DeliveryLease[],
    now: Date | undefined,
    extra: readonly unknown[],
  ): Promise<{ done: boolean[]; rows: RowOf<Name>[] }> {
    const parsed = parseLeases(leases);
    assertOptionalDate(now, 'now');
    if (parsed.length === 0) return { done: [], rows: [] };
    const rows = await runOwned<RowOf<Name>>(name, [...leaseArrays(parsed), ...extra]);
    const ids = new Set(rows.map((row) => row.id));
    // A lease listed twice succeeds once, as it would in two calls.
    return { done: parsed.map((lease) => ids.delete(lease.deliveryId)), rows };
  }

  /**
   * One claim: complete `leases` and claim from the held lanes in one statement, then, while the batch is not full,
   * take free lanes in doubling rounds (`acquireRounds`) and claim from them; with `acquireWhenFull`, a full batch still
   * takes a few lanes (their work comes with the next claim). An owner that likely holds no lane, or a caller under a
   * light load (`freeLanesFirst`), takes free lanes first.
   */
  async function claimCycle(params: ClaimParams, leases: readonly ParsedLease[]): Promise<CompleteAndClaimResult> {
    const { owner, handlers, limit, leaseDurationMs } = params;
    failedClaims.throwHidden(owner);
    const now = iso(params.now);
    const lookaheadMs = params.retryLookaheadMs ?? 0;
    /** The claim's statements run on the owner's connection when the caller relinquishes it (`ClaimSessions`). */
    const runClaim = <Row extends object>(name: StatementName, values: readonly unknown[]) =>
      params.holdConnection === true
        ? sessions.run(owner, driver.executor, (executor) => run<Row>(executor, name, values))
        : run<Row>(driver.executor, name, values);
    /**
     * The one row of a claim statement, and what it claimed. The walks move on, then the lanes it handed back lose their
     * cursors (in that order: a handed-back lane may have walked in the same claim).
     */
    const readClaim = (rows: readonly ClaimRow[]) => {
      const [summary] = rows;
      if (summary === undefined)
        throw new StoreUnavailableError('a claim statement returned no row; it always returns one');
      if (summary.walk_ends) walks.move(owner, summary.walk_ends);
      if (summary.handed_back.length > 0) walks.drop(owner, summary.handed_back);
      recordedLanes.claimed(owner, summary.lane_epochs, summary.handed_back);
      const claimedRows = toClaimed(summary.claimed, summary.lane_epochs);
      // What counts against the limit: followers come beyond it.
      let heads = 0;
      for (const row of claimedRows) if (row.follows === undefined) heads += 1;
      return { summary, claimedRows, heads };
    };
    /**
     * Claim from the held lanes and from the free lanes of `take` (taken when they give work): `want` heads at most,
     * `room` rows with their followers.
     */
    const claimHeldOnce = async (
      want: number,
      room: number,
      complete: readonly ParsedLease[],
      take: readonly number[],
    ) => {
      const rows = await runClaim<ClaimRow>('claim-held-lanes', [
        owner,
        handlers,
        want,
        leaseDurationMs,
        now,
        ...walks.parameters(owner),
        ...leaseArrays(complete),
        history,
        ...probes.due((params.now ?? new Date()).getTime(), lookaheadMs),
        take,
        lookaheadMs,
        params.followers ?? 0,
        params.siblingOwners ?? [],
        room,
      ]);
      const { summary, claimedRows, heads } = readClaim(rows);
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
    };
    /**
     * claim-light: a claim with nothing riding on it and no retried head to look up, from a caller under a light
     * load (it leaves free lanes to its poll: `skipFreeLanes`). A third of claim-held-lanes's plan, which under a
     * light load cost more to set up than to run; a lane whose keys need more than LIGHT_ROWS_PER_LANE rows is read in
     * part, and its other heads wait for the next claim-held-lanes (at least one per poll interval: the one that
     * looks at free lanes).
     */
    const claimLightOnce = async (want: number, take: readonly number[]) => {
      const rows = await runClaim<ClaimRow>('claim-light', [
        owner,
        handlers,
        want,
        leaseDurationMs,
        now,
        LIGHT_ROWS_PER_LANE,
        take,
        recordedLanes.of(owner, take),
      ]);
      const { summary, claimedRows, heads } = readClaim(rows);
      return { claimedRows, heads, completed: [], skippedLanes: summary.skipped_lanes, peerLanes: undefined };
    };
    const light =
      leases.length === 0 &&
      params.skipFreeLanes === true &&
      probes.due((params.now ?? new Date()).getTime(), lookaheadMs)[0].length === 0;
    /**
     * Claim up to `want` more heads, within the rows this claim may still hand out: a claim's statements together bring
     * at most `limit` x (1 + followers) rows (`ClaimParams.followers`), though each gives its heads the room the heads it
     * did not find leave.
     */
    const claimHeld = async (want: number, complete: readonly ParsedLease[], take: readonly number[] = []) => {
      const room = rowsAtMost - claimed.length;
      const claimOnce = light
        ? (w: number) => claimLightOnce(w, take)
        : (w: number, r: number, c: readonly ParsedLease[]) => claimHeldOnce(w, r, c, take);
      try {
        const first = await claimOnce(Math.min(want, room), room, complete);
        const roomLeft = room - first.claimedRows.length;
        if (first.skippedLanes === 0 || first.heads >= want || roomLeft <= 0) return first;
        // Held lanes changed while the claim waited for them (a renewal, a reschedule, another loop of this owner): it
        // left them alone rather than trust its older snapshot. Ask them again at once, or their due work would wait
        // for the next wake-up or poll.
        const again = await claimOnce(Math.min(want - first.heads, roomLeft), roomLeft, []);
        return {
          ...first,
          claimedRows: [...first.claimedRows, ...again.claimedRows],
          heads: first.heads + again.heads,
        };
      } catch (error) {
        failedClaims.failed(owner, take);
        throw error;
      }
    };
    const acquire = (take: number, prefer: readonly number[] = params.preferLanes ?? []) =>
      runClaim<RowOf<'acquire-lanes'>>('acquire-lanes', [
        owner,
        handlers,
        take,
        randomInt(LANE_COUNT),
        leaseDurationMs,
        now,
        prefer,
      ]);
    /** Lanes of retried heads due again that the last claim did not return: their lanes are not held by this owner. */
    const retryLanes = () => probes.dueLanes((params.now ?? new Date()).getTime(), lookaheadMs);
    const claimed: ClaimedDelivery[] = [];
    /** The most rows this claim hands out, heads and followers, over all its statements. */
    const rowsAtMost = limit * (1 + (params.followers ?? 0));
    /** Lanes other workers hold, as the last claim of the held lanes saw them (undefined: none ran, or claim-light). */
    let peerLanes: number | undefined;
    /** The deliveries of `claimed` that count against the limit (not followers). */
    let heads = 0;
    /** Which of `leases` the first claim of `acquireAndClaim` completed (undefined: none ran). */
    let completedFirst: boolean[] | undefined;
    /**
     * Take free lanes with due work, `acquireRounds()` lanes at a time, and claim from the held lanes after each round,
     * until the batch is full, a claim finds nothing, or a round took fewer lanes than it asked (no more free lanes with
     * due work). With `alwaysClaim`, the held lanes are asked once even when the first round took no lane. `complete`
     * rides on the first claim, which also takes the free lanes of `namedLanes` that give work (a retried head's lane,
     * whose head an acquire does not see before it is due).
     */
    const acquireAndClaim = async (
      alwaysClaim: boolean,
      complete: readonly ParsedLease[] = [],
      namedLanes: readonly number[] = [],
    ) => {
      let takenInAll = 0;
      let first = true;
      try {
        for (const take of acquireRounds(lanesTakenLast.get(owner))) {
          if (claimed.length >= rowsAtMost) break;
          // Lanes of retried heads due again are tried first, after those a wake-up named.
          const [acquired] = await acquire(take, [...(params.preferLanes ?? []), ...retryLanes()]);
          const taken = acquired ? toInt(acquired.lanes) : 0;
          takenInAll += taken;
          if (taken === 0 && !(alwaysClaim && first)) break;
          const more = await claimHeld(limit - heads, first ? complete : [], first ? namedLanes : []);
          if (first) completedFirst = more.completed;
          first = false;
          claimed.push(...more.claimedRows);
          heads += more.heads;
          peerLanes = more.peerLanes;
          if (taken < take || more.heads === 0 || heads >= limit) break;
        }
      } finally {
        if (takenInAll > 0) lanesTakenLast.set(owner, takenInAll);
        else lanesTakenLast.delete(owner);
      }
    };
    // The free lanes a wake-up named and those of retried heads due again (handed back while the head waited out its
    // backoff) are claimed from in the same statement as the held lanes, and taken when they give work: one statement
    // for a delivery published into a free lane, and a retried head comes back first even when the batch is full.
    const named = [...(params.preferLanes ?? []), ...retryLanes()];
    let completed: boolean[];
    const scanFree = params.skipFreeLanes !== true;
    const freeFirst =
      scanFree &&
      ((leases.length === 0 && !mayHoldLanes.has(owner) && named.length === 0) || params.freeLanesFirst === true);
    if (freeFirst) {
      // The owner is new, or its last claim found nothing, so it likely holds no lane (a claim hands back lanes that run
      // nothing), or the caller is under a light load (its held lanes will not fill the batch, so free lanes would be
      // looked at anyway): take free lanes first, then claim from every held lane, the completions riding on that
      // claim. Two statements when free lanes have work instead of three, and a worker's first claim does not ask for
      // lanes it cannot hold yet; a lane still held is asked all the same.
      try {
        await acquireAndClaim(true, leases, named);
      } catch (error) {
        // As below: what was claimed or completed is recorded, so it is handed over; the next claim rejects with the
        // failure.
        if (claimed.length === 0 && (leases.length === 0 || completedFirst === undefined)) throw error;
        failedClaims.hide(owner, error);
      }
      completed = completedFirst ?? leases.map(() => false);
    } else {
      const first = await claimHeld(limit, leases, named);
      claimed.push(...first.claimedRows);
      heads = first.heads;
      completed = first.completed;
      peerLanes = first.peerLanes;
      try {
        if (heads < limit) {
          // Shallow queue: the held lanes did not fill the batch. Unless the caller leaves free lanes to its poll's claim
          // (skipFreeLanes), take free lanes with due work, doubling each round, unless the held lanes' runs took every
          // row this claim may bring. Also when a wake-up's lanes gave work: work no publish named (a delayed delivery
          // come due, a crashed worker's expired lane, a publish without NOTIFY) is found by no other claim, and under a
          // steady stream of publishes every claim that looks is one a wake-up named lanes to (it waited 10 s and more).
          if (scanFree && claimed.length < rowsAtMost) await acquireAndClaim(false);
        } else if (params.acquireWhenFull === true) {
          // Deep backlog: the caller asks (once per lease duration) for a few lanes anyway, so the lanes of a crashed
          // worker are taken over (and its work re-run) while everyone is busy.
          await acquire(TAKEOVER_ROUND);
        }
      } catch (error) {
        // What was claimed (and completed) is recorded: hand it over, or it would stay stuck in flight in this owner's
        // lanes while the owner lives. The failed statement may have recorded more: the next claim rejects with the
        // failure, so the worker forgets that first (FailedClaims).
        if (claimed.length === 0 && leases.length === 0) throw error;
        failedClaims.hide(owner, error);
      }
    }
    if (claimed.length === 0 && !completed.includes(true)) mayHoldLanes.delete(owner);
    else mayHoldLanes.add(owner);
    return peerLanes === undefined ? { claimed, completed } : { claimed, completed, peerLanes };
  }

  return {
    kind: 'postgres',
    schema,
    capabilities: Object.freeze({
      transactions: true,
      completionHistory: history,
      wakeups: listens ? 'listen-notify' : 'poll',
      concurrentConnections: driver.concurrentConnections,
    }),

    async subscribeWakeups(onWake: (lanes?: readonly number[]) => void) {
      if (!listens || driver.listen === undefined) return async () => {};
      return driver.listen(channel!, (payload) => onWake(lanesOfPayload(payload)));
    },

    async setup() {
      try {
        await setupPostgres(driver, schema, statements);
        publishProbe.markFound();
      } catch (error) {
        throw toStoreError(error, 'setup', schema);
      }
    },

    async publish(tx: TTx, events: readonly PublishParams[], now?: Date): Promise<PublishResult[]> {
      const payloads = validatePublish(events, now);
      if (events.length === 0) return [];
      const executor = driver.unwrap(tx);
      await publishProbe.check(executor, (on, params) => run(on, 'publish-probe', params));
      const ids = events.map((event) => event.id ?? randomUUID());
      // Outside a transaction block (a transaction object used after it ended) a statement would autocommit. No
      // single statement can tell, so a guard statement sets a transaction-local marker first, pipelined where the
      // driver allows, and the publish statements write only where they see it. Nothing ever fails: the caller's
      // transaction stays usable.
      const guard = executor.transactionChecked === true ? null : GUARD_MARKER;
      // The common case, every id new, takes one statement (publish-new). It returns the events it inserted, or one row
      // saying why it wrote nothing (an id exists already, an event has no handler, or no transaction).
      // The arrays of publish-new and publish, built once and only when a statement needs them (not for one new event).
      const headers = events.map((event) => JSON.stringify(event.headers ?? {}));
      let arrays: unknown[] | undefined;
      const params = () => (arrays ??= [...publishArrays(events, ids, payloads, headers), guard, iso(now), channel]);
      const inline = events.map(
        (event, i) =>
          event.id === undefined && !history && payloads[i]!.length + headers[i]!.length <= INLINE_EVENT_LIMIT,
      );
      const [first] = events;
      const lean = () =>
        events.length === 1
          ? run<LeanRow>(executor, 'publish-new-one', [
              ids[0],
              first!.type,
              first!.key ?? null,
              payloads[0],
              headers[0],
              first!.handlers.map((h) => h.name),
              first!.handlers.map((h) => h.maxAttempts),
              laneOf(first!.key, ids[0]!),
              iso(first!.availableAt),
              guard,
              iso(now),
              channel,
              inline[0],
            ])
          : run<LeanRow>(executor, 'publish-new', [...params(), inline]);
      let rows: LeanRow[];
      if (guard === null) {
        rows = await lean();
      } else {
        [, rows] = await Promise.all([run(executor, 'publish-guard', []), lean()]);
        // A driver may run the two in either order: ask once more, after the guard has run, before refusing.
        if (rows.some((row) => row.refused === 'no-transaction')) rows = await lean();
        if (rows.some((row) => row.refused === 'no-transaction')) throw notInTransaction();
      }
      const unserved = rows.find((row) => row.refused === 'no-handlers');
      if (unserved !== undefined) throw noHandlersError(events[unserved.ord - 1]!, unserved.ord - 1);
      // An id exists, or (no row at all) a concurrent transaction inserted the one new id first and nothing was
      // written: the full statement (inbox dedup, conflict check) runs for the whole batch, in the same transaction.
      let results: Published[];
      if (rows.length === 0 || rows.some((row) => row.refused === 'exists')) {
        results = fullResults(await run<FullRow>(executor, 'publish', params()), events);
      } else {
        // An event without a row was not inserted: a concurrent transaction inserted its id first.
        const added = new Map<number, string[]>(rows.map((row) => [toInt(row.ord), row.handlers ?? []]));
        results = ids.map((eventId, index) => {
          const handlers = added.get(index + 1);
          return handlers === undefined
            ? { eventId, addedHandlers: [], duplicate: true, raced: true, inserted: false }
            : { eventId, addedHandlers: handlers, duplicate: false, raced: false, inserted: true };
        });
      }
      const raced = results.flatMap((result, index) => (result.raced ? [index] : []));
      if (raced.length > 0) {
        // Publish the raced events again: their ids are committed now, so the full statement sees them (inbox dedup,
        // or a conflict). On a conflict, take back everything this call wrote and throw: a batch writes all or nothing.
        const pick = <T>(values: readonly T[]) => raced.map((index) => values[index]!);
        const subset = pick(events);
        const again = await run<FullRow>(executor, 'publish', [
          ...publishArrays(subset, pick(ids), pick(payloads), pick(headers)),
          guard,
          iso(now),
          channel,
        ]);
        if (again.some((row) => row.conflict !== null)) {
          const added = results.flatMap((result, index) => result.addedHandlers.map((handler) => ({ index, handler })));
          await run(executor, 'publish-undo', [
            added.map(({ index }) => ids[index]),
            added.map(({ handler }) => handler),
            added.map(({ index }) => laneOf(events[index]!.key, ids[index]!)),
            added.map(({ index }) => events[index]!.key ?? null),
            results.flatMap((result) => (result.inserted ? [result.eventId] : [])),
          ]);
          throw conflictError(again, subset);
        }
        const settled = fullResults(again, subset);
        if (settled.some((result) => result.raced))
          throw new StoreUnavailableError(
            'An event id of this publish was inserted by a concurrent transaction twice in a row; nothing is decided for it. It is safe to retry.',
            { retryable: true },
          );
        raced.forEach((index, n) => {
          results[index] = settled[n]!;
        });
      }
      return results.map(({ eventId, addedHandlers, duplicate }) => ({ eventId, addedHandlers, duplicate }));
    },

    async subscribe(subscriptions: readonly Subscription[], options?: SubscribeOptions): Promise<void> {
      const retries = validateSubscriptions(subscriptions, options);
      if (subscriptions.length === 0) return;
      await runOwned('subscribe', [
        subscriptions.map((s) => s.eventType),
        subscriptions.map((s) => s.handler),
        subscriptions.map((s) => s.maxAttempts),
        retries,
        iso(options?.now),
        options?.seen ?? true,
      ]);
    },

    async listLanes(): Promise<LaneView[]> {
      const rows = await runOwned<RowOf<'list-lanes'>>('list-lanes', []);
      return rows.map((row) => ({
        lane: toInt(row.lane),
        owner: row.owner,
        epoch: row.epoch,
        leaseExpiresAt: toDate(row.lease_expires_at),
        inFlight: toInt(row.in_flight),
      }));
    },

    async listSubscriptions(): Promise<SubscriptionView[]> {
      const rows = await runOwned<SubscriptionRow>('list-subscriptions', []);
      return rows.map((row) => ({
        eventType: row.event_type,
        handler: row.handler,
        maxAttempts: toInt(row.max_attempts),
        retry: row.retry,
        createdAt: toDate(row.created_at),
        updatedAt: toDate(row.updated_at),
        seenAt: row.seen_at === null ? null : toDate(row.seen_at),
        pending: toInt(row.pending),
      }));
    },

    async unsubscribe(params: UnsubscribeParams): Promise<UnsubscribeResult> {
      validateUnsubscribe(params);
      const [row] = await runOwned<RowOf<'unsubscribe'>>('unsubscribe', [
        params.handler,
        params.eventType ?? null,
        params.buryPending ?? null,
        iso(params.now),
      ]);
      const refused = unsubscribeRefusal(params, toInt(row!.pending), toInt(row!.in_flight));
      if (refused !== undefined) throw refused;
      return { removed: toInt(row!.removed), buried: toInt(row!.buried) };
    },

    async claim(params: ClaimParams): Promise<ClaimedDelivery[]> {
      validateClaim(params);
      return (await claimCycle(params, [])).claimed;
    },

    async completeAndClaim(leases: readonly DeliveryLease[], params: ClaimParams): Promise<CompleteAndClaimResult> {
      const parsed = parseLeases(leases);
      validateClaim(params);
      return claimCycle(params, parsed);
    },

    async forgetInFlight(params: ForgetInFlightParams): Promise<number> {
      validateForgetInFlight(params);
      const rows = await runOwned<RowOf<'forget-in-flight'>>('forget-in-flight', [
        params.owner,
        params.holding,
        failedClaims.namedLanes(params.owner),
      ]);
      failedClaims.forgotten(params.owner);
      let forgotten = 0;
      for (const row of rows) forgotten += toInt(row.forgotten);
      return forgotten;
    },

    async extendLease(params: ExtendLeaseParams): Promise<ExtendLeaseResult> {
      validateExtendLease(params);
      if (params.lanes.length === 0) return { extended: [], lost: [] };
      const rows = await runOwned<RowOf<'extend-lease'>>('extend-lease', [
        params.owner,
        params.lanes.map((l) => l.lane),
        params.lanes.map((l) => l.epoch),
        params.leaseDurationMs,
        iso(params.now),
      ]);
      const extended = new Set(rows.map((row) => toInt(row.lane)));
      const lanes = params.lanes.map((l) => l.lane);
      return { extended: lanes.filter((l) => extended.has(l)), lost: lanes.filter((l) => !extended.has(l)) };
    },

    async completeMany(leases, now) {
      return (await fencedMany('complete-many', leases, now, [history, iso(now)])).done;
    },

    async completeManyReportingNext(leases, now) {
      const { done, rows } = await fencedMany('complete-many', leases, now, [history, iso(now)]);
      return { completed: done, nextDue: rows.some((row) => row.next_due) };
    },

    async complete(lease: DeliveryLease, tx: TTx, now?: Date): Promise<boolean> {
      const parsed = parseLease(lease);
      assertOptionalDate(now, 'now');
      const rows = await run(driver.unwrap(tx), 'complete-one', [
        parsed.deliveryId,
        parsed.lane,
        parsed.epoch,
        parsed.claims,
        history,
        iso(now),
      ]);
      return rows.length > 0;
    },

    async reschedule(lease: DeliveryLease, params: RescheduleParams): Promise<boolean> {
      const parsed = parseLease(lease);
      const error = validateReschedule(params);
      const [row] = await runOwned<RowOf<'reschedule'>>('reschedule', [
        parsed.deliveryId,
        parsed.lane,
        parsed.epoch,
        parsed.claims,
        iso(params.availableAt),
        error,
        iso(params.now),
      ]);
      if (row?.key != null) probes.add(toInt(row.lane), row.handler, row.key, params.availableAt);
      return row !== undefined;
    },

    async bury(lease: DeliveryLease, params: BuryParams): Promise<boolean> {
      const parsed = parseLease(lease);
      const error = validateBury(params);
      return fenced('bury', parsed, [error, iso(params.now)]);
    },

    async release(leases, now) {
      return (await fencedMany('release', leases, now, [iso(now)])).done;
    },

    async relinquish(owner: string): Promise<number> {
      assertName(owner, 'owner');
      walks.forget(owner);
      recordedLanes.forget(owner);
      failedClaims.forgotten(owner);
      mayHoldLanes.delete(owner);
      lanesTakenLast.delete(owner);
      try {
        return (await runOwned('relinquish', [owner])).length;
      } finally {
        await sessions.release(owner);
      }
    },

    async requeue(params: RequeueParams): Promise<number> {
      validateRequeue(params);
      const rows = await runOwned('requeue', [
        params.deliveryIds ? [...params.deliveryIds] : null,
        params.handler ?? null,
        params.eventId ?? null,
        iso(params.now),
      ]);
      return rows.length;
    },

    async listDeliveries(params: ListDeliveriesParams = {}): Promise<Page<DeliveryView>> {
      const { limit, cursor } = validateList(params);
      const rows = await runOwned<DeliveryRow>('list-deliveries', [
        params.status ?? null,
        params.handler ?? null,
        params.eventId ?? null,
        params.key ?? null,
        cursor,
        limit + 1,
        params.withPayload ?? false,
      ]);
      const items = rows.slice(0, limit).map(toView);
      return { items, nextCursor: rows.length > limit ? items[items.length - 1]!.id : null };
    },

    async statistics(now?: Date): Promise<Statistics> {
      assertOptionalDate(now, 'now');
      const at = now ?? new Date();
      const rows = await runOwned<StatisticsRow>('statistics', [iso(now)]);
      const handlers: Record<string, HandlerStatistics> = {};
      let lanesLeased = 0;
      for (const row of rows) {
        if (row.handler === null) {
          lanesLeased = toInt(row.lanes_leased);
          continue;
        }
        const oldest = row.oldest_due_at === null ? null : toDate(row.oldest_due_at).getTime();
        handlers[row.handler] = {
          pending: toInt(row.pending),
          due: toInt(row.due),
          scheduled: toInt(row.scheduled),
          inFlight: toInt(row.in_flight),
          dead: toInt(row.dead),
          completed: toInt(row.completed),
          oldestDueAgeMs: oldest === null ? null : Math.max(0, at.getTime() - oldest),
        };
      }
      return withTotals(handlers, lanesLeased);
    },

    async purgeExpired(params: PurgeParams): Promise<PurgeResult> {
      validatePurge(params);
      const [row] = await runOwned<RowOf<'purge-expired'>>('purge-expired', [
        params.completedRetentionMs,
        params.deadRetentionMs,
        iso(params.now),
      ]);
      return { events: toInt(row?.events), deadDeliveries: toInt(row?.dead_deliveries), history: toInt(row?.history) };
    },

    async transaction<T>(fn: (tx: TTx) => Promise<T>): Promise<T> {
      let thrown: { error: unknown } | undefined;
      try {
        return await driver.transaction(async (tx) => {
          try {
            return await fn(tx);
          } catch (error) {
            thrown = { error };
            throw error;
          }
        });
      } catch (error) {
        // What the caller's fn threw is theirs, as it is; a driver error (opening, committing) is classified like any.
        if (thrown !== undefined && error === thrown.error) throw error;
        throw toStoreError(error, 'transaction', schema);
      }
    },

    onConnectionError(listener: (error: Error) => void): () => void {
      return driver.onConnectionError?.(listener) ?? (() => {});
    },

    async close() {
      await sessions.releaseAll();
      await driver.close();
    },
  };
}
