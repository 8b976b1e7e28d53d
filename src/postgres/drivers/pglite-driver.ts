import { InvalidInputError } from '../../core/errors.js';
import type { PostgresDriver, SqlExecutor, SqlStatement, Unlisten } from '../sql-client.js';
import { runGuarded } from './transaction-guard.js';

/**
 * The PGlite driver: embedded Postgres (WASM) in the same process, for the demo and for tests that
 * need no server. PGlite is one connection: transactions run one after another, so lock contention
 * between workers cannot happen (`concurrentConnections: false`). Structural types only. There is
 * no connection to drop, hence no `onConnectionError`.
 */

/** A PGlite database or a PGlite transaction. */
export interface PgliteQueryableLike {
  query<Row>(text: string, params?: unknown[]): Promise<{ rows: Row[] }>;
  exec(script: string): Promise<unknown>;
}

/**
 * A PGlite `Transaction` (the `tx` of `db.transaction(tx => ...)`). Only a transaction has `rollback`,
 * so the database itself does not type-check where a transaction is needed.
 */
export interface PgliteTransactionLike extends PgliteQueryableLike {
  rollback(): Promise<void>;
}

/** A PGlite database. */
export interface PgliteLike extends PgliteQueryableLike {
  transaction<T>(fn: (tx: PgliteTransactionLike) => Promise<T>): Promise<T>;
  close(): Promise<void>;
}

/**
 * The transaction type of a PGlite database: PGlite's own `Transaction`, so a transactional handler's
 * `ctx.transaction` is the type the application writes against.
 */
export type PgliteTransactionOf<TDb> = TDb extends {
  transaction<T>(fn: (tx: infer Tx) => Promise<T>): Promise<T>;
}
  ? Tx extends PgliteTransactionLike
    ? Tx
    : PgliteTransactionLike
  : PgliteTransactionLike;

export interface FromPgliteOptions {
  /** Close the database on `store.close()` (default false: it belongs to the caller). */
  readonly closeWithStore?: boolean;
}

function executorOf(db: PgliteQueryableLike): SqlExecutor {
  return {
    async run<Row extends object>(statement: SqlStatement, params: readonly unknown[]): Promise<Row[]> {
      return (await db.query<Row>(statement.text, [...params])).rows;
    },
    async exec(script: string): Promise<void> {
      await db.exec(script);
    },
  };
}

/**
 * Adapt a PGlite database for `postgresStore`. `bus.publish(tx, ...)` then takes the `tx` of
 * `db.transaction(tx => ...)` (PGlite's `Transaction`), and the database itself does not type-check there.
 *
 * ```ts
 * const db = await PGlite.create();
 * const store = postgresStore({ driver: fromPglite(db) });
 * ```
 */
export function fromPglite<TDb extends PgliteLike>(
  db: TDb,
  options: FromPgliteOptions = {},
): PostgresDriver<PgliteTransactionOf<TDb>> {
  return pgliteDriver(db, options) as unknown as PostgresDriver<PgliteTransactionOf<TDb>>;
}

function pgliteDriver(db: PgliteLike, options: FromPgliteOptions): PostgresDriver<PgliteTransactionLike> {
  if (typeof db?.query !== 'function' || typeof db.transaction !== 'function') {
    throw new InvalidInputError('fromPglite() needs a PGlite database (an object with query() and transaction()).');
  }
  return {
    executor: executorOf(db),
    concurrentConnections: false,
    unwrap(tx: PgliteTransactionLike): SqlExecutor {
      if (typeof tx?.query !== 'function') {
        throw new InvalidInputError(
          'Expected a PGlite transaction (the argument of db.transaction(fn)), got ' + typeof tx + '.',
        );
      }
      if (typeof (tx as { transaction?: unknown }).transaction === 'function') {
        // the database itself: its statements would commit on their own, not with the caller's writes
        throw new InvalidInputError(
          'Expected a PGlite transaction, got the PGlite database itself: a publish outside a transaction would not be ' +
            'atomic with your writes. Call it inside db.transaction(async (tx) => ...) and pass tx.',
        );
      }
      // A PGlite transaction refuses statements once it ended: no guard statement needed.
      return { ...executorOf(tx), transactionChecked: true };
    },
    transaction: (fn) => db.transaction((tx) => runGuarded(tx, fn)),
    listen: (channel, onNotify) => listenOnPglite(db, channel, onNotify),
    async close(): Promise<void> {
      if (options.closeWithStore) await db.close();
    },
  };
}

/** What relaybus uses of PGlite's `db.listen`. */
interface PgliteListener {
  listen(channel: string, callback: (payload: string) => void): Promise<() => Promise<void>>;
}

/** LISTEN on a PGlite database (one in-process connection: nothing to reconnect). */
export async function listenOnPglite(
  db: unknown,
  channel: string,
  onNotify: (payload: string) => void,
): Promise<Unlisten> {
  const unsubscribe = await (db as PgliteListener).listen(channel, (payload) => onNotify(payload));
  onNotify('');
  return () => unsubscribe();
}
