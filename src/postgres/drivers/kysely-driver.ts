/**
 * `relaybus/kysely`: run relaybus on a Kysely instance (the `PostgresDialect` over `pg`), and
 * publish inside a Kysely transaction.
 *
 * Public Kysely API only: statements run as `executeQuery(CompiledQuery.raw(text, params))`, which
 * Kysely hands to the dialect's connection unchanged (unnamed statements: Kysely offers no way to
 * name them). Plugins of the application's instance (a CamelCasePlugin, say) are bypassed with
 * `withoutPlugins()`, since relaybus reads its own rows by column name.
 *
 * The types are structural (`KyselyLike`, `KyselyTransactionLike`), so a `Transaction<AppDB>` from
 * the application's own copy of kysely type-checks, and a plain `Kysely` instance where a
 * transaction is expected does not (`isTransaction` is `true` only on a transaction).
 *
 * Dropped connections: Kysely checks a `pg` client out of the dialect's pool for every statement
 * and transaction and puts no `'error'` listener on it, so a connection dropped mid-statement (or
 * an idle one, in a pool without `pool.on('error')`) would crash the process. Kysely keeps that
 * pool private: pass it as `fromKysely(db, { pool })` and relaybus listens on it (see `fromPg`).
 */
import { CompiledQuery, type QueryResult } from 'kysely';
import { InvalidInputError, InvalidOptionsError } from '../../core/errors.js';
import type { PostgresDriver, SqlExecutor, SqlStatement } from '../sql-client.js';
import { guardPgPool, isPgPool } from './connection-errors.js';
import { listenOnPgPool } from './pg-listener.js';
import { pgSessions, type PgPoolLike } from './pg-driver.js';
import { splitStatements } from './placeholders.js';

/** What relaybus needs of any Kysely handle: run a compiled query, drop plugins. */
export interface KyselyExecutorLike {
  executeQuery<R>(query: CompiledQuery<R>): Promise<QueryResult<R>>;
  readonly isTransaction: boolean;
}

/** A Kysely `Transaction` (the `trx` of `db.transaction().execute(trx => ...)`) or `ControlledTransaction`. */
export interface KyselyTransactionLike extends KyselyExecutorLike {
  readonly isTransaction: true;
  withoutPlugins(): KyselyTransactionLike;
}

/** A Kysely instance. */
export interface KyselyLike extends KyselyExecutorLike {
  withoutPlugins(): KyselyLike;
  transaction(): { execute<T>(fn: (trx: KyselyTransactionLike) => Promise<T>): Promise<T> };
  destroy(): Promise<void>;
}

/**
 * The transaction type of a Kysely instance: `Transaction<DB>` for a `Kysely<DB>`, so
 * `ctx.transaction` of a transactional handler has the application's typed query builder.
 */
export type KyselyTransactionOf<TDb> = TDb extends {
  transaction(): { execute<T>(fn: (trx: infer Tx) => Promise<T>): Promise<T> };
}
  ? Tx
  : KyselyTransactionLike;

export interface FromKyselyOptions {
  /** Several connections can work at once (default true; false for a dialect over PGlite). */
  readonly concurrentConnections?: boolean;
  /** `db.destroy()` on `store.close()` (default false: the instance belongs to the caller). */
  readonly closeWithStore?: boolean;
  /**
   * The `pg.Pool` given to the `PostgresDialect`, which Kysely does not expose. With it, relaybus
   * listens for connection errors on the pool and on every client checked out of it (by Kysely,
   * relaybus or you), so a dropped connection fails the statement instead of crashing the
   * process, and `onConnectionError` reports it. Without it, add those listeners yourself.
   */
  readonly pool?: PgPoolLike;
}

const FINISHED = /^Transaction is already (committed|rolled back)$/;

function wrapFinished(error: unknown): unknown {
  const match = error instanceof Error ? FINISHED.exec(error.message) : null;
  if (!match) return error;
  return new InvalidInputError(
    `The Kysely transaction is already ${match[1]}: nothing was written. Call relaybus inside db.transaction().execute(async (trx) => ...), ` +
      'before the callback returns.',
    { cause: error },
  );
}

function executorOf(db: KyselyExecutorLike): SqlExecutor {
  return {
    async run<Row extends object>(statement: SqlStatement, params: readonly unknown[]): Promise<Row[]> {
      try {
        return [...(await db.executeQuery<Row>(CompiledQuery.raw(statement.text, [...params]))).rows];
      } catch (error) {
        throw wrapFinished(error);
      }
    },
    async exec(script: string): Promise<void> {
      try {
        // One statement per call: a dialect over PGlite (extended protocol) cannot run several at once.
        for (const statement of splitStatements(script)) await db.executeQuery(CompiledQuery.raw(statement));
      } catch (error) {
        throw wrapFinished(error);
      }
    },
  };
}

function describe(value: unknown): string {
  if (value === null) return 'null';
  if (typeof value !== 'object') return typeof value;
  return (value as { constructor?: { name?: string } }).constructor?.name ?? 'object';
}

/**
 * Adapt a Kysely instance (Postgres dialect) for `postgresStore`. The store's transaction type is
 * then Kysely's `Transaction`: `bus.publish(trx, ...)` accepts the `trx` of
 * `db.transaction().execute(...)` and refuses `db` itself, at compile time and at run time.
 *
 * ```ts
 * import { Kysely, PostgresDialect } from 'kysely';
 * import pg from 'pg';
 * import { postgresStore } from 'relaybus/postgres';
 * import { fromKysely } from 'relaybus/kysely';
 *
 * const pool = new pg.Pool({ connectionString });
 * const db = new Kysely<DB>({ dialect: new PostgresDialect({ pool }) });
 * const store = postgresStore({ driver: fromKysely(db, { pool }) });
 * await db.transaction().execute(async (trx) => {
 *   await trx.insertInto('orders').values({ id: 'o-1' }).execute();
 *   await bus.publish(trx, OrderPlaced, { orderId: 'o-1' });
 * });
 * ```
 */
export function fromKysely<TDb extends KyselyLike>(
  db: TDb,
  options: FromKyselyOptions = {},
): PostgresDriver<KyselyTransactionOf<TDb>> {
  return kyselyDriver(db, options) as unknown as PostgresDriver<KyselyTransactionOf<TDb>>;
}

function kyselyDriver(db: KyselyLike, options: FromKyselyOptions): PostgresDriver<KyselyTransactionLike> {
  if (
    typeof db?.executeQuery !== 'function' ||
    typeof db.transaction !== 'function' ||
    typeof db.withoutPlugins !== 'function'
  ) {
    throw new InvalidOptionsError(
      `fromKysely() needs a Kysely instance (new Kysely({ dialect })), got ${describe(db)}.`,
    );
  }
  if (db.isTransaction) {
    throw new InvalidOptionsError(
      'fromKysely() needs the Kysely instance itself, not a transaction: relaybus opens its own transactions on it.',
    );
  }
  if (options.pool !== undefined && !isPgPool(options.pool)) {
    throw new InvalidOptionsError(
      `fromKysely(db, { pool }) needs the pg.Pool of the PostgresDialect, got ${describe(options.pool)}.`,
    );
  }
  const { pool } = options;
  const subscribe = pool === undefined ? undefined : guardPgPool(pool);
  const owned = db.withoutPlugins();
  return {
    ...(subscribe ? { onConnectionError: subscribe } : {}),
    ...(pool === undefined
      ? {}
      : {
          listen: (channel: string, onNotify: (payload: string) => void) => listenOnPgPool(pool, channel, onNotify),
          // A claim loop's connection (`holdClaimConnections`), checked out of the same pool; its statements run on the
          // pg client itself, as named prepared statements, not through Kysely (which would check out one per statement).
          ...pgSessions(pool, true),
        }),
    executor: executorOf(owned),
    concurrentConnections: options.concurrentConnections ?? true,
    unwrap(tx: KyselyTransactionLike): SqlExecutor {
      const candidate = tx as Partial<KyselyTransactionLike> | null | undefined;
      if (typeof candidate?.executeQuery !== 'function' || typeof candidate.withoutPlugins !== 'function') {
        throw new InvalidInputError(
          `Expected a Kysely transaction (the trx of db.transaction().execute(trx => ...)), got ${describe(tx)}.`,
        );
      }
      if (candidate.isTransaction !== true) {
        throw new InvalidInputError(
          'Expected a Kysely transaction, got a Kysely instance that is not one: a publish outside a transaction would not be atomic ' +
            'with your writes. Call it inside db.transaction().execute(async (trx) => ...) and pass trx.',
        );
      }
      // A Kysely transaction refuses statements once it ended: no guard statement needed.
      return { ...executorOf(tx.withoutPlugins()), transactionChecked: true };
    },
    transaction<T>(fn: (tx: KyselyTransactionLike) => Promise<T>): Promise<T> {
      // The application's own instance (with its plugins): `fn` may be a transactional handler using trx for its writes.
      return db.transaction().execute(fn);
    },
    async close(): Promise<void> {
      if (options.closeWithStore) await db.destroy();
    },
  };
}
