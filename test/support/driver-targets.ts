/**
 * Contract targets for the Postgres store over the drivers that wrap another library: postgres.js,
 * Kysely (PostgresDialect over pg) and Drizzle (node-postgres, postgres-js and PGlite). Same SQL as
 * the `pg` target; these catch driver differences (parameter and result types, arrays, JSON, result
 * shapes, transactions). Each opened harness gets a schema of its own, dropped on close.
 */
import { drizzle as drizzleNodePg } from 'drizzle-orm/node-postgres';
import { drizzle as drizzlePglite } from 'drizzle-orm/pglite';
import { drizzle as drizzlePostgresJs } from 'drizzle-orm/postgres-js';
import { Kysely, PostgresDialect } from 'kysely';
import pg from 'pg';
import postgres from 'postgres';
import { fromDrizzle, type DrizzleTransactionLike } from '../../src/postgres/drivers/drizzle-driver.js';
import { fromKysely, type KyselyTransactionLike } from '../../src/postgres/drivers/kysely-driver.js';
import { fromPostgresJs, type PostgresJsTransactionLike } from '../../src/postgres/index.js';
import type { ContractTarget } from './harness.js';
import { pgliteTarget, POOL_SIZE, serverTarget } from './postgres-targets.js';

const quietPostgresJs = (url: string) => postgres(url, { max: POOL_SIZE, onnotice: () => {} });

/** The store over a postgres.js client (prepared statements unless `preparedStatements: false`). */
export function postgresJsTarget(
  options: { preparedStatements?: boolean } = {},
): ContractTarget<PostgresJsTransactionLike> {
  const prepared = options.preparedStatements ?? true;
  return serverTarget(
    prepared ? 'postgres store / postgres.js' : 'postgres store / postgres.js, preparedStatements: false',
    prepared ? 'postgres_js' : 'postgres_js_unprepared',
    (url) => {
      const sql = quietPostgresJs(url);
      return { driver: fromPostgresJs(sql, { preparedStatements: prepared }), end: () => sql.end() };
    },
  );
}

/** The store over Kysely's PostgresDialect on a pg pool. */
export function kyselyTarget(): ContractTarget<KyselyTransactionLike> {
  return serverTarget('postgres store / kysely (pg)', 'kysely', (url) => {
    const db = new Kysely<Record<string, never>>({
      dialect: new PostgresDialect({ pool: new pg.Pool({ connectionString: url, max: POOL_SIZE }) }),
    });
    return { driver: fromKysely(db), end: () => db.destroy() };
  });
}

/** The store over Drizzle's node-postgres driver. */
export function drizzlePgTarget(): ContractTarget<DrizzleTransactionLike> {
  return serverTarget('postgres store / drizzle (node-postgres)', 'drizzle_pg', (url) => {
    const pool = new pg.Pool({ connectionString: url, max: POOL_SIZE });
    return { driver: fromDrizzle(drizzleNodePg({ client: pool })), end: () => pool.end() };
  });
}

/** The store over Drizzle's postgres-js driver. */
export function drizzlePostgresJsTarget(): ContractTarget<DrizzleTransactionLike> {
  return serverTarget('postgres store / drizzle (postgres-js)', 'drizzle_postgres_js', (url) => {
    const sql = quietPostgresJs(url);
    return { driver: fromDrizzle(drizzlePostgresJs({ client: sql })), end: () => sql.end() };
  });
}

/** The store over Drizzle's PGlite driver (embedded, one connection; one instance shared by the harnesses). */
export function drizzlePgliteTarget(): ContractTarget<DrizzleTransactionLike> {
  return pgliteTarget('postgres store / drizzle (pglite)', 'drizzle_pglite', (client) =>
    fromDrizzle(drizzlePglite({ client })),
  );
}
