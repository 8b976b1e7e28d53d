/**
 * Claims racing on real connections: several workers (and two claim loops sharing one owner) drain a
 * keyed backlog at once. Nothing may be handed out twice while in flight, nothing may be lost, and
 * deliveries of one (handler, key) must come in sequence order, one at a time.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import pg from 'pg';
import { fromPg, postgresStore, type PgClientLike, type PostgresStore } from '../../src/postgres/index.js';
import { findPostgres, uniqueSchemaName } from '../support/databases.js';

const found = await findPostgres();

describe('concurrent claims on real Postgres', { skip: 'skip' in found ? found.skip : undefined }, () => {
  let pool: pg.Pool;
  let store: PostgresStore<PgClientLike>;
  const schema = uniqueSchemaName('concurrent_claims');

  before(async () => {
    pool = new pg.Pool({ connectionString: 'url' in found ? found.url : '', max: 10 });
    store = postgresStore({ driver: fromPg(pool), schema });
    await store.setup();
  });
  after(async () => {
    await pool.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
    await pool.end();
  });

  it('four owners and a doubled claim loop drain 1,200 deliveries exactly once, in per-key order', async () => {
    const handlers = [{ name: 'a', maxAttempts: 3 }, { name: 'b', maxAttempts: 3 }];
    for (let batch = 0; batch < 6; batch += 1) {
      await store.transaction((tx) => store.publish(tx, Array.from({ length: 100 }, (_, i) => ({
        type: 'thing.happened', key: i % 4 === 0 ? null : `k-${i % 30}`, payload: { n: batch * 100 + i }, handlers,
      }))));
    }
    const total = 1200;
    const running = new Set<string>();
    const runningSlots = new Map<string, string>();
    const seen = new Map<string, number>();
    const lastSequence = new Map<string, number>();
    let duplicates = 0;
    let overlaps = 0;
    let outOfOrder = 0;
    let completed = 0;

    async function loop(owner: string): Promise<void> {
      for (let idle = 0; idle < 20 && completed < total;) {
        const batch = await store.claim({ owner, handlers: ['a', 'b'], limit: 25, leaseDurationMs: 60_000 });
        if (batch.length === 0) {
          idle += 1;
          await new Promise((resolve) => setTimeout(resolve, 5));
          continue;
        }
        idle = 0;
        for (const d of batch) {
          if (running.has(d.id)) duplicates += 1;
          running.add(d.id);
          seen.set(d.id, (seen.get(d.id) ?? 0) + 1);
          if (d.key !== null) {
            const slot = `${d.handler}/${d.key}`;
            if ([...running].some((id) => id !== d.id && runningSlots.get(id) === slot)) overlaps += 1;
            runningSlots.set(d.id, slot);
            if ((lastSequence.get(slot) ?? 0) >= Number(d.sequence)) outOfOrder += 1;
            lastSequence.set(slot, Number(d.sequence));
          }
        }
        await new Promise((resolve) => setTimeout(resolve, 1));
        const results = await store.completeMany(batch.map((d) => ({ deliveryId: d.id, lease: d.lease })));
        for (const d of batch) {
          running.delete(d.id);
          runningSlots.delete(d.id);
        }
        completed += results.filter(Boolean).length;
      }
    }
    await Promise.all(['w1', 'w2', 'w3', 'w4', 'w1'].map(loop));

    assert.equal(duplicates, 0, 'no delivery handed out while already in flight');
    assert.equal(overlaps, 0, 'no two deliveries of one (handler, key) in flight together');
    assert.equal(outOfOrder, 0, 'per-key sequence order');
    assert.equal(completed, total, 'every delivery completed');
    assert.equal([...seen.values()].filter((n) => n > 1).length, 0, 'each delivery claimed once');
    const stats = await store.statistics();
    assert.equal(stats.pending + stats.inFlight + stats.dead, 0, 'nothing left');
  });
});
