import { InvalidInputError, InvalidOptionsError } from '../../core/errors.js';
import type { PostgresDriver, SqlExecutor, SqlStatement, Unlisten } from '../sql-client.js';
import { inTransaction } from './transaction-guard.js';
import { parseArrayLiteral, toArrayLiteral } from './array-literal.js';
import { jsonCastParams } from './placeholders.js';

/**
 * The postgres.js (`postgres` package) driver. Structural types only, so relaybus never imports
 * `postgres` and works with the copy the application installed.
 *
 * What it smooths over, at the boundary:
 * - postgres.js serialises each parameter by the type the server infers for it, so a JSON text
 *   sent to `$1::jsonb` would be encoded again as a JSON string. Parameters the statement casts to
 *   json/jsonb are declared as text (`sql.typed(value, 25)`), and the cast in the SQL converts.
 * - Arrays are sent as Postgres array literals, and array columns that come back as text (a client
 *   made with `fetch_types: false`) are parsed, so results never depend on that setting.
 * - Statements are prepared (postgres.js names them itself, per connection) unless
 *   `preparedStatements: false` or the client was made with `prepare: false`. An unprepared
 *   statement with parameters costs postgres.js two round trips (it asks the server for the
 *   parameter types first), so they are prepared inside the caller's transaction too.
 *
 * Dropped connections: postgres.js emits nothing (no listener needed, no `onConnectionError`): the
 * statement in progress fails, an idle connection reopens on its next use, and a transaction whose
 * connection dropped rejects at once, so the handler's attempt fails and is retried. relaybus then
 * refuses statements through that transaction and never lets postgres.js commit or roll it back:
 * postgres.js 3.4 would write on the closed socket and crash the process (your own `sql.begin`
 * callbacks that outlive a dropped connection hit the same bug).
 */

/** One column of a postgres.js result. */
export interface PostgresJsColumnLike {
  readonly name: string;
  readonly type: number;
}

/** What relaybus reads of a postgres.js result: an array of rows with column metadata. */
export interface PostgresJsResultLike extends ReadonlyArray<object> {
  readonly columns?: readonly PostgresJsColumnLike[] | null;
}

/** What relaybus needs of a postgres.js `Sql` or `TransactionSql`: `unsafe()` and `typed()`. */
export interface PostgresJsQueryableLike {
  unsafe(query: string, parameters?: unknown[], options?: { prepare?: boolean }): PromiseLike<PostgresJsResultLike>;
  typed(value: unknown, oid: number): unknown;
}

/**
 * A postgres.js `TransactionSql`: the `tx` of `sql.begin(tx => ...)` (or of a savepoint). Only a
 * transaction has `savepoint`, so the root `Sql` does not type-check where a transaction is needed.
 */
export interface PostgresJsTransactionLike extends PostgresJsQueryableLike {
  savepoint(fn: (tx: PostgresJsTransactionLike) => Promise<unknown>): Promise<unknown>;
}

/** A postgres.js `Sql` (the value `postgres(url)` returns). */
export interface PostgresJsSqlLike extends PostgresJsQueryableLike {
  begin(fn: (tx: PostgresJsTransactionLike) => Promise<unknown>): Promise<unknown>;
  end(options?: { timeout?: number | null }): Promise<void>;
  readonly options?: {
    readonly prepare?: boolean;
    readonly transform?: {
      readonly column?: { readonly from?: unknown };
      readonly value?: { readonly from?: unknown };
      readonly row?: { readonly from?: unknown };
    };
  };
}

/** The transaction type of a postgres.js client: `TransactionSql<Types>` for a `Sql<Types>`. */
export type PostgresJsTransactionOf<TSql> = TSql extends {
  begin<T>(options: string, fn: (tx: infer Tx) => T | Promise<T>): unknown;
}
  ? Tx
  : PostgresJsTransactionLike;

export interface FromPostgresJsOptions {
  /** Prepare statements (default true). Turn off behind transaction-mode poolers such as PgBouncer. */
  readonly preparedStatements?: boolean;
  /** End the client on `store.close()` (default false: the client belongs to the caller). */
  readonly closeWithStore?: boolean;
}

const TEXT_OID = 25;
/** Array column types whose elements relaybus reads as numbers (int2[], int4[]); other arrays stay text. */
const NUMERIC_ARRAYS = new Set([1005, 1007]);
const ARRAY_OIDS = new Set([1005, 1007, 1009, 1015, 1016, 1028, 1182, 1185]);

function parametersFor(db: PostgresJsQueryableLike, statement: SqlStatement, params: readonly unknown[]): unknown[] {
  const json = jsonCastParams(statement.text);
  return params.map((value, i) => {
    if (value === undefined || value === null) return null;
    if (Array.isArray(value)) return toArrayLiteral(value);
    if (typeof value === 'string' && json.has(i + 1)) return db.typed(value, TEXT_OID);
    return value;
  });
}

/** Parse array columns that came back as text (no array types fetched); everything else is left alone. */
function normalise(result: PostgresJsResultLike): object[] {
  const rows = result as unknown as Record<string, unknown>[];
  if (rows.length === 0 || !result.columns) return rows;
  // Every row is looked at: an array column may be NULL in some rows and not in others.
  const textArrays = result.columns.filter((c) => ARRAY_OIDS.has(c.type));
  if (textArrays.length === 0) return rows;
  for (const row of rows) {
    for (const column of textArrays) {
      const value = row[column.name];
      if (typeof value !== 'string') continue;
      const parsed = parseArrayLiteral(value);
      if (parsed)
        row[column.name] = NUMERIC_ARRAYS.has(column.type)
          ? parsed.map((x) => (x === null ? null : Number(x)))
          : parsed;
    }
  }
  return rows;
}

function executorOf(db: PostgresJsQueryableLike, prepare: boolean): SqlExecutor {
  return {
    async run<Row extends object>(statement: SqlStatement, params: readonly unknown[]): Promise<Row[]> {
      const result = await db.unsafe(statement.text, parametersFor(db, statement, params), { prepare });
      return normalise(result) as Row[];
    },
    async exec(script: string): Promise<void> {
      await db.unsafe(script); // no parameters: the simple protocol, several statements at once
    },
  };
}

function isQueryable(value: unknown): value is PostgresJsQueryableLike {
  const candidate = value as Partial<PostgresJsQueryableLike> | null;
  return (
    typeof value === 'function' && typeof candidate?.unsafe === 'function' && typeof candidate.typed === 'function'
  );
}

/** Why `tx` is not a postgres.js transaction, or undefined when it is one. */
function notATransaction(tx: unknown): string | undefined {
  if (!isQueryable(tx))
    return `Expected a postgres.js transaction (the tx of sql.begin(tx => ...)), got ${tx === null ? 'null' : typeof tx}.`;
  const candidate = tx as { savepoint?: unknown; begin?: unknown };
  if (typeof candidate.begin === 'function' || typeof candidate.savepoint !== 'function') {
    return (
      'Expected a postgres.js transaction (the tx of sql.begin(tx => ...)), got the postgres.js client itself: ' +
      'a publish outside a transaction would not be atomic with your writes. Call bus.publish(tx, ...) inside sql.begin(async (tx) => ...).'
    );
  }
  return undefined;
}

/**
 * Adapt a postgres.js client for `postgresStore`. `bus.publish(tx, ...)` then takes the `tx` of
 * `sql.begin(tx => ...)`, so the event commits or rolls back with your writes.
 *
 * A `tx` used after `sql.begin` returned is refused (postgres.js would run its statements outside
 * any transaction): the store's publish guard finds no transaction block and writes nothing.
 *
 * ```ts
 * import postgres from 'postgres';
 * import { fromPostgresJs, postgresStore } from 'relaybus/postgres';
 *
 * const sql = postgres(process.env.DATABASE_URL!);
 * const store = postgresStore({ driver: fromPostgresJs(sql) });
 * await sql.begin(async (tx) => {
 *   await tx`insert into orders (id) values (${'o-1'})`;
 *   await store.publish(tx, [{ type: 'order.placed', payload: { orderId: 'o-1' }, handlers: [{ name: 'mail', maxAttempts: 5 }] }]);
 * });
 * ```
 */
export function fromPostgresJs<TSql extends PostgresJsSqlLike>(
  sql: TSql,
  options: FromPostgresJsOptions = {},
): PostgresDriver<PostgresJsTransactionOf<TSql>> {
  return postgresJsDriver(sql, options) as unknown as PostgresDriver<PostgresJsTransactionOf<TSql>>;
}

function postgresJsDriver(
  sql: PostgresJsSqlLike,
  options: FromPostgresJsOptions,
): PostgresDriver<PostgresJsTransactionLike> {
  if (!isQueryable(sql) || typeof sql.begin !== 'function') {
    throw new InvalidOptionsError(
      'fromPostgresJs() needs a postgres.js client (the value of postgres(url)). For node-postgres use fromPg().',
    );
  }
  const transform = sql.options?.transform;
  if (transform?.column?.from || transform?.value?.from || transform?.row?.from) {
    throw new InvalidOptionsError(
      'fromPostgresJs() needs a postgres.js client without result transforms (transform: postgres.camel, ...): relaybus reads its own ' +
        'rows by column name. Make a second client for relaybus: postgres(url, { max: 4 }).',
    );
  }
  if (options.preparedStatements !== undefined && typeof options.preparedStatements !== 'boolean') {
    throw new InvalidOptionsError(
      `preparedStatements must be a boolean, got ${JSON.stringify(options.preparedStatements)}.`,
    );
  }
  const prepare = options.preparedStatements ?? true;
  return {
    executor: executorOf(sql, prepare),
    concurrentConnections: true,
    unwrap(tx: PostgresJsTransactionLike): SqlExecutor {
      const problem = notATransaction(tx);
      if (problem) throw new InvalidInputError(problem);
      return executorOf(tx, prepare);
    },
    transaction<T>(fn: (tx: PostgresJsTransactionLike) => Promise<T>): Promise<T> {
      return inTransaction<PostgresJsTransactionLike, T>((body) => sql.begin(body) as Promise<T>, fn);
    },
    listen: (channel, onNotify) => listenOnPostgresJs(sql, channel, onNotify),
    // No `session` (holdClaimConnections): a reserved postgres.js connection (`sql.reserve()`, 3.4.9) whose backend is
    // terminated is still written to on its next query, and the write on its closed socket throws in a timer: the
    // process dies (test/integration/connection-loss.test.ts, postgres.js, failed that way while claims held one).
    async close(): Promise<void> {
      if (options.closeWithStore) await sql.end();
    },
  };
}

/** What relaybus uses of postgres.js's `sql.listen`. */
interface PostgresJsListener {
  listen(
    channel: string,
    onnotify: (value: string) => void,
    onlisten?: () => void,
  ): PromiseLike<{ unlisten(): Promise<void> }>;
}

/**
 * LISTEN through postgres.js's own listening connection: it reconnects by itself and calls `onlisten` after each
 * (re)connect, where a notification may have been missed.
 */
export async function listenOnPostgresJs(
  sql: unknown,
  channel: string,
  onNotify: (payload: string) => void,
): Promise<Unlisten> {
  const { unlisten } = await (sql as PostgresJsListener).listen(
    channel,
    (payload) => onNotify(payload),
    () => onNotify(''),
  );
  return () => unlisten();
}
