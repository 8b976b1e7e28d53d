import assert from 'node:assert/strict';
import { after, describe, it } from 'node:test';
import pg from 'pg';
import { SchemaMismatchError, InvalidOptionsError } from '../../src/core/errors.js';
import { createPostgresSchemaSql, fromPg, postgresStore } from '../../src/postgres/index.js';
import { asScript, loadMigrations, loadSupplement } from '../../src/postgres/schema-sql.js';
import { findPostgres, uniqueSchemaName } from '../support/databases.js';

const found = await findPostgres();

describe('setup() on real Postgres', { skip: 'skip' in found ? found.skip : undefined }, () => {
  const url = 'url' in found ? found.url : '';
  const admin = new pg.Pool({ connectionString: url, max: 2 });
  const schemas: string[] = [];
  after(async () => {
    for (const schema of schemas) await admin.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
    await admin.end();
  });

  async function catalog(schema: string) {
    const tables = await admin.query<{ relname: string; reloptions: string[] | null }>(
      `SELECT c.relname, c.reloptions FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
       WHERE n.nspname = $1 AND c.relkind = 'r' ORDER BY c.relname`, [schema]);
    const indexes = await admin.query<{ indexname: string; indexdef: string }>(
      `SELECT indexname, replace(indexdef, $1, 'S') AS indexdef FROM pg_indexes WHERE schemaname = $2 ORDER BY indexname`, [`"${schema}"`, schema]);
    const lanes = await admin.query<{ n: number }>(`SELECT count(*)::int AS n FROM "${schema}".relaybus_lanes`);
    return { tables: tables.rows, indexes: indexes.rows.map((r) => `${r.indexname}: ${r.indexdef.replaceAll(schema, 'S')}`), lanes: lanes.rows[0]!.n };
  }

  it('three concurrent setup() calls on an empty schema all succeed and create everything once', async () => {
    const schema = uniqueSchemaName('setup_race');
    schemas.push(schema);
    const pools = [0, 1, 2].map(() => new pg.Pool({ connectionString: url, max: 1 }));
    try {
      await Promise.all(pools.map((pool) => postgresStore({ driver: fromPg(pool), schema }).setup()));
      await postgresStore({ driver: fromPg(pools[0]!), schema }).setup(); // and once more: idempotent
    } finally {
      await Promise.all(pools.map((pool) => pool.end()));
    }
    const result = await catalog(schema);
    assert.equal(result.lanes, 256);
    const options = Object.fromEntries(result.tables.map((t) => [t.relname, t.reloptions ?? []]));
    assert.deepEqual(options.relaybus_lanes, ['fillfactor=50']);
    assert.deepEqual(options.relaybus_deliveries, ['autovacuum_vacuum_scale_factor=0.02']);
    const migrations = await admin.query(`SELECT name FROM "${schema}".relaybus_migrations`);
    assert.deepEqual(migrations.rows.map((r) => r.name), loadMigrations(schema).map((m) => m.name));
  });

  it('deliveries carry only the indexes of the specification, none on a column the happy path writes', async () => {
    const schema = uniqueSchemaName('setup_indexes');
    schemas.push(schema);
    const pool = new pg.Pool({ connectionString: url, max: 1 });
    await postgresStore({ driver: fromPg(pool), schema }).setup();
    await pool.end();
    const { indexes } = await catalog(schema);
    const onDeliveries = indexes.filter((i) => i.includes('ON S.relaybus_deliveries '));
    assert.deepEqual(onDeliveries.map((i) => i.split(':')[0]), [
      'relaybus_deliveries_event_id_handler_idx',
      'relaybus_deliveries_keyed_due_idx',
      'relaybus_deliveries_lane_handler_key_sequence_idx',
      'relaybus_deliveries_pkey',
      'relaybus_deliveries_unkeyed_due_idx',
      'relaybus_deliveries_updated_at_id_idx',
    ]);
    assert.ok(!indexes.some((i) => i.startsWith('relaybus_lanes_') && !i.startsWith('relaybus_lanes_pkey')), 'lanes have no secondary index');
  });

  it('createPostgresSchemaSql() builds the same catalog as setup()', async () => {
    const viaSetup = uniqueSchemaName('via_setup');
    const viaScript = uniqueSchemaName('via_script');
    schemas.push(viaSetup, viaScript);
    const pool = new pg.Pool({ connectionString: url, max: 1 });
    await postgresStore({ driver: fromPg(pool), schema: viaSetup }).setup();
    await pool.end();
    await admin.query(createPostgresSchemaSql({ schema: viaScript }));
    const a = await catalog(viaSetup);
    const b = await catalog(viaScript);
    assert.deepEqual(b, a);
  });

  it('a database at the first schema version, with deliveries pending, is upgraded by setup() and loses nothing', async () => {
    const schema = uniqueSchemaName('setup_upgrade');
    schemas.push(schema);
    const [first] = loadMigrations(schema);
    await admin.query(asScript([...first!.statements, ...loadSupplement(schema)]));
    await admin.query(`INSERT INTO "${schema}".relaybus_migrations (name) VALUES ($1)`, [first!.name]);
    const pool = new pg.Pool({ connectionString: url, max: 2 });
    try {
      const store = postgresStore({ driver: fromPg(pool), schema });
      await admin.query(`INSERT INTO "${schema}".relaybus_events (id, type, key, payload, headers, handlers, created_at)
        SELECT 'e' || n, 't', CASE WHEN n % 2 = 0 THEN 'k' || (n % 5) END, '{}', '{}', '{h}', now() FROM generate_series(1, 40) n`);
      await admin.query(`INSERT INTO "${schema}".relaybus_deliveries
          (event_id, handler, lane, key, sequence, status, attempts, max_attempts, claims, available_at, created_at, updated_at)
        SELECT e.id, 'h', 0, e.key, CASE WHEN e.key IS NOT NULL THEN row_number() OVER (PARTITION BY e.key ORDER BY e.id) END,
               'pending', 0, 3, 0, now(), now(), now()
        FROM "${schema}".relaybus_events e`);
      await store.setup();
      await store.setup(); // the second run finds nothing to do
      const applied = await admin.query<{ name: string }>(`SELECT name FROM "${schema}".relaybus_migrations ORDER BY name`);
      assert.deepEqual(applied.rows.map((r) => r.name), loadMigrations(schema).map((m) => m.name));
      const fresh = uniqueSchemaName('setup_fresh');
      schemas.push(fresh);
      await postgresStore({ driver: fromPg(pool), schema: fresh }).setup();
      const upgradedIndexes = (await catalog(schema)).indexes;
      assert.deepEqual(upgradedIndexes, (await catalog(fresh)).indexes, 'the upgraded catalog equals a fresh install');
      const seen = new Set<string>();
      for (let round = 0; round < 40 && seen.size < 40; round += 1) {
        const batch = await store.claim({ owner: 'w', handlers: ['h'], limit: 50, leaseDurationMs: 30_000 });
        for (const d of batch) seen.add(d.eventId);
        await store.completeMany(batch.map((d) => ({ deliveryId: d.id, lease: d.lease })));
      }
      assert.equal(seen.size, 40, 'every delivery pending before the upgrade ran');
    } finally {
      await pool.end();
    }
  });

  it('a store on a schema that was never set up says to run setup(), and bad schema names are refused', async () => {
    const pool = new pg.Pool({ connectionString: url, max: 1 });
    try {
      const store = postgresStore({ driver: fromPg(pool), schema: uniqueSchemaName('never_setup') });
      await assert.rejects(store.statistics(), (error: unknown) => error instanceof SchemaMismatchError && /setup\(\)/.test(error.message));
      for (const schema of ['Relay', 'a-b', '"x"', '', 'x'.repeat(64)]) {
        assert.throws(() => postgresStore({ driver: fromPg(pool), schema }), InvalidOptionsError);
      }
    } finally {
      await pool.end();
    }
  });
});
