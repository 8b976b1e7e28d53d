/**
 * Publish inside the app's own Drizzle transaction, run a worker until both handlers have run, print what
 * happened as one JSON line.
 */
import { bus, notified, OrderPlaced } from './bus.js';
import { db, pool } from './db.js';
import { orders, receipts } from './schema.js';

// The order and its event commit together.
await db.transaction(async (tx) => {
  await tx.insert(orders).values({ id: 'o-1', customerId: 'c-7', totalCents: 4200 });
  await bus.publish(tx, OrderPlaced, { orderId: 'o-1', totalCents: 4200 }, { key: 'c-7' });
});

// A transaction that fails takes its event with it.
await db
  .transaction(async (tx) => {
    await tx.insert(orders).values({ id: 'o-2', customerId: 'c-7', totalCents: 100 });
    await bus.publish(tx, OrderPlaced, { orderId: 'o-2', totalCents: 100 }, { key: 'c-7' });
    throw new Error('payment declined');
  })
  .catch(() => {});

await bus.start();
for (const deadline = Date.now() + 20_000; Date.now() < deadline; ) {
  const { pending, inFlight } = await bus.store.statistics();
  if (pending + inFlight === 0) break;
  await new Promise((resolve) => setTimeout(resolve, 50));
}
await bus.stop();

const written = await db.select().from(receipts);
const stats = await bus.store.statistics();
console.log(
  JSON.stringify({
    notified,
    receipts: written.map((r) => r.orderId),
    orders: (await db.select().from(orders)).map((o) => o.id),
    left: { pending: stats.pending, inFlight: stats.inFlight, dead: stats.dead },
  }),
);
await pool.end();
