/**
 * Publish inside the app's own Kysely transaction, run a worker until both handlers have run, print what
 * happened as one JSON line.
 */
import { bus, notified, OrderPlaced } from './bus.js';
import { createAppTables, db } from './db.js';

await createAppTables();
await bus.start(); // setup() first, then the worker

// The order and its event commit together.
await db.transaction().execute(async (trx) => {
  await trx.insertInto('orders').values({ id: 'o-1', customer_id: 'c-7', total_cents: 4200 }).execute();
  await bus.publish(trx, OrderPlaced, { orderId: 'o-1', totalCents: 4200 }, { key: 'c-7' });
});

// A transaction that fails takes its event with it.
await db
  .transaction()
  .execute(async (trx) => {
    await trx.insertInto('orders').values({ id: 'o-2', customer_id: 'c-7', total_cents: 100 }).execute();
    await bus.publish(trx, OrderPlaced, { orderId: 'o-2', totalCents: 100 }, { key: 'c-7' });
    throw new Error('payment declined');
  })
  .catch(() => {});

for (const deadline = Date.now() + 20_000; Date.now() < deadline; ) {
  const { pending, inFlight } = await bus.store.statistics();
  if (pending + inFlight === 0 && notified.length > 0) break;
  await new Promise((resolve) => setTimeout(resolve, 50));
}
await bus.stop();

const stats = await bus.store.statistics();
console.log(
  JSON.stringify({
    notified,
    receipts: (await db.selectFrom('receipts').select('order_id').execute()).map((r) => r.order_id),
    orders: (await db.selectFrom('orders').select('id').execute()).map((o) => o.id),
    left: { pending: stats.pending, inFlight: stats.inFlight, dead: stats.dead },
  }),
);
await db.destroy();
