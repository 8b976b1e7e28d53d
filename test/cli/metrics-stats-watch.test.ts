/**
 * `relaybus stats --watch` (built bin, real Postgres): warns while deliveries are due and no lane is
 * leased (no worker claims them), stops warning once a worker holds lanes, and keeps every line
 * within 100 columns, even with a handler name of 150 characters.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import pg from 'pg';
import { fromPg, postgresStore, type PgClientLike, type PostgresStore } from '../../src/postgres/index.js';
import { findPostgres, uniqueSchemaName } from '../support/databases.js';
import { startCli, useBuiltCli } from './support.js';

const found = await findPostgres();
useBuiltCli();

describe('relaybus stats --watch (real Postgres, built bin)', {
  skip: 'skip' in found ? found.skip : undefined,
}, () => {
  const url = 'url' in found ? found.url : '';
  const schema = uniqueSchemaName('cli_stats_watch');
  const longName = `h-${'x'.repeat(148)}`;
  let pool: pg.Pool;
  let store: PostgresStore<PgClientLike>;

  before(async () => {
    pool = new pg.Pool({ connectionString: url, max: 2 });
    store = postgresStore({ driver: fromPg(pool), schema });
    await store.setup();
    await store.transaction((tx) =>
      store.publish(
        tx,
        Array.from({ length: 6 }, (_, n) => ({
          type: 'order.placed',
          payload: { n },
          handlers: [
            { name: 'email', maxAttempts: 3 },
            { name: longName, maxAttempts: 3 },
          ],
        })),
      ),
    );
  });
  after(async () => {
    await pool?.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
    await pool?.end();
  });

  it('warns while nothing holds a lane, not once a worker does; every line fits 100 columns', {
    timeout: 30_000,
  }, async () => {
    const watch = startCli(['stats', '--watch', '100ms', '--database-url', url, '--schema', schema]);
    try {
      await watch.waitFor(
        /WARNING: 12 deliveries are due, the oldest for .+, and no lane is leased: no worker is claiming/,
      );
      // A worker claims: its lanes are leased while the deliveries are in flight.
      const claimed = await store.claim({
        owner: 'test-worker',
        handlers: ['email', longName],
        limit: 4,
        leaseDurationMs: 60_000,
      });
      assert.ok(claimed.length > 0);
      const mark = watch.output().stdout.length;
      await watch.waitFor(/lanes leased: [1-9]/);
      await new Promise((resolve) => setTimeout(resolve, 300));
      const after = watch.output().stdout.slice(mark);
      const refreshed = after.split('\n\n').filter((block) => /lanes leased: [1-9]/.test(block));
      assert.ok(refreshed.length > 0);
      for (const block of refreshed) assert.doesNotMatch(block, /WARNING/, 'no warning while a worker holds lanes');
    } finally {
      watch.child.kill('SIGINT');
    }
    const result = await watch.exited;
    assert.equal(result.code, 0, result.stderr);
    const lines = result.stdout.split('\n');
    const widest = Math.max(...lines.map((line) => line.length));
    assert.ok(
      widest <= 100,
      `every line fits 100 columns; the widest has ${widest}:\n${lines.find((line) => line.length === widest)}`,
    );
    assert.ok(
      lines.some((line) => line.startsWith('h-xxxx') && line.includes('…')),
      'the long handler name is cut with an ellipsis',
    );
    assert.ok(lines.some((line) => /^email\s+\d+/.test(line)));
    await store.relinquish('test-worker').catch(() => 0);
  });
});
