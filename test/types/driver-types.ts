/**
 * Compile-time checks of the driver types (checked by `tsc --noEmit`, never run): the caller's
 * transaction of each driver type-checks where the store wants one, and the database handle itself
 * does not.
 */
import { PGlite } from '@electric-sql/pglite';
import { drizzle as drizzleNodePg } from 'drizzle-orm/node-postgres';
import { drizzle as drizzlePglite } from 'drizzle-orm/pglite';
import { pgTable, text } from 'drizzle-orm/pg-core';
import { drizzle as drizzlePostgresJs } from 'drizzle-orm/postgres-js';
import { Kysely, PostgresDialect, type Transaction } from 'kysely';
import pg from 'pg';
import postgres from 'postgres';
import { fromDrizzle } from '../../src/postgres/drivers/drizzle-driver.js';
import { fromKysely } from '../../src/postgres/drivers/kysely-driver.js';
import { fromPostgresJs, postgresStore } from '../../src/postgres/index.js';

const orders = pgTable('orders', { id: text('id').primaryKey() });

interface AppDB {
  orders: { id: string };
}

export async function postgresJsTypes(): Promise<void> {
  const sql = postgres('postgres://localhost/app');
  const store = postgresStore({ driver: fromPostgresJs(sql) });
  await sql.begin((tx) => store.publish(tx, []));
  await store.transaction((tx) => tx`select 1`); // postgres.js's own TransactionSql
  // @ts-expect-error the client itself is not a transaction
  await store.publish(sql, []);
}

export async function kyselyTypes(): Promise<void> {
  const db = new Kysely<AppDB>({ dialect: new PostgresDialect({ pool: new pg.Pool() }) });
  const store = postgresStore({ driver: fromKysely(db) });
  await db.transaction().execute((trx: Transaction<AppDB>) => store.publish(trx, []));
  const controlled = await db.startTransaction().execute();
  await store.publish(controlled, []);
  // @ts-expect-error a Kysely instance is not a transaction
  await store.publish(db, []);
  // the store's transactions (ctx.transaction of a transactional handler) are the application's Transaction<AppDB>
  await store.transaction((trx) => trx.insertInto('orders').values({ id: 'o-1' }).execute());
}

export async function drizzleTypes(): Promise<void> {
  const dbPg = drizzleNodePg({ client: new pg.Pool() });
  const dbJs = drizzlePostgresJs({ client: postgres('postgres://localhost/app') });
  const dbLite = drizzlePglite({ client: new PGlite() });
  for (const db of [dbPg, dbJs, dbLite] as const) {
    const store = postgresStore({ driver: fromDrizzle(db) });
    await db.transaction((tx) => store.publish(tx, []));
    await store.transaction((tx) => tx.select().from(orders)); // the database's own typed transaction
    // @ts-expect-error a Drizzle database is not a transaction
    await store.publish(db, []);
  }
}
