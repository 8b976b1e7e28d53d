/**
 * The README's Kysely flow ("Kysely and Drizzle"), as a user does it in a new project outside the repository, with
 * relaybus installed from its packed tarball (test/support/packed-package.ts) and pg, kysely and tsx from the npm
 * cache. The section's text says what the reader has by then: `db` (Kysely over a `pg.Pool` with its error listener),
 * that `pool`, an order to save, and the quick start's `OrderPlaced`, its tables (`npx relaybus setup`) and its
 * orders table. The Kysely block runs as written after the runnable form of its preludes (RUNNABLE_PRELUDES of
 * test/docs/preludes.ts), then `db.destroy()` so the script ends: it publishes inside `db.transaction().execute`, and
 * the quick start's worker (its `relaybus.config.ts`, handler `send-receipt`) delivers the event.
 */
import assert from 'node:assert/strict';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';
import pg from 'pg';
import { blockWith, fileBlock, shell, startWorker } from '../docs/flow.js';
import { RUNNABLE_PRELUDES } from '../docs/preludes.js';
import { findPostgres } from '../support/databases.js';
import { FlowDatabases, freshProject, packedTarball, removeWork, workDir } from '../support/packed-package.js';

/** The guide's page with the Kysely flow. */
const PAGE = 'docs/guide/publishing.md';
const found = await findPostgres();

describe('README Kysely flow, in a new project with the packed package', {
  skip: 'skip' in found ? found.skip : undefined,
}, () => {
  const work = workDir('kysely-flow');
  const databases = new FlowDatabases('url' in found ? found.url : '');
  after(async () => {
    await databases.drop();
    removeWork(work);
  });

  it('publishes inside db.transaction().execute with the order, and a worker delivers it', {
    timeout: 120_000,
  }, async () => {
    const block = blockWith(PAGE, 'ts', /fromKysely/);
    assert.match(
      block.code,
      /db\.transaction\(\)\.execute/,
      `README.md:${block.line}: the block publishes in a Kysely transaction`,
    );
    const preludes = block.marker?.preludes ?? [];
    for (const name of preludes)
      assert.ok(RUNNABLE_PRELUDES[name] !== undefined, `README.md:${block.line}: prelude ${name} has a runnable form`);

    const project = await freshProject(join(work, 'app'), await packedTarball(work), ['pg', 'kysely'], ['tsx']);
    const env = { DATABASE_URL: await databases.create('kysely') };
    for (const file of ['relaybus.config.ts', 'create-orders.ts'])
      writeFileSync(join(project, file), fileBlock(file).code);
    await shell({ line: 0, text: 'npx relaybus setup' }, project, env);
    await shell({ line: fileBlock('create-orders.ts').line, text: 'npx tsx create-orders.ts' }, project, env);

    writeFileSync(
      join(project, 'kysely-publish.ts'),
      [
        `// README.md line ${block.line + 1}, after its preludes (${preludes.join(', ')})`,
        ...preludes.map((name) => RUNNABLE_PRELUDES[name]!),
        block.code,
        'await db.destroy();',
        '',
      ].join('\n'),
    );
    await shell({ line: block.line, text: 'npx tsx kysely-publish.ts' }, project, env);

    const db = new pg.Pool({ connectionString: env.DATABASE_URL, max: 1 });
    // pool.end() resolves before its connection has closed: the forced drop of the database after the test can reach
    // it, a harmless 'error' event that without a listener fails the file after its test ended.
    db.on('error', () => {});
    try {
      const orders = await db.query('SELECT id, customer_id FROM orders');
      assert.deepEqual(orders.rows, [{ id: 'o-1', customer_id: 'c-7' }], 'the order committed');
      const pending = await db.query<{ handler: string; key: string }>(
        'SELECT handler, key FROM relaybus.relaybus_deliveries',
      );
      assert.deepEqual(pending.rows, [{ handler: 'send-receipt', key: 'c-7' }], 'with its event, keyed by customer');

      // `--once` drains what is due, then exits (the quick start's worker line says so).
      const { code, output } = await startWorker(project, ['worker', '--once'], env).exited;
      assert.equal(code, 0, output);
      assert.ok(output.includes('send-receipt: order o-1, attempt 1'), `the handler ran:\n${output}`);
      const left = await db.query('SELECT count(*)::int AS n FROM relaybus.relaybus_deliveries');
      assert.equal(left.rows[0].n, 0, 'delivered and completed');
    } finally {
      await db.end();
    }
  });
});
