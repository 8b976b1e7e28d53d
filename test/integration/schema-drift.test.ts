/**
 * Schema drift: the three ways to get the relaybus tables must agree.
 *
 * (a) `drizzle-kit generate` on the committed `schema/postgres.ts` finds nothing to add to the
 *     committed `schema/migrations/` (so nobody changed the tables without generating a migration).
 * (b) A database built the way a drizzle-kit user builds it (the migrations applied by drizzle-orm's
 *     own migrator, then the supplement) has the same catalog as one built by `setup()`: tables,
 *     columns, types, defaults, identity, constraints, indexes with their predicates and storage
 *     parameters, table storage parameters, and the 256 lane rows.
 * (c) A drizzle-kit database at each earlier relaybus version, with deliveries pending, is taken to
 *     the latest by the committed migrations plus the new supplement: the same catalog, nothing
 *     lost, and setup() finds nothing left to do.
 *
 * (b) and (c) need a database each, since the migrations create the schema "relaybus" itself.
 */
import assert from 'node:assert/strict';
import { execFile, spawn } from 'node:child_process';
import { cpSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, relative } from 'node:path';
import { after, describe, it } from 'node:test';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { drizzle } from 'drizzle-orm/node-postgres';
import { migrate } from 'drizzle-orm/node-postgres/migrator';
import pg from 'pg';
import { createPostgresSupplementSql, fromPg, postgresStore } from '../../src/postgres/index.js';
import { loadMigrations, loadSupplement } from '../../src/postgres/schema-sql.js';
import { setupPostgres } from '../../src/postgres/setup.js';
import { loadStatements } from '../../src/postgres/statements.js';
import { catalog, drain, seedPending, supplementAtVersion } from '../support/upgrades.js';
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
async function generate(
  schemaFiles: readonly string[],
  migrations: string = join(root, 'schema/migrations'),
  answerPrompts = false,
): Promise<{ output: string; before: Record<string, string>; after: Record<string, string> }> {
  const dir = mkdtempSync(join(tmpdir(), 'relaybus-drift-'));
  try {
    const out = join(dir, 'migrations');
    cpSync(migrations, out, { recursive: true });
    const config = join(dir, 'drizzle.config.ts');
    writeFileSync(
      config,
      `export default ${JSON.stringify({
        dialect: 'postgresql',
        schema: schemaFiles.map((file) => `./${relative(root, file)}`),
        out: `./${relative(root, out)}`,
        schemaFilter: ['relaybus'],
      })};\n`,
    );
    const before = snapshotFolder(out);
    const output = answerPrompts
      ? await generateAnsweringPrompts(config)
      : await run(drizzleKit, ['generate', '--config', config], { cwd: root, timeout: 60_000 }).then(
          ({ stdout, stderr }) => `${stdout}\n${stderr}`,
        );
    return { output, before, after: snapshotFolder(out) };
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

/**
 * `drizzle-kit generate` where it asks (a table created or renamed?) and refuses to ask without a terminal: run in a
 * pseudo-terminal (util-linux `script`), pressing Enter for each question as a user taking the default does (the
 * default is "create").
 */
function generateAnsweringPrompts(config: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const child = spawn('script', ['-qfec', `${drizzleKit} generate --config ${config}`, '/dev/null'], { cwd: root });
    let output = '';
    child.stdout.on('data', (chunk: Buffer) => {
      output += chunk.toString();
    });
    // The child can end between two presses: a press written after that fails with EPIPE (once a CI run, unhandled, it
    // failed the test); 'close' tells how the child ended.
    child.stdin.on('error', (error: NodeJS.ErrnoException) => {
      if (error.code !== 'EPIPE') reject(error);
    });
    const enter = setInterval(() => {
      if (child.stdin.writable) child.stdin.write('\r');
    }, 500);
    child.on('exit', () => clearInterval(enter));
    const timeout = setTimeout(() => child.kill(), 60_000);
    child.on('error', reject);
    child.on('close', (code) => {
      clearInterval(enter);
      clearTimeout(timeout);
      if (code === 0) resolve(output);
      else reject(new Error(`drizzle-kit generate exited ${code}:\n${output}`));
    });
  });
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
      writeFileSync(
        extra,
        `import { text } from '${join(root, 'node_modules/drizzle-orm/pg-core/index.cjs')}';\n` +
          `import { relaybusSchema } from '${join(root, 'schema/postgres.ts')}';\n` +
          `export const driftProbe = relaybusSchema.table('relaybus_drift_probe', { id: text('id').primaryKey() });\n`,
      );
      const { output, before, after } = await generate([join(root, 'schema/postgres.ts'), extra]);
      const added = Object.keys(after).filter((file) => !(file in before));
      assert.equal(added.filter((file) => file.endsWith('.sql')).length, 1, output);
      const sql = added
        .filter((file) => file.endsWith('.sql'))
        .map((file) => after[file])
        .join('');
      assert.match(sql, /CREATE TABLE "relaybus"\."relaybus_drift_probe"/);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

const found = await findPostgres();

describe('the drizzle-kit migrations plus the supplement build what setup() builds', {
  skip: 'skip' in found ? found.skip : undefined,
}, () => {
  const url = 'url' in found ? found.url : '';
  const databases: string[] = [];
  const admin = new pg.Pool({ connectionString: url, max: 1 });
  after(async () => {
    for (const database of databases) await admin.query(`DROP DATABASE IF EXISTS "${database}" WITH (FORCE)`);
    await admin.end();
  });

  /** A new database of its own (the migrations create the schema "relaybus" itself), and a pool on it. */
  async function freshDatabase(label: string): Promise<pg.Pool> {
    const database = `relaybus_drift_${label}_${process.pid}_${Date.now()}`;
    databases.push(database);
    await admin.query(`CREATE DATABASE "${database}"`);
    const target = new URL(url);
    target.pathname = `/${database}`;
    return new pg.Pool({ connectionString: target.toString(), max: 2 });
  }

  /**
   * A copy of the committed migrations folder as an earlier relaybus shipped it: the first `count` entries of the
   * journal, their SQL files and snapshots (drizzle-kit diffs against the last snapshot it finds).
   */
  function folderUpTo(count: number): string {
    const dir = mkdtempSync(join(tmpdir(), 'relaybus-drift-version-'));
    cpSync(join(root, 'schema/migrations'), dir, { recursive: true });
    const journalFile = join(dir, 'meta/_journal.json');
    const journal = JSON.parse(readFileSync(journalFile, 'utf8')) as { entries: { idx: number; tag: string }[] };
    for (const { idx, tag } of journal.entries.slice(count)) {
      rmSync(join(dir, `${tag}.sql`));
      rmSync(join(dir, `meta/${String(idx).padStart(4, '0')}_snapshot.json`));
    }
    writeFileSync(journalFile, JSON.stringify({ ...journal, entries: journal.entries.slice(0, count) }));
    return dir;
  }

  const migrateOptions = { migrationsSchema: 'drizzle_meta', migrationsTable: '__relaybus_migrations' } as const;

  it('has the same catalog: tables, columns, defaults, constraints, indexes with predicates, storage parameters, lane rows', async () => {
    const pool = await freshDatabase('latest');
    try {
      // As a drizzle-kit user does it: drizzle-orm's migrator over the committed folder, then the supplement (a custom migration).
      const db = drizzle({ client: pool });
      await migrate(db, { migrationsFolder: join(root, 'schema/migrations'), ...migrateOptions });
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

  const versions = loadMigrations('relaybus').map((m) => m.name);
  for (let count = 1; count < versions.length; count += 1) {
    it(`the committed migrations take a drizzle-kit database at ${versions[count - 1]}, with deliveries pending, to the latest: nothing lost, the catalog of setup()`, async () => {
      const pool = await freshDatabase(`v${count}`);
      const earlier = folderUpTo(count);
      try {
        const db = drizzle({ client: pool });
        // The user's database at that version: its migrations, and the supplement of that version (lane rows, records of its migrations).
        await migrate(db, { migrationsFolder: earlier, ...migrateOptions });
        for (const statement of supplementAtVersion('relaybus', versions[count - 1]!)) await pool.query(statement);
        for (const name of versions.slice(0, count))
          await pool.query('INSERT INTO relaybus.relaybus_migrations (name) VALUES ($1)', [name]);
        const events = await seedPending(pool, 'relaybus', 60);
        // The upgrade as a drizzle-kit user does it: the committed migrations, then the supplement of the new version.
        await migrate(db, { migrationsFolder: join(root, 'schema/migrations'), ...migrateOptions });
        await pool.query(createPostgresSupplementSql({ schema: 'relaybus' }));
        await postgresStore({ driver: fromPg(pool), schema: 'via_setup' }).setup();
        assert.deepEqual(await catalog(pool, 'relaybus'), await catalog(pool, 'via_setup'));
        const applied = await pool.query<{ name: string }>(
          'SELECT name FROM relaybus.relaybus_migrations ORDER BY name',
        );
        assert.deepEqual(
          applied.rows.map((r) => r.name),
          versions,
        );
        const store = postgresStore({ driver: fromPg(pool), schema: 'relaybus' });
        assert.deepEqual(
          (await setupPostgres(fromPg(pool), 'relaybus', loadStatements('relaybus'))).applied,
          [],
          'setup() finds nothing left to do',
        );
        assert.deepEqual(await drain(store, ['h']), events, 'every delivery pending before the upgrade runs after it');
      } finally {
        rmSync(earlier, { recursive: true, force: true });
        await pool.end();
      }
    });
  }

  it(`a drizzle-kit user who generates the upgrade from ${versions.at(-2)} to the latest from schema/postgres.ts, then appends the supplement, keeps per-key order and gets the SQL functions`, async () => {
    const pool = await freshDatabase('generated');
    const earlier = folderUpTo(versions.length - 1);
    try {
      const db = drizzle({ client: pool });
      await migrate(db, { migrationsFolder: earlier, ...migrateOptions });
      for (const statement of supplementAtVersion('relaybus', versions.at(-2)!)) await pool.query(statement);
      for (const name of versions.slice(0, -1))
        await pool.query('INSERT INTO relaybus.relaybus_migrations (name) VALUES ($1)', [name]);
      const seeded = await seedPending(pool, 'relaybus', 60);
      // The user's own migration: drizzle-kit generate against their folder (at the earlier version), applied by drizzle.
      const generated = await generate([join(root, 'schema/postgres.ts')], earlier, true);
      const added = Object.keys(generated.after).filter((file) => file.endsWith('.sql') && !(file in generated.before));
      assert.equal(added.length, 1, generated.output);
      for (const [file, text] of Object.entries(generated.after)) writeFileSync(join(earlier, file), text);
      await migrate(db, { migrationsFolder: earlier, ...migrateOptions });
      await pool.query(createPostgresSupplementSql({ schema: 'relaybus' }));
      await postgresStore({ driver: fromPg(pool), schema: 'via_setup' }).setup();
      assert.deepEqual(await catalog(pool, 'relaybus'), await catalog(pool, 'via_setup'));
      // A key with pending deliveries from before the upgrade gets a later event: it must run after them.
      const store = postgresStore({ driver: fromPg(pool), schema: 'relaybus' });
      const client = await pool.connect();
      try {
        await client.query('BEGIN');
        await store.publish(client, [
          { id: 'after-upgrade', type: 't', key: 'key-0', payload: {}, handlers: [{ name: 'h', maxAttempts: 3 }] },
        ]);
        await client.query('COMMIT');
      } finally {
        client.release();
      }
      const sequences = await pool.query<{ id: string; sequence: string }>(
        `SELECT event_id AS id, sequence::text FROM relaybus.relaybus_deliveries WHERE key = 'key-0' ORDER BY sequence`,
      );
      assert.equal(sequences.rows.at(-1)?.id, 'after-upgrade', JSON.stringify(sequences.rows));
      assert.deepEqual(
        await drain(store, ['h']),
        [...seeded, 'after-upgrade'].sort(),
        'in per-key order (drain checks it)',
      );
      const lane = await pool.query<{ lane: number }>(`SELECT relaybus.relaybus_lane('key-0') AS lane`);
      assert.equal(typeof lane.rows[0]?.lane, 'number', 'relaybus_lane exists');
    } finally {
      rmSync(earlier, { recursive: true, force: true });
      await pool.end();
    }
  });
});
