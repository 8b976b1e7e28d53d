import { createRelayBus, defineEvent, Type } from 'relaybus';
import { fromKysely } from 'relaybus/kysely';
import { postgresStore } from 'relaybus/postgres';
import { db, pool } from './db.js';

export const OrderPlaced = defineEvent(
  'order.placed',
  Type.Object({ orderId: Type.String(), totalCents: Type.Integer() }),
);

// bus.start() runs relaybus's own setup: it creates the tables in the "relaybus" schema (idempotent, safe to race).
export const bus = createRelayBus({
  // The pool too: Kysely hides it, and relaybus listens for dropped connections on every client it checks out.
  store: postgresStore({ driver: fromKysely(db, { pool }) }),
  events: [OrderPlaced],
  dispatcher: { pollIntervalMs: 100 },
});

/** Order ids the plain handler saw (a real app would call a mailer or a webhook here). */
export const notified: string[] = [];

bus.on(OrderPlaced, 'notify-warehouse', async (order) => {
  notified.push(order.orderId);
});

// Transactional: ctx.transaction is a Kysely Transaction<Database>; the receipt and the completion commit together.
bus.on(OrderPlaced, 'write-receipt', { transactional: true }, async (order, ctx) => {
  await ctx.transaction.insertInto('receipts').values({ order_id: order.orderId }).execute();
});
