/**
 * The delivery path's write budget on real Postgres: a delivery costs one insert and one delete, the
 * claim writes lane rows only, and every lane update is heap-only (HOT). Read from
 * pg_stat_user_tables after forcing this backend's statistics out.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type pg from 'pg';
import type { PgClientLike, PostgresStore } from '../../src/postgres/index.js';
import { findPostgres } from '../support/databases.js';
import { usePgStore } from '../support/pg-store.js';
import * as owners from '../support/claims.js';

const found = await findPostgres();

interface TableCounters {
  n_tup_ins: number;
  n_tup_upd: number;
  n_tup_hot_upd: number;
  n_tup_del: number;
}

describe('write amplification of the delivery path (real Postgres)', {
  skip: 'skip' in found ? found.skip : undefined,
}, () => {
  let pool: pg.Pool;
  let store: PostgresStore<PgClientLike>;
  // One connection: every statement runs on the backend whose statistics we flush and read.
  const schema = usePgStore('write_amp', 1, (opened) => ({ pool, store } = opened));

  async function counters(): Promise<Record<string, TableCounters>> {
    await pool.query('SELECT pg_stat_force_next_flush()');
    await pool.query('SELECT 1'); // the flush happens when the backend goes idle after the previous statement
    const { rows } = await pool.query<TableCounters & { relname: string }>(
      `SELECT relname, n_tup_ins::int, n_tup_upd::int, n_tup_hot_upd::int, n_tup_del::int
       FROM pg_stat_user_tables WHERE schemaname = $1`,
      [schema],
    );
    return Object.fromEntries(rows.map(({ relname, ...rest }) => [relname, rest]));
  }

  function delta(a: TableCounters | undefined, b: TableCounters | undefined): TableCounters {
    const zero = { n_tup_ins: 0, n_tup_upd: 0, n_tup_hot_upd: 0, n_tup_del: 0 };
    const x = a ?? zero;
    const y = b ?? zero;
    return {
      n_tup_ins: y.n_tup_ins - x.n_tup_ins,
      n_tup_upd: y.n_tup_upd - x.n_tup_upd,
      n_tup_hot_upd: y.n_tup_hot_upd - x.n_tup_hot_upd,
      n_tup_del: y.n_tup_del - x.n_tup_del,
    };
  }

  it('publish, claim and complete: deliveries inserted and deleted, never updated; every lane update HOT', async (t) => {
    const events = 2000; // about 16 deliveries per lane: batches share lane updates
    const handlers = [
      { name: 'email', maxAttempts: 5 },
      { name: 'ledger', maxAttempts: 5 },
    ];
    const beforeCounters = await counters();
    const walBefore = (await pool.query<{ lsn: string }>('SELECT pg_current_wal_lsn()::text AS lsn')).rows[0]!.lsn;

    for (let batch = 0; batch < events / 50; batch += 1) {
      await store.transaction((tx) =>
        store.publish(
          tx,
          Array.from({ length: 50 }, (_, i) => ({
            type: 'order.placed',
            key: i % 10 === 0 ? `customer-${(batch * 50 + i) % 7}` : null,
            payload: { n: batch * 50 + i },
            handlers,
          })),
        ),
      );
    }
    let completed = 0;
    for (let round = 0; round < 500 && completed < events * handlers.length; round += 1) {
      const claimed = await owners.claim(store, {
        owner: 'worker-a',
        handlers: ['email', 'ledger'],
        limit: 200,
        leaseDurationMs: 30_000,
      });
      const results = await store.completeMany(claimed.map((d) => ({ deliveryId: d.id, leaseToken: d.leaseToken })));
      assert.ok(results.every(Boolean), 'every completion of a held lease succeeds');
      completed += results.length;
    }
    assert.equal(completed, events * handlers.length, 'every delivery was claimed and completed');

    const walAfter = (
      await pool.query<{ bytes: string }>('SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), $1)::text AS bytes', [
        walBefore,
      ])
    ).rows[0]!.bytes;
    const afterCounters = await counters();
    const deliveries = delta(beforeCounters.relaybus_deliveries, afterCounters.relaybus_deliveries);
    const lanes = delta(beforeCounters.relaybus_lanes, afterCounters.relaybus_lanes);
    t.diagnostic(`relaybus_deliveries ${JSON.stringify(deliveries)}`);
    t.diagnostic(`relaybus_lanes ${JSON.stringify(lanes)}`);
    t.diagnostic(
      `WAL ${walAfter} bytes for ${completed} deliveries (${Math.round(Number(walAfter) / completed)} B/delivery, whole cluster, includes publish)`,
    );

    assert.equal(deliveries.n_tup_ins, events * handlers.length, 'one insert per delivery');
    assert.equal(deliveries.n_tup_upd, 0, 'no delivery row is ever updated on the happy path');
    assert.equal(deliveries.n_tup_del, events * handlers.length, 'one delete per delivery');
    assert.ok(lanes.n_tup_upd > 0, 'claims write lane rows');
    assert.equal(lanes.n_tup_hot_upd, lanes.n_tup_upd, 'every lane update is heap-only (HOT)');
    assert.ok(
      lanes.n_tup_upd < completed / 2,
      `lane updates are shared by a batch (${lanes.n_tup_upd} for ${completed} deliveries)`,
    );
  });
});
