/**
 * The fence of completions that ride on a claim (claim-held-lanes): a delivery is deleted only while its lane lists it
 * in flight at the lease's epoch, whatever its claims counter says. Every store operation that takes a delivery away
 * from its run also bumps that counter, so the store's own API cannot reach a lease that only the fence refuses; the
 * lane row is changed here directly, as a lane changed by another statement between the claim and its completion.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type pg from 'pg';
import type { PgClientLike, PostgresStore } from '../../src/postgres/index.js';
import type { ClaimedDelivery } from '../../src/store/contract.js';
import type { OwnerClaimParams as ClaimParams } from '../support/claims.js';
import { findPostgres } from '../support/databases.js';
import { usePgStore } from '../support/pg-store.js';
import * as owners from '../support/claims.js';

const found = await findPostgres();
const handlers = [{ name: 'a', maxAttempts: 3 }];

describe('the fence of riding completions on real Postgres', { skip: 'skip' in found ? found.skip : undefined }, () => {
  let pool: pg.Pool;
  let store: PostgresStore<PgClientLike>;
  const schema = usePgStore('claim_fence', 2, (opened) => ({ pool, store } = opened));
  const params: ClaimParams = { owner: 'fence-w', handlers: ['a'], limit: 10, leaseDurationMs: 30_000 };

  /** Two keyed events of one key (one lane), the first claimed by the owner. */
  async function claimFirst(key: string): Promise<ClaimedDelivery> {
    await store.transaction((tx) =>
      store.publish(tx, [
        { type: 't', key, payload: { n: 1 }, handlers },
        { type: 't', key, payload: { n: 2 }, handlers },
      ]),
    );
    const claimed = await owners.claim(store, params);
    assert.equal(claimed.length, 1);
    return claimed[0]!;
  }

  async function stillPending(id: string): Promise<boolean> {
    const { rows } = await pool.query(`SELECT 1 FROM "${schema}".relaybus_deliveries WHERE id = $1`, [id]);
    return rows.length === 1;
  }

  const leaseOf = (delivery: ClaimedDelivery) => ({ deliveryId: delivery.id, leaseToken: delivery.leaseToken });

  it('completes nothing of a delivery its lane no longer lists in flight', async () => {
    const head = await claimFirst('unlisted');
    await pool.query(`UPDATE "${schema}".relaybus_lanes SET in_flight = '{}' WHERE lane = $1`, [head.lane]);
    const result = await owners.completeAndClaim(store, [leaseOf(head)], params);
    assert.deepEqual(result.completed, [false]);
    assert.ok(await stillPending(head.id), 'the delivery is still there');
    assert.ok(
      result.claimed.every((delivery) => delivery.key !== 'unlisted' || delivery.id === head.id),
      'no successor of a head that was not completed is handed out',
    );
  });

  it('completes nothing under a lease of an older epoch of the lane', async () => {
    const head = await claimFirst('old-epoch');
    await pool.query(`UPDATE "${schema}".relaybus_lanes SET epoch = epoch + 1 WHERE lane = $1`, [head.lane]);
    const result = await owners.completeAndClaim(store, [leaseOf(head)], params);
    assert.deepEqual(result.completed, [false]);
    assert.ok(await stillPending(head.id), 'the delivery is still there');
  });
});
