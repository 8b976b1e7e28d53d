/**
 * Contract targets for the Postgres store over the drivers that wrap another library: postgres.js,
 * Kysely (PostgresDialect over pg) and Drizzle (node-postgres, postgres-js and PGlite). Same SQL as
 * the `pg` target; these catch driver differences (parameter and result types, arrays, JSON, result
 * shapes, transactions). Each opened harness gets a schema of its own, dropped on close.
 */
import { PGlite } from '@electric-sql/pglite';
import { drizzle as drizzleNodePg } from 'drizzle-orm/node-postgres';
import { drizzle as drizzlePglite } from 'drizzle-orm/pglite';
import { drizzle as drizzlePostgresJs } from 'drizzle-orm/postgres-js';
import { Kysely, PostgresDialect } from 'kysely';
import pg from 'pg';
import postgres from 'postgres';
import { fromDrizzle, type DrizzleTransactionLike } from '../../src/postgres/drivers/drizzle-driver.js';
import { fromKysely, type KyselyTransactionLike } from '../../src/postgres/drivers/kysely-driver.js';
import { fromPostgresJs, postgresStore, type PostgresDriver, type PostgresJsTransactionLike } from '../../src/postgres/index.js';
import type { StoreCapabilities } from '../../src/store/contract.js';
import { uniqueSchemaName } from './databases.js';
import { StubClock, type ContractTarget, type Harness, type HarnessOptions } from './harness.js';
import { capabilities, POOL_SIZE, resetSql, serverTarget, transactionRunner } from './postgres-targets.js';

const quietPostgresJs = (url: string) => postgres(url, { max: POOL_SIZE, onnotice: () => {} });

/** The store over a postgres.js client (prepared statements unless `preparedStatements: false`). */
export function postgresJsTarget(options: { preparedStatements?: boolean } = {}): ContractTarget<PostgresJsTransactionLike> {
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
    const db = new Kysely<Record<string, never>>({ dialect: new PostgresDialect({ pool: new pg.Pool({ connectionString: url, max: POOL_SIZE }) }) });
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

/**
 * The store over Drizzle's PGlite driver (embedded, one connection). A PGlite instance takes about
 * half a gigabyte, so the harnesses of one target share one instance, each in a schema of its own.
 */
export function drizzlePgliteTarget(): ContractTarget<DrizzleTransactionLike> {
  let shared: { client: Promise<PGlite>; users: number } | undefined;
  return {
    name: 'postgres store / drizzle (pglite)',
    capabilities: capabilities(false),
    probe: async () => undefined,
    async open(options: HarnessOptions = {}): Promise<Harness<DrizzleTransactionLike>> {
      shared ??= { client: PGlite.create(), users: 0 };
      const instance = shared;
      instance.users += 1;
      const client = await instance.client;
      const driver = fromDrizzle(drizzlePglite({ client }));
      const schema = uniqueSchemaName('drizzle_pglite');
      const store = postgresStore({ driver, schema, completionHistory: options.completionHistory ?? false });
      await store.setup();
      return {
        store,
        clock: new StubClock(),
        inTransaction: transactionRunner(store),
        reset: () => driver.executor.exec(resetSql(schema)),
        close: async () => {
          await driver.executor.exec(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
          instance.users -= 1;
          if (instance.users === 0) {
            if (shared === instance) shared = undefined;
            await client.close();
          }
        },
      };
    },
  };
}
