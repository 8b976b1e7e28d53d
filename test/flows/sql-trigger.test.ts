/**
 * The README's "Publishing from SQL and triggers" flow as a user follows it, in a new project outside the repository
 * with relaybus installed from its packed tarball (test/support/packed-package.ts) and pg and tsx from the npm cache:
 * the quick start's config, tables (`npx relaybus setup`) and orders table; the trigger block saved under the name
 * the README gives it and applied with the README's `psql` line; an order inserted before any worker ran fails with
 * P0002 as the README says; then the quick start's worker starts (recording its subscriptions), and an order inserted
 * by plain SQL is delivered to its handler. test/integration/sql-publish.test.ts checks the SQL function itself.
 */
import assert from 'node:assert/strict';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import pg from 'pg';
import { blockWith, commandsOf, fileBlock, printedClaims, shell, startWorker } from '../docs/flow.js';
import { findPostgres } from '../support/databases.js';
import { FlowDatabases, freshProject, packedTarball, removeWork, workDir } from '../support/packed-package.js';

/** The guide's page with the trigger flow. */
const PAGE = 'docs/guide/sql.md';
const TRIGGER_FILE = 'orders-publish-trigger.sql';
const found = await findPostgres();

describe('README SQL and trigger flow, in a new project with the packed package', {
  skip: 'skip' in found ? found.skip : undefined,
}, () => {
  const work = workDir('sql-trigger-flow');
  const databases = new FlowDatabases('url' in found ? found.url : '');
  after(async () => {
    await databases.drop();
    removeWork(work);
  });

  it('an insert fails with P0002 before any worker; with the worker started, an insert publishes and is delivered', {
    timeout: 120_000,
  }, async () => {
    const trigger = fileBlock(TRIGGER_FILE);
    assert.equal(trigger.page, PAGE, `${trigger.page}:${trigger.line}: the trigger block is on ${PAGE}`);
    const apply = commandsOf(blockWith(PAGE, 'sh', new RegExp(TRIGGER_FILE.replaceAll('.', '\\.'))));

    const project = await freshProject(join(work, 'app'), await packedTarball(work), ['pg'], ['tsx']);
    const env = { DATABASE_URL: await databases.create('sql_trigger') };
    for (const file of ['relaybus.config.ts', 'create-orders.ts'])
      writeFileSync(join(project, file), fileBlock(file).code);
    await shell({ line: 0, text: 'npx relaybus setup' }, project, env);
    await shell({ line: fileBlock('create-orders.ts').line, text: 'npx tsx create-orders.ts' }, project, env);
    writeFileSync(join(project, TRIGGER_FILE), trigger.code);
    for (const command of apply) await shell(command, project, env);

    const db = new pg.Pool({ connectionString: env.DATABASE_URL, max: 1 });
    // pool.end() resolves before its connection has closed: the forced drop of the database after the test can reach
    // it, a harmless 'error' event that without a listener fails the file after its test ended.
    db.on('error', () => {});
    const insert = (id: string) => db.query('INSERT INTO orders (id, customer_id) VALUES ($1, $2)', [id, 'c-7']);
    try {
      await assert.rejects(insert('o-1'), (error: { code?: string; message?: string }) => {
        assert.equal(error.code, 'P0002', `before any worker, the README says P0002: ${error.message}`);
        assert.match(error.message ?? '', /order\.placed/, 'the message names the type');
        return true;
      });
      assert.equal((await db.query('SELECT 1 FROM orders')).rowCount, 0, 'the refused insert left no order');

      const worker = startWorker(project, ['worker'], env);
      try {
        const deadline = Date.now() + 30_000;
        while (
          (
            await db.query(
              "SELECT 1 FROM relaybus.relaybus_subscriptions WHERE event_type = 'order.placed' AND handler = 'send-receipt' AND active",
            )
          ).rowCount === 0
        ) {
          if (Date.now() > deadline || worker.child.exitCode !== null)
            assert.fail(`the worker recorded no subscription:\n${worker.output()}`);
          await sleep(100);
        }
        await insert('o-2');
        await worker.waitFor(/send-receipt: order o-2, attempt 1/);
      } catch (error) {
        await worker.stop();
        throw error;
      }
      const { code, output } = await worker.stop();
      assert.equal(code, 0, output);
      for (const claim of printedClaims(PAGE))
        assert.ok(output.includes(claim), `the README says the worker prints "${claim}":\n${output}`);
      const events = await db.query<{ id: string; key: string }>('SELECT id, key FROM relaybus.relaybus_events');
      assert.deepEqual(events.rows, [{ id: 'order-o-2', key: 'c-7' }], "the trigger's id and key");
      assert.equal((await db.query('SELECT 1 FROM relaybus.relaybus_deliveries')).rowCount, 0, 'delivered');
    } finally {
      await db.end();
    }
  });
});
