/**
 * The dispatcher's own hot statements (claim, acquire, completion, lease renewal) commit without
 * waiting for the WAL flush: each turns synchronous_commit off for its own transaction only. A lost
 * claim or completion after a server crash means a redelivery, never a loss. The setting must never
 * leak into the session (the pool is often the application's) nor into a caller's transaction.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type pg from 'pg';
import type { PgClientLike, PostgresStore } from '../../src/postgres/index.js';
import { loadStatements, type StatementName } from '../../src/postgres/statements.js';
import { findPostgres } from '../support/databases.js';
import { usePgStore } from '../support/pg-store.js';
import * as owners from '../support/claims.js';

const found = await findPostgres();

describe('asynchronous commit of the dispatcher statements on real Postgres', {
  skip: 'skip' in found ? found.skip : undefined,
}, () => {
  let pool: pg.Pool;
  let store: PostgresStore<PgClientLike>;
  const schema = usePgStore('async_commit', 1, (opened) => ({ pool, store } = opened));

  it('each hot statement turns synchronous_commit off inside its own transaction, and only there', async () => {
    const handlers = [{ name: 'h', maxAttempts: 3 }];
    await store.transaction((tx) =>
      store.publish(
        tx,
        Array.from({ length: 20 }, (_, i) => ({
          type: 't',
          key: i % 2 === 0 ? `k-${i}` : null,
          payload: { i },
          handlers,
        })),
      ),
    );
    const claimed = await owners.claim(store, { owner: 'w', handlers: ['h'], limit: 5, leaseDurationMs: 30_000 });
    assert.equal(claimed.length, 5);
    const leases = claimed.map((d) => d.leaseToken.split(':'));
    const statements = loadStatements(schema);
    const cases: [StatementName, unknown[]][] = [
      [
        'claim-held-lanes',
        ['w', ['h'], 5, 30_000, null, [], [], [], [], [], [], [], false, [], [], [], [], 0, 0, [], 5],
      ],
      ['acquire-lanes', ['w2', ['h'], 4, 0, 30_000, null, []]],
      ['extend-lease', ['w', leases.map((l) => Number(l[0])), leases.map((l) => l[1]), 30_000, null]],
      [
        'complete-many',
        [
          claimed.map((d) => d.id),
          leases.map((l) => Number(l[0])),
          leases.map((l) => l[1]),
          leases.map((l) => Number(l[2])),
          false,
          null,
        ],
      ],
    ];
    const client = await pool.connect();
    try {
      for (const [name, params] of cases) {
        await client.query('BEGIN');
        const rows = await client.query({ name: statements[name].name, text: statements[name].text, values: params });
        const inside = await client.query<{ synchronous_commit: string }>('SHOW synchronous_commit');
        await client.query('ROLLBACK');
        if (name !== 'claim-held-lanes')
          assert.ok(
            rows.rowCount !== null && rows.rowCount > 0,
            `${name} did its work in this test (${rows.rowCount} rows)`,
          );
        assert.equal(inside.rows[0]!.synchronous_commit, 'off', `${name} turned it off in its transaction`);
        const afterwards = await client.query<{ synchronous_commit: string }>('SHOW synchronous_commit');
        assert.equal(afterwards.rows[0]!.synchronous_commit, 'on', `${name} left the session's setting alone`);
      }
    } finally {
      client.release();
    }
    // Through the store (autocommit), the session keeps its setting, and a caller's transaction keeps its own.
    await store.completeMany(claimed.map((d) => ({ deliveryId: d.id, leaseToken: d.leaseToken })));
    assert.equal((await pool.query('SHOW synchronous_commit')).rows[0].synchronous_commit, 'on');
    await store.transaction(async (tx) => {
      await store.publish(tx, [{ type: 't', payload: {}, handlers }]);
      const setting = (await tx.query('SHOW synchronous_commit')).rows as { synchronous_commit: string }[];
      assert.equal(setting[0]!.synchronous_commit, 'on', "a publish keeps the caller's durability");
    });
  });
});
