/**
 * The two example apps, end to end, with relaybus installed the way a user gets it: built
 * (`npm run build` in a copy of the package), packed (`npm pack`), and installed from the tarball into a copy of the example
 * with the example's own dependencies (from the local npm cache). Each example gets a database of
 * its own.
 *
 * - examples/drizzle-app: drizzle-kit generate (the app's tables and the relaybus tables, re-exported
 *   from `relaybus/schema` by a file of the app, between the adopt and supplement custom migrations)
 *   and migrate, then the bus with
 *   `setupStore: false`, a publish inside `db.transaction(...)` and a worker.
 * - examples/kysely-app: the bus runs relaybus's setup, a publish inside
 *   `db.transaction().execute(...)` and a worker.
 *
 * Both also type-check against the packed declarations.
 */
import assert from 'node:assert/strict';
import { cpSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { findPostgres } from '../support/databases.js';
import { FlowDatabases, packedTarball, REPO_ROOT, removeWork, run, workDir } from '../support/packed-package.js';

const found = await findPostgres();

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
  const work = workDir('examples');
  const databases = new FlowDatabases('url' in found ? found.url : '');
  let tarball = '';

  /** A fresh database for one example; its URL. */
  const database = (label: string) => databases.create(label);

  /** A copy of examples/<app> with relaybus installed from the tarball and its other dependencies from the npm cache. */
  async function install(app: string): Promise<string> {
    const project = join(work, app);
    cpSync(join(REPO_ROOT, 'examples', app), project, {
      recursive: true,
      filter: (src) => !src.includes('node_modules'),
    });
    const manifest = JSON.parse(readFileSync(join(project, 'package.json'), 'utf8')) as {
      dependencies: Record<string, string>;
    };
    manifest.dependencies.relaybus = `file:${tarball}`;
    writeFileSync(join(project, 'package.json'), `${JSON.stringify(manifest, null, 2)}\n`);
    await run('npm', ['install', '--prefer-offline', '--no-audit', '--no-fund', '--loglevel=error'], project);
    return project;
  }

  before(async () => {
    tarball = await packedTarball(work);
  });

  after(async () => {
    await databases.drop();
    removeWork(work);
  });

  it('drizzle-app: drizzle-kit generate and migrate with relaybus/schema re-exported, the adopt and supplement migrations, setupStore: false, publish in db.transaction, a worker', async () => {
    const project = await install('drizzle-app');
    const env = { DATABASE_URL: await database('drizzle') };
    await run('npm', ['run', 'db:generate'], project, env);
    const migrations = readdirSync(join(project, 'drizzle'))
      .filter((f) => f.endsWith('.sql'))
      .sort();
    assert.equal(migrations.length, 3, migrations.join(', '));
    const [adopt, init, supplement] = migrations.map((file) => readFileSync(join(project, 'drizzle', file), 'utf8'));
    assert.match(adopt!, /ALTER SCHEMA "relaybus" RENAME TO/);
    assert.match(init!, /CREATE TABLE "orders"/);
    assert.match(init!, /CREATE TABLE "relaybus"\."relaybus_lanes"/);
    assert.match(
      supplement!,
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
