/**
 * `holdClaimConnections` (on by default) on real Postgres (pg, Kysely with its pool, Drizzle over a pg pool; postgres.js
 * lends none): each owner whose claims say `holdConnection` runs its claim statements on a
 * connection of the pool it holds, on generic plans from the first call, at most half the pool held; a claim that does
 * not say so holds nothing; relinquish gives the connection back with the setting restored; a held connection whose
 * backend was terminated fails one claim (retryable) and the next claim opens another; a bus that stops gives every
 * connection back, so `pool.end()` returns; with the option off a bus holds none.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { drizzle as drizzlePg } from 'drizzle-orm/node-postgres';
import { drizzle as drizzlePostgresJs } from 'drizzle-orm/postgres-js';
import { Kysely, PostgresDialect } from 'kysely';
import pg from 'pg';
import postgres from 'postgres';
import { InvalidOptionsError, StoreUnavailableError } from '../../src/core/errors.js';
import { createRelayBus, defineEvent, Type } from '../../src/index.js';
import { fromDrizzle } from '../../src/postgres/drivers/drizzle-driver.js';
import { fromKysely } from '../../src/postgres/drivers/kysely-driver.js';
import {
  fromPg,
  fromPostgresJs,
  type PgClientLike,
  type PostgresStore,
  postgresStore,
} from '../../src/postgres/index.js';
import { findPostgres, uniqueSchemaName } from '../support/databases.js';
import { waitFor } from '../support/wait.js';
import * as owners from '../support/claims.js';

const found = await findPostgres();
const url = 'url' in found ? found.url : '';
const handlers = [{ name: 'h', maxAttempts: 3 }];
const Ping = defineEvent('claim-connections.ping', Type.Object({ n: Type.Integer() }));

/** Connections the pool has lent out and not taken back. */
const lent = (pool: pg.Pool) => pool.totalCount - pool.idleCount;
/** The suite's pool's backends, told apart from other suites' in the same database. */
const APP = 'relaybus_claim_connections_test';

describe('claim connections held per owner on real Postgres', { skip: 'skip' in found ? found.skip : false }, () => {
  const schema = uniqueSchemaName('claim_connections');
  // The buses' own schema: the store tests above leave deliveries in flight in lanes their owners still hold.
  const busSchema = uniqueSchemaName('claim_connections_bus');
  // Six connections: the listening one and two owners' fill half.
  let pool: pg.Pool;
  let store: PostgresStore<PgClientLike>;

  before(async () => {
    pool = new pg.Pool({ connectionString: url, max: 6, application_name: APP });
    store = postgresStore({ driver: fromPg(pool), schema });
    await store.setup();
  });
  after(async () => {
    await store.close();
    await pool.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
    await pool.query(`DROP SCHEMA IF EXISTS "${busSchema}" CASCADE`);
    await pool.end();
  });

  const publish = (count: number, prefix: string) =>
    store.transaction((tx) =>
      store.publish(
        tx,
        Array.from({ length: count }, (_, n) => ({ type: 't', key: `${prefix}-${n}`, payload: { n }, handlers })),
      ),
    );
  /** A claim as the dispatcher sends it: the caller relinquishes the owner when done. */
  const claim = (owner: string, holdConnection = true) =>
    owners.claim(store, { owner, handlers: ['h'], limit: 5, leaseDurationMs: 60_000, holdConnection });

  it('a lent connection plans generically from the first call with index look-ups priced as cached, and is reset when given back', async () => {
    const session = await fromPg(pool).session!();
    const show = { name: '', text: 'SHOW plan_cache_mode' };
    assert.deepEqual(await session.run(show, []), [{ plan_cache_mode: 'force_generic_plan' }]);
    const pageCost = { name: '', text: 'SHOW random_page_cost' };
    assert.deepEqual(await session.run(pageCost, []), [{ random_page_cost: '1.1' }], 'index look-ups priced as cached');
    await session.run({ name: 'claim_connections_probe', text: 'SELECT $1::int + 1 AS n' }, [1]);
    assert.deepEqual(
      await session.run(
        {
          name: '',
          text: "SELECT generic_plans, custom_plans FROM pg_prepared_statements WHERE name = 'claim_connections_probe'",
        },
        [],
      ),
      [{ generic_plans: '1', custom_plans: '0' }],
      'one call, one generic plan',
    );
    await session.release(false);
    await session.release(false); // idempotent
    // Every connection of the pool, the given-back one among them, has the server's setting.
    const clients = await Promise.all(Array.from({ length: pool.totalCount }, () => pool.connect()));
    try {
      for (const client of clients) {
        assert.equal((await client.query('SHOW plan_cache_mode')).rows[0].plan_cache_mode, 'auto');
        assert.equal((await client.query('SHOW random_page_cost')).rows[0].random_page_cost, '4');
      }
    } finally {
      for (const client of clients) client.release();
    }
  });

  it('postgres.js, straight or under Drizzle, lends none: a reserved connection dies with its backend', async () => {
    // connection-loss.test.ts terminates backends under a postgres.js bus: with a reserved claim connection the process
    // died (postgres.js 3.4.9 writes to the closed socket in a timer).
    const sql = postgres(url, { max: 8, onnotice: () => {} });
    try {
      assert.equal(fromPostgresJs(sql).session, undefined);
      assert.equal(fromDrizzle(drizzlePostgresJs({ client: sql })).session, undefined);
    } finally {
      await sql.end();
    }
  });

  it('Drizzle over a pg pool lends a connection of that pool', async () => {
    const driver = fromDrizzle(drizzlePg({ client: pool }));
    assert.equal(driver.poolSize, 6);
    const session = await driver.session!();
    const [row] = await session.run<{ plan_cache_mode: string }>({ name: '', text: 'SHOW plan_cache_mode' }, []);
    assert.equal(row!.plan_cache_mode, 'force_generic_plan');
    assert.equal(lent(pool), 1);
    await session.release(false);
    assert.equal(lent(pool), 0);
  });

  it("an owner's claims hold one connection; at most half the pool is held; relinquish gives it back", async () => {
    await publish(30, 'half');
    assert.equal(lent(pool), 0);
    assert.ok((await claim('a')).length > 0);
    assert.ok((await claim('a')).length > 0);
    assert.equal(lent(pool), 1, "owner a's connection, held between its claims");
    await claim('b');
    await claim('c');
    assert.equal(
      lent(pool),
      2,
      'a and b hold one each; with the listening one that is half of 6: c claims on the pool',
    );
    for (const owner of ['a', 'b', 'c']) await owners.relinquish(store, owner);
    assert.equal(lent(pool), 0, 'every connection given back');
  });

  it('a claim that does not say it relinquishes its owner holds nothing', async () => {
    await publish(10, 'unheld');
    assert.ok((await claim('u', false)).length > 0);
    assert.equal(lent(pool), 0, 'the claim gave its connection back to the pool');
    await owners.relinquish(store, 'u');
  });

  it('a held connection whose backend was terminated fails one claim, retryably; the next claim opens another', async () => {
    await publish(10, 'terminated');
    // Every idle connection of the pool runs something else last: afterwards only the held one's last statement is a claim.
    const idle = await Promise.all(Array.from({ length: pool.idleCount }, () => pool.connect()));
    for (const client of idle) {
      await client.query('SELECT 1');
      client.release();
    }
    assert.ok((await claim('t')).length > 0);
    assert.equal(lent(pool), 1);
    // The held connection is the only one of this schema's pool idle after a claim (the pool's others ran no claim).
    const { rows } = await pool.query<{ n: number }>(
      `SELECT count(pg_terminate_backend(pid))::int AS n FROM pg_stat_activity
       WHERE application_name = '${APP}' AND pid <> pg_backend_pid() AND query <> 'SELECT 1'`,
    );
    assert.equal(rows[0]!.n, 1, 'the held backend, terminated');
    await assert.rejects(claim('t'), (error: unknown) => error instanceof StoreUnavailableError && error.retryable);
    assert.equal(lent(pool), 0, 'the broken connection is closed, not pooled');
    await owners.relinquish(store, 't'); // what a worker does after a failed claim: its lanes and records are forgotten
    await publish(5, 'after');
    assert.ok((await claim('t')).length > 0, 'the next claim runs, on a new connection');
    assert.equal(lent(pool), 1);
    await owners.relinquish(store, 't');
  });

  it('a pool too small to spare a connection: claims run on the pool, nothing is held', async () => {
    const small = new pg.Pool({ connectionString: url, max: 3 });
    const smallStore = postgresStore({ driver: fromPg(small), schema });
    try {
      await publish(5, 'small');
      await owners.claim(smallStore, {
        owner: 's',
        handlers: ['h'],
        limit: 5,
        leaseDurationMs: 60_000,
        holdConnection: true,
      });
      assert.equal(lent(small), 0);
      await owners.relinquish(smallStore, 's');
    } finally {
      await smallStore.close();
      await small.end();
    }
  });

  it('refuses a holdClaimConnections that is not a boolean', () => {
    assert.throws(
      () => postgresStore({ driver: fromPg(pool), schema, holdClaimConnections: 'yes' as never }),
      (error: unknown) =>
        error instanceof InvalidOptionsError && /holdClaimConnections must be a boolean/.test(String(error)),
    );
  });

  /**
   * Start a bus over `busStore` (handler `handler`), publish `count` keyed events and wait until each ran; `whileRunning`
   * looks at the pool before the bus stops.
   */
  async function deliverThenStop<TTx>(
    busStore: PostgresStore<TTx>,
    handler: string,
    count: number,
    whileRunning: () => void | Promise<void> = () => {},
  ): Promise<void> {
    const bus = createRelayBus({
      store: busStore,
      events: [Ping],
      setupStore: true,
      dispatcher: { pollIntervalMs: 50, claimLoops: 2, concurrency: 20, batchSize: 20 },
    });
    const seen = new Set<number>();
    bus.on(Ping, handler, ({ n }) => {
      seen.add(n);
    });
    await bus.start();
    try {
      await busStore.transaction((tx) =>
        bus.publishMany(
          tx,
          Array.from({ length: count }, (_, n) => ({
            event: Ping,
            payload: { n },
            options: { key: `${handler}-${n % 10}` },
          })),
        ),
      );
      await waitFor(() => seen.size === count, 'every delivery ran', 10_000);
      await whileRunning();
    } finally {
      await bus.stop();
    }
  }

  /** A store over a pg pool of 8: straight (`fromPg`), through Kysely given the pool, or through Drizzle. */
  const overPgPool: Record<string, (own: pg.Pool) => { store: PostgresStore<unknown>; end: () => Promise<void> }> = {
    pg: (own) => ({ store: postgresStore({ driver: fromPg(own), schema: busSchema }), end: () => own.end() }),
    kysely: (own) => {
      const db = new Kysely<Record<string, never>>({ dialect: new PostgresDialect({ pool: own }) });
      return {
        store: postgresStore({ driver: fromKysely(db, { pool: own }), schema: busSchema }),
        end: () => db.destroy(),
      };
    },
    'drizzle over pg': (own) => ({
      store: postgresStore({
        driver: fromDrizzle(drizzlePg({ client: own })),
        schema: busSchema,
      }) as PostgresStore<unknown>,
      end: () => own.end(),
    }),
  };
  for (const [name, open] of Object.entries(overPgPool)) {
    it(`${name}: a bus delivers on held connections and gives them back when it stops: the pool ends`, async () => {
      const own = new pg.Pool({ connectionString: url, max: 8 });
      const { store: busStore, end } = open(own);
      await deliverThenStop(busStore, `bus-${name}`, 100, () =>
        assert.ok(lent(own) >= 2, "the listening connection and at least one claim loop's"),
      );
      assert.equal(lent(own), 0, 'all given back by stop()');
      await end();
    });
  }

  it('holdClaimConnections false: a bus holds only its listening connection', async () => {
    const own = new pg.Pool({ connectionString: url, max: 8 });
    try {
      const busStore = postgresStore({ driver: fromPg(own), schema: busSchema, holdClaimConnections: false });
      // Held, a claim loop's connection stays lent between claims; here only the listening one does between them.
      await deliverThenStop(busStore, 'bus-unheld', 100, () =>
        waitFor(() => lent(own) === 1, 'the listening connection alone lent between claims', 5_000),
      );
    } finally {
      await own.end();
    }
  });

  it('postgres.js: a bus stops and sql.end() returns at once', async () => {
    const sql = postgres(url, { max: 8, onnotice: () => {} });
    await deliverThenStop(postgresStore({ driver: fromPostgresJs(sql), schema: busSchema }), 'bus-js', 100);
    await Promise.race([
      sql.end(),
      new Promise((_, reject) => setTimeout(() => reject(new Error('sql.end() waited for a connection')), 5_000)),
    ]);
  });
});
