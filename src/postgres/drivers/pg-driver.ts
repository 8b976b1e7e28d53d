import { InvalidInputError } from '../../core/errors.js';
import type { PostgresDriver, SqlExecutor, SqlSession, SqlStatement } from '../sql-client.js';
import { toArrayLiteral } from './array-literal.js';
import { guardCheckedOut, guardPgPool } from './connection-errors.js';
import { listenOnPgPool } from './pg-listener.js';
import { runGuarded } from './transaction-guard.js';

/**
 * The `pg` (node-postgres) driver. Structural types only, so relaybus never imports `pg` itself and
 * works with whichever copy the application installed. Statements run as named prepared statements
 * (`{ name, text, values }`) unless `preparedStatements: false` (transaction-mode PgBouncer).
 */

/** What relaybus needs of a `pg.QueryResult`. */
export interface PgQueryResultLike {
  readonly rows: unknown[];
}

/** A `pg.Client` or `pg.PoolClient`: the caller's transaction is a client after `BEGIN`. */
export interface PgClientLike {
  query(config: { text: string; values?: unknown[]; name?: string }): Promise<PgQueryResultLike>;
  query(text: string): Promise<PgQueryResultLike>;
  /** pg >= 8.12: 'I' idle (no transaction), 'T' in a transaction, 'E' in a failed transaction. */
  getTransactionStatus?(): string | null;
}

/** A `pg.PoolClient`: a client that goes back to its pool. */
export interface PgPoolClientLike extends PgClientLike {
  release(error?: Error | boolean): void;
}

/** A `pg.Pool`. */
export interface PgPoolLike extends PgClientLike {
  connect(): Promise<PgPoolClientLike>;
  end(): Promise<void>;
  /** `pg.Pool`'s options: `max` is how many connections it may open (10 unless set). */
  readonly options?: { readonly max?: number };
}

/**
 * The client type of a pool: what its `connect()` resolves to (`pg.PoolClient` for a `pg.Pool`), so a
 * transactional handler's `ctx.transaction` is the application's own typed client and `bus.publish` refuses the
 * pool itself (a `pg.Pool` has no `release`). Both of `pg.Pool.connect`'s overloads are matched: inferring from
 * the last one alone (the callback form) would give `unknown`.
 */
export type PgPoolClientOf<TPool> = TPool extends {
  connect(): Promise<infer Client>;
  connect(callback: never): void;
}
  ? Client extends PgPoolClientLike
    ? Client
    : PgPoolClientLike
  : PgPoolClientLike;

export interface FromPgOptions {
  /** Run statements as named prepared statements (default true). Turn off behind transaction-mode poolers. */
  readonly preparedStatements?: boolean;
  /** End the pool on `store.close()` (default false: the pool belongs to the caller). */
  readonly closeWithStore?: boolean;
}

function isPgClient(value: unknown): value is PgClientLike {
  return typeof value === 'object' && value !== null && typeof (value as { query?: unknown }).query === 'function';
}

function executorOf(client: PgClientLike, prepared: boolean): SqlExecutor {
  return {
    async run<Row extends object>(statement: SqlStatement, params: readonly unknown[]): Promise<Row[]> {
      const values = params.map((value) => (Array.isArray(value) ? toArrayLiteral(value) : value));
      const config = prepared
        ? { name: statement.name, text: statement.text, values }
        : { text: statement.text, values };
      return (await client.query(config)).rows as Row[];
    },
    async exec(script: string): Promise<void> {
      await client.query(script);
    },
  };
}

/** pg.Pool's default `max`. */
const PG_DEFAULT_POOL_SIZE = 10;

/** How many connections a pg pool may open (its `max`), or undefined for a pool-like that does not say. */
function pgPoolSize(pool: PgPoolLike): number | undefined {
  if (!('options' in pool)) return undefined;
  const max = pool.options?.max;
  return typeof max === 'number' && Number.isInteger(max) && max > 0 ? max : PG_DEFAULT_POOL_SIZE;
}

/**
 * The settings of a lent connection while relaybus holds it (restored when given back):
 * - plan_cache_mode: a generic plan from the first call. Postgres otherwise plans a statement five times with its
 *   parameters' values and once more generically on every connection before it settles, and the claim statements take
 *   milliseconds to plan.
 * - random_page_cost at most 1.1: the claims read a queue's tables, which live in shared buffers. At the default (4) a
 *   table analyzed while nearly empty (a drained queue: what autovacuum analyzes most often) beside its indexes' pages
 *   prices each index look-up above a read of the whole heap, and the claims' generic plans then scan the heap for
 *   every key they visit (claims of hundreds of milliseconds under a light load).
 */
export const LENT_SESSION_SETTINGS =
  "SELECT set_config('plan_cache_mode', 'force_generic_plan', false), " +
  "set_config('random_page_cost', least(current_setting('random_page_cost')::float8, 1.1)::text, false)";
const LENT_SESSION_RESET = 'RESET plan_cache_mode; RESET random_page_cost';

/**
 * A connection of `pool` lent to relaybus (`PostgresDriver.session`), with LENT_SESSION_SETTINGS where statements are
 * prepared. Not without them (transaction-mode PgBouncer): unnamed statements are planned on every call anyway, and a
 * session setting would stay on whichever server connection the pooler picked.
 */
async function lendPgConnection(pool: PgPoolLike, prepared: boolean): Promise<SqlSession> {
  const client = await pool.connect();
  guardCheckedOut(pool, client);
  try {
    if (prepared) await client.query(LENT_SESSION_SETTINGS);
  } catch (error) {
    client.release(error instanceof Error ? error : new Error(String(error)));
    throw error;
  }
  let released = false;
  return {
    ...executorOf(client, prepared),
    async release(broken: boolean): Promise<void> {
      if (released) return;
      released = true;
      let destroy: Error | undefined = broken
        ? new Error('relaybus: a statement on this connection failed')
        : undefined;
      if (destroy === undefined && prepared) {
        try {
          // Back to the connection's own settings (the server's, or the pool's startup options).
          await client.query(LENT_SESSION_RESET);
        } catch (error) {
          destroy = error instanceof Error ? error : new Error(String(error));
        }
      }
      client.release(destroy ?? false);
    },
  };
}

/**
 * What a driver over `pool` lends for `holdClaimConnections` (`PostgresDriver.session` and `poolSize`): `fromPg`, and
 * Kysely and Drizzle over a pg pool (their claim statements then run on the pg client itself, not through them).
 */
export function pgSessions(pool: PgPoolLike, prepared: boolean): Pick<PostgresDriver<unknown>, 'session' | 'poolSize'> {
  const poolSize = pgPoolSize(pool);
  return { session: () => lendPgConnection(pool, prepared), ...(poolSize === undefined ? {} : { poolSize }) };
}

/**
 * Adapt a `pg.Pool` for `postgresStore`. `bus.publish(client, ...)` then takes a client checked out of
 * the pool (`pg.PoolClient`) in an open transaction (`BEGIN` issued by the caller), and a transactional
 * handler's `ctx.transaction` is a `pg.PoolClient` too; the pool itself does not type-check there.
 *
 * Dropped connections: relaybus puts an `'error'` listener on the pool and on every client it hands
 * out from then on (once per pool), so a connection that drops (`pg_terminate_backend`, a restart)
 * fails the statement in progress instead of crashing the process with an unhandled `'error'`
 * event; a handler's attempt then fails and is retried. The errors go to `onConnectionError`
 * subscribers (the worker logs them). Your own code should still listen too: `pool.on('error')`,
 * and `client.on('error')` on clients you check out with `pool.connect()` to publish.
 *
 * ```ts
 * const pool = new pg.Pool({ connectionString: process.env.DATABASE_URL });
 * const store = postgresStore({ driver: fromPg(pool) });
 * ```
 */
export function fromPg<TPool extends PgPoolLike>(
  pool: TPool,
  options: FromPgOptions = {},
): PostgresDriver<PgPoolClientOf<TPool>> {
  return pgDriver(pool, options) as unknown as PostgresDriver<PgPoolClientOf<TPool>>;
}

function pgDriver(pool: PgPoolLike, options: FromPgOptions): PostgresDriver<PgClientLike> {
  if (!isPgClient(pool) || typeof (pool as { connect?: unknown }).connect !== 'function') {
    throw new InvalidInputError(
      'fromPg() needs a pg.Pool (an object with query() and connect()). For PGlite use fromPglite().',
    );
  }
  const prepared = options.preparedStatements ?? true;
  const subscribe = guardPgPool(pool);
  return {
    executor: executorOf(pool, prepared),
    concurrentConnections: true,
    unwrap(tx: PgClientLike): SqlExecutor {
      if (!isPgClient(tx)) {
        throw new InvalidInputError(
          'Expected a pg client inside an open transaction (a pg.PoolClient after BEGIN), got ' + typeof tx + '.',
        );
      }
      if ('totalCount' in tx) {
        // a pg.Pool: each query would run on whichever connection is free
        throw new InvalidInputError(
          'Expected a pg client in an open transaction, got a pool: check a client out with pool.connect() and run BEGIN.',
        );
      }
      const status = tx.getTransactionStatus?.();
      if (status === 'I') {
        throw new InvalidInputError(
          'The pg client is not in a transaction (no BEGIN, or it already committed or rolled back); nothing was written.',
        );
      }
      if (status === 'E') {
        throw new InvalidInputError("The pg client's transaction has failed: roll it back; nothing was written.");
      }
      // pg >= 8.12 reports the transaction status: 'T' is an open block, and publish needs no guard statement.
      return { ...executorOf(tx, prepared), transactionChecked: status === 'T' };
    },
    async transaction<T>(fn: (tx: PgClientLike) => Promise<T>): Promise<T> {
      const client = await pool.connect();
      guardCheckedOut(pool, client); // a pool-like that emits no 'acquire' still gets the listener
      let broken: Error | undefined;
      try {
        await client.query('BEGIN');
        const result = await runGuarded<PgClientLike, T>(client, fn);
        await client.query('COMMIT');
        return result;
      } catch (error) {
        try {
          await client.query('ROLLBACK');
        } catch (rollbackError) {
          broken = rollbackError as Error; // the connection is unusable: destroy it instead of pooling it
        }
        throw error;
      } finally {
        client.release(broken ?? false);
      }
    },
    onConnectionError(listener: (error: Error) => void): () => void {
      return subscribe?.(listener) ?? (() => {});
    },
    listen: (channel, onNotify) => listenOnPgPool(pool, channel, onNotify),
    ...pgSessions(pool, prepared),
    async close(): Promise<void> {
      if (options.closeWithStore) await pool.end();
    },
  };
}
