/**
 * Errors are classified once, at the store boundary, on real Postgres: a driver error becomes a
 * `RelayBusError` whose `retryable` says whether the same call may succeed later, and only a
 * retryable one says "It is safe to retry". `store.transaction()` classifies driver errors of
 * opening and committing the same way, and hands back what the caller's own fn threw, unchanged.
 * A reschedule the database refuses for good makes the dispatcher bury the delivery instead of
 * running it again and again.
 */
import assert from 'node:assert/strict';
import { createServer } from 'node:net';
import { after, before, describe, it } from 'node:test';
import { Type } from '@sinclair/typebox';
import pg from 'pg';
import postgres from 'postgres';
import { createRelayBus } from '../../src/bus/bus.js';
import { InvalidInputError, RelayBusError, StoreUnavailableError } from '../../src/core/errors.js';
import { defineEvent } from '../../src/core/events.js';
import { fromPg, fromPostgresJs, postgresStore, type PostgresStore } from '../../src/postgres/index.js';
import { findPostgres, uniqueSchemaName } from '../support/databases.js';
import { nextEvent } from '../support/wait.js';
import * as owners from '../support/claims.js';

const found = await findPostgres();
const skip = 'skip' in found ? found.skip : undefined;
const url = 'url' in found ? found.url : '';

function isStoreError(error: unknown, retryable: boolean, sqlState?: string): true {
  assert.ok(error instanceof StoreUnavailableError, `expected StoreUnavailableError, got ${String(error)}`);
  assert.equal(error.retryable, retryable, error.message);
  assert.equal(/It is safe to retry/.test(error.message), retryable, error.message);
  if (sqlState !== undefined) assert.equal((error.cause as { code?: unknown }).code, sqlState);
  return true;
}

async function closedPort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as { port: number };
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return port;
}

describe('store errors on real Postgres', { skip }, () => {
  const schemas: string[] = [];
  let admin: pg.Pool;
  before(() => {
    admin = new pg.Pool({ connectionString: url, max: 1 });
  });
  after(async () => {
    for (const schema of schemas) await admin.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
    await admin.end();
  });
  async function storeOn<TTx>(
    make: (schema: string) => PostgresStore<TTx>,
    label: string,
  ): Promise<PostgresStore<TTx>> {
    const schema = uniqueSchemaName(label);
    schemas.push(schema);
    const store = make(schema);
    await store.setup();
    // A table whose unique constraint is checked at commit: a commit that fails with 23505.
    await admin.query(
      `CREATE TABLE "${schema}".deferred (id int, CONSTRAINT deferred_id UNIQUE (id) DEFERRABLE INITIALLY DEFERRED)`,
    );
    return store;
  }

  it('pg: store.transaction hands back what fn threw, and classifies a failed commit and a failed connect', async () => {
    const pool = new pg.Pool({ connectionString: url, max: 2 });
    try {
      const store = await storeOn((schema) => postgresStore({ driver: fromPg(pool), schema }), 'errors_pg');
      const mine = new Error('business rule broken');
      await assert.rejects(
        store.transaction(async () => {
          throw mine;
        }),
        (error) => error === mine,
      );
      const relaybus = new InvalidInputError('bad');
      await assert.rejects(
        store.transaction(async () => {
          throw relaybus;
        }),
        (error) => error === relaybus,
      );
      let own: unknown;
      await assert.rejects(
        store.transaction(async (tx) => {
          own = await tx.query('SELECT 1/0').then(
            () => undefined,
            (error: unknown) => error,
          );
          throw own;
        }),
        (error) => error === own && !(error instanceof RelayBusError),
      );

      await assert.rejects(
        store.transaction(async (tx) => {
          await tx.query(`INSERT INTO "${store.schema}".deferred VALUES (1), (1)`);
        }),
        (error) => isStoreError(error, false, '23505'),
      );

      const down = new pg.Pool({
        host: '127.0.0.1',
        port: await closedPort(),
        user: 'x',
        database: 'x',
        connectionTimeoutMillis: 2_000,
      });
      try {
        const unreachable = postgresStore({ driver: fromPg(down), schema: store.schema });
        await assert.rejects(
          unreachable.transaction(async () => 1),
          (error) => isStoreError(error, true),
        );
        await assert.rejects(unreachable.statistics(), (error) => isStoreError(error, true));
      } finally {
        await down.end();
      }
    } finally {
      await pool.end();
    }
  });

  it('postgres.js: a failed commit and a statement the caller caught inside sql.begin are classified', async () => {
    const sql = postgres(url, { max: 2, onnotice: () => {} });
    try {
      const store = await storeOn((schema) => postgresStore({ driver: fromPostgresJs(sql), schema }), 'errors_pj');
      const mine = new Error('business rule broken');
      await assert.rejects(
        store.transaction(async () => {
          throw mine;
        }),
        (error) => error === mine,
      );
      await assert.rejects(
        store.transaction(async (tx) => {
          await tx.unsafe(`INSERT INTO "${store.schema}".deferred VALUES (1), (1)`);
        }),
        (error) => isStoreError(error, false, '23505'),
      );
      // postgres.js fails sql.begin with a statement that failed inside it even when fn caught that failure.
      await assert.rejects(
        store.transaction(async (tx) => {
          await tx.unsafe('SELECT 1/0').catch(() => undefined);
        }),
        (error) => isStoreError(error, false, '22012'),
      );
    } finally {
      await sql.end();
    }
  });

  it('a statement error is retryable only when a retry can fix it', async () => {
    const pool = new pg.Pool({ connectionString: url, max: 2 });
    try {
      const store = await storeOn((schema) => postgresStore({ driver: fromPg(pool), schema }), 'errors_check');
      await store.transaction((tx) =>
        store.publish(tx, [{ id: 'e1', type: 't', payload: {}, handlers: [{ name: 'h1', maxAttempts: 3 }] }]),
      );
      const [claimed] = await owners.claim(store, { owner: 'w', handlers: ['h1'], limit: 1, leaseDurationMs: 30_000 });
      await admin.query(
        `ALTER TABLE "${store.schema}".relaybus_deliveries ADD CONSTRAINT no_poison CHECK (last_error NOT LIKE '%poison%')`,
      );
      await assert.rejects(
        store.reschedule(
          { deliveryId: claimed!.id, leaseToken: claimed!.leaseToken },
          { availableAt: new Date(), error: 'poison' },
        ),
        (error) => isStoreError(error, false, '23514'),
      );
    } finally {
      await pool.end();
    }
  });

  it('the dispatcher buries a delivery whose reschedule the database refuses for good, instead of running it forever', {
    timeout: 20_000,
  }, async (t) => {
    const pool = new pg.Pool({ connectionString: url, max: 4 });
    let bus: { stop(options?: { graceMs?: number }): Promise<void> } | undefined;
    // The bus first: its dispatcher holds a pool connection (LISTEN) until it stops, and pool.end() waits for it.
    t.after(async () => {
      await bus?.stop({ graceMs: 0 });
      await pool.end();
    });
    const store = await storeOn((schema) => postgresStore({ driver: fromPg(pool), schema }), 'errors_bury');
    // Failure texts that name the handler's error are refused (a stand-in for any data error of that write).
    await admin.query(
      `ALTER TABLE "${store.schema}".relaybus_deliveries ADD CONSTRAINT refuse_marked CHECK (last_error NOT LIKE '%XYZZY%')`,
    );
    const Order = defineEvent('order', Type.Object({ n: Type.Integer() }));
    const relay = createRelayBus({
      store,
      events: [Order],
      backoff: { jitter: 0 },
      dispatcher: { pollIntervalMs: 20 },
    });
    bus = relay;
    let runs = 0;
    relay.on(Order, 'poisoned', { maxAttempts: 5 }, () => {
      runs += 1;
      throw new Error('XYZZY');
    });
    await store.transaction((tx) => relay.publish(tx, Order, { n: 1 }));
    const dead = nextEvent(relay.lifecycle, 'dead', { timeoutMs: 10_000 });
    await relay.start();
    await dead;
    const [view] = (await store.listDeliveries({ status: 'dead' })).items;
    assert.match(
      view!.lastError ?? '',
      /^relaybus could not record this failure with reschedule \(StoreUnavailableError: .*refuse_marked.*the handler's error is in the worker log$/,
    );
    assert.equal(view!.attempts, 1);
    assert.equal(runs, 1);
  });
});
