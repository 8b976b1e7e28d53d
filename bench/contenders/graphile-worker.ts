/**
 * graphile-worker 0.17.x from the npm registry (0.17.3; 0.18 needs Node 22). One task per handler;
 * publishing calls the schema's `add_jobs(job_spec[])` in the caller's transaction (what
 * `WorkerUtils.addJobs` sends). Completed jobs are deleted, as in relaybus.
 *
 * Ordering: graphile-worker runs the jobs of one named queue one at a time, in order. A keyed run
 * puts every job in the queue `<key>:<handler>` (relaybus orders per handler and key), so the
 * order check applies. graphile-worker 0.17.3's local queue breaks that guarantee (a batch fetch
 * can take several jobs of one queue: graphile/worker#621, fixed after 0.17.3 by #622), so the
 * keyed variant runs without it.
 *
 * Start-up: `run()` is `getUtilsAndReleasersFromOptions` (pool, migration check) followed by
 * `runInternal` (the worker pool). The first runs in `prepare` (before "go", with the pool opened
 * to its size), the second in `start`: the same split every contender gets.
 *
 * Settings (`extra`): `localQueue` size (absent: none), `completeJobBatchDelay` (absent: -1, off;
 * failJobBatchDelay follows it). Pool: `maxPoolSize`; the docs advise `concurrentJobs + 2` or 10.
 */
import pg from 'pg';
import { Logger, type Runner, type TaskList } from 'graphile-worker';
import { getUtilsAndReleasersFromOptions } from 'graphile-worker/dist/lib.js';
import { runInternal } from 'graphile-worker/dist/runner.js';
import { runMigrations } from 'graphile-worker';
import { HANDLERS, handlerIndex, pairsOf, type Contender, type DispatcherSettings } from '../lib/types.js';
import { inTransaction, warmPool } from '../lib/db.js';

/** graphile-worker's Logger wraps a log-function factory: errors and warnings go to `warn`, the rest nowhere. */
const loggerTo = (warn: (message: string) => void) =>
  new Logger(() => (level, message) => {
    if (level === 'error' || level === 'warning') warn(`${level}: ${message}`);
  });
const silent = new Logger(() => () => {});

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

/** The sweep of bench:full (bench/README.md): concurrency 8/16/24/32, local queue concurrency+1 or 500, completion delay 0 or 5 ms. */
export const GRAPHILE_SWEEP: Readonly<Record<string, DispatcherSettings>> = Object.fromEntries(
  [8, 16, 24, 32].flatMap((c) =>
    [c + 1, 500].flatMap((lq) => [0, 5].map((d) => [`c${c} lq${lq} d${d}`, graphileSettings(c, lq, d)])),
  ),
);

export const graphileWorker: Contender = {
  name: 'graphile-worker',
  ordersKeys: true,
  keyed: true,
  retryBackoff: false,
  keyedVariants: ['queues', 'queues-localqueue'],
  namedOnly: ['queues-localqueue'],
  variants: {
    // Its own defaults: concurrency 1, poll 2 s, no local queue, no completion batching, pool 10.
    defaults: { concurrency: 1, batchSize: 1, pollIntervalMs: 2000, poolSize: 10 },
    // The best point of the sweep on this machine (bench/README.md gives the figures).
    best: graphileSettings(16, 500, 0),
    // Keyed runs: the same without the local queue (graphile/worker#621), polling every 50 ms: a
    // worker whose fetch found every queue locked by another fetch waits for the next poll.
    queues: { ...graphileSettings(16, 0, 0), pollIntervalMs: 50 },
    // Ad hoc only, to show the harness catches graphile/worker#621: named queues with the local queue.
    'queues-localqueue': { ...graphileSettings(16, 500, 0), pollIntervalMs: 50 },
  },
  sweep: GRAPHILE_SWEEP,
  tables: { deliveries: '_private_jobs' },

  async setup(url, schema) {
    await runMigrations({ connectionString: url, schema, logger: silent });
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
    const taskList: TaskList = Object.fromEntries(
      HANDLERS.map((name) => {
        const index = handlerIndex(name);
        return [name, (payload: unknown) => hooks.onHandle((payload as { i: number }).i, index)];
      }),
    );
    const localQueue = settings.extra?.localQueue;
    const delay = settings.extra?.completeJobBatchDelay;
    const options = {
      connectionString: url,
      schema,
      concurrency: settings.concurrency,
      pollInterval: settings.pollIntervalMs,
      maxPoolSize: settings.poolSize,
      noHandleSignals: true,
      logger: loggerTo(hooks.warn),
      taskList,
      preset: {
        worker: {
          ...(localQueue !== undefined ? { localQueue: { size: localQueue } } : {}),
          ...(delay !== undefined ? { completeJobBatchDelay: delay, failJobBatchDelay: delay } : {}),
        },
      },
    };
    let compiled: Awaited<ReturnType<typeof getUtilsAndReleasersFromOptions>> | undefined;
    let runner: Runner | undefined;
    return {
      async prepare() {
        compiled = await getUtilsAndReleasersFromOptions(options);
        await warmPool(compiled[0].pgPool as pg.Pool, settings.poolSize);
      },
      async start() {
        const [compiledOptions, release] = compiled!;
        runner = await runInternal(compiledOptions, undefined, [], release);
      },
      async stop() {
        if (runner) await runner.stop();
        else await compiled?.[1]();
      },
    };
  },
};
