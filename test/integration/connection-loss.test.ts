/**
 * No dropped connection may crash a relaybus process. A `pg` client checked out of a pool has no
 * `'error'` listener (pg-pool removes its own on checkout), so a backend terminated under a
 * transactional handler became an unhandled `'error'` event, and a dropped idle connection in a
 * pool without `pool.on('error')` did the same. The bus runs in this process: an unhandled
 * `'error'` event here is an uncaught exception that fails the run.
 *
 * For each server driver: a transactional handler's backend is terminated with
 * `pg_terminate_backend`, once while the connection is idle in the transaction and once during a
 * statement. The attempt fails and is retried, and its counter row (written in the transaction)
 * ends at exactly 1. Then every connection of the driver is terminated while the bus idles; the bus
 * keeps delivering, and `onConnectionError` subscribers heard of the dropped connections (drivers
 * over `pg`; postgres.js never emits them).
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { drizzle as drizzleNodePg } from 'drizzle-orm/node-postgres';
import { drizzle as drizzlePostgresJs } from 'drizzle-orm/postgres-js';
import { Kysely, PostgresDialect } from 'kysely';
import pg from 'pg';
import postgres from 'postgres';
import { createRelayBus, defineEvent, isRetryableError, Type, type FailedEvent } from '../../src/index.js';
import { fromDrizzle } from '../../src/postgres/drivers/drizzle-driver.js';
import { fromKysely } from '../../src/postgres/drivers/kysely-driver.js';
import { fromPg, fromPostgresJs, postgresStore, type PostgresDriver } from '../../src/postgres/index.js';
import { findPostgres, uniqueSchemaName } from '../support/databases.js';
import { collect, pause, waitFor } from '../support/wait.js';

const found = await findPostgres();
const skip = 'skip' in found ? found.skip : undefined;
const url = 'url' in found ? found.url : '';

const Counted = defineEvent(
  'conn-loss.counted',
  Type.Object({ mode: Type.Union([Type.Literal('idle'), Type.Literal('busy'), Type.Literal('plain')]) }),
);
type Mode = 'idle' | 'busy' | 'plain';

/** A driver under test over fresh connections tagged with `applicationName`, and how to end them. */
interface Connection {
  readonly driver: PostgresDriver<unknown>;
  /** The driver reports dropped connections to `onConnectionError` (the drivers over `pg`). */
  readonly reports: boolean;
  end(): Promise<void>;
}

interface Target {
  readonly name: string;
  connect(applicationName: string): Connection;
}

const POOL_MAX = 4;
const pgPool = (applicationName: string) =>
  new pg.Pool({ connectionString: url, max: POOL_MAX, application_name: applicationName });
const postgresJs = (applicationName: string) =>
  postgres(url, { max: POOL_MAX, onnotice: () => {}, connection: { application_name: applicationName } });
const widen = <TTx>(driver: PostgresDriver<TTx>) => driver as unknown as PostgresDriver<unknown>;

/** Run `fn` again (up to 3 times) while it fails with a retryable error. */
async function retrying<T>(fn: () => Promise<T>): Promise<T> {
  for (let attempt = 1; ; attempt += 1) {
    try {
      return await fn();
    } catch (error) {
      if (attempt >= 3 || !isRetryableError(error)) throw error;
    }
  }
}

// postgres.js is ended with a timeout: a connection it reopened after a drop can sit with an unsent
// startup message (3.4 keeps a stale write timer), and end() would wait for it forever.
const TARGETS: readonly Target[] = [
  {
    name: 'pg',
    connect(applicationName) {
      const pool = pgPool(applicationName);
      return { driver: widen(fromPg(pool)), reports: true, end: () => pool.end() };
    },
  },
  {
    name: 'postgres.js',
    connect(applicationName) {
      const sql = postgresJs(applicationName);
      return { driver: widen(fromPostgresJs(sql)), reports: false, end: () => sql.end({ timeout: 1 }) };
    },
  },
  {
    name: 'kysely (pg)',
    connect(applicationName) {
      const pool = pgPool(applicationName);
      const db = new Kysely<Record<string, never>>({ dialect: new PostgresDialect({ pool }) });
      return { driver: widen(fromKysely(db, { pool })), reports: true, end: () => db.destroy() };
    },
  },
  {
    name: 'drizzle (node-postgres)',
    connect(applicationName) {
      const pool = pgPool(applicationName);
      return { driver: widen(fromDrizzle(drizzleNodePg({ client: pool }))), reports: true, end: () => pool.end() };
    },
  },
  {
    name: 'drizzle (postgres-js)',
    connect(applicationName) {
      const sql = postgresJs(applicationName);
      return {
        driver: widen(fromDrizzle(drizzlePostgresJs({ client: sql }))),
        reports: false,
        end: () => sql.end({ timeout: 1 }),
      };
    },
  },
];

describe('a dropped connection never crashes the process', { skip }, () => {
  let admin: pg.Pool;
  const schemas: string[] = [];
  before(() => {
    admin = new pg.Pool({ connectionString: url, max: 2 });
  });
  after(async () => {
    for (const schema of schemas) await admin.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
    await admin.end();
  });

  /** Terminate every backend tagged `applicationName`; how many were. */
  async function terminateAll(applicationName: string): Promise<number> {
    const { rows } = await admin.query<{ n: number }>(
      'SELECT count(*)::int AS n FROM (SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1 AND pid <> pg_backend_pid()) t',
      [applicationName],
    );
    return rows[0]!.n;
  }

  for (const target of TARGETS) {
    it(`${target.name}: a terminated backend fails the attempt, the retry counts once, and the bus carries on`, {
      timeout: 30_000,
    }, async (t) => {
      const schema = uniqueSchemaName(`conn_loss_${target.name}`);
      schemas.push(schema);
      const applicationName = schema; // unique per test: terminateAll touches only this driver's connections
      const { driver, reports, end } = target.connect(applicationName);
      const store = postgresStore({ driver, schema });
      const connectionErrors: Error[] = [];
      const unsubscribe = store.onConnectionError((error) => connectionErrors.push(error));
      const runs: { mode: Mode; attempt: number; pid: number }[] = [];
      const bus = createRelayBus({
        store,
        events: [Counted],
        setupStore: false,
        backoff: { initialDelayMs: 50, maxDelayMs: 100, multiplier: 2, jitter: 0 },
        dispatcher: { pollIntervalMs: 20, leaseDurationMs: 5_000, concurrency: 2, completionBatchWindowMs: 0 },
      });
      bus.on(Counted, 'count', { transactional: true, maxAttempts: 5 }, async ({ mode }, ctx) => {
        const tx = driver.unwrap(ctx.transaction);
        const [row] = await tx.run<{ pid: number }>(
          { name: 'conn_loss_pid', text: 'SELECT pg_backend_pid() AS pid' },
          [],
        );
        const pid = Number(row!.pid);
        runs.push({ mode, attempt: ctx.delivery.attempt, pid });
        await tx.run(
          {
            name: `conn_loss_count_${schema}`,
            text: `INSERT INTO "${schema}".counters (event_id, n) VALUES ($1, 1) ON CONFLICT (event_id) DO UPDATE SET n = counters.n + 1`,
          },
          [ctx.delivery.eventId],
        );
        if (ctx.delivery.attempt > 1 || mode === 'plain') return;
        if (mode === 'idle') {
          // The server's FATAL arrives while no statement runs: pg emits it as an 'error' event only.
          await admin.query('SELECT pg_terminate_backend($1)', [pid]);
          await pause(300);
          return; // the completion (and the commit) then fail on the dead connection
        }
        const terminate = pause(150).then(() => admin.query('SELECT pg_terminate_backend($1)', [pid]));
        try {
          await tx.run({ name: 'conn_loss_sleep', text: 'SELECT pg_sleep(5)' }, []);
        } finally {
          await terminate;
        }
      });
      const failed = collect(bus.lifecycle, 'failed');
      const delivered = collect(bus.lifecycle, 'delivered');
      try {
        await store.setup();
        await admin.query(`CREATE TABLE "${schema}".counters (event_id text PRIMARY KEY, n int NOT NULL)`);
        const publish = (mode: Mode) => store.transaction((tx) => bus.publish(tx, Counted, { mode }));
        const idle = await publish('idle');
        const busy = await publish('busy');
        await bus.start();
        await waitFor(
          () => delivered.length === 2,
          'both deliveries delivered after their first attempt failed',
          15_000,
        );

        assert.deepEqual(
          failed.map((f: FailedEvent) => f.delivery.eventId).sort(),
          [idle.eventId, busy.eventId].sort(),
          'each first attempt failed (and was rescheduled) once',
        );
        assert.deepEqual(
          delivered.map((d) => d.delivery.attempt),
          [2, 2],
          'each delivery was delivered by its second attempt',
        );
        for (const { error } of failed) {
          assert.match(
            String((error as Error).message ?? error),
            /terminat|connection/i,
            'the attempt failed with the connection error, not a later one that hides it',
          );
        }
        const firstPids = runs.filter((r) => r.attempt === 1).map((r) => r.pid);
        assert.equal(firstPids.length, 2);
        for (const run of runs.filter((r) => r.attempt === 2))
          assert.ok(!firstPids.includes(run.pid), 'the retry ran on a new connection');

        // Now drop every connection of the driver (idle in the pool, or mid-poll) while the bus runs.
        await pause(100);
        const terminated = await terminateAll(applicationName);
        assert.ok(terminated > 0, 'the driver had connections to terminate');
        await pause(300);
        // postgres.js 3.4 fails the first statement on a connection it reopened after a drop with the
        // old FATAL error (a stale error response): a retryable error, retried as an application would.
        const plain = await retrying(() => publish('plain'));
        await waitFor(
          () => delivered.length === 3,
          'a delivery published after the connections dropped is delivered',
          15_000,
        );
        assert.equal(delivered[2]!.delivery.eventId, plain.eventId);

        const { rows } = await admin.query<{ event_id: string; n: number }>(
          `SELECT event_id, n FROM "${schema}".counters ORDER BY event_id`,
        );
        assert.deepEqual(
          new Map(rows.map((r) => [r.event_id, r.n])),
          new Map([
            [idle.eventId, 1],
            [busy.eventId, 1],
            [plain.eventId, 1],
          ]),
          'every event counted exactly once: the increments of the failed attempts rolled back',
        );
        const stats = await retrying(() => store.statistics());
        assert.deepEqual({ pending: stats.pending, dead: stats.dead }, { pending: 0, dead: 0 });

        if (reports) {
          assert.ok(
            connectionErrors.length >= 2,
            `onConnectionError heard the dropped connections (got ${connectionErrors.length})`,
          );
          for (const error of connectionErrors) assert.match(error.message, /terminat|ECONNRESET/i); // the FATAL message, or the reset when the socket closed first
        } else {
          assert.equal(
            driver.onConnectionError,
            undefined,
            'a driver that never emits connection errors offers no subscription',
          );
        }
        t.diagnostic(
          `first attempts failed with: ${failed.map((f) => String((f.error as Error).message ?? f.error)).join(' | ')}`,
        );
        t.diagnostic(
          `${terminated} idle connections terminated; onConnectionError heard ${connectionErrors.length}: ${[...new Set(connectionErrors.map((e) => e.message))].join(' | ')}`,
        );
      } finally {
        unsubscribe();
        await bus.stop({ graceMs: 1_000 });
        await end();
      }
    });
  }

  it("listeners go on a pool once however many drivers wrap it; the application's stay; unsubscribe stops delivery", async () => {
    const applicationName = uniqueSchemaName('conn_loss_shared');
    const pool = pgPool(applicationName);
    const own: Error[] = [];
    const onOwn = (error: Error) => own.push(error);
    pool.on('error', onOwn);
    try {
      const before = { error: pool.listenerCount('error'), acquire: pool.listenerCount('acquire') };
      const first = fromPg(pool);
      const second = fromPg(pool);
      const db = new Kysely<Record<string, never>>({ dialect: new PostgresDialect({ pool }) });
      const third = fromKysely(db, { pool });
      assert.deepEqual(
        { error: pool.listenerCount('error'), acquire: pool.listenerCount('acquire') },
        { error: before.error + 1, acquire: before.acquire + 1 },
        'one pool listener of each kind, whatever the number of drivers',
      );
      const heard: string[] = [];
      const offFirst = first.onConnectionError!(() => heard.push('first'));
      second.onConnectionError!(() => heard.push('second'));
      third.onConnectionError!(() => heard.push('third'));
      offFirst();

      const client = await pool.connect(); // two clients checked out and returned: both idle in the pool
      const other = await pool.connect();
      assert.equal(
        client.listenerCount('error'),
        1,
        "a checked-out client carries relaybus's listener (and not the pool's idle one)",
      );
      client.release();
      other.release();
      assert.equal(await terminateAll(applicationName), 2);
      await waitFor(() => own.length === 2, "the application's pool listener heard both idle clients drop");
      assert.deepEqual(
        heard.sort(),
        ['second', 'second', 'third', 'third'],
        'each subscriber hears each error once; an unsubscribed one hears none',
      );
    } finally {
      pool.off('error', onOwn);
      await pool.end();
    }
  });

  it('drizzle over a lone pg.Client: a terminated backend is reported, not fatal', async () => {
    const applicationName = uniqueSchemaName('conn_loss_client');
    const client = new pg.Client({ connectionString: url, application_name: applicationName });
    await client.connect();
    try {
      const driver = fromDrizzle(drizzleNodePg({ client }));
      const heard: Error[] = [];
      driver.onConnectionError!((error) => heard.push(error));
      assert.equal(await terminateAll(applicationName), 1);
      await waitFor(() => heard.length > 0, "the lone client's error reached onConnectionError");
      await assert.rejects(
        driver.executor.run({ name: 'x', text: 'SELECT 1' }, []),
        'a statement on the dropped client fails',
      );
    } finally {
      await client.end().catch(() => {});
    }
  });

  it('fromKysely refuses a pool option that is not a pg.Pool', async () => {
    const pool = pgPool('unused');
    const db = new Kysely<Record<string, never>>({ dialect: new PostgresDialect({ pool }) });
    assert.throws(() => fromKysely(db, { pool: {} as never }), /needs the pg\.Pool of the PostgresDialect/);
    await pool.end();
  });
});
