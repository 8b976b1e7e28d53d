/**
 * The two example apps, end to end, with relaybus installed the way a user gets it: built
 * (`npm run build` in a copy of the package), packed (`npm pack`), and installed from the tarball into a copy of the example
 * with the example's own dependencies (from the local npm cache). Each example gets a database of
 * its own.
 *
 * - examples/drizzle-app: drizzle-kit generate (the app's tables, the relaybus tables from
 *   `relaybus/schema`, the supplement as a custom migration) and migrate, then the bus with
 *   `setupStore: false`, a publish inside `db.transaction(...)` and a worker.
 * - examples/kysely-app: the bus runs relaybus's setup, a publish inside
 *   `db.transaction().execute(...)` and a worker.
 *
 * Both also type-check against the packed declarations.
 */
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import {
  cpSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  symlinkSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import pg from 'pg';
import { findPostgres } from '../support/databases.js';

const execFileAsync = promisify(execFile);
const root = fileURLToPath(new URL('../../', import.meta.url));
const found = await findPostgres();

/** Run a command; on failure the error carries its output. */
async function run(
  command: string,
  args: readonly string[],
  cwd: string,
  env: Record<string, string> = {},
): Promise<string> {
  // npm_* variables of an enclosing `npm test` would leak into the example's npm (its prefix, its scripts).
  const clean = Object.fromEntries(
    Object.entries(process.env).filter(([name]) => !name.toLowerCase().startsWith('npm_')),
  );
  try {
    const { stdout, stderr } = await execFileAsync(command, [...args], {
      cwd,
      env: { ...clean, ...env, NO_UPDATE_NOTIFIER: '1' },
      timeout: 120_000,
      maxBuffer: 32 * 1024 * 1024,
    });
    return `${stdout}${stderr}`;
  } catch (error) {
    const { stdout = '', stderr = '' } = error as { stdout?: string; stderr?: string };
    throw new Error(`${command} ${args.join(' ')} failed in ${cwd}:\n${stdout}\n${stderr}`, { cause: error });
  }
}

/** The last line of `output` that parses as JSON. */
function lastJson(output: string): Record<string, unknown> {
  const line = output
    .trim()
    .split('\n')
    .reverse()
    .find((l) => l.startsWith('{'));
  assert.ok(line, `no JSON line in:\n${output}`);
  return JSON.parse(line) as Record<string, unknown>;
}

const EXPECTED = { notified: ['o-1'], receipts: ['o-1'], orders: ['o-1'], left: { pending: 0, inFlight: 0, dead: 0 } };

describe('example apps, with relaybus packed and installed from the tarball', {
  skip: 'skip' in found ? found.skip : undefined,
}, () => {
  const url = 'url' in found ? found.url : '';
  const work = mkdtempSync(join(tmpdir(), 'relaybus-examples-'));
  const admin = new pg.Pool({ connectionString: url, max: 1 });
  const databases: string[] = [];
  let tarball = '';

  /** A fresh database for one example; its URL. */
  async function database(label: string): Promise<string> {
    const name = `relaybus_example_${label}_${process.pid}_${Date.now()}`;
    await admin.query(`CREATE DATABASE "${name}"`);
    databases.push(name);
    const target = new URL(url);
    target.pathname = `/${name}`;
    return target.toString();
  }

  /** A copy of examples/<app> with relaybus installed from the tarball and its other dependencies from the npm cache. */
  async function install(app: string): Promise<string> {
    const project = join(work, app);
    cpSync(join(root, 'examples', app), project, { recursive: true, filter: (src) => !src.includes('node_modules') });
    const manifest = JSON.parse(readFileSync(join(project, 'package.json'), 'utf8')) as {
      dependencies: Record<string, string>;
    };
    manifest.dependencies.relaybus = `file:${tarball}`;
    writeFileSync(join(project, 'package.json'), `${JSON.stringify(manifest, null, 2)}\n`);
    await run('npm', ['install', '--prefer-offline', '--no-audit', '--no-fund', '--loglevel=error'], project);
    return project;
  }

  before(async () => {
    // A copy of the package sources (the repository's own dist/ stays untouched: other runs may be using it),
    // built with `npm run build`, then packed as `npm pack` packs it.
    const staging = join(work, 'package');
    mkdirSync(staging);
    for (const path of ['package.json', 'tsconfig.json', 'tsconfig.build.json', 'README.md', 'src', 'schema', 'sql']) {
      cpSync(join(root, path), join(staging, path), { recursive: true });
    }
    symlinkSync(join(root, 'node_modules'), join(staging, 'node_modules'), 'dir');
    await run('npm', ['run', 'build'], staging);
    assert.ok(existsSync(join(staging, 'dist/src/index.js')), 'npm run build writes dist/');
    const packed = JSON.parse(
      await run('npm', ['pack', '--json', '--ignore-scripts', '--pack-destination', work, '--loglevel=error'], staging),
    ) as {
      filename: string;
      files: { path: string }[];
    }[];
    const files = new Set(packed[0]!.files.map((f) => f.path));
    for (const file of [
      'dist/src/index.js',
      'dist/src/index.d.ts',
      'dist/src/postgres/index.js',
      'dist/src/postgres/drivers/kysely-driver.js',
      'dist/src/postgres/drivers/drizzle-driver.d.ts',
      'dist/schema/index.js',
      'sql/publish.sql',
      'sql/complete-many.sql',
      'schema/migrations/meta/_journal.json',
      'schema/postgres-supplement.sql',
    ]) {
      assert.ok(files.has(file), `the tarball contains ${file}`);
    }
    assert.ok(
      ![...files].some((f) => f.startsWith('src/') || f.startsWith('test/')),
      'no sources or tests in the tarball',
    );
    tarball = join(work, packed[0]!.filename);
  });

  after(async () => {
    for (const name of databases) await admin.query(`DROP DATABASE IF EXISTS "${name}" WITH (FORCE)`);
    await admin.end();
    rmSync(work, { recursive: true, force: true });
  });

  it('drizzle-app: drizzle-kit generate and migrate with relaybus/schema, setupStore: false, publish in db.transaction, a worker', async () => {
    const project = await install('drizzle-app');
    const env = { DATABASE_URL: await database('drizzle') };
    await run('npm', ['run', 'db:generate'], project, env);
    const migrations = readdirSync(join(project, 'drizzle'))
      .filter((f) => f.endsWith('.sql'))
      .sort();
    assert.equal(migrations.length, 2, migrations.join(', '));
    const init = readFileSync(join(project, 'drizzle', migrations[0]!), 'utf8');
    assert.match(init, /CREATE TABLE "orders"/);
    assert.match(init, /CREATE TABLE "relaybus"\."relaybus_lanes"/);
    assert.match(
      readFileSync(join(project, 'drizzle', migrations[1]!), 'utf8'),
      /\nALTER TABLE "relaybus"\."relaybus_lanes" SET \(fillfactor = 50, toast_tuple_target = 8160\)/,
    );
    await run('npm', ['run', 'db:migrate'], project, env);
    assert.deepEqual(lastJson(await run('npm', ['start', '--silent'], project, env)), EXPECTED);
    await run('npm', ['run', 'typecheck'], project);
  });

  it('kysely-app: setup by the bus, publish in db.transaction().execute, a worker', async () => {
    const project = await install('kysely-app');
    const env = { DATABASE_URL: await database('kysely') };
    assert.deepEqual(lastJson(await run('npm', ['start', '--silent'], project, env)), EXPECTED);
    await run('npm', ['run', 'typecheck'], project);
  });
});
