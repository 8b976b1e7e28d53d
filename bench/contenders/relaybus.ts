/**
 * relaybus itself: the real bus and dispatcher (createRelayBus + postgresStore over `pg`), the
 * same code a user runs with `npx relaybus worker`. Publishing goes through `bus.publishMany` in
 * the caller's transaction (a pg client after BEGIN).
 */
import pg from 'pg';
import { createConsoleLogger, createRelayBus, defineEvent, Type, type RelayBus } from '../../src/index.js';
import { fromPg, postgresStore, type PgClientLike } from '../../src/postgres/index.js';
import { HANDLERS, type Contender, type DispatcherSettings } from '../lib/types.js';
import { inTransaction } from '../lib/db.js';

const BenchEvent = defineEvent('bench.event', Type.Object({ i: Type.Integer() }));

function makeBus(pool: pg.Pool, schema: string, settings?: DispatcherSettings): RelayBus<PgClientLike, typeof BenchEvent> {
  const store = postgresStore({ driver: fromPg(pool), schema });
  return createRelayBus({
    store,
    events: [BenchEvent],
    setupStore: false,
    // BENCH_DEBUG=1 shows the dispatcher's own log (warnings and errors) on stderr.
    ...(process.env.BENCH_DEBUG ? { logger: createConsoleLogger({ level: 'warn' }) } : {}),
    ...(settings
      ? {
          dispatcher: {
            concurrency: settings.concurrency,
            batchSize: settings.batchSize,
            pollIntervalMs: settings.pollIntervalMs,
            ...(settings.extra?.completionBatchWindowMs !== undefined ? { completionBatchWindowMs: settings.extra.completionBatchWindowMs } : {}),
          },
        }
      : {}),
  });
}

export const relaybus: Contender = {
  name: 'relaybus',
  ordered: true,
  variants: {
    // The library's DEFAULT_* (concurrency 10, batch 10, poll 1 s) on a default-sized pg pool.
    defaults: { concurrency: 10, batchSize: 10, pollIntervalMs: 1000, poolSize: 10 },
    tuned: { concurrency: 200, batchSize: 200, pollIntervalMs: 50, poolSize: 20 },
    // Twice the batch in handler slots: the next claim overlaps the completion of the previous batch.
    pipelined: { concurrency: 400, batchSize: 200, pollIntervalMs: 50, poolSize: 20 },
  },
  tables: { deliveries: 'relaybus_deliveries', lanes: 'relaybus_lanes' },

  async setup(url, schema) {
    const pool = new pg.Pool({ connectionString: url, max: 2 });
    try {
      await postgresStore({ driver: fromPg(pool), schema }).setup();
    } finally {
      await pool.end();
    }
  },

  async teardown(admin, schema) {
    await admin.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
  },

  async remaining(admin, schema) {
    const { rows: [row] } = await admin.query<{ pending: string; dead: string }>(
      `SELECT count(*) FILTER (WHERE status = 'pending') AS pending, count(*) FILTER (WHERE status = 'dead') AS dead
       FROM "${schema}".relaybus_deliveries`);
    return { pending: Number(row!.pending), dead: Number(row!.dead), completedRows: 0 };
  },

  async publisher({ url, schema, poolSize }) {
    const pool = new pg.Pool({ connectionString: url, max: poolSize });
    const bus = makeBus(pool, schema);
    for (const handler of HANDLERS) bus.on(BenchEvent, handler, () => {});
    return {
      async publish(events) {
        await inTransaction(pool, async (client) => {
          if (events.length === 1) {
            await bus.publish(client, BenchEvent, { i: events[0]!.i }, { key: events[0]!.key, id: `e${events[0]!.i}` });
          } else {
            await bus.publishMany(client, events.map((e) => ({ event: BenchEvent, payload: { i: e.i }, options: { key: e.key, id: `e${e.i}` } })));
          }
        });
      },
      close: () => pool.end(),
    };
  },

  async dispatcher({ url, schema }, settings, onHandle) {
    const pool = new pg.Pool({ connectionString: url, max: settings.poolSize });
    const bus = makeBus(pool, schema, settings);
    HANDLERS.forEach((handler, index) => bus.on(BenchEvent, handler, (payload) => { onHandle(payload.i, index); }));
    return {
      start: () => bus.start(),
      async stop() {
        await bus.stop({ graceMs: 5_000 });
        await pool.end();
      },
    };
  },
};
