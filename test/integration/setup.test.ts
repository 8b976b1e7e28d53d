import assert from 'node:assert/strict';
import { after, describe, it } from 'node:test';
import pg from 'pg';
import { SchemaMismatchError, InvalidOptionsError } from '../../src/core/errors.js';
import { createPostgresSchemaSql, fromPg, postgresStore } from '../../src/postgres/index.js';
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
    assert.deepEqual(migrations.rows.map((r) => r.name), ['0000_init']);
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
      'relaybus_deliveries_lane_available_at_id_idx',
      'relaybus_deliveries_lane_handler_key_sequence_idx',
      'relaybus_deliveries_pkey',
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
