/**
 * `relaybus stats --watch` (built bin, real Postgres): warns while deliveries are due and no lane is
 * leased (no worker claims them), stops warning once a worker holds lanes, and keeps every line
 * within 100 columns, even with a handler name of 150 characters. Without completion history,
 * `stats --json` says `completed: null` (not a 0 that reads as "nothing completed"); `dead list
 * --json` carries each dead letter's payload and headers, of an event published inline too.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import pg from 'pg';
import { fromPg, postgresStore, type PgClientLike, type PostgresStore } from '../../src/postgres/index.js';
import { findPostgres, uniqueSchemaName } from '../support/databases.js';
import { allBlocks } from '../docs/doc-set.js';
import { runCli, startCli, useBuiltCli } from './support.js';
import * as owners from '../support/claims.js';

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
      const claimed = await owners.claim(store, {
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
    await owners.relinquish(store, 'test-worker').catch(() => 0);
  });

  it('stats --json says completed: null while no completion history is recorded, per handler too', {
    timeout: 30_000,
  }, async () => {
    const result = await runCli(['stats', '--json', '--database-url', url, '--schema', schema]);
    assert.equal(result.code, 0, result.stderr);
    const json = JSON.parse(result.stdout) as {
      completed: number | null;
      pending: number;
      handlers: Record<string, { completed: number | null }>;
    };
    assert.equal(json.completed, null);
    assert.deepEqual(
      Object.values(json.handlers).map((handler) => handler.completed),
      [null, null],
    );
    assert.equal(typeof json.pending, 'number');
    assert.equal(
      (await store.statistics()).completed,
      0,
      'the store API counts 0 (capabilities say there is no history)',
    );

    // The README's example of the output has the same keys (noLiveWorker only while subscriptions are recorded).
    const documented = allBlocks().filter((block) => block.lang === 'json' && block.code.includes('"lanesLeased"'));
    assert.equal(documented.length, 1, 'one documented example of stats --json');
    const example = JSON.parse(documented[0]!.code) as Record<string, unknown> & {
      handlers: Record<string, Record<string, unknown>>;
    };
    assert.deepEqual(
      Object.keys(example).filter((key) => key !== 'noLiveWorker'),
      Object.keys(json),
    );
    assert.deepEqual(Object.keys(Object.values(example.handlers)[0]!), Object.keys(Object.values(json.handlers)[0]!));
    assert.equal(example.completed, null, 'the example shows completed without history');
  });

  it('dead list --json carries the payload and headers of an event published inline', { timeout: 30_000 }, async () => {
    // Small, without an id, no completion history: published inline, its delivery row carries payload and headers.
    await store.transaction((tx) =>
      store.publish(tx, [
        {
          type: 'order.placed',
          payload: { n: 99, note: '<script>' },
          headers: { seq: '99' },
          handlers: [{ name: 'inline-dead', maxAttempts: 1 }],
        },
      ]),
    );
    const { rows } = await pool.query(`SELECT count(*)::int AS n FROM "${schema}".relaybus_events`);
    assert.deepEqual(rows, [{ n: 0 }], 'published inline: no events row');
    const [doomed] = await owners.claim(store, {
      owner: 'dead-maker',
      handlers: ['inline-dead'],
      limit: 1,
      leaseDurationMs: 30_000,
    });
    assert.ok(await store.bury({ deliveryId: doomed!.id, leaseToken: doomed!.leaseToken }, { error: 'no' }));
    await owners.relinquish(store, 'dead-maker');
    const result = await runCli(['dead', 'list', '--json', '--database-url', url, '--schema', schema]);
    assert.equal(result.code, 0, result.stderr);
    const dead = JSON.parse(result.stdout) as { id: string; payload: unknown; headers: Record<string, string> }[];
    assert.deepEqual(
      dead.map((item) => [item.id, item.payload, item.headers]),
      [[doomed!.id, { n: 99, note: '<script>' }, { seq: '99' }]],
    );
  });
});
