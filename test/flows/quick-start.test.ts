/**
 * The README's "Quick start in your project", followed literally in a new project outside the repository, in the
 * README's order: every shell line runs as written (`/bin/sh -c`), every ts block is saved under its file name, and
 * the worker must print what the README says it prints. Two parts are replaced, and only these:
 *
 * - the network: npm installs run with `--prefer-offline` (NPM_CONFIG_PREFER_OFFLINE), served from the npm cache
 *   that `npm ci` filled;
 * - the build in the clone, `(cd "$RELAYBUS_DIR" && npm ci && npm pack)`: the clone is a copy of this repository's
 *   package sources, laid where the README's RELAYBUS_DIR points, built and packed by test/support/packed-package.ts
 *   (`npm run build`, `npm pack`) over this repository's node_modules instead of a second full `npm ci`; the tarball
 *   lands in that folder under the name npm gives it, so the README's `npm install "$RELAYBUS_DIR/<name>.tgz"` fails
 *   when it names another file.
 *
 * DATABASE_URL is a database of this test's own, whatever the README exports. `npx relaybus worker` runs as the
 * project's installed bin (what npx would run), so that SIGTERM reaches the worker itself.
 */
import assert from 'node:assert/strict';
import { copyFileSync, existsSync, mkdirSync, symlinkSync, writeFileSync } from 'node:fs';
import { basename, join, relative, resolve } from 'node:path';
import { after, describe, it } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import pg from 'pg';
import { printedClaims, sectionBlocks, shell, startWorker } from '../docs/flow.js';
import { quickStartSteps } from '../docs/quick-start.js';
import { findPostgres } from '../support/databases.js';
import { FlowDatabases, packedTarball, removeWork, run, workDir } from '../support/packed-package.js';

const QUICK_START = 'Quick start in your project';
const found = await findPostgres();

describe('README quick start, followed literally in a new project', {
  skip: 'skip' in found ? found.skip : undefined,
}, () => {
  const work = workDir('quick-start');
  const databases = new FlowDatabases('url' in found ? found.url : '');
  after(async () => {
    await databases.drop();
    removeWork(work);
  });

  it('installs the packed package, sets up, creates the orders table, publishes, and the worker delivers', {
    timeout: 120_000,
  }, async () => {
    const steps = quickStartSteps(sectionBlocks('README.md', QUICK_START));
    const url = await databases.create('quick_start');
    const project = join(work, 'app');
    mkdirSync(project);
    await run('npm', ['init', '-y'], project);
    const env: Record<string, string | undefined> = { DATABASE_URL: url };
    const db = new pg.Pool({ connectionString: url, max: 1 });
    // The drop of the worker's connections below (and the database's forced drop after) may reach this pool's idle
    // connection too: a harmless 'error' event here.
    db.on('error', () => {});
    let delivered = false;
    try {
      for (const step of steps) {
        const at = `README.md:${step.line}`;
        if (step.kind === 'file') {
          writeFileSync(join(project, step.name), step.code);
        } else if (step.kind === 'env') {
          env[step.name] = step.name === 'DATABASE_URL' ? url : step.value;
        } else if (step.kind === 'build') {
          const clone = env.RELAYBUS_DIR === undefined ? undefined : resolve(project, env.RELAYBUS_DIR);
          assert.ok(clone, `${at}: \`${step.text}\` builds in RELAYBUS_DIR, which the README sets before`);
          assert.ok(
            !relative(work, clone).startsWith('..'),
            `${at}: RELAYBUS_DIR (${env.RELAYBUS_DIR}) is a folder beside the project, where the test can lay the clone`,
          );
          assert.match(step.text, /npm ci && npm pack/, `${at}: the build is \`npm ci && npm pack\` in the clone`);
          const tarball = await packedTarball(work);
          if (!existsSync(clone)) symlinkSync(join(work, 'package'), clone, 'dir');
          copyFileSync(tarball, join(clone, basename(tarball)));
        } else if (step.kind === 'relaybus' && step.invocation.words[0] === 'worker') {
          const worker = startWorker(project, step.invocation.args, env);
          try {
            const deadline = Date.now() + 30_000;
            for (;;) {
              const { rows } = await db.query<{ events: number; deliveries: number }>(
                'SELECT (SELECT count(*)::int FROM relaybus.relaybus_events) AS events, (SELECT count(*)::int FROM relaybus.relaybus_deliveries) AS deliveries',
              );
              if (rows[0]!.events > 0 && rows[0]!.deliveries === 0) break;
              if (Date.now() > deadline || worker.child.exitCode !== null)
                assert.fail(`${at}: the worker did not drain (${JSON.stringify(rows[0])}):\n${worker.output()}`);
              await sleep(100);
            }
            // The server drops the worker's connections (a failover, an idle timeout): the quick start's pool error
            // listener keeps the process alive, and the worker still stops gracefully.
            const dropped = await db.query(
              'SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()',
            );
            assert.ok((dropped.rowCount ?? 0) > 0, 'the worker had connections to drop');
            await sleep(500);
            assert.equal(
              worker.child.exitCode,
              null,
              `${at}: the worker died when its connections were dropped:\n${worker.output()}`,
            );
          } catch (error) {
            await worker.stop();
            throw error;
          }
          const stopped = await worker.stop();
          assert.equal(stopped.code, 0, `${at}: the worker stopped with ${stopped.code}:\n${stopped.output}`);
          const claims = printedClaims('README.md', QUICK_START);
          assert.ok(claims.length > 0, 'the README says what the worker prints');
          for (const claim of claims)
            assert.ok(
              stopped.output.includes(claim),
              `the README says the worker prints "${claim}"; it printed:\n${stopped.output}`,
            );
          delivered = true;
        } else {
          await shell(step, project, env);
        }
      }
      assert.ok(delivered, 'the quick start runs a worker');
      const { rows } = await db.query<{ id: string; handlers: string[] }>(
        'SELECT id, handlers FROM relaybus.relaybus_events',
      );
      assert.deepEqual(rows, [{ id: 'order-o-1', handlers: ['send-receipt'] }], 'the quick start published one event');
      const orders = await db.query('SELECT id, customer_id FROM orders');
      assert.deepEqual(orders.rows, [{ id: 'o-1', customer_id: 'c-7' }], 'with its order');
    } finally {
      await db.end();
    }
  });
});
