/**
 * A worker config whose one handler records each run in `<schema>.handled`, and the suite fixture around it: a schema
 * set up with that table, a folder holding the config as bus.mjs, and the cleanup of any worker a test left running.
 * Shared by the CLI suites that start real worker processes and watch what they deliver.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, before } from 'node:test';
import pg from 'pg';
import { fromPg, postgresStore, type PgClientLike, type PostgresStore } from '../../src/postgres/index.js';
import { uniqueSchemaName } from '../support/databases.js';
import { IMPORTS, tempDir, writeModule } from './support.js';

export const RECORD_HANDLERS = [{ name: 'record', maxAttempts: 5 }];

/**
 * One handler that records each run in `<schema>.handled`, after HANDLER_DELAY_MS; a long lease so only a relinquish
 * frees lanes. MARK_FILE: written once the config is imported; EXIT_FILE: the code Node exits with (an orphaned
 * worker's status goes to its new parent, not to the test).
 */
export const RECORDING_CONFIG = `
import { writeFileSync } from 'node:fs';
import pg from '${IMPORTS.pg}';
import { createRelayBus, defineEvent, Type } from '${IMPORTS.relaybus}';
import { fromPg, postgresStore } from '${IMPORTS.postgres}';

if (process.env.MARK_FILE) writeFileSync(process.env.MARK_FILE, 'imported');
if (process.env.EXIT_FILE) process.on('exit', (code) => writeFileSync(process.env.EXIT_FILE, String(code)));
const schema = process.env.TEST_SCHEMA;
const pool = new pg.Pool({ connectionString: process.env.DATABASE_URL, max: 4 });
const store = postgresStore({ driver: fromPg(pool, { closeWithStore: true }), schema });
const OrderPlaced = defineEvent('order.placed', Type.Object({ n: Type.Integer() }));
const bus = createRelayBus({
  store, events: [OrderPlaced], maxAttempts: 5,
  dispatcher: { concurrency: 4, batchSize: 4, pollIntervalMs: 50, leaseDurationMs: 120_000, shutdownGraceMs: 10_000 },
});
const delayMs = Number(process.env.HANDLER_DELAY_MS ?? 0);
bus.on(OrderPlaced, 'record', async (payload, ctx) => {
  if (delayMs > 0) await new Promise((resolve) => setTimeout(resolve, delayMs));
  await pool.query('INSERT INTO "' + schema + '".handled (delivery_id, n) VALUES ($1, $2)', [ctx.delivery.id, payload.n]);
});
export default bus;
`;

/** True while `pid` runs (a zombie waiting for its new parent to reap it has finished). */
export function isRunning(pid: number): boolean {
  try {
    process.kill(pid, 0);
  } catch {
    return false;
  }
  try {
    return readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]?.[0] !== 'Z';
  } catch {
    return true; // no /proc (macOS): kill(0) is the answer
  }
}

/** What `useRecordingSchema` gives a suite; `pool`, `store`, `dir` and `config` exist once its before hook ran. */
export interface RecordingSchema {
  readonly schema: string;
  readonly pool: pg.Pool;
  readonly store: PostgresStore<PgClientLike>;
  /** The suite's folder, with the config saved as bus.mjs. */
  readonly dir: string;
  /** The path of bus.mjs. */
  readonly config: string;
  /** Worker process ids a test started: killed after the suite. */
  readonly leftovers: number[];
  /** `count` order.placed events with n = from, from + 1, ..., keyed `k-<n % keys>`, in one transaction. */
  publish(count: number, options?: { readonly from?: number; readonly keys?: number }): Promise<void>;
  /** How many runs the handler recorded. */
  runs(): Promise<number>;
  /** How many deliveries the handler ran at least once. */
  handledDeliveries(): Promise<number>;
}

async function count(pool: pg.Pool, text: string): Promise<number> {
  const { rows } = await pool.query<{ count: number }>(text);
  return rows[0]!.count;
}

/** Registers the suite's hooks: a schema `label` of its own on `url` (set up, with the handled table) and a folder. */
export function useRecordingSchema(url: string, label: string): RecordingSchema {
  const schema = uniqueSchemaName(label);
  const leftovers: number[] = [];
  let pool: pg.Pool | undefined;
  let store: PostgresStore<PgClientLike> | undefined;
  let dir: string | undefined;
  const ready = <T>(value: T | undefined): T => {
    if (value === undefined) throw new Error('useRecordingSchema: used before the suite started');
    return value;
  };
  before(async () => {
    pool = new pg.Pool({ connectionString: url, max: 3 });
    store = postgresStore({ driver: fromPg(pool), schema });
    await store.setup();
    await pool.query(`CREATE TABLE "${schema}".handled (delivery_id bigint NOT NULL, n int NOT NULL)`);
    dir = tempDir(label);
    writeModule(dir, 'bus.mjs', RECORDING_CONFIG);
  });
  after(async () => {
    for (const pid of leftovers) {
      try {
        process.kill(pid, 'SIGKILL');
      } catch {
        /* already gone */
      }
    }
    await pool?.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
    await pool?.end();
  });
  return {
    schema,
    leftovers,
    get pool() {
      return ready(pool);
    },
    get store() {
      return ready(store);
    },
    get dir() {
      return ready(dir);
    },
    get config() {
      return join(ready(dir), 'bus.mjs');
    },
    async publish(count, { from = 0, keys = 7 } = {}) {
      const target = ready(store);
      await target.transaction((tx) =>
        target.publish(
          tx,
          Array.from({ length: count }, (_, i) => ({
            type: 'order.placed',
            key: `k-${(from + i) % keys}`,
            payload: { n: from + i },
            handlers: RECORD_HANDLERS,
          })),
        ),
      );
    },
    runs: () => count(ready(pool), `SELECT count(*)::int AS count FROM "${schema}".handled`),
    handledDeliveries: () =>
      count(ready(pool), `SELECT count(DISTINCT delivery_id)::int AS count FROM "${schema}".handled`),
  };
}
