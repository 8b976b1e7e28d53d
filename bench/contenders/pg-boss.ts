/**
 * pg-boss 10.x from the npm registry (10.4.2; 11+ needs Node 22). One queue per handler;
 * publishing inserts one job per handler with `boss.insert(jobs, { db })` inside the caller's
 * transaction. Maintenance and scheduling are off (`supervise: false`, `schedule: false`) so no
 * archive or purge runs inside a measured window; completed jobs stay in the job table (pg-boss's
 * design: it updates them to `completed` and archives later).
 *
 * No per-key ordering: pg-boss 10 has none. Its `singleton` queue policy allows one active job
 * per singleton key, enforced by a unique index, which a batch fetch running into a key that is
 * already active fails on: it serialises, it does not order, so keyed runs are not offered.
 *
 * The worker loop (src/worker.js): fetch up to `batchSize` jobs, run the handler on the batch,
 * complete them, then sleep `pollingIntervalSeconds` minus the time spent, when more than 100 ms
 * is left; 0.5 s is pg-boss's minimum. So one `work()` handles at most batchSize / max(interval,
 * fetch + handle + complete) jobs/s, and `workers` loops per queue multiply it.
 *
 * Start-up: `boss.start()` (pool, version check) in `prepare`, with the pool opened to its size;
 * the `work()` calls in `start`.
 */
import pg from 'pg';
import PgBoss from 'pg-boss';
import { HANDLERS, pairsOf, type Contender, type DispatcherSettings } from '../lib/types.js';
import { inTransaction, warmSize } from '../lib/db.js';

interface Executor {
  executeSql(text: string, values?: unknown[]): Promise<{ rows: unknown[] }>;
}

function boss(url: string, schema: string, max: number): PgBoss {
  return new PgBoss({ connectionString: url, schema, max, supervise: false, schedule: false, migrate: false });
}

/** One sweep point: `workers` work() loops per queue, batchSize b, polling interval s seconds; pool 2 x workers x queues + 2. */
export function pgBossSettings(workers: number, b: number, s: number, priority = true): DispatcherSettings {
  return {
    concurrency: 1,
    batchSize: b,
    pollIntervalMs: s * 1000,
    poolSize: Math.max(10, workers * HANDLERS.length * 2 + 2),
    extra: { workers, ...(priority ? {} : { priority: 0 }) },
  };
}

/** The sweep of bench:full (bench/README.md). */
export const PG_BOSS_SWEEP: Readonly<Record<string, DispatcherSettings>> = {
  ...Object.fromEntries(
    [2, 4, 8].flatMap((w) => [1000, 2000, 5000].map((b) => [`w${w} b${b} s0.5`, pgBossSettings(w, b, 0.5)])),
  ),
  'w4 b5000 s1': pgBossSettings(4, 5000, 1),
  'w4 b5000 s0.5 noprio': pgBossSettings(4, 5000, 0.5, false),
};

export const pgBoss: Contender = {
  name: 'pg-boss',
  ordersKeys: false,
  keyed: false,
  retryBackoff: false,
  keyedVariants: [],
  variants: {
    defaults: { concurrency: 1, batchSize: 1, pollIntervalMs: 2000, poolSize: 10, extra: { workers: 1 } },
    // The best point of the sweep on this machine (bench/README.md gives the figures).
    best: pgBossSettings(4, 5000, 0.5),
  },
  sweep: PG_BOSS_SWEEP,
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
    const {
      rows: [row],
    } = await admin.query<{ pending: string; dead: string; done: string }>(
      `SELECT count(*) FILTER (WHERE state IN ('created', 'retry', 'active')) AS pending,
              count(*) FILTER (WHERE state IN ('failed', 'cancelled')) AS dead,
              count(*) FILTER (WHERE state = 'completed') AS done
       FROM "${schema}".job`,
    );
    return { pending: Number(row!.pending), dead: Number(row!.dead), completedRows: Number(row!.done) };
  },

  async stored(admin, schema) {
    const { rows } = await admin.query<{ i: string; handler: string }>(
      `SELECT data->>'i' AS i, name AS handler FROM "${schema}".job WHERE state IN ('created', 'retry')`,
    );
    return pairsOf(rows);
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
          await b.insert(
            events.flatMap((e) => HANDLERS.map((name) => ({ name, data: { i: e.i } }))),
            { db },
          );
        });
      },
      async close() {
        await b.stop({ graceful: false, wait: true });
        await pool.end();
      },
    };
  },

  async dispatcher({ url, schema }, settings, hooks) {
    const b = boss(url, schema, settings.poolSize);
    b.on('error', (error: unknown) => hooks.warn(`error: ${String((error as Error)?.stack ?? error)}`));
    const workers = settings.extra?.workers ?? 1;
    const priority = settings.extra?.priority !== 0;
    return {
      async prepare() {
        await b.start();
        // Open the pool (lib/db.ts warmSize): as many statements at once as connections wanted.
        const db = b.getDb();
        await Promise.all(
          Array.from({ length: warmSize(settings.poolSize) }, () => db.executeSql('SELECT pg_sleep(0.01)', [])),
        );
      },
      async start() {
        for (const [index, name] of HANDLERS.entries()) {
          for (let w = 0; w < workers; w += 1) {
            await b.work<{ i: number }>(
              name,
              { batchSize: settings.batchSize, pollingIntervalSeconds: settings.pollIntervalMs / 1000, priority },
              async (jobs) => {
                for (const job of jobs) {
                  const running = hooks.onHandle(job.data.i, index);
                  if (running) await running; // only the liveness cell's yielding handler returns a promise
                }
              },
            );
          }
        }
      },
      async stop() {
        await b.stop({ graceful: true, wait: true, timeout: 5_000 });
      },
    };
  },
};
