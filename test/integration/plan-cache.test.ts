/**
 * No hot statement may stay on custom plans: a prepared statement that Postgres re-plans on every call
 * costs ~0.5-1 ms a call (acquire-lanes did). After a warm-up (Postgres always tries five custom plans
 * first), each hot statement of a real delivery cycle must run on its generic plan.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type pg from 'pg';
import { laneOf } from '../../src/core/lanes.js';
import type { PgClientLike, PostgresStore } from '../../src/postgres/index.js';
import { loadStatements, type StatementName } from '../../src/postgres/statements.js';
import { findPostgres } from '../support/databases.js';
import { usePgStore } from '../support/pg-store.js';
import * as owners from '../support/claims.js';

const found = await findPostgres();
/** The statements every delivery cycle runs. */
const HOT: readonly StatementName[] = [
  'claim-held-lanes',
  'claim-light',
  'acquire-lanes',
  'complete-many',
  'extend-lease',
  'publish-new',
  'publish-new-one',
];

describe('plan cache of the hot statements on real Postgres', {
  skip: 'skip' in found ? found.skip : undefined,
}, () => {
  let pool: pg.Pool;
  let store: PostgresStore<PgClientLike>;
  // One connection: prepared statements and their plan counters live per connection.
  const schema = usePgStore('plan_cache', 1, (opened) => ({ pool, store } = opened));

  it('after warm-up every hot statement runs on its generic plan', async () => {
    const handlers = [
      { name: 'a', maxAttempts: 3 },
      { name: 'b', maxAttempts: 3 },
    ];
    // A backlog with fresh statistics: plan choices depend on them (the re-planning showed with a real backlog).
    for (let batch = 0; batch < 10; batch += 1) {
      await store.transaction((tx) =>
        store.publish(
          tx,
          Array.from({ length: 100 }, (_, i) => ({
            type: 't',
            key: i % 3 === 0 ? null : `k-${i % 40}`,
            payload: { batch, i },
            handlers,
          })),
        ),
      );
    }
    await pool.query(`ANALYZE "${schema}".relaybus_deliveries, "${schema}".relaybus_lanes`);
    for (let round = 0; round < 30; round += 1) {
      await store.transaction((tx) =>
        store.publish(tx, [{ type: 't', key: `k-${round % 7}`, payload: { round }, handlers }]),
      );
      await store.transaction((tx) =>
        store.publish(
          tx,
          Array.from({ length: 20 }, (_, i) => ({
            type: 't',
            key: i % 2 === 0 ? `k-${i % 5}` : null,
            payload: { round, i },
            handlers,
          })),
        ),
      );
      const owner = `w-${round % 3}`;
      const batch = await owners.claim(store, { owner, handlers: ['a', 'b'], limit: 25, leaseDurationMs: 30_000 });
      const lanes = new Map(batch.map((d) => [d.lane, d.leaseToken.split(':')[1]!]));
      await store.extendLease({
        owner,
        lanes: [...lanes].map(([lane, epoch]) => ({ lane, epoch })),
        leaseDurationMs: 30_000,
      });
      await store.completeMany(batch.map((d) => ({ deliveryId: d.id, leaseToken: d.leaseToken })));
      // A claim under a light load (a wake-up named the lane; free lanes are left to the poll): claim-light.
      await store.transaction((tx) =>
        store.publish(tx, [{ type: 't', key: `light-${round % 5}`, payload: { round }, handlers }]),
      );
      const light = await owners.claim(store, {
        owner,
        handlers: ['a', 'b'],
        limit: 25,
        leaseDurationMs: 30_000,
        preferLanes: [laneOf(`light-${round % 5}`, '')],
        freeLanes: 'skip',
      });
      await store.completeMany(light.map((d) => ({ deliveryId: d.id, leaseToken: d.leaseToken })));
    }
    const names = loadStatements(schema);
    const plans = await pool.query<{ name: string; generic_plans: string; custom_plans: string }>(
      'SELECT name, generic_plans::text, custom_plans::text FROM pg_prepared_statements WHERE name = ANY ($1)',
      [HOT.map((statement) => names[statement].name)],
    );
    const byName = new Map(plans.rows.map((row) => [row.name, row]));
    const report = HOT.map((statement) => {
      const row = byName.get(names[statement].name);
      return `${statement}: ${row?.generic_plans ?? '-'} generic / ${row?.custom_plans ?? '-'} custom`;
    });
    for (const statement of HOT) {
      const row = byName.get(names[statement].name);
      assert.ok(row, `${statement} ran prepared (${report.join('; ')})`);
      assert.ok(
        Number(row.custom_plans) <= 5 && Number(row.generic_plans) > 0,
        `${statement} settled on its generic plan: ${report.join('; ')}`,
      );
    }
  });
});
