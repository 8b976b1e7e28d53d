/**
 * The planner's statistics of the tables the claims read, kept in step with their size (src/postgres/statistics-keeper.ts):
 * a deliveries table analyzed while empty (what autovacuum leaves once a delete-on-complete table drained) and then
 * filled by a backlog is analyzed again by the store after a claim, so the claims' generic plans are made for the table
 * as it is; a table within its statistics is left alone.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type pg from 'pg';
import { fromPg, postgresStore, type PgClientLike, type PostgresStore } from '../../src/postgres/index.js';
import { findPostgres } from '../support/databases.js';
import { usePgStore } from '../support/pg-store.js';
import * as owners from '../support/claims.js';

const found = await findPostgres();

describe('the planner statistics of the claimed tables', { skip: 'skip' in found ? found.skip : undefined }, () => {
  let pool: pg.Pool;
  let store: PostgresStore<PgClientLike>;
  const schema = usePgStore('statistics_keeper', 4, (opened) => ({ pool, store } = opened));

  const deliveriesStatistics = async () =>
    (
      await pool.query<{ reltuples: number; stale: boolean }>(
        `SELECT c.reltuples::float8 AS reltuples,
                pg_relation_size(c.oid) / current_setting('block_size')::int > 2 * (greatest(c.relpages, 0) + 2) AS stale
         FROM pg_class c WHERE c.oid = '"${schema}".relaybus_deliveries'::regclass`,
      )
    ).rows[0]!;

  it('a claim on a backlog that outgrew statistics taken while the table was empty analyzes the table', async () => {
    await pool.query(`VACUUM ANALYZE "${schema}".relaybus_deliveries`);
    assert.equal((await deliveriesStatistics()).reltuples, 0, 'analyzed empty');
    const handlers = [{ name: 'h', maxAttempts: 3 }];
    await store.transaction((tx) =>
      store.publish(
        tx,
        Array.from({ length: 20_000 }, (_, n) => ({ type: 't', key: `k${n % 500}`, payload: { n }, handlers })),
      ),
    );
    assert.equal((await deliveriesStatistics()).stale, true, 'the backlog outgrew the statistics');

    await owners.claim(store, { owner: 'w1', handlers: ['h'], limit: 10, leaseDurationMs: 60_000 });
    const deadline = Date.now() + 10_000;
    while ((await deliveriesStatistics()).reltuples === 0 && Date.now() < deadline)
      await new Promise((resolve) => setTimeout(resolve, 50));
    const after = await deliveriesStatistics();
    assert.ok(after.reltuples > 15_000, `analyzed with the backlog in: reltuples ${after.reltuples}`);
    assert.equal(after.stale, false);
  });

  it('a table that kept its pages through a drain, analyzed with none of its rows, is analyzed once rows return', async () => {
    const handlers = [{ name: 'h', maxAttempts: 3 }];
    // One connection for the whole preparation, its statistics counters flushed before each look at them (a session
    // flushes them at most once a second otherwise, and a late flush would count rows the table no longer has).
    const client = await pool.connect();
    const publish = async (count: number, from: number) => {
      await client.query('BEGIN');
      await store.publish(
        client,
        Array.from({ length: count }, (_, n) => ({ type: 't', key: `k${(from + n) % 500}`, payload: { n }, handlers })),
      );
      await client.query('COMMIT');
      await client.query('SELECT pg_stat_force_next_flush()');
    };
    try {
      await client.query(`DELETE FROM "${schema}".relaybus_deliveries`);
      await publish(20_000, 0);
      // The drain: every row gone but the last one, which keeps the heap's pages from being truncated by VACUUM.
      await client.query(
        `DELETE FROM "${schema}".relaybus_deliveries WHERE id < (SELECT max(id) FROM "${schema}".relaybus_deliveries)`,
      );
      await client.query('SELECT pg_stat_force_next_flush()');
      await client.query(`VACUUM ANALYZE "${schema}".relaybus_deliveries`);
      const drained = await deliveriesStatistics();
      assert.ok(drained.reltuples < 10, `analyzed nearly empty: reltuples ${drained.reltuples}`);

      await publish(3_000, 20_000);
      assert.equal((await deliveriesStatistics()).stale, false, 'the rows fit in the pages the table kept');
    } finally {
      client.release();
    }

    const deadline = Date.now() + 10_000;
    while ((await deliveriesStatistics()).reltuples < 1_000 && Date.now() < deadline) {
      await owners.claim(store, { owner: 'w3', handlers: ['h'], limit: 1, leaseDurationMs: 60_000 });
      await new Promise((resolve) => setTimeout(resolve, 200));
    }
    const after = await deliveriesStatistics();
    assert.ok(after.reltuples > 2_000, `analyzed with the rows back: reltuples ${after.reltuples}`);
  });

  it('a table within its statistics is not analyzed again', async () => {
    const analyzeCount = async () =>
      Number(
        (
          await pool.query<{ n: string }>(
            `SELECT analyze_count::text AS n FROM pg_stat_user_tables WHERE relid = '"${schema}".relaybus_deliveries'::regclass`,
          )
        ).rows[0]!.n,
      );
    const before = await analyzeCount();
    // A fresh store: its keeper looks at its first claim.
    const fresh = postgresStore({ driver: fromPg(pool), schema });
    await owners.claim(fresh, { owner: 'w2', handlers: ['h'], limit: 10, leaseDurationMs: 60_000 });
    await new Promise((resolve) => setTimeout(resolve, 500));
    assert.equal(await analyzeCount(), before);
  });
  it('a table its statistics count as fuller than it is now is not analyzed into fewer rows', async () => {
    const handlers = [{ name: 'h', maxAttempts: 3 }];
    const client = await pool.connect();
    const publish = async (count: number) => {
      await client.query('BEGIN');
      await store.publish(
        client,
        Array.from({ length: count }, (_, n) => ({ type: 't', key: `k${n % 50}`, payload: { n }, handlers })),
      );
      await client.query('COMMIT');
      await client.query('SELECT pg_stat_force_next_flush()');
    };
    const drainer = await pool.connect();
    try {
      await client.query(`DELETE FROM "${schema}".relaybus_deliveries`);
      await publish(300);
      await client.query(`ANALYZE "${schema}".relaybus_deliveries`);
      await publish(2_000);
      // The drain as the live-rows counter sees it under load: its deletes reach the shared statistics a second or so
      // after the inserts did (a session that flushed its counters holds the next ones back for a second), so for that
      // second the counter reads the 2,300 rows while the table holds 2. (A read of the table is counted too, and
      // flushed: it starts the drainer's second.)
      await drainer.query(`SELECT count(*) FROM "${schema}".relaybus_deliveries`);
      await drainer.query(
        `DELETE FROM "${schema}".relaybus_deliveries
         WHERE id < (SELECT id FROM "${schema}".relaybus_deliveries ORDER BY id DESC OFFSET 1 LIMIT 1)`,
      );
      const counted = await pool.query<{ live: number; reltuples: number }>(
        `SELECT pg_stat_get_live_tuples(c.oid)::float8 AS live, c.reltuples::float8 AS reltuples
         FROM pg_class c WHERE c.oid = '"${schema}".relaybus_deliveries'::regclass`,
      );
      assert.ok(
        counted.rows[0]!.live > 2 * (counted.rows[0]!.reltuples + 50),
        `the counter reads high: ${JSON.stringify(counted.rows[0])}`,
      );
      const fresh = postgresStore({ driver: fromPg(pool), schema });
      await owners.claim(fresh, { owner: 'w4', handlers: ['h'], limit: 1, leaseDurationMs: 60_000 });
      await new Promise((resolve) => setTimeout(resolve, 500));
    } finally {
      drainer.release();
      client.release();
    }
    const after = await deliveriesStatistics();
    assert.ok(after.reltuples >= 300, `not analyzed into the drained table: reltuples ${after.reltuples}`);
  });
});
