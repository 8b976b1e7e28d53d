/**
 * What a README fragment takes from the reader's own application, declared before the block when
 * the README asks for it with `<!-- snippet: prelude=<name>,... -->`. Keep them small: a prelude
 * declares what the text around the block says the reader has, never what the block should show.
 * Imports are aliased (`name_`) so they cannot collide with the block's own.
 */
export const PRELUDES: Readonly<Record<string, string>> = {
  /** The event of the quick start. */
  'order-placed': [
    "import { defineEvent as defineEvent_, Type as Type_ } from 'relaybus';",
    "const OrderPlaced = defineEvent_('order.placed', Type_.Object({ orderId: Type_.String(), customerId: Type_.String() }));",
  ].join('\n'),

  /** A Postgres store over a `pg` pool. */
  store: [
    "import type { Store as Store_ } from 'relaybus';",
    "declare const store: Store_<import('pg').PoolClient>;",
  ].join('\n'),

  /** A Kysely database over `pool` with an `orders` table, and an order to save. */
  kysely: [
    "declare const pool: import('pg').Pool;",
    "declare const db: import('kysely').Kysely<{ orders: { id: string; customer_id: string } }>;",
    'declare const order: { readonly id: string; readonly customerId: string };',
  ].join('\n'),

  /** A Drizzle node-postgres database, its `orders` table, and an order to save. */
  drizzle: [
    "import { drizzle as drizzle_ } from 'drizzle-orm/node-postgres';",
    "import { pgTable as pgTable_, text as text_ } from 'drizzle-orm/pg-core';",
    "const orders = pgTable_('orders', { id: text_('id').primaryKey(), customerId: text_('customer_id').notNull() });",
    "declare const pool_: import('pg').Pool;",
    'const db = drizzle_({ client: pool_ });',
    'declare const order: { readonly id: string; readonly customerId: string };',
  ].join('\n'),
};

/**
 * The same preludes as values a program can run, for the flow tests (test/flows/) that run a README block in a new
 * project: what the reader's application would have made by then. Each declares the names its `PRELUDES` entry
 * declares, with those types, so a block that typechecks with one runs with the other.
 */
export const RUNNABLE_PRELUDES: Readonly<Record<string, string>> = {
  'order-placed': PRELUDES['order-placed']!,

  kysely: [
    "import pg_ from 'pg';",
    "import { Kysely as Kysely_, PostgresDialect as PostgresDialect_ } from 'kysely';",
    'const pool = new pg_.Pool({ connectionString: process.env.DATABASE_URL });',
    "pool.on('error', (error) => console.error('idle Postgres connection lost:', error.message));",
    'const db = new Kysely_<{ orders: { id: string; customer_id: string } }>({ dialect: new PostgresDialect_({ pool }) });',
    "const order: { readonly id: string; readonly customerId: string } = { id: 'o-1', customerId: 'c-7' };",
  ].join('\n'),
};
