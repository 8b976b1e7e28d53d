/**
 * Compile-time checks (by `tsc --noEmit`, never run) that the bus carries each driver's own transaction type: a
 * transactional handler's `ctx.transaction` is the client the application writes against (`pg.PoolClient`,
 * postgres.js's `TransactionSql`, PGlite's `Transaction`), with typed query results, and `bus.publish` refuses the
 * database handle itself (a pool, the root `sql`, the PGlite database), which is refused at run time too.
 * test/types/declarations.test.ts checks the same through the packed package, with one driver installed.
 */
import { PGlite, type Transaction } from '@electric-sql/pglite';
import pg from 'pg';
import postgres from 'postgres';
import { createRelayBus, defineEvent, Type } from '../../src/index.js';
import { fromPg, fromPglite, fromPostgresJs, postgresStore } from '../../src/postgres/index.js';

const OrderPlaced = defineEvent('order.placed', Type.Object({ orderId: Type.String() }));

/** A helper of the application, written against the driver's own client. */
async function countOrder(client: pg.PoolClient, orderId: string): Promise<number> {
  return (await client.query('INSERT INTO order_counts (order_id) VALUES ($1)', [orderId])).rowCount ?? 0;
}

export async function pgTypes(): Promise<void> {
  const pool = new pg.Pool();
  const bus = createRelayBus({ store: postgresStore({ driver: fromPg(pool) }), events: [OrderPlaced] });
  bus.on(OrderPlaced, 'count-orders', { transactional: true }, async (order, ctx) => {
    const { rows } = await ctx.transaction.query<{ id: string }>('SELECT $1::text AS id', [order.orderId]);
    const id: string | undefined = rows[0]?.id;
    // @ts-expect-error the rows are typed: id is a string
    const wrong: number | undefined = rows[0]?.id;
    const client: pg.PoolClient = ctx.transaction;
    await countOrder(ctx.transaction, order.orderId);
    void [id, wrong, client];
  });
  const client = await pool.connect();
  await bus.publish(client, OrderPlaced, { orderId: 'o-1' });
  await bus.store.transaction((tx) => countOrder(tx, 'o-1'));
  // @ts-expect-error the pool is not a transaction (its queries run on whichever connection is free)
  await bus.publish(pool, OrderPlaced, { orderId: 'o-1' });
}

export async function postgresJsTypes(): Promise<void> {
  const sql = postgres('postgres://localhost/app');
  const bus = createRelayBus({ store: postgresStore({ driver: fromPostgresJs(sql) }), events: [OrderPlaced] });
  bus.on(OrderPlaced, 'count-orders', { transactional: true }, async (order, ctx) => {
    const rows = await ctx.transaction<{ id: string }[]>`SELECT ${order.orderId}::text AS id`;
    const id: string | undefined = rows[0]?.id;
    // @ts-expect-error the rows are typed: id is a string
    const wrong: number | undefined = rows[0]?.id;
    const tx: postgres.TransactionSql = ctx.transaction;
    void [id, wrong, tx];
  });
  await sql.begin((tx) => bus.publish(tx, OrderPlaced, { orderId: 'o-1' }));
  // @ts-expect-error the client itself is not a transaction
  await bus.publish(sql, OrderPlaced, { orderId: 'o-1' });
}

export async function pgliteTypes(): Promise<void> {
  const db = new PGlite();
  const bus = createRelayBus({ store: postgresStore({ driver: fromPglite(db) }), events: [OrderPlaced] });
  bus.on(OrderPlaced, 'count-orders', { transactional: true }, async (order, ctx) => {
    const { rows } = await ctx.transaction.query<{ id: string }>('SELECT $1::text AS id', [order.orderId]);
    const id: string | undefined = rows[0]?.id;
    // @ts-expect-error the rows are typed: id is a string
    const wrong: number | undefined = rows[0]?.id;
    const tx: Transaction = ctx.transaction;
    void [id, wrong, tx];
  });
  await db.transaction((tx) => bus.publish(tx, OrderPlaced, { orderId: 'o-1' }));
  // @ts-expect-error the database itself is not a transaction
  await bus.publish(db, OrderPlaced, { orderId: 'o-1' });
}
