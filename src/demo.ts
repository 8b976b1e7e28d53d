/**
 * The embedded demo: an in-process PGlite database (no server, no setup), a few thousand keyed events
 * published with two handlers, drained through the lane-lease delivery path, then the statistics and
 * the write evidence read back from Postgres's own counters.
 */
import { PGlite } from '@electric-sql/pglite';
import { fromPglite, postgresStore } from './postgres/index.js';

const EVENTS = Number(process.env.RELAYBUS_DEMO_EVENTS ?? 3000);
const HANDLERS = [{ name: 'send-receipt', maxAttempts: 3 }, { name: 'update-ledger', maxAttempts: 3 }];

function progress(label: string, done: number, total: number): void {
  if (!process.stdout.isTTY && done < total) return; // a log file gets the final line only
  const width = 30;
  const filled = Math.round((done / total) * width);
  process.stdout.write(`\r${label} [${'#'.repeat(filled)}${'.'.repeat(width - filled)}] ${done}/${total}`);
  if (done >= total) process.stdout.write('\n');
}

const started = performance.now();
const db = await PGlite.create();
const store = postgresStore({ driver: fromPglite(db, { ownsDatabase: true }) });
await store.setup();
console.log(`relaybus demo: embedded PGlite, schema "${store.schema}" set up in ${Math.round(performance.now() - started)} ms`);

for (let sent = 0; sent < EVENTS; sent += 100) {
  await store.transaction((tx) => store.publish(tx, Array.from({ length: Math.min(100, EVENTS - sent) }, (_, i) => ({
    type: 'order.placed', key: `customer-${(sent + i) % 500}`, payload: { orderId: `o-${sent + i}` }, handlers: HANDLERS,
  }))));
  progress('publish ', Math.min(sent + 100, EVENTS), EVENTS);
}

const total = EVENTS * HANDLERS.length;
const lastSequence = new Map<string, number>();
let delivered = 0;
let orderViolations = 0;
const drainStart = performance.now();
while (delivered < total) {
  const batch = await store.claim({ owner: 'demo-worker', handlers: HANDLERS.map((h) => h.name), limit: 500, leaseDurationMs: 30_000 });
  if (batch.length === 0) break;
  for (const delivery of batch) {
    const slot = `${delivery.handler}/${delivery.key}`;
    const sequence = Number(delivery.sequence);
    if ((lastSequence.get(slot) ?? 0) >= sequence) orderViolations += 1;
    lastSequence.set(slot, sequence);
  }
  const done = await store.completeMany(batch.map((d) => ({ deliveryId: d.id, lease: d.lease })));
  delivered += done.filter(Boolean).length;
  progress('deliver ', delivered, total);
}
const seconds = (performance.now() - drainStart) / 1000;

const stats = await store.statistics();
await db.query('SELECT pg_stat_force_next_flush()');
await db.query('SELECT 1'); // statistics are flushed when the backend goes idle
const { rows } = await db.query<{ relname: string; ins: number; upd: number; hot: number; del: number }>(
  `SELECT relname, n_tup_ins::int AS ins, n_tup_upd::int AS upd, n_tup_hot_upd::int AS hot, n_tup_del::int AS del
   FROM pg_stat_user_tables WHERE schemaname = $1 AND relname IN ('relaybus_deliveries', 'relaybus_lanes') ORDER BY relname`,
  [store.schema],
);
console.log(`\ndelivered ${delivered}/${total} deliveries in ${seconds.toFixed(1)} s, per-key order violations: ${orderViolations}`);
console.log(`left: pending ${stats.pending}, in flight ${stats.inFlight}, dead ${stats.dead}`);
console.log('write evidence (pg_stat_user_tables):');
for (const row of rows) console.log(`  ${row.relname.padEnd(20)} inserted ${row.ins}, updated ${row.upd} (HOT ${row.hot}), deleted ${row.del}`);
await store.close();
process.exitCode = delivered === total && orderViolations === 0 ? 0 : 1;
