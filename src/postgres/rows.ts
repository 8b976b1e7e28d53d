import type { CancelOutcome, DeliveryStatus, ReplayMode, ReplayState } from '../store/contract.js';
import type { StatementName } from './statements.js';

/**
 * The result columns of every statement of `sql/` that returns rows, as Postgres describes them
 * (column name -> `pg_type.typname`, in SELECT order), and the TypeScript row types derived from
 * them. The description is checked against the server (test/integration/row-types.test.ts, which
 * describes each statement without running it), and the row types the store reads are computed
 * from it, so a column renamed, added, dropped or retyped in SQL fails that test instead of
 * drifting silently from a hand-written interface.
 *
 * Postgres cannot say whether a column may be NULL, nor narrow a text to the literals a CASE
 * yields, so those are stated here per column, for TypeScript only (`nullable`, `typed`).
 */

/**
 * What the drivers hand back for each Postgres type relaybus reads, as the adapters pass it on:
 * timestamptz as a Date, arrays as arrays, jsonb parsed; int8 as text from pg and postgres.js but
 * as a number from PGlite (so the SQL casts ids to text). A type missing here cannot be described:
 * add it with what every driver returns (the test checks each type through each driver).
 */
export interface PgValues {
  bool: boolean;
  int2: number;
  int4: number;
  int8: string | number;
  float8: number;
  text: string;
  jsonb: unknown;
  timestamptz: Date;
  _text: string[];
}

export type PgTypeName = keyof PgValues;

/** Type-only: the TypeScript value of a column. Never set at run time (a column is its type name). */
declare const VALUE: unique symbol;

/** A column: at run time its Postgres type name; for TypeScript also the value a row holds in it. */
export type Column<P extends PgTypeName, T> = P & { readonly [VALUE]: T };

/**
 * What a column of type P may be declared to hold: the driver's value, narrowed as far as the SQL
 * guarantees, or NULL; for a timestamp also its text (the store's readers accept either).
 */
type Holds<P extends PgTypeName> = PgValues[P] | null | (P extends 'timestamptz' ? string : never);

/** A column of type P, never NULL. */
function col<P extends PgTypeName>(type: P): Column<P, PgValues[P]> {
  return type as Column<P, PgValues[P]>;
}

/** A column of type P that may be NULL. */
function nullable<P extends PgTypeName>(type: P): Column<P, PgValues[P] | null> {
  return type as Column<P, PgValues[P] | null>;
}

/**
 * A column of type P holding T: a CASE of known literals (`typed<'text', DeliveryStatus>('text')`), a jsonb of known
 * shape. Both type arguments are explicit (inferring T from the context would widen it).
 */
function typed<P extends PgTypeName, T extends Holds<P>>(type: P): Column<P, T> {
  return type as Column<P, T>;
}

export type Columns = Readonly<Record<string, Column<PgTypeName, unknown>>>;

/** Statements that return no rows (DDL, inserts without RETURNING). The test checks that Postgres agrees. */
export const NO_ROWS = [
  'analyze-deliveries',
  'analyze-events',
  'discard-plans',
  'setup-record',
  'subscribe',
  'upgrade-drop-lane-function',
  'upgrade-lane-function',
  'upgrade-row-lease-deliveries-columns',
  'upgrade-row-lease-deliveries-layout',
  'upgrade-row-lease-drop-indexes',
  'upgrade-row-lease-events-columns',
  'upgrade-row-lease-events-layout',
  'upgrade-row-lease-lock',
  'upgrade-row-lease-rename-unique',
] as const satisfies readonly StatementName[];

/** publish-new and publish-new-one answer alike: the store reads both as one row type. */
const LEAN = {
  ord: col('int4'),
  handlers: nullable('_text'),
  refused: typed<'text', 'exists' | 'no-handlers' | 'no-transaction' | null>('text'),
};

/** Completions and releases: the id of every delivery the statement changed. */
const IDS = { id: col('text') };

/** The leases 0.1 workers still hold (upgrade-row-lease-leases, and the end of upgrade-row-lease-plan). */
const LEASES = {
  leased: col('int4'),
  lease_owners: col('_text'),
  leased_until: typed<'timestamptz', Date | string | null>('timestamptz'),
};

/** The one row of a claim (claim-held-lanes, claim-light): what it claimed, as one JSON text, and its summary. */
const CLAIMED = {
  /**
   * The claimed deliveries (sql/fragments/claimed-rows.sql): a JSON array of `ClaimedTuple`s, heads oldest due first
   * (their followers after them); NULL when the claim picked nothing.
   */
  claimed: nullable('text'),
  /** `lane:epoch` of each lane the claim recorded in flight: a claimed delivery's lease is under its lane's epoch. */
  lane_epochs: col('_text'),
  /** NULL when every listed lease was completed (or none was listed), else the ids completed. */
  completed_ids: nullable('_text'),
  /** Held lanes skipped because they changed while the claim waited. */
  skipped_lanes: col('int4'),
  /** The lanes the claim handed back. */
  handed_back: col('_text'),
  /** Lane, handler and key in turn, where each walked lane's walk resumes (claim-light walks none: NULL). */
  walk_ends: nullable('_text'),
  /** Lanes other workers hold under a lease not expired (claim-held-lanes; claim-light: NULL). */
  peer_lanes: nullable('int4'),
  /** While a replay runs, the statement's time in ms since the epoch (the store's clock); NULL while none runs. */
  replay_clock: nullable('float8'),
} satisfies Columns;

/**
 * One claimed delivery in the claim's JSON text, in the fragment's order: id, lane, claims, its texts (event id, event
 * type, handler, key: one array, escaped by one array_to_json), sequence, payload, headers, attempts, max attempts,
 * available_at and created_at (milliseconds since the epoch), early (claimed before it was due: start it at
 * available_at), after (a follower: the id of the delivery of the same claim that must succeed before it starts).
 */
export type ClaimedTuple = readonly [
  id: string,
  lane: number,
  claims: number,
  texts: readonly [eventId: string, eventType: string, handler: string, key: string | null],
  sequence: string | null,
  payload: unknown,
  headers: Record<string, string> | null,
  attempts: number,
  maxAttempts: number,
  availableAt: number,
  createdAt: number,
  early: boolean,
  after: string | null,
];

/** Values in a `ClaimedTuple`. */
const CLAIMED_TUPLE_LENGTH = 13;

/**
 * The tuples of a claim's `claimed` text; none when it is NULL (the claim picked nothing). The fragment writes each
 * tuple's values as text, one after another: a tuple of another length means a value went missing (a NULL the
 * fragment did not write as 'null'), and every value after it would be read as the one before.
 */
export function claimedTuples(text: string | null): ClaimedTuple[] {
  if (text === null) return [];
  const tuples = JSON.parse(text) as ClaimedTuple[];
  for (const tuple of tuples)
    if (tuple.length !== CLAIMED_TUPLE_LENGTH)
      throw new Error(
        `a claimed delivery came with ${tuple.length} values instead of ${CLAIMED_TUPLE_LENGTH} (sql/fragments/claimed-rows.sql): ${JSON.stringify(tuple).slice(0, 200)}`,
      );
  return tuples;
}

/**
 * Every statement that returns rows, by name. Each statement is either here or in NO_ROWS (a new
 * one in neither fails to compile; in both, too).
 */
export const ROW_COLUMNS = {
  'acquire-lanes': { lanes: col('int4'), charged: col('int4') },
  bury: IDS,
  cancel: {
    id: nullable('text'),
    handler: col('text'),
    outcome: typed<'text', CancelOutcome>('text'),
  },
  'claim-held-lanes': CLAIMED,
  'claim-light': CLAIMED,
  'complete-many': { id: col('text'), next_due: col('bool') },
  'complete-one': IDS,
  'extend-lease': { lane: col('int2') },
  'list-deliveries': {
    id: col('text'),
    event_id: col('text'),
    event_type: col('text'),
    handler: col('text'),
    key: nullable('text'),
    sequence: nullable('text'),
    lane: col('int2'),
    status: typed<'text', DeliveryStatus>('text'),
    attempts: col('int4'),
    max_attempts: col('int4'),
    available_at: col('timestamptz'),
    last_error: nullable('text'),
    created_at: col('timestamptz'),
    updated_at: col('timestamptz'),
    /** The event's payload and headers: null unless asked for ($7), or when no row holds them any more. */
    payload: nullable('jsonb'),
    headers: typed<'jsonb', Readonly<Record<string, string>> | null>('jsonb'),
    /** The page order (the id as a number); the store pages by `id`. */
    sort_id: col('int8'),
  },
  'list-lanes': {
    lane: col('int2'),
    owner: col('text'),
    epoch: col('text'),
    lease_expires_at: col('timestamptz'),
    in_flight: col('int4'),
  },
  'list-subscriptions': {
    event_type: col('text'),
    handler: col('text'),
    max_attempts: col('int4'),
    retry: typed<'jsonb', Record<string, unknown> | null>('jsonb'),
    created_at: col('timestamptz'),
    updated_at: col('timestamptz'),
    seen_at: nullable('timestamptz'),
    pending: col('int4'),
  },
  'list-paused-handlers': { handler: col('text'), paused_at: col('timestamptz'), reason: nullable('text') },
  'pause-handler': { handler: col('text') },
  publish: {
    ord: col('int4'),
    id: col('text'),
    added: col('_text'),
    duplicate: col('bool'),
    conflict: nullable('_text'),
    stored_type: nullable('text'),
    stored_key: nullable('text'),
    no_transaction: col('bool'),
    no_handlers: col('bool'),
    raced: col('bool'),
  },
  'planner-statistics': {
    name: typed<'text', 'deliveries' | 'events'>('text'),
    stale: col('bool'),
    owned: col('bool'),
    pages: col('int4'),
    analyzed_pages: col('int4'),
    analyzed_rows: col('float8'),
  },
  'replay-cancel': { id: col('text') },
  'replay-in-flight': { in_flight: col('int4') },
  'replay-late-plan': { planned: col('int4'), finished: nullable('bool') },
  'replay-live-wait': { handler: col('text'), waited_ms: col('float8') },
  'replay-list': {
    id: col('text'),
    mode: typed<'text', ReplayMode>('text'),
    handlers: col('_text'),
    filter: typed<'jsonb', Record<string, unknown>>('jsonb'),
    requested_by: nullable('text'),
    reason: nullable('text'),
    state: typed<'text', ReplayState>('text'),
    created_at: col('timestamptz'),
    updated_at: col('timestamptz'),
    finished_at: nullable('timestamptz'),
    total: col('text'),
    created: col('text'),
    skipped: col('text'),
  },
  'replay-lock': { locked: col('text') },
  'replay-quiesce': { lanes: col('int4') },
  'replay-no-jit': { jit: col('text') },
  'replay-outstanding': { outstanding: col('int4') },
  'replay-plan': { handler: col('text'), deliveries: col('int4'), events: col('int4'), unsubscribed: col('_text') },
  'replay-start': {
    id: nullable('text'),
    running: nullable('text'),
    unsubscribed_type: nullable('text'),
    unsubscribed_handler: nullable('text'),
  },
  'replay-step': { created: col('int4'), taken: col('int4') },
  'replay-take': {
    state: typed<'text', ReplayState>('text'),
    mode: typed<'text', ReplayMode>('text'),
    handlers: col('_text'),
    filter: typed<'jsonb', Record<string, unknown>>('jsonb'),
    cursor: col('text'),
    planned: col('text'),
    settled: col('bool'),
  },
  'publish-undo': { deliveries: col('int4'), events: col('int4'), restored: col('int4') },
  'publish-guard': { marker: col('text') },
  'resume-handler': { handler: col('text') },
  'publish-new': LEAN,
  'publish-new-one': LEAN,
  'publish-probe': { missing: col('_text'), row_lease: col('bool') },
  'purge-expired': { events: col('int4'), dead_deliveries: col('int4'), history: col('int4') },
  release: IDS,
  relinquish: { lane: col('int2') },
  'report-live-lag': { sent: col('bool') },
  'forget-in-flight': { lane: col('int2'), forgotten: col('int4') },
  'look-due': {
    due: col('bool'),
    handed_back: col('_text'),
    peer_lanes: col('int4'),
    replay_clock: nullable('float8'),
  },
  requeue: IDS,
  reschedule: { id: col('text'), lane: col('int2'), handler: col('text'), key: nullable('text') },
  'setup-applied': { name: col('text') },
  'setup-inspect': {
    schema_exists: col('bool'),
    tables: col('_text'),
    row_lease: col('bool'),
    migrations_table: col('bool'),
  },
  'setup-lock': { locked: col('bool') },
  statistics: {
    handler: nullable('text'),
    pending: col('int4'),
    due: col('int4'),
    scheduled: col('int4'),
    in_flight: col('int4'),
    dead: col('int4'),
    completed: col('int4'),
    oldest_due_at: nullable('timestamptz'),
    lanes_leased: nullable('int4'),
  },
  unsubscribe: { pending: col('int4'), in_flight: col('int4'), removed: col('int4'), buried: col('int4') },
  'upgrade-row-lease-catalog': {
    table_name: col('text'),
    kind: col('text'),
    column_name: nullable('text'),
    column_type: nullable('text'),
  },
  'upgrade-row-lease-convert': {
    last_id: nullable('text'),
    scanned: col('int4'),
    laned: col('int4'),
    moved: col('int4'),
    events: col('int4'),
  },
  'upgrade-row-lease-events-handlers': { events: col('int4') },
  'upgrade-row-lease-key-sequences': { keys: col('int4') },
  'upgrade-row-lease-leases': LEASES,
  'upgrade-row-lease-plan': {
    deliveries: col('int4'),
    pending: col('int4'),
    processing: col('int4'),
    last_attempt: col('int4'),
    completed: col('int4'),
    dead: col('int4'),
    to_convert: col('int4'),
    events: col('int4'),
    unfit: col('int4'),
    ...LEASES,
  },
  'upgrade-row-lease-release': { pending: col('int4'), dead: col('int4') },
} satisfies Record<Exclude<StatementName, (typeof NO_ROWS)[number]>, Columns>;

export type RowStatementName = keyof typeof ROW_COLUMNS;

/** The value a column holds, from its description. */
type ValueOf<C> = C extends { readonly [VALUE]: infer T } ? T : never;

/** The row of statement N (of a union of statements: what any of them returns), as the store reads it. */
export type RowOf<N extends RowStatementName> = N extends RowStatementName
  ? { [K in keyof (typeof ROW_COLUMNS)[N]]: ValueOf<(typeof ROW_COLUMNS)[N][K]> }
  : never;
