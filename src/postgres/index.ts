/**
 * `relaybus/postgres`: the Postgres store, its drivers and the DDL.
 */
export { postgresStore, type PostgresStore, type PostgresStoreOptions } from './postgres-store.js';
export {
  fromPg,
  type FromPgOptions,
  type PgClientLike,
  type PgPoolClientLike,
  type PgPoolClientOf,
  type PgPoolLike,
} from './drivers/pg-driver.js';
export {
  fromPglite,
  type FromPgliteOptions,
  type PgliteLike,
  type PgliteQueryableLike,
  type PgliteTransactionLike,
  type PgliteTransactionOf,
} from './drivers/pglite-driver.js';
export {
  fromPostgresJs,
  type FromPostgresJsOptions,
  type PostgresJsColumnLike,
  type PostgresJsQueryableLike,
  type PostgresJsResultLike,
  type PostgresJsSqlLike,
  type PostgresJsTransactionLike,
  type PostgresJsTransactionOf,
} from './drivers/postgres-js-driver.js';
export { createPostgresAdoptSql, createPostgresSupplementSql } from './drizzle-kit-sql.js';
export { createPostgresSchemaSql, DEFAULT_SCHEMA } from './schema-sql.js';
export type { PostgresDriver, SqlExecutor, SqlStatement } from './sql-client.js';
export { UpgradeInterruptedError } from './upgrade/interrupted.js';
export { UpgradePreconditionError } from './upgrade/preconditions.js';
