import { createRelayBus, defineEvent, Type } from 'relaybus';
import { fromDrizzle } from 'relaybus/drizzle';
import { postgresStore } from 'relaybus/postgres';
import { db } from './db.js';
import { receipts } from './schema.js';

export const OrderPlaced = defineEvent(
  'order.placed',
  Type.Object({ orderId: Type.String(), totalCents: Type.Integer() }),
);

// The tables come from the app's drizzle-kit migrations, so the bus does not run relaybus's own setup.
export const bus = createRelayBus({
  store: postgresStore({ driver: fromDrizzle(db) }),
  events: [OrderPlaced],
  setupStore: false,
  dispatcher: { pollIntervalMs: 100 },
});

/** Order ids the plain handler saw (a real app would call a mailer or a webhook here). */
export const notified: string[] = [];

bus.on(OrderPlaced, 'notify-warehouse', async (order) => {
  notified.push(order.orderId);
});

// Transactional: ctx.transaction is a Drizzle transaction; the receipt and the completion commit together.
bus.on(OrderPlaced, 'write-receipt', { transactional: true }, async (order, ctx) => {
  await ctx.transaction.insert(receipts).values({ orderId: order.orderId });
});
