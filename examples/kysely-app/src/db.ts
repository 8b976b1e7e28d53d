import { Kysely, PostgresDialect } from 'kysely';
import pg from 'pg';

export interface Database {
  orders: { id: string; customer_id: string; total_cents: number };
  receipts: { order_id: string };
}

export const pool = new pg.Pool({ connectionString: process.env.DATABASE_URL });
// A pool emits 'error' when the server drops an idle connection: unheard, it ends the process.
pool.on('error', (error) => console.error('idle Postgres connection lost:', error.message));

export const db = new Kysely<Database>({ dialect: new PostgresDialect({ pool }) });

/** The app's own tables (a real app would use its migrations). */
export async function createAppTables(): Promise<void> {
  await db.schema
    .createTable('orders')
    .ifNotExists()
    .addColumn('id', 'text', (c) => c.primaryKey())
    .addColumn('customer_id', 'text', (c) => c.notNull())
    .addColumn('total_cents', 'integer', (c) => c.notNull())
    .execute();
  await db.schema
    .createTable('receipts')
    .ifNotExists()
    .addColumn('order_id', 'text', (c) => c.primaryKey())
    .execute();
}
