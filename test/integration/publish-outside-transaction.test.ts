/**
 * A transaction object used after its transaction ended must not publish: its statements would run
 * outside any transaction block (autocommit), so the events would commit on their own, not with the
 * caller's writes. postgres.js and Drizzle (over node-postgres and postgres-js) keep running
 * statements through such an object; pg, Kysely and PGlite refuse it themselves. The store's publish
 * guard (a transaction-local marker set by a statement before the publish, see postgres-store.ts)
 * refuses it on every driver, writes nothing and runs no failing statement.
 *
 * Why not a check inside the publish statement alone: on the extended protocol (every parameterised
 * statement) Postgres starts the implicit transaction at the Parse or Bind message and sets
 * statement_timestamp() again at Execute, so in autocommit transaction_timestamp() is earlier than
 * statement_timestamp() just as it is inside a BEGIN block. The first test pins that.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { PGlite } from '@electric-sql/pglite';
import { drizzle as drizzleNodePg } from 'drizzle-orm/node-postgres';
import { drizzle as drizzlePglite } from 'drizzle-orm/pglite';
import { drizzle as drizzlePostgresJs } from 'drizzle-orm/postgres-js';
import { Kysely, PostgresDialect } from 'kysely';
import pg from 'pg';
import postgres from 'postgres';
import { InvalidInputError, RelayBusError } from '../../src/core/errors.js';
import { fromDrizzle } from '../../src/postgres/drivers/drizzle-driver.js';
import { fromKysely, type KyselyTransactionLike } from '../../src/postgres/drivers/kysely-driver.js';
import {
  fromPg,
  fromPglite,
  fromPostgresJs,
  postgresStore,
  type PgPoolClientLike,
  type PgPoolLike,
  type PostgresDriver,
  type PostgresStore,
  type SqlExecutor,
} from '../../src/postgres/index.js';
import type { PublishParams } from '../../src/store/contract.js';
import { findPostgres, uniqueSchemaName } from '../support/databases.js';

const found = await findPostgres();
const skip = 'skip' in found ? found.skip : undefined;
const url = 'url' in found ? found.url : '';

const event = (id: string): PublishParams => ({
  id,
  type: 'order.placed',
  key: 'k',
  payload: { orderId: id },
  handlers: [
    { name: 'h1', maxAttempts: 3 },
    { name: 'h2', maxAttempts: 3 },
  ],
});

const NOT_IN_TRANSACTION = /not in a transaction block .*nothing was written/s;

/** Events and deliveries in the store's schema, read with the store's own connections. */
async function counts<TTx>(
  store: PostgresStore<TTx>,
  driver: PostgresDriver<TTx>,
): Promise<{ events: number; deliveries: number }> {
  const rows = await driver.executor.run<{ events: number; deliveries: number }>(
    {
      name: `count_${store.schema}`,
      text: `SELECT (SELECT count(*)::int FROM "${store.schema}".relaybus_events) AS events,
                  (SELECT count(*)::int FROM "${store.schema}".relaybus_deliveries) AS deliveries`,
    },
    [],
  );
  return { events: Number(rows[0]!.events), deliveries: Number(rows[0]!.deliveries) };
}

/**
 * Publish e1 properly, then through `late` (a finished transaction): a new event, a batch, and e1 again with a new
 * handler (the dedup path). Each is refused and nothing changes; a proper publish afterwards still works.
 */
async function refusesLateTransaction<TTx>(
  store: PostgresStore<TTx>,
  driver: PostgresDriver<TTx>,
  late: TTx,
  expected: (error: unknown) => void,
): Promise<void> {
  await store.transaction((tx) => store.publish(tx, [event('e1')]));
  const before = await counts(store, driver);
  assert.deepEqual(before, { events: 1, deliveries: 2 });
  const again = { ...event('e1'), handlers: [...event('e1').handlers, { name: 'h3', maxAttempts: 3 }] };
  for (const batch of [[event('late-1')], [event('late-2'), event('late-3')], [again], [event('late-4'), again]]) {
    await assert.rejects(store.publish(late, batch), (error: unknown) => {
      expected(error);
      return true;
    });
    assert.deepEqual(await counts(store, driver), before, `nothing written for ${batch.map((e) => e.id).join(', ')}`);
  }
  const [ok] = await store.transaction((tx) => store.publish(tx, [event('after')]));
  assert.equal(ok?.duplicate, false);
}

function isGuardRefusal(error: unknown): void {
  assert.ok(error instanceof InvalidInputError, `expected InvalidInputError, got ${String(error)}`);
  assert.match(error.message, NOT_IN_TRANSACTION);
}

/** Drivers that refuse a finished transaction themselves: any non-retryable RelayBusError. */
function isRefusal(error: unknown): void {
  assert.ok(error instanceof RelayBusError, `expected a RelayBusError, got ${String(error)}`);
  assert.equal(error.retryable, false, error.message);
}

describe('publish through a transaction that has ended', { skip, timeout: 120_000 }, () => {
  const schemas: string[] = [];
  let admin: pg.Pool;
  before(() => {
    admin = new pg.Pool({ connectionString: url, max: 1 });
  });
  after(async () => {
    for (const schema of schemas) await admin.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
    await admin.end();
  });
  async function storeOn<TTx>(driver: PostgresDriver<TTx>, label: string): Promise<PostgresStore<TTx>> {
    const schema = uniqueSchemaName(label);
    schemas.push(schema);
    const store = postgresStore({ driver, schema });
    await store.setup();
    return store;
  }

  it('the timestamps cannot tell autocommit from a transaction block on the extended protocol', async () => {
    const text = 'SELECT transaction_timestamp() = statement_timestamp() AS same, $1::int AS n';
    const pool = new pg.Pool({ connectionString: url, max: 1 });
    const sql = postgres(url, { max: 1, onnotice: () => {} });
    try {
      const same: boolean[] = [];
      for (let n = 0; n < 10; n += 1) {
        same.push((await pool.query<{ same: boolean }>({ name: 'ts_probe', text, values: [n] })).rows[0]!.same);
        same.push((await pool.query<{ same: boolean }>({ text, values: [n] })).rows[0]!.same);
        same.push((await sql.unsafe<{ same: boolean }[]>(text, [n], { prepare: true }))[0]!.same);
        same.push((await sql.unsafe<{ same: boolean }[]>(text, [n], { prepare: false }))[0]!.same);
      }
      assert.ok(
        same.includes(false),
        'in autocommit, statement_timestamp() moves past transaction_timestamp() at Execute',
      );
      // The simple protocol (no parameters) does keep them equal: not how relaybus runs its statements.
      assert.equal(
        (await pool.query<{ same: boolean }>('SELECT transaction_timestamp() = statement_timestamp() AS same')).rows[0]!
          .same,
        true,
      );
    } finally {
      await pool.end();
      await sql.end();
    }
  });

  for (const preparedStatements of [true, false]) {
    it(`postgres.js (${preparedStatements ? 'prepared' : 'unprepared'}): the tx of a finished sql.begin is refused`, async () => {
      const sql = postgres(url, { max: 2, onnotice: () => {} });
      try {
        const driver = fromPostgresJs(sql, { preparedStatements });
        const store = await storeOn(driver, `late_pj_${preparedStatements}`);
        let late: postgres.TransactionSql | undefined;
        await sql.begin(async (tx) => {
          late = tx;
        });
        await refusesLateTransaction(store, driver, late!, isGuardRefusal);
        // A rolled-back one too.
        await assert.rejects(
          sql.begin(async (tx) => {
            late = tx;
            throw new Error('rollback');
          }),
          /rollback/,
        );
        await assert.rejects(store.publish(late!, [event('late-rolled-back')]), NOT_IN_TRANSACTION);
        assert.equal((await counts(store, driver)).events, 2);
      } finally {
        await sql.end();
      }
    });
  }

  it('postgres.js: publishes pipelined in a live transaction all pass the guard, even as its first statements', async () => {
    const sql = postgres(url, { max: 1, onnotice: () => {} });
    try {
      const driver = fromPostgresJs(sql);
      const store = await storeOn(driver, 'pj_pipelined');
      await sql.begin((tx) =>
        Promise.all([
          store.publish(tx, [event('p1')]),
          store.publish(tx, [event('p2'), event('p3')]),
          store.publish(tx, [event('p4')]),
        ]),
      );
      assert.deepEqual(await counts(store, driver), { events: 4, deliveries: 8 });
    } finally {
      await sql.end();
    }
  });

  it('Drizzle over node-postgres and postgres-js: the tx of a finished db.transaction is refused', async () => {
    const pool = new pg.Pool({ connectionString: url, max: 2 });
    const sql = postgres(url, { max: 2, onnotice: () => {} });
    try {
      for (const [label, db] of [
        ['late_dz_pg', drizzleNodePg({ client: pool })],
        ['late_dz_pj', drizzlePostgresJs({ client: sql })],
      ] as const) {
        const driver = fromDrizzle(db);
        const store = await storeOn(driver, label);
        let late: Parameters<Parameters<typeof db.transaction>[0]>[0] | undefined;
        await db.transaction(async (tx) => {
          late = tx;
        });
        await refusesLateTransaction(store, driver, late!, isGuardRefusal);
      }
    } finally {
      await pool.end();
      await sql.end();
    }
  });

  it('pg: a client after COMMIT is refused, also without getTransactionStatus (pg before 8.12)', async () => {
    const pool = new pg.Pool({ connectionString: url, max: 2 });
    const client = await pool.connect();
    try {
      const driver = fromPg<PgPoolLike>(pool); // typed as the minimal client: `old` below is one
      const store = await storeOn(driver, 'late_pg');
      await client.query('BEGIN');
      await client.query('COMMIT');
      await refusesLateTransaction(store, driver, client, isRefusal);
      // An older pg client cannot say whether it is in a transaction: the guard does.
      const old: PgPoolClientLike = { query: (config: never) => client.query(config), release: () => {} };
      await assert.rejects(store.publish(old, [event('old-pg')]), NOT_IN_TRANSACTION);
      await client.query('BEGIN');
      await store.publish(old, [event('old-pg')]);
      await client.query('COMMIT');
      assert.equal((await counts(store, driver)).events, 3);
    } finally {
      client.release();
      await pool.end();
    }
  });

  it('Kysely: a finished transaction is refused', async () => {
    const db = new Kysely<Record<string, never>>({
      dialect: new PostgresDialect({ pool: new pg.Pool({ connectionString: url, max: 2 }) }),
    });
    try {
      const driver = fromKysely(db);
      const store = await storeOn(driver, 'late_kysely');
      let late: KyselyTransactionLike | undefined;
      await db.transaction().execute(async (trx) => {
        late = trx;
      });
      await refusesLateTransaction(store, driver, late!, isRefusal);
    } finally {
      await db.destroy();
    }
  });

  it('the guard holds when a driver runs the publish before the guard statement', async () => {
    const pool = new pg.Pool({ connectionString: url, max: 2 });
    try {
      const pgDriver = fromPg<PgPoolLike>(pool);
      // A driver that holds the guard statement back until the next statement has run: the publish sees no marker
      // first, then runs again once the guard has.
      const reordering: PostgresDriver<PgPoolClientLike> = {
        ...pgDriver,
        unwrap(tx: PgPoolClientLike): SqlExecutor {
          const inner = pgDriver.unwrap(tx);
          let held: (() => void) | undefined;
          return {
            exec: (script) => inner.exec(script),
            async run(statement, params) {
              if (statement.name.startsWith('relaybus_publish_guard')) {
                await new Promise<void>((resolve) => {
                  held = resolve;
                });
                return inner.run(statement, params);
              }
              const rows = await inner.run(statement, params);
              held?.();
              held = undefined;
              return rows as never;
            },
          };
        },
      };
      const store = await storeOn(reordering, 'reordered');
      await store.transaction((tx) => store.publish(tx, [event('r1')]));
      await store.transaction((tx) => store.publish(tx, [event('r2'), event('r3')]));
      assert.deepEqual(await counts(store, reordering), { events: 3, deliveries: 6 });
      const client = await pool.connect();
      try {
        const unchecked: PgPoolClientLike = { query: (config: never) => client.query(config), release: () => {} };
        await assert.rejects(store.publish(unchecked, [event('r4')]), NOT_IN_TRANSACTION);
        assert.deepEqual(await counts(store, reordering), { events: 3, deliveries: 6 });
      } finally {
        client.release();
      }
    } finally {
      await pool.end();
    }
  });
});

describe('publish through a finished PGlite transaction', () => {
  it('is refused and writes nothing, with fromPglite and with Drizzle', async () => {
    const client = await PGlite.create();
    try {
      const driver = fromPglite(client);
      const store = postgresStore({ driver });
      await store.setup();
      let late: Parameters<Parameters<typeof client.transaction>[0]>[0] | undefined;
      await client.transaction(async (tx) => {
        late = tx;
      });
      await refusesLateTransaction(store, driver, late!, isRefusal);
      const db = drizzlePglite({ client });
      const drizzleDriver = fromDrizzle(db);
      const drizzleStore = postgresStore({ driver: drizzleDriver, schema: 'drizzle_late' });
      await drizzleStore.setup();
      let lateTx: Parameters<Parameters<typeof db.transaction>[0]>[0] | undefined;
      await db.transaction(async (tx) => {
        lateTx = tx;
      });
      await refusesLateTransaction(drizzleStore, drizzleDriver, lateTx!, isRefusal);
    } finally {
      await client.close();
    }
  });
});
