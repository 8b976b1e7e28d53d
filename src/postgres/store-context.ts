import { InvalidOptionsError, RelayBusError, StoreUnavailableError } from '../core/errors.js';
import { isRetryableDatabaseError, sqlStateOf } from './retryable-errors.js';
import { HeldConnections } from './held-connections.js';
import { missingSchemaError, PublishProbe } from './publish-probe.js';
import { RetryProbes } from './retry-probes.js';
import { StatisticsKeeper } from './statistics-keeper.js';
import { assertSchemaName, DEFAULT_SCHEMA } from './schema-sql.js';
import type { PostgresDriver, SqlExecutor } from './sql-client.js';
import { loadStatements, type StatementName, type Statements } from './statements.js';

/**
 * What every module of the Postgres store shares (publish.ts, pg-claim-session.ts, fenced-writes.ts, admin.ts): the
 * driver, the loaded statements, the settings and the store-wide hints. Built once by `postgresStore()` from its
 * validated options; nothing in it is per owner (that is each claim session's).
 */

export interface PostgresStoreOptions<TTx> {
  /** The driver: `fromPg(pool)`, `fromPglite(db)`, ... */
  readonly driver: PostgresDriver<TTx>;
  /** Postgres schema of the relaybus tables (default `relaybus`). */
  readonly schema?: string;
  /** Keep an append-only history of completed deliveries (one extra insert per completion; default false). */
  readonly completionHistory?: boolean;
  /**
   * Write an events row for every event (default false). Without it, an event published without an id of yours, with
   * a small payload, on a store without completion history, is written inline: its deliveries carry its type, payload
   * and headers, one row and one index entry fewer per event, but nothing is kept of it once its deliveries complete.
   * With it, every event stays until retention purges it (docs/guide/guarantees.md, "Which events are kept").
   */
  readonly keepEvents?: boolean;
  /**
   * Wake idle workers at once (default true): every publishing transaction sends one NOTIFY at commit, and each
   * dispatcher LISTENs on one connection of its own (where the driver can hold one, beside a pool of two or more).
   * Polling stays the correctness path. Turn it off behind a transaction-mode pooler (PgBouncer: no LISTEN), or when
   * many concurrent single-event publishers matter more than latency (NOTIFY serialises commits on a global lock).
   */
  readonly notify?: boolean;
  /**
   * Each claim loop of a worker holds one connection of the pool for its claim statements (default true), where the
   * driver can lend one (`fromPg`, `fromKysely` with its pool, `fromDrizzle` over a node-postgres pool; elsewhere they
   * run on the pool: postgres.js's reserved connections do not survive a terminated backend, see `fromPostgresJs`).
   * Postgres plans them once there, generically from the first call, instead of six times on every connection a claim
   * lands on, which makes drains a little faster (docs/guide/performance.md, "Where the time goes"). Holds at most half
   * the pool's connections (the listening one counted); a claim loop gives its connection back when it stops or rests, or when a statement on it fails, so
   * `pool.end()` after `bus.stop()` returns at once. Only claim sessions opened with `holdConnection` hold one
   * (`ClaimSessionOptions.holdConnection`: the dispatcher's do): a session you open yourself holds nothing unless you ask.
   * Set it to false behind a transaction-mode pooler (PgBouncer) unless the driver runs without prepared statements:
   * the generic-plan setting is the connection's, and the held connection runs named prepared statements.
   */
  readonly holdClaimConnections?: boolean;
}

export interface StoreContext {
  readonly driver: PostgresDriver<unknown>;
  readonly schema: string;
  readonly statements: Statements;
  /** Completion history is kept (`completionHistory`). */
  readonly history: boolean;
  /** An event without an id of the caller's and with a small payload may be written without an events row. */
  readonly inlineEvents: boolean;
  /** The NOTIFY channel of this schema; null without `notify`. */
  readonly channel: string | null;
  /** The channel of the workers' live lag reports while a replay runs (live-lag.ts); null without `notify`. */
  readonly lagChannel: string | null;
  /** The store LISTENs (notify on, and the driver can hold a listening connection beside its statements' ones). */
  readonly listens: boolean;
  /** Keys whose head this store rescheduled: any of its claim sessions looks them up (they are rows, not an owner's). */
  readonly probes: RetryProbes;
  /** Until the tables are seen, a publish checks for them first, so their absence leaves the caller's transaction usable. */
  readonly publishProbe: PublishProbe;
  /** The connections the claim sessions hold (at most half the pool). */
  readonly held: HeldConnections;
  /** Keeps the planner's statistics of the tables the claims read in step with their size. */
  readonly statistics: StatisticsKeeper;
  /** Run one statement on `executor`; a driver error becomes a `RelayBusError` (`toStoreError`). */
  run<Row extends object>(executor: SqlExecutor, name: StatementName, params: readonly unknown[]): Promise<Row[]>;
  /** Run one statement on the pool. */
  runOwned<Row extends object>(name: StatementName, params: readonly unknown[]): Promise<Row[]>;
}

const UNDEFINED_TABLE = '42P01';

/**
 * Every driver error becomes a `RelayBusError` here, once: `retryable` comes from the one
 * classification (`retryable-errors.ts`), and only a retryable error says a retry is safe.
 */
export function toStoreError(error: unknown, statement: string, schema: string): RelayBusError {
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

function assertBoolean(value: unknown, name: string): void {
  if (value !== undefined && typeof value !== 'boolean')
    throw new InvalidOptionsError(`${name} must be a boolean, got ${JSON.stringify(value)}.`);
}

/** Validate `postgresStore()`'s options and build what its modules share. */
export function createStoreContext<TTx>(options: PostgresStoreOptions<TTx>): StoreContext {
  if (typeof options !== 'object' || options === null || typeof options.driver?.unwrap !== 'function') {
    throw new InvalidOptionsError('postgresStore() needs { driver }, e.g. postgresStore({ driver: fromPg(pool) }).');
  }
  const schema = options.schema ?? DEFAULT_SCHEMA;
  assertSchemaName(schema);
  assertBoolean(options.completionHistory, 'completionHistory');
  assertBoolean(options.keepEvents, 'keepEvents');
  assertBoolean(options.notify, 'notify');
  assertBoolean(options.holdClaimConnections, 'holdClaimConnections');
  const driver = options.driver as PostgresDriver<unknown>;
  const statements = loadStatements(schema);
  const notify = options.notify ?? true;
  // A listener holds a connection for as long as it lives: on a pool of one it would leave the statements none.
  const listens = notify && driver.listen !== undefined && !(driver.poolSize !== undefined && driver.poolSize < 2);
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
  return {
    driver,
    schema,
    statements,
    history: options.completionHistory ?? false,
    inlineEvents: !(options.completionHistory ?? false) && !(options.keepEvents ?? false),
    // An unquoted identifier: schema names are plain, and channels stop at 63 bytes.
    channel: notify ? `relaybus_${schema}`.slice(0, 63) : null,
    // Never another schema's wake-up channel (those start `relaybus_`); unquoted, as PGlite listens.
    lagChannel: notify ? `relaybuslag_${schema}`.slice(0, 63) : null,
    listens,
    probes: new RetryProbes(),
    publishProbe: new PublishProbe(schema, statements),
    // The listening connection is held besides the claim sessions' ones.
    held: new HeldConnections(options.holdClaimConnections === false ? undefined : driver, listens ? 1 : 0),
    statistics: new StatisticsKeeper(),
    run,
    runOwned: (name, params) => run(driver.executor, name, params),
  };
}
