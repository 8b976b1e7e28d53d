/**
 * Publishing before the relaybus tables exist (the quick start's first mistake: `npx relaybus setup` not run yet)
 * raises a `SchemaMismatchError` that names the command, and leaves the caller's transaction usable: its next
 * statement succeeds and commits, on every driver. The store reads the catalog before its first publish statement
 * (src/postgres/publish-probe.ts) and stops reading it once the tables are found.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { PGlite } from '@electric-sql/pglite';
import { drizzle as drizzleNodePg } from 'drizzle-orm/node-postgres';
import { sql as drizzleSql } from 'drizzle-orm';
import { Kysely, PostgresDialect, sql as kyselySql } from 'kysely';
import pg from 'pg';
import postgres from 'postgres';
import { createRelayBus, defineEvent, SchemaMismatchError, Type, type RelayBus } from '../../src/index.js';
import { fromDrizzle } from '../../src/postgres/drivers/drizzle-driver.js';
import { fromKysely } from '../../src/postgres/drivers/kysely-driver.js';
import {
  fromPg,
  fromPglite,
  fromPostgresJs,
  postgresStore,
  type PostgresDriver,
  type PostgresStore,
  type SqlExecutor,
} from '../../src/postgres/index.js';
import { findPostgres, uniqueSchemaName } from '../support/databases.js';

const found = await findPostgres();
const skip = 'skip' in found ? found.skip : undefined;
const url = 'url' in found ? found.url : '';

const OrderPlaced = defineEvent('order.placed', Type.Object({ orderId: Type.String() }));

function busOn<TTx>(store: PostgresStore<TTx>): RelayBus<TTx> {
  const bus = createRelayBus({ store, events: [OrderPlaced] });
  bus.on(OrderPlaced, 'send-receipt', async () => {});
  return bus;
}

/** The error a publish before setup must raise: typed, naming the command and the missing tables. */
function isMissingSchema(schema: string) {
  return (error: unknown): boolean => {
    assert.ok(error instanceof SchemaMismatchError, `expected SchemaMismatchError, got ${String(error)}`);
    assert.equal(error.code, 'RELAYBUS_SCHEMA_MISMATCH');
    assert.equal(error.retryable, false);
    assert.ok(error.message.includes('npx relaybus setup'), error.message);
    assert.ok(error.message.includes(`"${schema}"`), error.message);
    assert.match(error.message, /relaybus_events/);
    assert.match(error.message, /your transaction is still usable/);
    return true;
  };
}

/** The driver, with the names of the statements it ran in callers' transactions recorded. */
function recording<TTx>(driver: PostgresDriver<TTx>, ran: string[]): PostgresDriver<TTx> {
  return new Proxy(driver, {
    get(target, property, receiver) {
      if (property !== 'unwrap') return Reflect.get(target, property, receiver);
      return (tx: TTx): SqlExecutor => {
        const executor = target.unwrap(tx);
        return new Proxy(executor, {
          get(inner, name, innerReceiver) {
            if (name !== 'run') return Reflect.get(inner, name, innerReceiver);
            return (statement: { name: string }, params: readonly unknown[]) => {
              ran.push(statement.name.replace(/^relaybus_(.*)_[0-9a-f]{8}$/, '$1'));
              return inner.run(statement as never, params);
            };
          },
        });
      };
    },
  });
}

describe('publish before setup', { skip, timeout: 120_000 }, () => {
  const app = uniqueSchemaName('before_setup_app');
  const schemas: string[] = [app];
  let admin: pg.Pool;

  before(async () => {
    admin = new pg.Pool({ connectionString: url, max: 1 });
    await admin.query(
      `CREATE SCHEMA "${app}"; CREATE TABLE "${app}".orders (id text PRIMARY KEY, driver text NOT NULL)`,
    );
  });
  after(async () => {
    for (const schema of schemas) await admin.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
    await admin.end();
  });

  /** A relaybus schema name nobody set up (dropped afterwards, should a test create it). */
  const unsetSchema = (label: string): string => {
    const schema = uniqueSchemaName(label);
    schemas.push(schema);
    return schema;
  };

  /** The orders one driver committed. */
  const committed = async (driver: string): Promise<string[]> =>
    (
      await admin.query<{ id: string }>(`SELECT id FROM "${app}".orders WHERE driver = $1 ORDER BY id`, [driver])
    ).rows.map((row) => row.id);

  it('pg: throws SchemaMismatchError naming npx relaybus setup; the next statement succeeds and commits', async () => {
    const pool = new pg.Pool({ connectionString: url, max: 1 });
    try {
      const schema = unsetSchema('before_setup_pg');
      const ran: string[] = [];
      const store = postgresStore({ driver: recording(fromPg(pool), ran), schema });
      const bus = busOn(store);
      const client = await pool.connect();
      try {
        await client.query('BEGIN');
        await client.query(`INSERT INTO "${app}".orders VALUES ('pg-1', 'pg')`);
        await assert.rejects(bus.publish(client, OrderPlaced, { orderId: 'pg-1' }), isMissingSchema(schema));
        await client.query(`INSERT INTO "${app}".orders VALUES ('pg-2', 'pg')`);
        await client.query('COMMIT');
      } finally {
        client.release();
      }
      assert.deepEqual(await committed('pg'), ['pg-1', 'pg-2']);
      assert.deepEqual(ran, ['publish_probe'], 'only the catalog probe ran');

      // Once the tables exist, the first publish probes once more and finds them; later ones probe no more.
      await postgresStore({ driver: fromPg(pool), schema }).setup();
      ran.length = 0;
      for (const orderId of ['o-1', 'o-2', 'o-3'])
        await store.transaction((tx) => bus.publish(tx, OrderPlaced, { orderId }));
      assert.equal(ran.filter((name) => name === 'publish_probe').length, 1, ran.join(', '));
      // A store whose setup() ran never probes.
      const ranAfterSetup: string[] = [];
      const setUp = postgresStore({ driver: recording(fromPg(pool), ranAfterSetup), schema });
      await setUp.setup();
      await setUp.transaction((tx) => busOn(setUp).publish(tx, OrderPlaced, { orderId: 'o-4' }));
      assert.ok(!ranAfterSetup.includes('publish_probe'), ranAfterSetup.join(', '));
    } finally {
      await pool.end();
    }
  });

  it('pg: tables of relaybus 0.1 are refused with the upgrade command, the transaction usable', async () => {
    const schema = unsetSchema('before_setup_row_lease');
    // The relations the publish statements name, with 0.1's lease column on the deliveries.
    await admin.query(`CREATE SCHEMA "${schema}";
      CREATE TABLE "${schema}".relaybus_events (id text PRIMARY KEY);
      CREATE TABLE "${schema}".relaybus_deliveries (id bigint PRIMARY KEY, lease_token text);
      CREATE TABLE "${schema}".relaybus_subscriptions (handler text PRIMARY KEY);
      CREATE SEQUENCE "${schema}".relaybus_key_order`);
    const pool = new pg.Pool({ connectionString: url, max: 1 });
    try {
      const bus = busOn(postgresStore({ driver: fromPg(pool), schema }));
      const client = await pool.connect();
      try {
        await client.query('BEGIN');
        await assert.rejects(bus.publish(client, OrderPlaced, { orderId: 'x' }), (error: unknown) => {
          assert.ok(error instanceof SchemaMismatchError, String(error));
          assert.match(error.message, /relaybus 0\.1/);
          assert.match(error.message, /npx relaybus upgrade/);
          return true;
        });
        await client.query(`INSERT INTO "${app}".orders VALUES ('row-lease-1', 'row-lease')`);
        await client.query('COMMIT');
      } finally {
        client.release();
      }
      assert.deepEqual(await committed('row-lease'), ['row-lease-1']);
    } finally {
      await pool.end();
    }
  });

  it('postgres.js: the same inside sql.begin', async () => {
    const sql = postgres(url, { max: 1, onnotice: () => {} });
    try {
      const schema = unsetSchema('before_setup_pj');
      const bus = busOn(postgresStore({ driver: fromPostgresJs(sql), schema }));
      await sql.begin(async (tx) => {
        await tx.unsafe(`INSERT INTO "${app}".orders VALUES ('pj-1', 'postgres.js')`);
        await assert.rejects(bus.publish(tx, OrderPlaced, { orderId: 'pj-1' }), isMissingSchema(schema));
        await tx.unsafe(`INSERT INTO "${app}".orders VALUES ('pj-2', 'postgres.js')`);
      });
      assert.deepEqual(await committed('postgres.js'), ['pj-1', 'pj-2']);
    } finally {
      await sql.end();
    }
  });

  it('Kysely and Drizzle (node-postgres): the same inside their transactions', async () => {
    const pool = new pg.Pool({ connectionString: url, max: 1 });
    const db = new Kysely<Record<string, never>>({ dialect: new PostgresDialect({ pool }) });
    try {
      const kyselySchema = unsetSchema('before_setup_kysely');
      const kysely = busOn(postgresStore({ driver: fromKysely(db, { pool }), schema: kyselySchema }));
      await db.transaction().execute(async (trx) => {
        await kyselySql`INSERT INTO ${kyselySql.table(`${app}.orders`)} VALUES ('k-1', 'kysely')`.execute(trx);
        await assert.rejects(kysely.publish(trx, OrderPlaced, { orderId: 'k-1' }), isMissingSchema(kyselySchema));
        await kyselySql`INSERT INTO ${kyselySql.table(`${app}.orders`)} VALUES ('k-2', 'kysely')`.execute(trx);
      });
      assert.deepEqual(await committed('kysely'), ['k-1', 'k-2']);

      const drizzleSchema = unsetSchema('before_setup_drizzle');
      const orm = drizzleNodePg({ client: pool });
      const drizzle = busOn(postgresStore({ driver: fromDrizzle(orm), schema: drizzleSchema }));
      await orm.transaction(async (tx) => {
        await tx.execute(drizzleSql.raw(`INSERT INTO "${app}".orders VALUES ('d-1', 'drizzle')`));
        await assert.rejects(drizzle.publish(tx, OrderPlaced, { orderId: 'd-1' }), isMissingSchema(drizzleSchema));
        await tx.execute(drizzleSql.raw(`INSERT INTO "${app}".orders VALUES ('d-2', 'drizzle')`));
      });
      assert.deepEqual(await committed('drizzle'), ['d-1', 'd-2']);
    } finally {
      await db.destroy();
    }
  });
});

describe('publish before setup on PGlite', { timeout: 60_000 }, () => {
  it('the same inside pglite.transaction', async () => {
    const pglite = new PGlite();
    try {
      await pglite.exec('CREATE TABLE orders (id text PRIMARY KEY)');
      const bus = busOn(postgresStore({ driver: fromPglite(pglite) }));
      await pglite.transaction(async (tx) => {
        await tx.query("INSERT INTO orders VALUES ('l-1')");
        await assert.rejects(bus.publish(tx, OrderPlaced, { orderId: 'l-1' }), isMissingSchema('relaybus'));
        await tx.query("INSERT INTO orders VALUES ('l-2')");
      });
      const { rows } = await pglite.query<{ id: string }>('SELECT id FROM orders ORDER BY id');
      assert.deepEqual(
        rows.map((row) => row.id),
        ['l-1', 'l-2'],
      );
    } finally {
      await pglite.close();
    }
  });
});
