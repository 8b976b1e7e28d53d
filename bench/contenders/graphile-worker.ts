/**
 * graphile-worker from the npm registry: the current release (0.18.x, `graphile-worker`) and, in bench:full only,
 * 0.17.3 (the npm alias `graphile-worker17`, the last release that ran on Node 20) as `graphile-worker-0.17`, so one
 * run shows what the upgrade changed. One task per handler; publishing calls the schema's
 * `add_jobs(job_spec[])` in the caller's transaction (what `WorkerUtils.addJobs` sends). Completed jobs are deleted,
 * as in relaybus.
 *
 * Ordering: graphile-worker runs the jobs of one named queue one at a time, in order. A keyed run
 * puts every job in the queue `<key>:<handler>` (relaybus orders per handler and key), so the
 * order check applies. graphile-worker 0.17.3's local queue breaks that guarantee (a batch fetch
 * can take several jobs of one queue: graphile/worker#621, fixed after 0.17.3 by #622), so the
 * keyed variant runs without it.
 *
 * Start-up, through the public API only (0.18's `exports` admit nothing but the package entry): the harness opens
 * its own pg pool to its size and runs `runMigrations({ pgPool })` (the migration check `run()` does) in `prepare`,
 * before "go"; `start` calls `runTaskList(options, tasks, pgPool)`, the worker pool that `run()` builds (without
 * cron, which the workload does not use).
 *
 * Settings (`extra`): `localQueue` size (absent: none), `completeJobBatchDelay` (absent: -1, off;
 * failJobBatchDelay follows it). Pool: the docs advise `concurrentJobs + 2` or 10.
 */
import pg from 'pg';
import type { Logger as LoggerType, TaskList, WorkerPool, WorkerPoolOptions } from 'graphile-worker';
import { HANDLERS, handlerIndex, pairsOf, type Contender, type DispatcherSettings } from '../lib/types.js';
import { inTransaction, warmPool } from '../lib/db.js';

/** The part of graphile-worker's API the harness calls; 0.17 and 0.18 agree on it. */
interface GraphileApi {
  Logger: new (factory: () => (level: string, message: string) => void) => LoggerType;
  runMigrations(options: { pgPool: pg.Pool; schema: string; logger: LoggerType }): Promise<void>;
  runTaskList(options: WorkerPoolOptions, tasks: TaskList, pgPool: pg.Pool): WorkerPool;
}

/** One sweep point: concurrency c, pool max(c + 2, 10), local queue lq (0: none), completion batch delay d (-1: off). */
export function graphileSettings(c: number, lq: number, d: number): DispatcherSettings {
  return {
    concurrency: c,
    batchSize: Math.max(1, lq),
    pollIntervalMs: 2000,
    poolSize: Math.max(c + 2, 10),
    extra: { ...(lq > 0 ? { localQueue: lq } : {}), ...(d >= 0 ? { completeJobBatchDelay: d } : {}) },
  };
}

/**
 * The sweep of bench:full (bench/README.md): concurrency 8/16/24/32, local queue concurrency+1 or 500, completion
 * delay 0 or 5 ms; and around the best point, the docs' suggested completion delay (250 ms) and a local queue of 1,000.
 */
export const GRAPHILE_SWEEP: Readonly<Record<string, DispatcherSettings>> = {
  ...Object.fromEntries(
    [8, 16, 24, 32].flatMap((c) =>
      [c + 1, 500].flatMap((lq) => [0, 5].map((d) => [`c${c} lq${lq} d${d}`, graphileSettings(c, lq, d)])),
    ),
  ),
  'c16 lq500 d250': graphileSettings(16, 500, 250),
  'c16 lq1000 d5': graphileSettings(16, 1000, 5),
};

/** 0.17.3's sweep, short: its best points of earlier runs (bench/README.md). */
export const GRAPHILE_017_SWEEP: Readonly<Record<string, DispatcherSettings>> = {
  'c16 lq500 d5': graphileSettings(16, 500, 5),
  'c32 lq500 d5': graphileSettings(32, 500, 5),
};

/** A pool with the error listeners graphile-worker asks for (on the pool, and on each client it connects). */
function poolFor(url: string, max: number, warn: (message: string) => void): pg.Pool {
  const pool = new pg.Pool({ connectionString: url, max });
  pool.on('error', (error) => warn(`pool error: ${error.message}`));
  pool.on('connect', (client) => client.on('error', (error) => warn(`client error: ${error.message}`)));
  return pool;
}

function makeGraphileWorker(
  name: string,
  load: () => Promise<GraphileApi>,
  best: DispatcherSettings,
  sweep: Readonly<Record<string, DispatcherSettings>>,
): Contender {
  let api: GraphileApi | undefined;
  const loaded = async () => (api ??= await load());
  /** graphile-worker's Logger wraps a log-function factory: errors and warnings go to `warn`, the rest nowhere. */
  const loggerTo = (Logger: GraphileApi['Logger'], warn: (message: string) => void) =>
    new Logger(() => (level, message) => {
      if (level === 'error' || level === 'warning') warn(`${level}: ${message}`);
    });

  return {
    name,
    ordersKeys: true,
    keyed: true,
    retryBackoff: false,
    keyedVariants: ['queues', 'queues-localqueue'],
    namedOnly: ['queues-localqueue'],
    variants: {
      // Its own defaults: concurrency 1, poll 2 s, no local queue, no completion batching, pool 10.
      defaults: { concurrency: 1, batchSize: 1, pollIntervalMs: 2000, poolSize: 10 },
      // The best point of the sweep on this machine (bench/README.md gives the figures).
      best,
      // Keyed runs: named queues without the local queue (graphile/worker#621), polling every 50 ms: a
      // worker whose fetch found every queue locked by another fetch waits for the next poll.
      queues: { ...graphileSettings(16, 0, 0), pollIntervalMs: 50 },
      // Ad hoc only, to show the harness catches graphile/worker#621: named queues with the local queue.
      'queues-localqueue': { ...graphileSettings(16, 500, 0), pollIntervalMs: 50 },
    },
    sweep,
    tables: { deliveries: '_private_jobs' },

    async setup(url, schema) {
      const { Logger, runMigrations } = await loaded();
      const pgPool = poolFor(url, 2, (message) => console.error(`[${name}] ${message}`));
      try {
        await runMigrations({ pgPool, schema, logger: new Logger(() => () => {}) });
      } finally {
        await pgPool.end();
      }
    },

    async teardown(admin, schema) {
      await admin.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
    },

    async remaining(admin, schema) {
      const {
        rows: [row],
      } = await admin.query<{ pending: string; dead: string }>(
        `SELECT count(*) FILTER (WHERE attempts < max_attempts) AS pending, count(*) FILTER (WHERE attempts >= max_attempts) AS dead
         FROM "${schema}"._private_jobs`,
      );
      return { pending: Number(row!.pending), dead: Number(row!.dead), completedRows: 0 };
    },

    async stored(admin, schema) {
      const { rows } = await admin.query<{ i: string; handler: string }>(
        `SELECT j.payload->>'i' AS i, t.identifier AS handler FROM "${schema}"._private_jobs j JOIN "${schema}"._private_tasks t ON t.id = j.task_id`,
      );
      return pairsOf(rows);
    },

    async publisher({ url, schema, poolSize }) {
      const pool = new pg.Pool({ connectionString: url, max: poolSize });
      const text = `SELECT id FROM "${schema}".add_jobs(array(SELECT json_populate_recordset(NULL::"${schema}".job_spec, $1::json)), false)`;
      return {
        async publish(events) {
          const specs = JSON.stringify(
            events.flatMap((e) =>
              HANDLERS.map((identifier) => ({
                identifier,
                payload: { i: e.i },
                ...(e.key !== null ? { queue_name: `${e.key}:${identifier}` } : {}),
              })),
            ),
          );
          await inTransaction(pool, async (client) => {
            await client.query(text, [specs]);
          });
        },
        close: () => pool.end(),
      };
    },

    async dispatcher({ url, schema }, settings, hooks) {
      const { Logger, runMigrations, runTaskList } = await loaded();
      const taskList: TaskList = Object.fromEntries(
        HANDLERS.map((handler) => {
          const index = handlerIndex(handler);
          return [handler, (payload: unknown) => hooks.onHandle((payload as { i: number }).i, index)];
        }),
      );
      const localQueue = settings.extra?.localQueue;
      const delay = settings.extra?.completeJobBatchDelay;
      const logger = loggerTo(Logger, hooks.warn);
      const options: WorkerPoolOptions = {
        schema,
        concurrency: settings.concurrency,
        pollInterval: settings.pollIntervalMs,
        maxPoolSize: settings.poolSize,
        noHandleSignals: true,
        logger,
        preset: {
          worker: {
            ...(localQueue !== undefined ? { localQueue: { size: localQueue } } : {}),
            ...(delay !== undefined ? { completeJobBatchDelay: delay, failJobBatchDelay: delay } : {}),
          },
        },
      };
      const pgPool = poolFor(url, settings.poolSize, hooks.warn);
      let workerPool: WorkerPool | undefined;
      return {
        async prepare() {
          await runMigrations({ pgPool, schema, logger });
          await warmPool(pgPool, settings.poolSize);
        },
        async start() {
          workerPool = runTaskList(options, taskList, pgPool);
        },
        async stop() {
          if (workerPool) await workerPool.gracefulShutdown();
          await pgPool.end();
        },
      };
    },
  };
}

/** graphile-worker 0.18: best = the point found on this machine (bench/README.md gives the figures). */
export const graphileWorker = makeGraphileWorker(
  'graphile-worker',
  async () => (await import('graphile-worker')) as unknown as GraphileApi,
  graphileSettings(16, 500, 5),
  GRAPHILE_SWEEP,
);

/** graphile-worker 0.17.3 (npm alias `graphile-worker17`), bench:full only: the release before, in the same run. */
export const graphileWorker017 = makeGraphileWorker(
  'graphile-worker-0.17',
  async () => (await import('graphile-worker17')) as unknown as GraphileApi,
  graphileSettings(16, 500, 0),
  GRAPHILE_017_SWEEP,
);
