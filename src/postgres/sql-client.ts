/**
 * The one interface every Postgres driver adapter implements, so the Postgres store is written once
 * for `pg`, postgres.js, PGlite, Kysely and Drizzle. Adapters normalise results at the
 * boundary: rows come back as plain objects; int8 columns are cast to text in the SQL itself.
 */

/** A statement from `sql/`: a stable name (for named prepared statements) and its text. */
export interface SqlStatement {
  readonly name: string;
  readonly text: string;
}

/** A pool, a client or an open transaction: anything that can run statements. */
export interface SqlExecutor {
  /** Run one parameterised statement and return its rows. */
  run<Row extends object>(statement: SqlStatement, params: readonly unknown[]): Promise<Row[]>;
  /** Run a script of several statements without parameters (setup DDL). */
  exec(script: string): Promise<void>;
  /**
   * True when the driver has already made sure, without a round trip, that this executor runs inside an
   * open transaction block (pg's transaction status, a Kysely or PGlite transaction object that refuses
   * use after it ended): publish then skips its guard statement.
   */
  readonly transactionChecked?: boolean;
}

/**
 * River's Driver[TTx]: connections relaybus runs its own statements on (the dispatcher side), plus
 * `unwrap()` for the caller's transaction of type `TTx`.
 */
export interface PostgresDriver<TTx> {
  /** Autocommit executor on connections the driver manages (a pool, or one database handle). */
  readonly executor: SqlExecutor;
  /** An executor that runs statements inside the caller's transaction `tx`. */
  unwrap(tx: TTx): SqlExecutor;
  /** Open a transaction and hand it to `fn` as the caller's transaction type; commit or roll back. */
  transaction<T>(fn: (tx: TTx) => Promise<T>): Promise<T>;
  /** Several statements can run at once on different connections (false for PGlite). */
  readonly concurrentConnections: boolean;
  /**
   * Subscribe to connection errors the driver kept from crashing the process (a pooled `pg`
   * connection dropped: `pg_terminate_backend`, a restart, a network cut), for logging. The
   * statement in progress has failed with the error already. Returns the unsubscribe function.
   * Absent where such errors only ever surface as failed statements (postgres.js, PGlite) and
   * where the driver cannot reach the pool (Kysely without its `pool` option).
   */
  onConnectionError?(listener: (error: Error) => void): () => void;
  /**
   * LISTEN on `channel` on a connection of its own, calling `onNotify` for each notification and after every
   * (re)connect (a notification sent while nothing listened is lost). Absent where the driver cannot hold such a
   * connection (Kysely without its pool); the dispatcher then only polls.
   */
  listen?(channel: string, onNotify: (payload: string) => void): Promise<Unlisten>;
  /**
   * Lend one connection of the pool, held until released: a claim loop's statements run on it (`ClaimSessions`), so each
   * is planned once there, with a generic plan from its first call (`plan_cache_mode`, set on the connection for as long
   * as relaybus holds it), instead of five custom plans and a generic one on every connection of the pool it lands on.
   * Absent where the driver cannot lend one (the store then runs those statements on `executor`).
   */
  session?(): Promise<SqlSession>;
  /** How many connections the pool may open, where the driver can tell: relaybus holds at most half of them. */
  readonly poolSize?: number;
  /** Close what the driver opened itself (never a pool the caller passed in). */
  close(): Promise<void>;
}

/** A connection lent by `PostgresDriver.session`: its statements run one after another. */
export interface SqlSession extends SqlExecutor {
  /**
   * Give the connection back, with the settings relaybus changed restored; `broken` (a statement on it failed, so the
   * connection may be gone or in an unknown state) closes it instead. Idempotent.
   */
  release(broken: boolean): Promise<void>;
}

/** Stops a listener and gives its connection back. */
export type Unlisten = () => Promise<void>;
