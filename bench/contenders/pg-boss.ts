/**
 * pg-boss 10.x from the npm registry (10.4.2; 11+ needs Node 22). One queue per handler; publishing
 * inserts one job per handler with `boss.insert(jobs, { db })` inside the caller's transaction.
 * Maintenance and scheduling are off (`supervise: false`, `schedule: false`) so no archive or purge
 * runs inside a measured window; completed jobs stay in the job table (pg-boss's design: it updates
 * them to `completed` and archives later). No per-key ordering: the order check does not apply.
 *
 * defaults: one `work()` per queue with pg-boss's defaults (batchSize 1, polling every 2 s), pool 10.
 *   pg-boss 10's worker waits out the polling interval after every fetch (src/worker.js), so this
 *   handles batchSize / interval = 0.5 jobs/s per queue: no drain of thousands of deliveries ends
 *   in a benchmark's time, so the plans do not run it (bench/README.md gives the measurement).
 * tuned: `workers` `work()` loops per queue, batchSize and polling as given, larger pool: at most
 *   workers x batchSize / interval jobs/s per queue.
 */
import pg from 'pg';
import PgBoss from 'pg-boss';
import { HANDLERS, type Contender } from '../lib/types.js';
import { inTransaction } from '../lib/db.js';

interface Executor { executeSql(text: string, values?: unknown[]): Promise<{ rows: unknown[] }> }

function boss(url: string, schema: string, max: number): PgBoss {
  return new PgBoss({ connectionString: url, schema, max, supervise: false, schedule: false, migrate: false });
}

export const pgBoss: Contender = {
  name: 'pg-boss',
  ordered: false,
  variants: {
    defaults: { concurrency: 1, batchSize: 1, pollIntervalMs: 2000, poolSize: 10, extra: { workers: 1 } },
    tuned: { concurrency: 1, batchSize: 1000, pollIntervalMs: 500, poolSize: 20, extra: { workers: 4 } },
  },
  tables: { deliveries: /^j[0-9a-f]{56}$/ },

  async setup(url, schema) {
    const b = new PgBoss({ connectionString: url, schema, max: 2, supervise: false, schedule: false, migrate: true });
    b.on('error', (error: unknown) => console.error('[pg-boss]', error));
    await b.start();
    for (const handler of HANDLERS) await b.createQueue(handler);
    await b.stop({ graceful: false, wait: true });
  },

  async teardown(admin, schema) {
    await admin.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
  },

  async remaining(admin, schema) {
    const { rows: [row] } = await admin.query<{ pending: string; dead: string; done: string }>(
      `SELECT count(*) FILTER (WHERE state IN ('created', 'retry', 'active')) AS pending,
              count(*) FILTER (WHERE state IN ('failed', 'cancelled')) AS dead,
              count(*) FILTER (WHERE state = 'completed') AS done
       FROM "${schema}".job`);
    return { pending: Number(row!.pending), dead: Number(row!.dead), completedRows: Number(row!.done) };
  },

  async publisher({ url, schema, poolSize }) {
    const pool = new pg.Pool({ connectionString: url, max: poolSize });
    const b = boss(url, schema, 1);
    b.on('error', (error: unknown) => console.error('[pg-boss]', error));
    await b.start();
    return {
      async publish(events) {
        await inTransaction(pool, async (client) => {
          const db: Executor = { executeSql: (text, values) => client.query(text, values) };
          await b.insert(events.flatMap((e) => HANDLERS.map((name) => ({ name, data: { i: e.i } }))), { db });
        });
      },
      async close() {
        await b.stop({ graceful: false, wait: true });
        await pool.end();
      },
    };
  },

  async dispatcher({ url, schema }, settings, onHandle) {
    const b = boss(url, schema, settings.poolSize);
    b.on('error', (error: unknown) => console.error('[pg-boss]', error));
    return {
      async start() {
        await b.start();
        for (const [index, name] of HANDLERS.entries()) {
          for (let w = 0; w < (settings.extra?.workers ?? 1); w += 1) {
            await b.work<{ i: number }>(name, { batchSize: settings.batchSize, pollingIntervalSeconds: settings.pollIntervalMs / 1000 }, async (jobs) => {
              for (const job of jobs) onHandle(job.data.i, index);
            });
          }
        }
      },
      async stop() {
        await b.stop({ graceful: true, wait: true, timeout: 5_000 });
      },
    };
  },
};
