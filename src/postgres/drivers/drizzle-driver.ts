/**
 * `relaybus/drizzle`: run relaybus on a Drizzle database (node-postgres, postgres-js or PGlite
 * driver), and publish inside a Drizzle transaction.
 *
 * Public Drizzle API only: each statement of `sql/` is rebuilt as `sql` chunks, its literal text
 * with `sql.raw()` and every `$N` as `sql.param()` (which binds an array as one parameter, where a
 * plain `${array}` would expand into a list), and run with `execute()`. Results are normalised at
 * the boundary: postgres-js returns an array of rows, node-postgres and PGlite an object with
 * `rows`. Statements run unnamed (Drizzle names only the statements of its own query builder).
 *
 * Dropped connections: over node-postgres, Drizzle checks a client out of the pool for each
 * transaction and puts no `'error'` listener on it, so a connection dropped mid-transaction would
 * crash the process. relaybus listens on `db.$client` (the pool, or a lone `pg.Client`) and on every
 * client the pool hands out (see `fromPg`); the errors go to `onConnectionError`. postgres-js and
 * PGlite never emit them: a dropped connection only fails the statement in progress.
 */
import { entityKind, is, sql, type SQL } from 'drizzle-orm';
import { PgTransaction } from 'drizzle-orm/pg-core';
import { InvalidInputError, InvalidOptionsError } from '../../core/errors.js';
import type { PostgresDriver, SqlExecutor, SqlStatement } from '../sql-client.js';
import { guardPgClient, guardPgPool, isPgPool, type ConnectionErrorListener } from './connection-errors.js';
import { listenOnPgPool } from './pg-listener.js';
import { listenOnPglite } from './pglite-driver.js';
import { toArrayLiteral } from './array-literal.js';
import { listenOnPostgresJs } from './postgres-js-driver.js';
import { pgSessions, type PgPoolLike } from './pg-driver.js';
import { inTransaction, runGuarded } from './transaction-guard.js';
import { placeholderChunks, splitStatements } from './placeholders.js';

/** What relaybus needs of any Drizzle Postgres handle: `execute(sql)`. */
export interface DrizzleExecutorLike {
  execute(query: SQL): PromiseLike<unknown>;
}

/**
 * A Drizzle Postgres transaction (the `tx` of `db.transaction(async (tx) => ...)`) on any driver.
 * Only a transaction has `rollback()`, so a database handle does not type-check where a
 * transaction is expected.
 */
export interface DrizzleTransactionLike extends DrizzleExecutorLike {
  rollback(): unknown;
}

/** A Drizzle Postgres database (`drizzle(...)` of drizzle-orm/node-postgres, /postgres-js or /pglite). */
export interface DrizzleDatabaseLike extends DrizzleExecutorLike {
  transaction<T>(fn: (tx: DrizzleTransactionLike) => Promise<T>): Promise<T>;
}

/**
 * The transaction type of a Drizzle database (its `PgTransaction<...>`), so `ctx.transaction` of a
 * transactional handler has the application's typed query builder.
 */
export type DrizzleTransactionOf<TDb> = TDb extends {
  transaction<T>(fn: (tx: infer Tx) => Promise<T>, ...rest: never[]): Promise<T>;
}
  ? Tx
  : DrizzleTransactionLike;

export interface FromDrizzleOptions {
  /**
   * Several connections can work at once. Default: false for a PGlite database (one connection),
   * true otherwise.
   */
  readonly concurrentConnections?: boolean;
}

/** The entity kinds (class names) of a Drizzle object's class chain, e.g. ['PgliteDatabase', 'PgDatabase']. */
function kindsOf(value: object): string[] {
  const kinds: string[] = [];
  for (let c: unknown = value.constructor; typeof c === 'function'; c = Object.getPrototypeOf(c)) {
    const kind = (c as { [entityKind]?: unknown })[entityKind];
    if (typeof kind === 'string' && !kinds.includes(kind)) kinds.push(kind);
  }
  return kinds;
}

/** A `DrizzleQueryError` wraps the driver's error (and repeats the statement and its parameters): hand on the driver's. */
function unwrapError(error: unknown): unknown {
  const wrapped = error as { query?: unknown; params?: unknown; cause?: unknown } | null;
  const cause =
    wrapped !== null &&
    typeof wrapped === 'object' &&
    typeof wrapped.query === 'string' &&
    Array.isArray(wrapped.params)
      ? wrapped.cause
      : undefined;
  const underlying = cause ?? error;
  if (underlying instanceof Error && underlying.message === 'Transaction is closed') {
    return new InvalidInputError(
      'The Drizzle transaction is already committed or rolled back: nothing was written. Call relaybus inside ' +
        'db.transaction(async (tx) => ...), before the callback returns.',
      { cause: underlying },
    );
  }
  return underlying;
}

function rowsOf(result: unknown): unknown[] {
  if (Array.isArray(result)) return result;
  const rows = (result as { rows?: unknown } | null)?.rows;
  return Array.isArray(rows) ? rows : [];
}

/** The statement as Drizzle SQL: literal text as `sql.raw`, each `$N` as `sql.param(params[N - 1])`. */
function statementToSql(text: string, params: readonly unknown[]): SQL {
  return sql.join(
    placeholderChunks(text).map((chunk) =>
      typeof chunk === 'string' ? sql.raw(chunk) : sql.param(params[chunk - 1] ?? null),
    ),
  );
}

/**
 * `arraysAsLiterals`: under postgres-js, Drizzle hands a JS array parameter to postgres.js untyped, which fails on
 * some (an array of nulls); a Postgres array literal is read right by every statement's `$N::type[]` cast.
 */
function executorOf(db: DrizzleExecutorLike, arraysAsLiterals: boolean): SqlExecutor {
  const prepare = (params: readonly unknown[]) =>
    arraysAsLiterals ? params.map((value) => (Array.isArray(value) ? toArrayLiteral(value) : value)) : params;
  return {
    async run<Row extends object>(statement: SqlStatement, params: readonly unknown[]): Promise<Row[]> {
      try {
        return rowsOf(await db.execute(statementToSql(statement.text, prepare(params)))) as Row[];
      } catch (error) {
        throw unwrapError(error);
      }
    },
    async exec(script: string): Promise<void> {
      try {
        // One statement per call: Drizzle's PGlite driver runs the extended protocol (one statement per query).
        for (const statement of splitStatements(script)) await db.execute(sql.raw(statement));
      } catch (error) {
        throw unwrapError(error);
      }
    },
  };
}

/** Listen for connection errors on the `pg` pool or client under a node-postgres database (undefined for other drivers). */
function guardNodePg(db: DrizzleDatabaseLike): ((listener: ConnectionErrorListener) => () => void) | undefined {
  if (!kindsOf(db).includes('NodePgDatabase')) return undefined;
  const client: unknown = (db as { $client?: unknown }).$client;
  return isPgPool(client) ? guardPgPool(client) : guardPgClient(client);
}

/** LISTEN through the database's own client: a node-postgres pool, a postgres.js client or a PGlite database. */
function listenerOf(db: DrizzleDatabaseLike): Pick<PostgresDriver<unknown>, 'listen'> {
  const client: unknown = (db as { $client?: unknown }).$client;
  const kinds = kindsOf(db);
  if (kinds.includes('NodePgDatabase') && isPgPool(client))
    return { listen: (channel, onNotify) => listenOnPgPool(client, channel, onNotify) };
  if (kinds.includes('PostgresJsDatabase'))
    return { listen: (channel, onNotify) => listenOnPostgresJs(client, channel, onNotify) };
  if (kinds.includes('PgliteDatabase'))
    return { listen: (channel, onNotify) => listenOnPglite(client, channel, onNotify) };
  return {};
}

/**
 * Claim loops' connections (`holdClaimConnections`) from a node-postgres pool under the database (see `fromPg`): their
 * claim statements run on that connection as named prepared statements, not through Drizzle. None under postgres.js
 * (see `fromPostgresJs`) or PGlite.
 */
function sessionsOf(db: DrizzleDatabaseLike): Pick<PostgresDriver<unknown>, 'session' | 'poolSize'> {
  const client: unknown = (db as { $client?: unknown }).$client;
  return kindsOf(db).includes('NodePgDatabase') && isPgPool(client) ? pgSessions(client as PgPoolLike, true) : {};
}

function describe(value: unknown): string {
  if (value === null) return 'null';
  if (typeof value !== 'object') return typeof value;
  return kindsOf(value)[0] ?? (value as { constructor?: { name?: string } }).constructor?.name ?? 'object';
}

/**
 * Adapt a Drizzle Postgres database for `postgresStore`. The store's transaction type is then
 * the database's own transaction type (`PgTransaction<...>`): `bus.publish(tx, ...)` accepts the `tx` of `db.transaction(...)` and
 * refuses `db` itself, at compile time and at run time.
 *
 * ```ts
 * import { drizzle } from 'drizzle-orm/node-postgres';
 * import { postgresStore } from 'relaybus/postgres';
 * import { fromDrizzle } from 'relaybus/drizzle';
 *
 * const db = drizzle(process.env.DATABASE_URL!);
 * const store = postgresStore({ driver: fromDrizzle(db) });
 * await db.transaction(async (tx) => {
 *   await tx.insert(orders).values({ id: 'o-1' });
 *   await bus.publish(tx, OrderPlaced, { orderId: 'o-1' });
 * });
 * ```
 */
export function fromDrizzle<TDb extends DrizzleDatabaseLike>(
  db: TDb,
  options: FromDrizzleOptions = {},
): PostgresDriver<DrizzleTransactionOf<TDb>> {
  return drizzleDriver(db, options) as unknown as PostgresDriver<DrizzleTransactionOf<TDb>>;
}

/** The transaction status of the pg client under a node-postgres Drizzle transaction ('T': open), else undefined. */
function nodePgStatusOf(tx: DrizzleTransactionLike): string | null | undefined {
  const session = (tx as { session?: { client?: { getTransactionStatus?: () => string | null } } }).session;
  return session?.client?.getTransactionStatus?.();
}

function drizzleDriver(db: DrizzleDatabaseLike, options: FromDrizzleOptions): PostgresDriver<DrizzleTransactionLike> {
  if (typeof db?.execute !== 'function' || typeof db.transaction !== 'function') {
    throw new InvalidOptionsError(
      `fromDrizzle() needs a Drizzle Postgres database (drizzle(...)), got ${describe(db)}.`,
    );
  }
  if (is(db, PgTransaction)) {
    throw new InvalidOptionsError(
      'fromDrizzle() needs the Drizzle database itself, not a transaction: relaybus opens its own transactions on it.',
    );
  }
  const single = kindsOf(db).includes('PgliteDatabase');
  const subscribe = guardNodePg(db);
  const postgresJs = kindsOf(db).includes('PostgresJsDatabase');
  const endsEarly = postgresJs;
  return {
    ...(subscribe ? { onConnectionError: subscribe } : {}),
    ...listenerOf(db),
    ...sessionsOf(db),
    executor: executorOf(db, postgresJs),
    concurrentConnections: options.concurrentConnections ?? !single,
    unwrap(tx: DrizzleTransactionLike): SqlExecutor {
      if (typeof (tx as Partial<DrizzleTransactionLike> | null)?.execute !== 'function') {
        throw new InvalidInputError(
          `Expected a Drizzle transaction (the tx of db.transaction(async (tx) => ...)), got ${describe(tx)}.`,
        );
      }
      if (!is(tx, PgTransaction)) {
        throw new InvalidInputError(
          `Expected a Drizzle transaction, got ${describe(tx)}: a publish outside a transaction would not be atomic with your writes. ` +
            'Call it inside db.transaction(async (tx) => ...) and pass tx.',
        );
      }
      return { ...executorOf(tx, postgresJs), transactionChecked: single || nodePgStatusOf(tx) === 'T' };
    },
    async transaction<T>(fn: (tx: DrizzleTransactionLike) => Promise<T>): Promise<T> {
      let failure: { readonly error: unknown } | undefined;
      const body = async (tx: DrizzleTransactionLike): Promise<T> => {
        try {
          return await runGuarded(tx, fn);
        } catch (error) {
          failure = { error };
          throw error;
        }
      };
      try {
        // Only a postgres-js transaction can end while `fn` still runs (see inTransaction).
        return endsEarly
          ? await inTransaction<DrizzleTransactionLike, T>((inner) => db.transaction(inner), body)
          : await db.transaction(body);
      } catch (error) {
        // On a dropped connection Drizzle replaces what `fn` threw with its failed ROLLBACK: hand on fn's error.
        if (failure !== undefined && (error as { query?: unknown } | null)?.query === 'rollback') throw failure.error;
        throw error;
      }
    },
    async close(): Promise<void> {
      // The database and its client belong to the caller.
    },
  };
}
