/**
 * Schema drift: the three ways to get the relaybus tables must agree.
 *
 * (a) `drizzle-kit generate` on the committed `schema/postgres.ts` finds nothing to add to the
 *     committed `schema/migrations/` (so nobody changed the tables without generating a migration).
 * (b) A database built the way a drizzle-kit user builds it (the migrations applied by drizzle-orm's
 *     own migrator, then the supplement) has the same catalog as one built by `setup()`: tables,
 *     columns, types, defaults, identity, constraints, indexes with their predicates and storage
 *     parameters, table storage parameters, and the 256 lane rows.
 *
 * (b) needs a database of its own, since the migrations create the schema "relaybus" itself.
 */
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { cpSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, relative } from 'node:path';
import { after, describe, it } from 'node:test';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { drizzle } from 'drizzle-orm/node-postgres';
import { migrate } from 'drizzle-orm/node-postgres/migrator';
import pg from 'pg';
import { fromPg, loadSupplement, postgresStore } from '../../src/postgres/index.js';
import { findPostgres } from '../support/databases.js';

const run = promisify(execFile);
const root = fileURLToPath(new URL('../../', import.meta.url));
const drizzleKit = join(root, 'node_modules/.bin/drizzle-kit');

/** Every file under `folder`, relative path to content. */
function snapshotFolder(folder: string): Record<string, string> {
  const files: Record<string, string> = {};
  const walk = (dir: string) => {
    for (const name of readdirSync(dir)) {
      const path = join(dir, name);
      if (statSync(path).isDirectory()) walk(path);
      else files[relative(folder, path)] = readFileSync(path, 'utf8');
    }
  };
  walk(folder);
  return files;
}

/**
 * Run `drizzle-kit generate` with a config in a temp folder whose `out` is a copy of the committed
 * migrations; returns its output and the folder's files afterwards. drizzle-kit prefixes `out` with
 * './' and exits 0 even when it fails, so paths are relative to the repository and the output is checked.
 */
async function generate(schemaFiles: readonly string[]): Promise<{ output: string; before: Record<string, string>; after: Record<string, string> }> {
  const dir = mkdtempSync(join(tmpdir(), 'relaybus-drift-'));
  try {
    const out = join(dir, 'migrations');
    cpSync(join(root, 'schema/migrations'), out, { recursive: true });
    const config = join(dir, 'drizzle.config.ts');
    writeFileSync(config, `export default ${JSON.stringify({
      dialect: 'postgresql', schema: schemaFiles.map((file) => `./${relative(root, file)}`), out: `./${relative(root, out)}`, schemaFilter: ['relaybus'],
    })};\n`);
    const before = snapshotFolder(out);
    const { stdout, stderr } = await run(drizzleKit, ['generate', '--config', config], { cwd: root, timeout: 60_000 });
    return { output: `${stdout}\n${stderr}`, before, after: snapshotFolder(out) };
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

describe('drizzle-kit generate on the committed schema', () => {
  it('finds no change: schema/migrations is up to date with schema/postgres.ts', async () => {
    const { output, before, after } = await generate([join(root, 'schema/postgres.ts')]);
    assert.match(output, /No schema changes, nothing to migrate/, output);
    assert.deepEqual(Object.keys(after).sort(), Object.keys(before).sort(), 'no migration file was added');
    assert.deepEqual(after, before);
  });

  it('does find a change when a table is added (the check above can fail)', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'relaybus-drift-extra-'));
    try {
      // Outside the repository, so drizzle-orm is imported by path (drizzle-kit loads schema files as CommonJS).
      const extra = join(dir, 'extra.ts');
      writeFileSync(extra, `import { text } from '${join(root, 'node_modules/drizzle-orm/pg-core/index.cjs')}';\n`
        + `import { relaybusSchema } from '${join(root, 'schema/postgres.ts')}';\n`
        + `export const driftProbe = relaybusSchema.table('relaybus_drift_probe', { id: text('id').primaryKey() });\n`);
      const { output, before, after } = await generate([join(root, 'schema/postgres.ts'), extra]);
      const added = Object.keys(after).filter((file) => !(file in before));
      assert.equal(added.filter((file) => file.endsWith('.sql')).length, 1, output);
      const sql = added.filter((file) => file.endsWith('.sql')).map((file) => after[file]).join('');
      assert.match(sql, /CREATE TABLE "relaybus"\."relaybus_drift_probe"/);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

const found = await findPostgres();

/** The catalog of one schema, with the schema name replaced by S so two schemas compare. */
async function catalog(client: pg.Pool, schema: string) {
  const q = async <Row extends object>(text: string): Promise<Row[]> => (await client.query<Row>(text, [schema])).rows;
  const neutral = (text: string | null) => (text ?? '').replaceAll(`"${schema}".`, 'S.').replaceAll(`${schema}.`, 'S.');
  const tables = await q<{ table: string; options: string[] | null; persistence: string }>(`
    SELECT c.relname AS table, c.reloptions AS options, c.relpersistence AS persistence
    FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
    WHERE n.nspname = $1 AND c.relkind IN ('r', 'p') ORDER BY 1`);
  const columns = await q<{ table: string; column: string; type: string; not_null: boolean; default: string | null; identity: string; generated: string; position: number }>(`
    SELECT c.relname AS table, a.attname AS column, format_type(a.atttypid, a.atttypmod) AS type, a.attnotnull AS not_null,
           pg_get_expr(d.adbin, d.adrelid) AS default, a.attidentity AS identity, a.attgenerated AS generated, a.attnum AS position
    FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid JOIN pg_namespace n ON n.oid = c.relnamespace
    LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
    WHERE n.nspname = $1 AND c.relkind = 'r' AND a.attnum > 0 AND NOT a.attisdropped ORDER BY 1, a.attnum`);
  const constraints = await q<{ table: string; name: string; type: string; definition: string }>(`
    SELECT c.relname AS table, k.conname AS name, k.contype AS type, pg_get_constraintdef(k.oid) AS definition
    FROM pg_constraint k JOIN pg_class c ON c.oid = k.conrelid JOIN pg_namespace n ON n.oid = c.relnamespace
    WHERE n.nspname = $1 ORDER BY 1, 2`);
  const indexes = await q<{ name: string; definition: string; options: string[] | null }>(`
    SELECT i.indexname AS name, i.indexdef AS definition, c.reloptions AS options
    FROM pg_indexes i JOIN pg_namespace n ON n.nspname = i.schemaname JOIN pg_class c ON c.relname = i.indexname AND c.relnamespace = n.oid
    WHERE i.schemaname = $1 ORDER BY 1`);
  const sequences = await q<{ name: string; type: string; start: string; increment: string; cycle: boolean }>(`
    SELECT s.sequencename AS name, s.data_type::text AS type, s.start_value::text AS start, s.increment_by::text AS increment, s.cycle
    FROM pg_sequences s WHERE s.schemaname = $1 ORDER BY 1`);
  const lanes = await q<{ count: number; epochs: string; empty: boolean }>(`
    SELECT count(*)::int AS count, string_agg(DISTINCT epoch::text, ',') AS epochs, bool_and(in_flight = '{}' AND lease_owner IS NULL) AS empty
    FROM ${`"${schema}"`}.relaybus_lanes WHERE $1::text IS NOT NULL`);
  return {
    tables,
    columns: columns.map((c) => ({ ...c, default: neutral(c.default) })),
    constraints: constraints.map((c) => ({ ...c, definition: neutral(c.definition) })),
    indexes: indexes.map((i) => ({ ...i, definition: neutral(i.definition) })),
    sequences,
    lanes,
  };
}

describe('the drizzle-kit migrations plus the supplement build what setup() builds', { skip: 'skip' in found ? found.skip : undefined }, () => {
  const url = 'url' in found ? found.url : '';
  const database = `relaybus_drift_${process.pid}_${Date.now()}`;
  const admin = new pg.Pool({ connectionString: url, max: 1 });
  after(async () => {
    await admin.query(`DROP DATABASE IF EXISTS "${database}" WITH (FORCE)`);
    await admin.end();
  });

  it('has the same catalog: tables, columns, defaults, constraints, indexes with predicates, storage parameters, lane rows', async () => {
    await admin.query(`CREATE DATABASE "${database}"`);
    const target = new URL(url);
    target.pathname = `/${database}`;
    const pool = new pg.Pool({ connectionString: target.toString(), max: 2 });
    try {
      // As a drizzle-kit user does it: drizzle-orm's migrator over the committed folder, then the supplement (a custom migration).
      const db = drizzle({ client: pool });
      await migrate(db, { migrationsFolder: join(root, 'schema/migrations'), migrationsSchema: 'drizzle_meta', migrationsTable: '__relaybus_migrations' });
      for (const statement of loadSupplement('relaybus')) await pool.query(statement);
      // As relaybus does it.
      await postgresStore({ driver: fromPg(pool), schema: 'via_setup' }).setup();

      const viaMigrations = await catalog(pool, 'relaybus');
      const viaSetup = await catalog(pool, 'via_setup');
      assert.ok(viaMigrations.tables.length >= 5, 'the migrations created the tables');
      assert.deepEqual(viaMigrations.tables, viaSetup.tables);
      assert.deepEqual(viaMigrations.columns, viaSetup.columns);
      assert.deepEqual(viaMigrations.constraints, viaSetup.constraints);
      assert.deepEqual(viaMigrations.indexes, viaSetup.indexes);
      assert.deepEqual(viaMigrations.sequences, viaSetup.sequences);
      assert.deepEqual(viaMigrations.lanes, [{ count: 256, epochs: '0', empty: true }]);
      assert.deepEqual(viaSetup.lanes, viaMigrations.lanes);
    } finally {
      await pool.end();
    }
  });
});
