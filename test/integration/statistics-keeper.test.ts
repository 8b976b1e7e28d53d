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
});
