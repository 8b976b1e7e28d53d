/**
 * What the contract suite cannot say about the drivers, because it only ever passes the right
 * transaction: the wrong object, a finished transaction, client settings relaybus does not control
 * (postgres.js `fetch_types: false`, a client shared with Drizzle, Kysely plugins), and whether
 * `preparedStatements: false` really prepares nothing.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { PGlite } from '@electric-sql/pglite';
import { drizzle as drizzleNodePg } from 'drizzle-orm/node-postgres';
import { drizzle as drizzlePglite } from 'drizzle-orm/pglite';
import { drizzle as drizzlePostgresJs } from 'drizzle-orm/postgres-js';
import { CamelCasePlugin, Kysely, PostgresDialect } from 'kysely';
import pg from 'pg';
import postgres from 'postgres';
import { InvalidInputError, InvalidOptionsError, RelayBusError } from '../../src/core/errors.js';
import { fromDrizzle } from '../../src/postgres/drivers/drizzle-driver.js';
import { fromKysely, type KyselyTransactionLike } from '../../src/postgres/drivers/kysely-driver.js';
import { fromPg, fromPglite, fromPostgresJs, postgresStore, type PostgresStore } from '../../src/postgres/index.js';
import type { PublishParams } from '../../src/store/contract.js';
import { findPostgres, uniqueSchemaName } from '../support/databases.js';
import * as owners from '../support/claims.js';

const found = await findPostgres();
const skip = 'skip' in found ? found.skip : undefined;
const url = 'url' in found ? found.url : '';

const event = (id: string): PublishParams => ({
  id,
  type: 'order.placed',
  key: 'k',
  payload: { orderId: id, note: 'quote " and \\ and {a,b}' },
  headers: { trace: 't' },
  handlers: [
    { name: 'h1', maxAttempts: 3 },
    { name: 'h2', maxAttempts: 3 },
  ],
});

/** Expect an InvalidInputError whose message matches. */
async function rejectsInput(promise: Promise<unknown>, message: RegExp): Promise<void> {
  await assert.rejects(promise, (error: unknown) => {
    assert.ok(error instanceof InvalidInputError, `expected InvalidInputError, got ${String(error)}`);
    assert.match(error.message, message);
    return true;
  });
}

async function countEvents<TTx>(store: PostgresStore<TTx>): Promise<number> {
  return (await store.listDeliveries({ limit: 1000 })).items.length;
}

/** Publish, claim and complete through `store`; returns what the claim saw. */
async function roundTrip<TTx>(store: PostgresStore<TTx>, id: string) {
  const [published] = await store.transaction((tx) => store.publish(tx, [event(id)]));
  assert.deepEqual(published, { eventId: id, addedHandlers: ['h1', 'h2'], duplicate: false });
  const params = { owner: `w-${id}`, handlers: ['h1', 'h2'], limit: 10, leaseDurationMs: 30_000 };
  const claimed = await owners.claim(store, params);
  assert.equal(claimed.length, 2);
  assert.deepEqual(claimed[0]!.payload, event(id).payload);
  assert.deepEqual(claimed[0]!.headers, { trace: 't' });
  const leases = claimed.map((c) => ({ deliveryId: c.id, leaseToken: c.leaseToken }));
  assert.deepEqual(await store.completeMany([leases[0]!]), [true]);
  // The other completion rides on a claim that finds a new event's deliveries, next to one that was done already: the
  // claim's summary row lists the ids it completed (an array column after rows where it is NULL), read alike through
  // every driver and client setting.
  await store.transaction((tx) => store.publish(tx, [event(`${id}-next`)]));
  const riding = await owners.completeAndClaim(store, leases, params);
  assert.deepEqual(riding.completed, [false, true]);
  assert.equal(riding.claimed.length, 2);
  await store.completeMany(riding.claimed.map((c) => ({ deliveryId: c.id, leaseToken: c.leaseToken })));
  return claimed;
}

describe('drivers on real Postgres: wrong objects, finished transactions, client settings', { skip }, () => {
  const schemas: string[] = [];
  let admin: pg.Pool;
  before(() => {
    admin = new pg.Pool({ connectionString: url, max: 1 });
  });
  after(async () => {
    for (const schema of schemas) await admin.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
    await admin.end();
  });
  const schemaFor = (label: string) => {
    const schema = uniqueSchemaName(label);
    schemas.push(schema);
    return schema;
  };

  describe('pg', () => {
    it('refuses a pool, a client outside a transaction and a failed transaction; nothing is written', async () => {
      const pool = new pg.Pool({ connectionString: url, max: 2 });
      const client = await pool.connect();
      try {
        const store = postgresStore({ driver: fromPg(pool), schema: schemaFor('pg_wrong') });
        await store.setup();
        await rejectsInput(store.publish(pool as never, [event('e1')]), /got a pool/);
        await rejectsInput(store.publish(client, [event('e1')]), /not in a transaction/);
        await client.query('BEGIN');
        await client.query('SELECT 1/0').catch(() => {});
        // pg rejects on the error message and learns the failed status from the ReadyForQuery that follows:
        // one more (failing) round trip makes sure that message has been read.
        await client.query('SELECT 1').catch(() => {});
        await rejectsInput(store.publish(client, [event('e1')]), /has failed/);
        await client.query('ROLLBACK');
        await client.query('BEGIN');
        await client.query('COMMIT');
        await rejectsInput(store.publish(client, [event('e1')]), /not in a transaction/);
        assert.equal(await countEvents(store), 0);
      } finally {
        client.release();
        await pool.end();
      }
    });
  });

  describe('postgres.js', () => {
    it('refuses the client itself as the transaction and a client with column transforms', async () => {
      const sql = postgres(url, { max: 2, onnotice: () => {} });
      try {
        const store = postgresStore({ driver: fromPostgresJs(sql), schema: schemaFor('pj_wrong') });
        await store.setup();
        await rejectsInput(store.publish(sql as never, [event('e1')]), /sql\.begin/);
        await rejectsInput(store.publish({} as never, [event('e1')]), /postgres\.js transaction/);
        assert.equal(await countEvents(store), 0);
        const camel = postgres(url, { max: 1, transform: postgres.camel });
        try {
          assert.throws(() => fromPostgresJs(camel), InvalidOptionsError);
        } finally {
          await camel.end();
        }
        assert.throws(() => fromPostgresJs({} as never), InvalidOptionsError);
      } finally {
        await sql.end();
      }
    });

    it('binds JSON text, arrays and results the same with fetch_types off and with a client Drizzle also uses', async () => {
      for (const [label, options] of [
        ['pj_no_types', { fetch_types: false }],
        ['pj_shared', {}],
      ] as const) {
        const sql = postgres(url, { max: 2, onnotice: () => {}, ...options });
        try {
          if (label === 'pj_shared') drizzlePostgresJs({ client: sql }); // drizzle replaces the client's JSON and date serializers
          const store = postgresStore({ driver: fromPostgresJs(sql), schema: schemaFor(label) });
          await store.setup();
          await roundTrip(store, `e-${label}`);
          // An array column NULL in the first rows and set in a later one (the claim's summary row comes last).
          const arrays = await fromPostgresJs(sql).executor.run<{ a: string[] | null }>(
            {
              name: 'relaybus_test_arrays',
              text: `SELECT NULL::text[] AS a UNION ALL SELECT ARRAY['10', '20']::text[]`,
            },
            [],
          );
          assert.deepEqual(
            arrays.map((r) => r.a),
            [null, ['10', '20']],
            `${label}: a text[] after NULL rows comes back as an array`,
          );
          const [row] = await sql.unsafe(`SELECT jsonb_typeof(payload) AS t FROM "${store.schema}".relaybus_events`);
          assert.equal(row?.t, 'object', `${label}: the payload is stored as a JSON object, not as a JSON string`);
        } finally {
          await sql.end();
        }
      }
    });

    it('prepares its statements unless preparedStatements is false or the client has prepare: false', async () => {
      const cases = [
        { preparedStatements: true, client: {}, expected: true },
        { preparedStatements: false, client: {}, expected: false },
        { preparedStatements: true, client: { prepare: false }, expected: false },
      ];
      for (const { preparedStatements, client, expected } of cases) {
        const sql = postgres(url, { max: 1, onnotice: () => {}, ...client });
        try {
          const store = postgresStore({
            driver: fromPostgresJs(sql, { preparedStatements }),
            schema: schemaFor('pj_prep'),
          });
          await store.setup();
          await roundTrip(store, 'e1');
          // postgres.js prepares its own BEGIN and COMMIT unless the client has prepare: false: count relaybus's statements only.
          const [row] = await sql.unsafe(
            `SELECT count(*)::int AS n FROM pg_prepared_statements WHERE statement LIKE '%relaybus_%'`,
          );
          assert.equal(
            (row?.n as number) > 0,
            expected,
            `relaybus statements prepared with ${JSON.stringify({ preparedStatements, client })}`,
          );
        } finally {
          await sql.end();
        }
      }
    });
  });

  describe('kysely', () => {
    let db: Kysely<Record<string, never>>;
    let store: PostgresStore<KyselyTransactionLike>;
    before(async () => {
      db = new Kysely({
        dialect: new PostgresDialect({ pool: new pg.Pool({ connectionString: url, max: 2 }) }),
        plugins: [new CamelCasePlugin()],
      });
      store = postgresStore({ driver: fromKysely(db), schema: schemaFor('kysely_errors') });
      await store.setup();
    });
    after(() => db.destroy());

    it('works on an instance with a CamelCasePlugin (relaybus reads its rows without the plugins)', async () => {
      await roundTrip(store, 'e-camel');
    });

    it('refuses a Kysely instance that is not a transaction, and other objects', async () => {
      await rejectsInput(store.publish(db as never, [event('e1')]), /not one: a publish outside a transaction/);
      await rejectsInput(store.publish(null as never, [event('e1')]), /Kysely transaction/);
      assert.throws(() => fromKysely({} as never), InvalidOptionsError);
      await db.transaction().execute(async (trx) => {
        assert.throws(() => fromKysely(trx as never), InvalidOptionsError);
      });
    });

    it('refuses a committed or rolled-back transaction with a clear error and writes nothing', async () => {
      let committed: KyselyTransactionLike | undefined;
      await db.transaction().execute(async (trx) => {
        committed = trx;
      });
      await rejectsInput(store.publish(committed!, [event('late')]), /already committed: nothing was written/);
      let rolledBack: KyselyTransactionLike | undefined;
      await assert.rejects(
        db.transaction().execute(async (trx) => {
          rolledBack = trx;
          throw new Error('no');
        }),
        /no/,
      );
      await rejectsInput(store.publish(rolledBack!, [event('late')]), /already rolled back/);
      const claimed = await owners.claim(store, {
        owner: 'w',
        handlers: ['h1', 'h2'],
        limit: 10,
        leaseDurationMs: 30_000,
      });
      assert.deepEqual(claimed, []);
    });
  });

  describe('drizzle', () => {
    it('refuses a Drizzle database where a transaction is needed, on node-postgres and postgres-js', async () => {
      const pool = new pg.Pool({ connectionString: url, max: 2 });
      const sql = postgres(url, { max: 2, onnotice: () => {} });
      try {
        for (const [label, db] of [
          ['dz_pg', drizzleNodePg({ client: pool })],
          ['dz_pj', drizzlePostgresJs({ client: sql })],
        ] as const) {
          const store = postgresStore({ driver: fromDrizzle(db), schema: schemaFor(label) });
          await store.setup();
          await rejectsInput(store.publish(db as never, [event('e1')]), /not be atomic/);
          await rejectsInput(store.publish('tx' as never, [event('e1')]), /Drizzle transaction/);
          assert.equal(await countEvents(store), 0);
          await db.transaction(async (tx) => {
            assert.throws(() => fromDrizzle(tx), InvalidOptionsError);
          });
        }
      } finally {
        await pool.end();
        await sql.end();
      }
    });

    it("hands on the driver error with its SQLSTATE, not Drizzle's wrapper", async () => {
      const pool = new pg.Pool({ connectionString: url, max: 1 });
      try {
        const store = postgresStore({
          driver: fromDrizzle(drizzleNodePg({ client: pool })),
          schema: schemaFor('dz_never_setup'),
        });
        await assert.rejects(
          store.statistics(),
          (error: unknown) => error instanceof RelayBusError && error.code === 'RELAYBUS_SCHEMA_MISMATCH',
        );
      } finally {
        await pool.end();
      }
    });
  });
});

describe('PGlite: the database where a transaction is needed', () => {
  it('is refused with a clear error and nothing is written', async () => {
    const db = await PGlite.create();
    try {
      const store = postgresStore({ driver: fromPglite(db) });
      await store.setup();
      await rejectsInput(store.publish(db as never, [event('e1')]), /got the PGlite database itself: .*not be atomic/);
      assert.equal(await countEvents(store), 0);
      await db.transaction((tx) => store.publish(tx, [event('e2')]));
      assert.equal(await countEvents(store), 2);
    } finally {
      await db.close();
    }
  });
});

describe('drizzle on PGlite: a finished transaction', () => {
  it('is refused with a clear error and nothing is written', async () => {
    const client = await PGlite.create();
    try {
      const db = drizzlePglite({ client });
      const store = postgresStore({ driver: fromDrizzle(db) });
      assert.equal(store.capabilities.concurrentConnections, false);
      await store.setup();
      let finished: Parameters<Parameters<typeof db.transaction>[0]>[0] | undefined;
      await db.transaction(async (tx) => {
        finished = tx;
      });
      await rejectsInput(
        store.publish(finished!, [event('late')]),
        /already committed or rolled back: nothing was written/,
      );
      await rejectsInput(store.publish(db as never, [event('e1')]), /not be atomic/);
      assert.equal(await countEvents(store), 0);
    } finally {
      await client.close();
    }
  });
});
