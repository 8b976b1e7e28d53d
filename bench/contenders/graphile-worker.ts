/**
 * graphile-worker 0.17.x from the npm registry (0.17.3; 0.18 needs Node 22). One task per handler;
 * publishing calls the schema's `add_jobs(job_spec[])` in the caller's transaction (what
 * `WorkerUtils.addJobs` sends). Completed jobs are deleted, as in relaybus. No per-key ordering here
 * (a `queue_name` per key would serialise keys, at a large cost): the order check does not apply.
 *
 * defaults: graphile-worker's defaults (concurrency 1, poll 2 s, no local queue, pool 10).
 * tuned: concurrency, a local queue of `localQueue` jobs, batched completion (delay 0), pool as given.
 */
import pg from 'pg';
import { Logger, run, runMigrations, type Runner } from 'graphile-worker';
import { HANDLERS, type Contender } from '../lib/types.js';
import { inTransaction } from '../lib/db.js';

/** graphile-worker's Logger wraps a log-function factory; a no-op one keeps its output out of the run. */
const logger = new Logger(() => () => {});

export const graphileWorker: Contender = {
  name: 'graphile-worker',
  ordered: false,
  variants: {
    defaults: { concurrency: 1, batchSize: 1, pollIntervalMs: 2000, poolSize: 10 },
    tuned: { concurrency: 32, batchSize: 500, pollIntervalMs: 50, poolSize: 20, extra: { localQueue: 500 } },
  },
  tables: { deliveries: '_private_jobs' },

  async setup(url, schema) {
    await runMigrations({ connectionString: url, schema, logger });
  },

  async teardown(admin, schema) {
    await admin.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
  },

  async remaining(admin, schema) {
    const { rows: [row] } = await admin.query<{ pending: string; dead: string }>(
      `SELECT count(*) FILTER (WHERE attempts < max_attempts) AS pending, count(*) FILTER (WHERE attempts >= max_attempts) AS dead
       FROM "${schema}"._private_jobs`);
    return { pending: Number(row!.pending), dead: Number(row!.dead), completedRows: 0 };
  },

  async publisher({ url, schema, poolSize }) {
    const pool = new pg.Pool({ connectionString: url, max: poolSize });
    const text = `SELECT id FROM "${schema}".add_jobs(array(SELECT json_populate_recordset(NULL::"${schema}".job_spec, $1::json)), false)`;
    return {
      async publish(events) {
        const specs = JSON.stringify(events.flatMap((e) => HANDLERS.map((identifier) => ({ identifier, payload: { i: e.i } }))));
        await inTransaction(pool, async (client) => {
          await client.query(text, [specs]);
        });
      },
      close: () => pool.end(),
    };
  },

  async dispatcher({ url, schema }, settings, onHandle) {
    let runner: Runner | undefined;
    const taskList = Object.fromEntries(HANDLERS.map((name, index) => [name, async (payload: unknown) => { onHandle((payload as { i: number }).i, index); }]));
    const localQueue = settings.extra?.localQueue;
    return {
      async start() {
        runner = await run({
          connectionString: url,
          schema,
          concurrency: settings.concurrency,
          pollInterval: settings.pollIntervalMs,
          maxPoolSize: settings.poolSize,
          noHandleSignals: true,
          logger,
          taskList,
          ...(localQueue !== undefined
            ? { preset: { worker: { localQueue: { size: localQueue }, completeJobBatchDelay: 0, failJobBatchDelay: 0 } } }
            : {}),
        });
      },
      async stop() {
        await runner?.stop();
      },
    };
  },
};
