/**
 * The guide's "Backfill a new handler" flow (docs/guide/replay.md) as a user follows it, in a new project outside the
 * repository with relaybus installed from its packed tarball: the quick start's config and tables; orders published
 * before the new handler exists (with ids of the caller's, so their events are kept); the handler added to the config
 * and a worker started with it (step 1: its subscription is recorded); then the page's two commands, literally: the
 * dry run names the handler and its five deliveries and writes nothing, the backfill exits 0, and the worker runs the
 * handler on each old order once, each customer's in the order they were published.
 */
import assert from 'node:assert/strict';
import { appendFileSync, existsSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import pg from 'pg';
import { blockWith, commandsOf, fileBlock, shell, startWorker } from '../docs/flow.js';
import { findPostgres } from '../support/databases.js';
import { FlowDatabases, freshProject, packedTarball, removeWork, workDir } from '../support/packed-package.js';

const PAGE = 'docs/guide/replay.md';
const found = await findPostgres();

/** Five orders of two customers, published through the config's bus before `update-search` exists. */
const PUBLISH_HISTORY = `
import bus, { OrderPlaced, pool } from './relaybus.config.js';

const orders = [['o-1', 'c-7'], ['o-2', 'c-8'], ['o-3', 'c-7'], ['o-4', 'c-8'], ['o-5', 'c-7']];
for (const [orderId, customerId] of orders) {
  const client = await pool.connect();
  try {
    await client.query('BEGIN');
    await bus.publish(client, OrderPlaced, { orderId, customerId }, { key: customerId, id: \`order-\${orderId}\` });
    await client.query('COMMIT');
  } finally {
    client.release();
  }
}
await pool.end();
`;

/** The new handler, registered on the config's bus (step 1 of the page): it records what it indexed. */
const NEW_HANDLER = `
import { appendFileSync } from 'node:fs';
bus.on(OrderPlaced, 'update-search', async (order) => {
  appendFileSync('search.log', \`\${order.customerId} \${order.orderId}\\n\`);
});
`;

describe("the replay guide's backfill of a new handler, in a new project with the packed package", {
  skip: 'skip' in found ? found.skip : undefined,
}, () => {
  const work = workDir('replay-flow');
  const databases = new FlowDatabases('url' in found ? found.url : '');
  after(async () => {
    await databases.drop();
    removeWork(work);
  });

  it('the dry run plans the history, the backfill delivers it once, in each key order', {
    timeout: 180_000,
  }, async () => {
    const [dryRun, backfill, ...rest] = commandsOf(blockWith(PAGE, 'sh', /replay backfill .*--dry-run/));
    assert.ok(dryRun && backfill && rest.length === 0, `${PAGE}: the backfill block has the dry run and the backfill`);
    assert.match(dryRun.text, /--handler update-search\b.*--dry-run/);
    assert.match(backfill.text, /--handler update-search\b/);

    const project = await freshProject(join(work, 'app'), await packedTarball(work), ['pg'], ['tsx']);
    const env = { DATABASE_URL: await databases.create('replay_flow') };
    writeFileSync(join(project, 'relaybus.config.ts'), fileBlock('relaybus.config.ts').code);
    writeFileSync(join(project, 'publish-history.ts'), PUBLISH_HISTORY);
    await shell({ line: 0, text: 'npx relaybus setup' }, project, env);
    await shell({ line: 0, text: 'npx tsx publish-history.ts' }, project, env);

    appendFileSync(join(project, 'relaybus.config.ts'), NEW_HANDLER);
    const db = new pg.Pool({ connectionString: env.DATABASE_URL, max: 1 });
    db.on('error', () => {});
    const worker = startWorker(project, ['worker'], env);
    try {
      const deadline = Date.now() + 30_000;
      while (
        (
          await db.query(
            "SELECT 1 FROM relaybus.relaybus_subscriptions WHERE event_type = 'order.placed' AND handler = 'update-search' AND active",
          )
        ).rowCount === 0
      ) {
        if (Date.now() > deadline || worker.child.exitCode !== null)
          assert.fail(`the worker recorded no subscription of update-search:\n${worker.output()}`);
        await sleep(100);
      }
      const log = join(project, 'search.log');
      assert.equal(existsSync(log), false, 'a new handler gets nothing of what was published before it existed');

      const plan = await shell(dryRun, project, env);
      assert.match(plan, /update-search\D+5\b/, `${PAGE}:${dryRun.line}: the dry run plans 5 deliveries:\n${plan}`);
      const pending = await db.query("SELECT 1 FROM relaybus.relaybus_deliveries WHERE handler = 'update-search'");
      assert.equal(pending.rowCount, 0, 'the dry run wrote nothing');

      await shell(backfill, project, env);
      const indexed = async () => (existsSync(log) ? readFileSync(log, 'utf8').trim().split('\n') : []);
      const until = Date.now() + 30_000;
      while ((await indexed()).length < 5 && Date.now() < until) await sleep(100);
      await sleep(500); // nothing more may come
      const lines = await indexed();
      assert.equal(lines.length, 5, `each old order indexed once:\n${lines.join('\n')}\n${worker.output()}`);
      const ofCustomer = (customer: string) => lines.filter((line) => line.startsWith(`${customer} `));
      assert.deepEqual(ofCustomer('c-7'), ['c-7 o-1', 'c-7 o-3', 'c-7 o-5'], "c-7's orders in publish order");
      assert.deepEqual(ofCustomer('c-8'), ['c-8 o-2', 'c-8 o-4'], "c-8's orders in publish order");
      const replays = await db.query<{ state: string; created: string }>(
        'SELECT state, created::text FROM relaybus.relaybus_replays',
      );
      assert.deepEqual(replays.rows, [{ state: 'finished', created: '5' }], 'the audit record');
    } finally {
      const { code, output } = await worker.stop();
      await db.end();
      assert.equal(code, 0, output);
    }
  });
});
