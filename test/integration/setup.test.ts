import assert from 'node:assert/strict';
import { after, describe, it } from 'node:test';
import pg from 'pg';
import { InvalidOptionsError, SchemaMismatchError, StoreUnavailableError } from '../../src/core/errors.js';
import { createPostgresSchemaSql, fromPg, postgresStore } from '../../src/postgres/index.js';
import { asScript, loadMigrations } from '../../src/postgres/schema-sql.js';
import { setupPostgres } from '../../src/postgres/setup.js';
import { loadStatements } from '../../src/postgres/statements.js';
import { findPostgres, uniqueSchemaName } from '../support/databases.js';
import { catalog as fullCatalog, drain, seedPending, supplementAtVersion } from '../support/upgrades.js';

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
       WHERE n.nspname = $1 AND c.relkind = 'r' ORDER BY c.relname`,
      [schema],
    );
    const indexes = await admin.query<{ indexname: string; indexdef: string }>(
      `SELECT indexname, replace(indexdef, $1, 'S') AS indexdef FROM pg_indexes WHERE schemaname = $2 ORDER BY indexname`,
      [`"${schema}"`, schema],
    );
    const lanes = await admin.query<{ n: number }>(`SELECT count(*)::int AS n FROM "${schema}".relaybus_lanes`);
    return {
      tables: tables.rows,
      indexes: indexes.rows.map((r) => `${r.indexname}: ${r.indexdef.replaceAll(schema, 'S')}`),
      lanes: lanes.rows[0]!.n,
    };
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
    assert.deepEqual(options.relaybus_lanes, ['fillfactor=50', 'toast_tuple_target=8160']);
    assert.deepEqual(options.relaybus_deliveries, ['autovacuum_vacuum_scale_factor=0.02']);
    const migrations = await admin.query(`SELECT name FROM "${schema}".relaybus_migrations`);
    assert.deepEqual(
      migrations.rows.map((r) => r.name),
      loadMigrations(schema).map((m) => m.name),
    );
  });

  it('deliveries carry only the indexes of the specification, none on a column the happy path writes', async () => {
    const schema = uniqueSchemaName('setup_indexes');
    schemas.push(schema);
    const pool = new pg.Pool({ connectionString: url, max: 1 });
    await postgresStore({ driver: fromPg(pool), schema }).setup();
    await pool.end();
    const { indexes } = await catalog(schema);
    const onDeliveries = indexes.filter((i) => i.includes('ON S.relaybus_deliveries '));
    // No (event_id, handler) index since 0002: events.handlers keeps one delivery per handler (see publish.sql).
    // replayed_idx (0006) holds replayed rows only: a published row never enters it.
    assert.deepEqual(
      onDeliveries.map((i) => i.split(':')[0]),
      [
        'relaybus_deliveries_keyed_due_idx',
        'relaybus_deliveries_lane_handler_key_sequence_idx',
        'relaybus_deliveries_pkey',
        'relaybus_deliveries_replayed_idx',
        'relaybus_deliveries_unkeyed_due_idx',
        'relaybus_deliveries_updated_at_id_idx',
      ],
    );
    assert.ok(
      !indexes.some((i) => i.startsWith('relaybus_lanes_') && !i.startsWith('relaybus_lanes_pkey')),
      'lanes have no secondary index',
    );
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

  /** A schema at relaybus version `count` (its first `count` migrations, the supplement, the records), as setup() of that version left it. */
  async function schemaAtVersion(schema: string, count: number): Promise<void> {
    const migrations = loadMigrations(schema).slice(0, count);
    const version = migrations.at(-1)!.name;
    await admin.query(asScript([...migrations.flatMap((m) => m.statements), ...supplementAtVersion(schema, version)]));
    for (const { name } of migrations)
      await admin.query(`INSERT INTO "${schema}".relaybus_migrations (name) VALUES ($1)`, [name]);
  }

  const versions = loadMigrations().map((m) => m.name);
  for (let count = 1; count <= versions.length; count += 1) {
    it(`a schema at ${versions[count - 1]}, with deliveries pending, is upgraded by setup() to the latest: nothing lost, the catalog of a fresh install`, async () => {
      const schema = uniqueSchemaName(`setup_v${count}`);
      const fresh = uniqueSchemaName('setup_fresh');
      schemas.push(schema, fresh);
      await schemaAtVersion(schema, count);
      const events = await seedPending(admin, schema, 40);
      const pool = new pg.Pool({ connectionString: url, max: 2 });
      try {
        const store = postgresStore({ driver: fromPg(pool), schema });
        const result = await setupPostgres(fromPg(pool), schema, loadStatements(schema));
        assert.deepEqual(result, { from: 'relaybus', applied: versions.slice(count) });
        assert.deepEqual(
          await setupPostgres(fromPg(pool), schema, loadStatements(schema)),
          { from: 'relaybus', applied: [] },
          'the second run finds nothing to do',
        );
        const applied = await admin.query<{ name: string }>(
          `SELECT name FROM "${schema}".relaybus_migrations ORDER BY name`,
        );
        assert.deepEqual(
          applied.rows.map((r) => r.name),
          versions,
        );
        await postgresStore({ driver: fromPg(pool), schema: fresh }).setup();
        assert.deepEqual(
          await fullCatalog(admin, schema),
          await fullCatalog(admin, fresh),
          'the upgraded catalog equals a fresh install',
        );
        assert.deepEqual(
          await drain(store, ['h']),
          events,
          'every delivery pending before the upgrade ran, once, keys in order',
        );
      } finally {
        await pool.end();
      }
    });

    it(`a schema at ${versions[count - 1]}, with deliveries pending, is upgraded by the createPostgresSchemaSql() script (run twice) to the same`, async () => {
      const schema = uniqueSchemaName(`script_v${count}`);
      const fresh = uniqueSchemaName('script_fresh');
      schemas.push(schema, fresh);
      await schemaAtVersion(schema, count);
      const events = await seedPending(admin, schema, 40);
      await admin.query(createPostgresSchemaSql({ schema }));
      await admin.query(createPostgresSchemaSql({ schema }));
      await admin.query(createPostgresSchemaSql({ schema: fresh }));
      assert.deepEqual(await fullCatalog(admin, schema), await fullCatalog(admin, fresh));
      const applied = await admin.query<{ name: string }>(
        `SELECT name FROM "${schema}".relaybus_migrations ORDER BY name`,
      );
      assert.deepEqual(
        applied.rows.map((r) => r.name),
        versions,
      );
      const pool = new pg.Pool({ connectionString: url, max: 1 });
      try {
        assert.deepEqual(await drain(postgresStore({ driver: fromPg(pool), schema }), ['h']), events);
      } finally {
        await pool.end();
      }
    });
  }

  it('three replicas starting at once on a schema at the first version upgrade it once, and lose nothing', async () => {
    const schema = uniqueSchemaName('setup_upgrade_race');
    schemas.push(schema);
    await schemaAtVersion(schema, 1);
    const events = await seedPending(admin, schema, 30);
    const pools = [0, 1, 2].map(() => new pg.Pool({ connectionString: url, max: 1 }));
    try {
      const results = await Promise.all(
        pools.map((pool) => setupPostgres(fromPg(pool), schema, loadStatements(schema))),
      );
      assert.deepEqual(
        results.map((r) => r.applied).sort((a, b) => b.length - a.length),
        [versions.slice(1), [], []],
        'one replica applied the migrations',
      );
      const applied = await admin.query<{ name: string }>(
        `SELECT name FROM "${schema}".relaybus_migrations ORDER BY name`,
      );
      assert.deepEqual(
        applied.rows.map((r) => r.name),
        versions,
      );
      assert.deepEqual(await drain(postgresStore({ driver: fromPg(pools[0]!), schema }), ['h']), events);
    } finally {
      await Promise.all(pools.map((pool) => pool.end()));
    }
  });

  it('a schema of a newer relaybus is refused (not retryable), naming the versions, and left as it is', async () => {
    const schema = uniqueSchemaName('setup_newer');
    schemas.push(schema);
    await schemaAtVersion(schema, versions.length);
    await admin.query(`INSERT INTO "${schema}".relaybus_migrations (name) VALUES ('9999_from_the_future')`);
    await admin.query(`DROP INDEX "${schema}".relaybus_deliveries_updated_at_id_idx`); // setup() would recreate nothing, and must not try
    const before = await fullCatalog(admin, schema);
    const pool = new pg.Pool({ connectionString: url, max: 1 });
    try {
      await assert.rejects(postgresStore({ driver: fromPg(pool), schema }).setup(), (error: unknown) => {
        assert.ok(error instanceof SchemaMismatchError, String(error));
        assert.equal(error.retryable, false);
        assert.match(error.message, /newer relaybus/);
        assert.match(error.message, /9999_from_the_future/);
        assert.ok(error.message.includes(versions[versions.length - 1]!), error.message);
        return true;
      });
    } finally {
      await pool.end();
    }
    await assert.rejects(
      admin.query(createPostgresSchemaSql({ schema })),
      /set up by a newer relaybus: it records migrations this script does not know/,
    );
    assert.deepEqual(await fullCatalog(admin, schema), before, 'nothing changed');
  });

  it('tables under relaybus names without its migrations table (another layout, another application) are refused, nothing changed', async () => {
    const foreign = uniqueSchemaName('setup_foreign');
    const unrecorded = uniqueSchemaName('setup_unrecorded');
    const unrelated = uniqueSchemaName('setup_unrelated');
    schemas.push(foreign, unrecorded, unrelated);
    // An application's own table that happens to be called relaybus_events.
    await admin.query(
      `CREATE SCHEMA "${foreign}"; CREATE TABLE "${foreign}".relaybus_events (id serial PRIMARY KEY, note text)`,
    );
    // The relaybus tables with an empty migrations table (drizzle-kit migrations applied without the supplement).
    await admin.query(asScript(loadMigrations(unrecorded).flatMap((m) => m.statements)));
    // Unrelated tables only: relaybus installs beside them.
    await admin.query(`CREATE SCHEMA "${unrelated}"; CREATE TABLE "${unrelated}".orders (id int PRIMARY KEY)`);
    const pool = new pg.Pool({ connectionString: url, max: 1 });
    try {
      const tablesOf = async (schema: string) =>
        (
          await admin.query<{ t: string }>(
            'SELECT table_name AS t FROM information_schema.tables WHERE table_schema = $1 ORDER BY 1',
            [schema],
          )
        ).rows.map((r) => r.t);
      const foreignBefore = await tablesOf(foreign);
      await assert.rejects(
        postgresStore({ driver: fromPg(pool), schema: foreign }).setup(),
        (error: unknown) =>
          error instanceof SchemaMismatchError &&
          !error.retryable &&
          /relaybus_events/.test(error.message) &&
          /no relaybus_migrations table/.test(error.message) &&
          /another schema/.test(error.message),
      );
      await assert.rejects(admin.query(createPostgresSchemaSql({ schema: foreign })), /no relaybus_migrations table/);
      assert.deepEqual(await tablesOf(foreign), foreignBefore);
      const unrecordedBefore = await fullCatalog(admin, unrecorded);
      await assert.rejects(
        postgresStore({ driver: fromPg(pool), schema: unrecorded }).setup(),
        (error: unknown) =>
          error instanceof SchemaMismatchError &&
          /records no migration/.test(error.message) &&
          /--supplement/.test(error.message),
      );
      assert.deepEqual(await fullCatalog(admin, unrecorded), unrecordedBefore);
      await postgresStore({ driver: fromPg(pool), schema: unrelated }).setup();
      assert.ok((await tablesOf(unrelated)).includes('orders'));
    } finally {
      await pool.end();
    }
  });

  it('a role without the privileges gets an error that names the problem, and nothing is created or changed', async () => {
    const role = `relaybus_no_ddl_${process.pid}`;
    const schema = uniqueSchemaName('setup_privileges');
    const older = uniqueSchemaName('setup_privileges_old');
    schemas.push(schema, older);
    await admin.query(`DROP ROLE IF EXISTS ${role}`);
    await admin.query(`CREATE ROLE ${role} LOGIN`);
    await schemaAtVersion(older, 1);
    await admin.query(
      `GRANT USAGE ON SCHEMA "${older}" TO ${role}; GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA "${older}" TO ${role}`,
    );
    const target = new URL(url);
    target.username = role;
    const pool = new pg.Pool({ connectionString: target.toString(), max: 1 });
    try {
      const refused = (error: unknown) => {
        assert.ok(error instanceof StoreUnavailableError, String(error));
        assert.equal(error.retryable, false);
        assert.match(error.message, /lacks a privilege: (permission denied|must be owner)/);
        assert.match(error.message, /Nothing was changed/);
        return true;
      };
      await assert.rejects(postgresStore({ driver: fromPg(pool), schema }).setup(), refused);
      const created = await admin.query('SELECT 1 FROM pg_namespace WHERE nspname = $1', [schema]);
      assert.equal(created.rowCount, 0, 'no schema was created');
      const before = await fullCatalog(admin, older);
      await assert.rejects(postgresStore({ driver: fromPg(pool), schema: older }).setup(), refused);
      assert.deepEqual(await fullCatalog(admin, older), before, 'the older schema was not changed');
    } finally {
      await pool.end();
      await admin.query(`DROP OWNED BY ${role}`);
      await admin.query(`DROP ROLE ${role}`);
    }
  });

  it('a store on a schema that was never set up says to run setup(), and bad schema names are refused', async () => {
    const pool = new pg.Pool({ connectionString: url, max: 1 });
    try {
      const store = postgresStore({ driver: fromPg(pool), schema: uniqueSchemaName('never_setup') });
      await assert.rejects(
        store.statistics(),
        (error: unknown) => error instanceof SchemaMismatchError && /setup\(\)/.test(error.message),
      );
      for (const schema of ['Relay', 'a-b', '"x"', '', 'x'.repeat(64)]) {
        assert.throws(() => postgresStore({ driver: fromPg(pool), schema }), InvalidOptionsError);
      }
    } finally {
      await pool.end();
    }
  });
});
