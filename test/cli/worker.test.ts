/**
 * `relaybus worker` as a user runs it: the built bin loads a config module from a temporary folder
 * (importing the built library by file URL), drains events published into real Postgres, stops
 * gracefully on SIGTERM with nothing lost, is forced by a second SIGTERM, drains and exits with
 * `--once`, and loads a `.ts` config found in the working directory.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import pg from 'pg';
import { createRelayBus, defineEvent, Type } from '../../src/index.js';
import { fromPg, postgresStore, type PgClientLike, type PostgresStore } from '../../src/postgres/index.js';
import { findPostgres, uniqueSchemaName } from '../support/databases.js';
import { IMPORTS, startCli, tempDir, useBuiltCli, writeModule, runCli } from './support.js';

const found = await findPostgres();
useBuiltCli();

const HANDLERS = [
  { name: 'email', maxAttempts: 5 },
  { name: 'ledger', maxAttempts: 5 },
];

/** A config module: two handlers that record each run in `<schema>.handled`; HANDLER_MODE=hang never finishes. */
function configSource(typescript = false): string {
  const annotate = (type: string) => (typescript ? `: ${type}` : '');
  return `
import pg from '${IMPORTS.pg}';
import { createRelayBus, defineEvent, Type } from '${IMPORTS.relaybus}';
import { fromPg, postgresStore } from '${IMPORTS.postgres}';

const schema${annotate('string')} = process.env.TEST_SCHEMA${typescript ? '!' : ''};
const pool = new pg.Pool({ connectionString: process.env.DATABASE_URL, max: 4 });
const store = postgresStore({ driver: fromPg(pool, { closeWithStore: true }), schema });
const OrderPlaced = defineEvent('order.placed', Type.Object({ n: Type.Integer() }));
const bus = createRelayBus({
  store, events: [OrderPlaced], maxAttempts: 5,
  dispatcher: { concurrency: 4, batchSize: 4, pollIntervalMs: 50, shutdownGraceMs: 60_000 },
});
const delayMs = Number(process.env.HANDLER_DELAY_MS ?? 0);
for (const name of ['email', 'ledger']) {
  bus.on(OrderPlaced, name, async (payload${annotate('{ n: number }')}, ctx${annotate('{ delivery: { id: string } }')}) => {
    if (process.env.HANDLER_MODE === 'hang') {
      console.log('handler started');
      await new Promise(() => {});
    }
    if (delayMs > 0) await new Promise((resolve) => setTimeout(resolve, delayMs));
    await pool.query('INSERT INTO "' + schema + '".handled (delivery_id, handler, n) VALUES ($1, $2, $3)', [ctx.delivery.id, name, payload.n]);
  });
}
export default bus;
`;
}

describe('relaybus worker (real Postgres, built bin)', { skip: 'skip' in found ? found.skip : undefined }, () => {
  const url = 'url' in found ? found.url : '';
  const schema = uniqueSchemaName('cli_worker');
  let pool: pg.Pool;
  let store: PostgresStore<PgClientLike>;
  let dir: string;
  let config: string;
  const env = () => ({ DATABASE_URL: url, TEST_SCHEMA: schema });

  before(async () => {
    pool = new pg.Pool({ connectionString: url, max: 3 });
    store = postgresStore({ driver: fromPg(pool), schema });
    await store.setup();
    await pool.query(
      `CREATE TABLE "${schema}".handled (delivery_id bigint NOT NULL, handler text NOT NULL, n int NOT NULL)`,
    );
    dir = tempDir('worker');
    config = writeModule(dir, 'bus.mjs', configSource());
  });
  after(async () => {
    await pool?.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
    await pool?.end();
  });

  async function reset(): Promise<void> {
    await pool.query(
      `TRUNCATE "${schema}".handled, "${schema}".relaybus_deliveries, "${schema}".relaybus_events CASCADE`,
    );
  }

  async function publish(count: number, from = 0): Promise<void> {
    for (let first = from; first < from + count; first += 100) {
      await store.transaction((tx) =>
        store.publish(
          tx,
          Array.from({ length: Math.min(100, from + count - first) }, (_, i) => ({
            type: 'order.placed',
            key: `customer-${(first + i) % 13}`,
            payload: { n: first + i },
            handlers: HANDLERS,
          })),
        ),
      );
    }
  }

  async function handled(): Promise<{ rows: number; distinct: number }> {
    const { rows } = await pool.query<{ rows: number; distinct: number }>(
      `SELECT count(*)::int AS rows, count(DISTINCT (delivery_id, handler))::int AS distinct FROM "${schema}".handled`,
    );
    return rows[0]!;
  }

  async function waitUntil(what: string, check: () => Promise<boolean>, timeoutMs = 30_000): Promise<void> {
    const deadline = Date.now() + timeoutMs;
    while (!(await check())) {
      if (Date.now() > deadline) throw new Error(`timed out waiting until ${what}`);
      await sleep(50);
    }
  }

  it('drains what was published; SIGTERM mid-way stops gracefully (exit 0) with nothing lost; a restart finishes the rest', {
    timeout: 90_000,
  }, async () => {
    await reset();
    const total = 300 * HANDLERS.length;
    await publish(300);

    const first = startCli(['worker', config], { env: { ...env(), HANDLER_DELAY_MS: '5' } });
    await first.waitFor(/relaybus worker: running the bus from bus\.mjs|relaybus worker: running 2 handlers/);
    await waitUntil('a third of the deliveries ran', async () => (await handled()).distinct >= total / 3);
    first.child.kill('SIGTERM');
    const stopped = await first.exited;
    assert.equal(stopped.code, 0, `exit 0 after SIGTERM\n${stopped.stdout}\n${stopped.stderr}`);
    assert.match(stopped.stdout, /SIGTERM received; stopping gracefully/);
    assert.match(stopped.stdout, /relaybus worker: stopped; \d+ delivered, 0 failed attempts, 0 dead/);
    assert.equal(stopped.stderr, '');

    const midway = await handled();
    const stats = await store.statistics();
    assert.ok(midway.distinct < total, 'the worker was stopped before it drained everything');
    assert.equal(midway.rows, midway.distinct, 'no delivery ran twice');
    assert.equal(stats.inFlight, 0, 'nothing is left in flight: unfinished deliveries were released');
    assert.equal(stats.lanesLeased, 0, 'every lane was handed back');
    assert.equal(stats.dead, 0);
    assert.equal(midway.distinct + stats.pending, total, 'every delivery either ran or is still pending: nothing lost');
    const delivered = Number(/stopped; (\d+) delivered/.exec(stopped.stdout)![1]);
    assert.equal(delivered, midway.distinct, 'the summary counts what the handlers recorded');

    const second = startCli(['worker', config], { env: env() });
    await second.waitFor(/relaybus worker: running/);
    await waitUntil('every delivery ran', async () => (await handled()).distinct === total);
    second.child.kill('SIGTERM');
    const finished = await second.exited;
    assert.equal(finished.code, 0, finished.stderr);
    const all = await handled();
    assert.equal(all.rows, total, 'each delivery ran exactly once across the two workers');
    const left = await pool.query<{ count: number }>(
      `SELECT count(*)::int AS count FROM "${schema}".relaybus_deliveries`,
    );
    assert.equal(left.rows[0]!.count, 0, 'completed deliveries are deleted');
  });

  it('--once drains what is due, then exits 0 by itself', { timeout: 60_000 }, async () => {
    await reset();
    await publish(120);
    const result = await runCli(['worker', config, '--once'], { env: env() });
    assert.equal(result.code, 0, `${result.stdout}\n${result.stderr}`);
    assert.match(result.stdout, /--once: nothing is due; stopping gracefully/);
    assert.match(result.stdout, /stopped; 240 delivered, 0 failed attempts, 0 dead/);
    assert.deepEqual(await handled(), { rows: 240, distinct: 240 });
  });

  it('a second SIGTERM forces the stop: exit 143, the stuck delivery is released without an attempt charged', {
    timeout: 60_000,
  }, async () => {
    await reset();
    await publish(1);
    const worker = startCli(['worker', config], { env: { ...env(), HANDLER_MODE: 'hang' } });
    await worker.waitFor(/handler started/);
    worker.child.kill('SIGTERM');
    await worker.waitFor(/stopping gracefully/);
    await sleep(200);
    assert.equal(worker.child.exitCode, null, 'the graceful stop waits for the running handler');
    const forcedAt = Date.now();
    worker.child.kill('SIGTERM');
    const result = await worker.exited;
    assert.equal(result.code, 143, `${result.stdout}\n${result.stderr}`);
    assert.ok(Date.now() - forcedAt < 5_000, 'the forced stop is quick');
    assert.match(result.stderr, /SIGTERM received again; forcing the stop/);
    const { rows } = await pool.query<{ attempts: number; status: string }>(
      `SELECT attempts, status FROM "${schema}".relaybus_deliveries`,
    );
    assert.equal(rows.length, 2);
    for (const row of rows) assert.deepEqual(row, { attempts: 0, status: 'pending' });
    assert.equal((await store.statistics()).inFlight, 0, 'the aborted deliveries were released');
  });

  it('loads relaybus.config.ts from the working directory through tsx', { timeout: 60_000 }, async () => {
    await reset();
    await publish(10);
    const cwd = tempDir('worker-ts');
    writeModule(cwd, 'relaybus.config.ts', configSource(true));
    const result = await runCli(['worker', '--once'], { cwd, env: env() });
    assert.equal(result.code, 0, `${result.stdout}\n${result.stderr}`);
    assert.match(result.stdout, /from relaybus\.config\.ts/);
    assert.deepEqual(await handled(), { rows: 20, distinct: 20 });
  });

  it('per-run flags: honoured by a bus whose start() takes options, refused with a clear message otherwise', {
    timeout: 60_000,
  }, async () => {
    await reset();
    await publish(20);
    const probe = createRelayBus({ store, events: [defineEvent('probe', Type.Object({}))] }); // src and dist are the same code
    const supported = Array.isArray((probe as unknown as { handlers?: unknown }).handlers);
    const result = await runCli(
      ['worker', config, '--once', '--handlers', 'email', '--concurrency', '2', '--poll-interval', '20ms'],
      { env: env() },
    );
    if (supported) {
      assert.equal(result.code, 0, `${result.stdout}\n${result.stderr}`);
      assert.match(result.stdout, /running 1 handler \(email\)/);
      const { rows } = await pool.query<{ handler: string; count: number }>(
        `SELECT handler, count(*)::int AS count FROM "${schema}".handled GROUP BY handler`,
      );
      assert.deepEqual(rows, [{ handler: 'email', count: 20 }]);
      const unknown = await runCli(['worker', config, '--handlers', 'nope'], { env: env() });
      assert.equal(unknown.code, 2);
      assert.match(
        unknown.stderr,
        /^relaybus: --handlers: "nope" is not registered on the bus of bus\.mjs; it has email, ledger\n$/,
      );
    } else {
      assert.equal(result.code, 2, `${result.stdout}\n${result.stderr}`);
      assert.match(
        result.stderr,
        /^relaybus: --concurrency, --poll-interval, --handlers: this relaybus version cannot override the bus from the command line; set them in bus\.mjs .*\n$/,
      );
      assert.deepEqual(await handled(), { rows: 0, distinct: 0 });
    }
  });
});
