/**
 * pg-boss from the npm registry: the current major (12.x, `pg-boss`) and, in bench:full only, 10.4.2 (the npm alias
 * `pg-boss10`, the last major that ran on Node 20) as `pg-boss-10`, so one run shows what the upgrade changed (12 fetches
 * and completes through partitioned or shared job tables, writes more WAL per job, and adds burst fetching).
 * One queue per handler; publishing inserts one job per handler with `boss.insert` inside the caller's transaction
 * (`{ db }`): 12 takes the queue name per call (one statement per handler), 10 takes it per job (one statement).
 * Maintenance and scheduling are off (`supervise: false`, `schedule: false`) so no archive or purge runs inside a
 * measured window; completed jobs stay in the job table (pg-boss's design: it updates them to `completed`).
 *
 * No per-key ordering: pg-boss has none that a batch fetch keeps (its `singleton` policy serialises one active job
 * per key through a unique index, which a batch fetch running into an active key fails on), so no keyed runs.
 *
 * The worker loop: fetch up to `batchSize` jobs, run the handler on the batch, complete them, then wait out
 * `pollingIntervalSeconds` (0.5 s at least) minus the time spent. 10 multiplies that by calling `work()` several
 * times per queue; 12 has `localConcurrency` (that many loops behind one `work()`) and `burstWhenBatchFull` (fetch
 * again at once while fetches come back full). 12 stores a queue's jobs in the shared `job_common` table unless the
 * queue is created with `partition: true` (a table of its own, as every queue had in 10).
 *
 * Start-up: `boss.start()` (pool, version check) in `prepare`, with the pool opened to its size; `work()` in `start`.
 */
import pg from 'pg';
import { HANDLERS, pairsOf, settingsOf, type Contender, type DispatcherSettings } from '../lib/types.js';
import { inTransaction, warmSize } from '../lib/db.js';

interface Executor {
  executeSql(text: string, values?: unknown[]): Promise<{ rows: unknown[] }>;
}
interface Job {
  readonly data: { i: number };
}
/** The part of pg-boss 10 and 12 the harness calls (their own types differ in `insert` and `work`'s options). */
interface Boss {
  on(event: 'error' | 'warning', listener: (error: unknown) => void): unknown;
  start(): Promise<unknown>;
  stop(options: { graceful: boolean; wait: boolean; timeout?: number }): Promise<void>;
  createQueue(name: string, options?: { partition?: boolean }): Promise<void>;
  getDb(): Executor;
  work(name: string, options: Record<string, unknown>, handler: (jobs: Job[]) => Promise<void>): Promise<string>;
  insert(...args: unknown[]): Promise<unknown>;
}
type BossOptions = Record<string, unknown>;
type BossClass = new (options: BossOptions) => Boss;

interface Major {
  readonly name: string;
  readonly load: () => Promise<BossClass>;
  /** 12: `insert(name, jobs, { db })`, one call per queue; 10: `insert(jobs with names, { db })`. */
  readonly nameOnInsert: boolean;
  readonly variants: Readonly<Record<string, DispatcherSettings>>;
  readonly sweep: Readonly<Record<string, DispatcherSettings>>;
}

/**
 * One pg-boss 12 point: `works` work() calls per queue, each with `localConcurrency` lc, batchSize b, polling s
 * seconds, burstWhenBatchFull, queues created partitioned or not; pool 2 x loops x queues + 2.
 */
export function pgBoss12Settings(
  lc: number,
  b: number,
  s: number,
  {
    burst = true,
    partition = true,
    works = 1,
    notify = false,
  }: { burst?: boolean; partition?: boolean; works?: number; notify?: boolean } = {},
): DispatcherSettings {
  return {
    concurrency: lc,
    batchSize: b,
    pollIntervalMs: s * 1000,
    poolSize: Math.max(10, works * lc * HANDLERS.length * 2 + 2),
    extra: {
      workers: works,
      localConcurrency: lc,
      burst: burst ? 1 : 0,
      partition: partition ? 1 : 0,
      notify: notify ? 1 : 0,
    },
  };
}

/** The sweep of bench:full for 12 (bench/README.md, "Peers at their best"). */
export const PG_BOSS_SWEEP: Readonly<Record<string, DispatcherSettings>> = {
  ...Object.fromEntries(
    [1, 2, 4].flatMap((lc) =>
      [1000, 2000, 5000].map((b) => [`lc${lc} b${b} s0.5 burst part`, pgBoss12Settings(lc, b, 0.5)]),
    ),
  ),
  'lc2 b5000 s0.5 part': pgBoss12Settings(2, 5000, 0.5, { burst: false }),
  'lc2 b5000 s0.5 burst': pgBoss12Settings(2, 5000, 0.5, { partition: false }),
  'lc2 b5000 s1 burst part': pgBoss12Settings(2, 5000, 1),
  'w2 lc1 b5000 s0.5 burst part': pgBoss12Settings(1, 5000, 0.5, { works: 2 }),
  'lc4 b5000 s0.5 part': pgBoss12Settings(4, 5000, 0.5, { burst: false }),
};

/** One pg-boss 10 point: `workers` work() loops per queue, batchSize b, polling interval s seconds. */
export function pgBoss10Settings(workers: number, b: number, s: number): DispatcherSettings {
  return {
    concurrency: 1,
    batchSize: b,
    pollIntervalMs: s * 1000,
    poolSize: Math.max(10, workers * HANDLERS.length * 2 + 2),
    extra: { workers },
  };
}

/** 10's sweep, short: its best points of earlier runs on Node 20 (bench/README.md). */
export const PG_BOSS_10_SWEEP: Readonly<Record<string, DispatcherSettings>> = {
  'w2 b5000 s0.5': pgBoss10Settings(2, 5000, 0.5),
  'w4 b2000 s0.5': pgBoss10Settings(4, 2000, 0.5),
};

function makePgBoss(major: Major): Contender {
  let Boss: BossClass | undefined;
  const load = async () => (Boss ??= await major.load());
  const create = async (url: string, schema: string, max: number, migrate = false, listen = false) =>
    new (await load())({
      connectionString: url,
      schema,
      max,
      supervise: false,
      schedule: false,
      migrate,
      ...(listen ? { useListenNotify: true } : {}),
    });

  const contender: Contender = {
    name: major.name,
    ordersKeys: false,
    keyed: false,
    retryBackoff: false,
    keyedVariants: [],
    variants: major.variants,
    sweep: major.sweep,
    // 10: one partition `j<sha224>` of `job` per queue; 12: `job_common`, or `j<sha224>` per partitioned queue.
    tables: { deliveries: /^(j[0-9a-f]{56}|job_common)$/ },

    async setup(url, schema, variant) {
      const b = await create(url, schema, 2, true);
      b.on('error', (error: unknown) => console.error(`[${major.name}]`, error));
      await b.start();
      // Partitioned queues at the sweep points that ask for them (12), and for the publish and preload paths of `best`.
      const settings = (variant && settingsOf(contender, variant)) || major.variants.best;
      const partition = major.nameOnInsert && settings?.extra?.partition !== 0;
      const notify = major.nameOnInsert && settings?.extra?.notify === 1;
      for (const handler of HANDLERS)
        await b.createQueue(handler, {
          ...(partition ? { partition: true } : {}),
          ...(notify ? { notify: true } : {}),
        });
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
      const b = await create(url, schema, 1);
      b.on('error', (error: unknown) => console.error(`[${major.name}]`, error));
      await b.start();
      return {
        async publish(events) {
          await inTransaction(pool, async (client) => {
            const db: Executor = { executeSql: (text, values) => client.query(text, values) };
            if (major.nameOnInsert) {
              for (const name of HANDLERS)
                await b.insert(
                  name,
                  events.map((e) => ({ data: { i: e.i } })),
                  { db },
                );
            } else {
              await b.insert(
                events.flatMap((e) => HANDLERS.map((name) => ({ name, data: { i: e.i } }))),
                { db },
              );
            }
          });
        },
        async close() {
          await b.stop({ graceful: false, wait: true });
          await pool.end();
        },
      };
    },

    async dispatcher({ url, schema }, settings, hooks) {
      // 12's LISTEN/NOTIFY wake-up (the `notify` variant): one more connection, held by the listener.
      const b = await create(url, schema, settings.poolSize, false, settings.extra?.notify === 1);
      b.on('error', (error: unknown) => hooks.warn(`error: ${String((error as Error)?.stack ?? error)}`));
      // 12 reports what it falls back from (LISTEN/NOTIFY unavailable, slow queries) as 'warning' events.
      b.on('warning', (warning: unknown) => hooks.warn(`warning: ${JSON.stringify(warning)}`));
      const workers = settings.extra?.workers ?? 1;
      const options: Record<string, unknown> = {
        batchSize: settings.batchSize,
        pollingIntervalSeconds: settings.pollIntervalMs / 1000,
        ...(major.nameOnInsert
          ? {
              localConcurrency: settings.extra?.localConcurrency ?? 1,
              burstWhenBatchFull: settings.extra?.burst === 1,
            }
          : {}),
      };
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
              await b.work(name, options, async (jobs) => {
                for (const job of jobs) {
                  const running = hooks.onHandle(job.data.i, index);
                  if (running) await running; // only the liveness cell's yielding handler returns a promise
                }
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
  return contender;
}

/** pg-boss 12: its best point found on this machine (bench/README.md gives the figures). */
export const pgBoss = makePgBoss({
  name: 'pg-boss',
  load: async () => (await import('pg-boss')).PgBoss as unknown as BossClass,
  nameOnInsert: true,
  variants: {
    best: pgBoss12Settings(2, 5000, 0.5),
    // best with queues created `notify: true` and the instance's `useListenNotify`: a created job wakes the workers at
    // once instead of at their next poll (0.5 s at least), which is what a latency cell needs from pg-boss.
    notify: pgBoss12Settings(2, 5000, 0.5, { notify: true }),
  },
  sweep: PG_BOSS_SWEEP,
});

/** pg-boss 10.4.2 (npm alias `pg-boss10`), bench:full only: the major before, on the same Node and the same run. */
export const pgBoss10 = makePgBoss({
  name: 'pg-boss-10',
  load: async () => (await import('pg-boss10')).default as unknown as BossClass,
  nameOnInsert: false,
  variants: { best: pgBoss10Settings(4, 5000, 0.5) },
  sweep: PG_BOSS_10_SWEEP,
});
