/**
 * A lane a wake-up named (`ClaimParams.preferLanes`: the lanes the publishes the dispatcher heard were committed to)
 * gives its newest heads first, in a claim whose batch the backlog's heads would fill otherwise: live work beside a
 * backlog or a replay runs in the next claim instead of when the lane's walk comes round to its key
 * (sql/hot-path/claim-held-lanes.sql, fresh). Key order holds: a new row behind a pending one of its key stays.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type pg from 'pg';
import type { PgClientLike, PostgresStore } from '../../src/postgres/index.js';
import type { ClaimedDelivery } from '../../src/store/contract.js';
import * as owners from '../support/claims.js';
import { findPostgres } from '../support/databases.js';
import { usePgStore } from '../support/pg-store.js';

const found = await findPostgres();
const LANE = 7;

describe('the heads of a lane a wake-up named', { skip: 'skip' in found ? found.skip : undefined }, () => {
  let pool: pg.Pool;
  let store: PostgresStore<PgClientLike>;
  const schema = usePgStore('claim_wakeup_heads', 4, (opened) => ({ pool, store } = opened));
  const handlers = [{ name: 'h', maxAttempts: 3 }];
  const leaseOf = (delivery: ClaimedDelivery) => ({ deliveryId: delivery.id, leaseToken: delivery.leaseToken });

  /** `count` keys whose deliveries all go to LANE. */
  const keysOfLane = async (count: number, prefix: string): Promise<string[]> =>
    (
      await pool.query<{ key: string }>(
        `SELECT $2 || g AS key FROM generate_series(0, 100000) g WHERE "${schema}".relaybus_lane($2 || g) = $1 LIMIT $3`,
        [LANE, prefix, count],
      )
    ).rows.map((row) => row.key);

  const publish = (keys: readonly string[], type: string) =>
    store.transaction((tx) =>
      store.publish(
        tx,
        keys.map((key) => ({ type, key, payload: {}, handlers })),
      ),
    );

  it('come before the backlog in a full batch, and never ahead of their key', async () => {
    const backlog = await keysOfLane(20, 'backlog-');
    const [fresh, busyKey] = await keysOfLane(2, 'live-');
    await publish([...backlog, busyKey!], 'first');
    await publish(backlog, 'second');
    const params = { owner: 'w', handlers: ['h'], limit: 10, leaseDurationMs: 60_000, followers: 0 };
    const first = await owners.claim(store, params);
    assert.equal(first.length, 10);

    // Published after the backlog: the newest rows of the lane. busyKey's is behind its pending first delivery.
    await publish([fresh!, busyKey!], 'live');
    const next = await owners.completeAndClaim(store, first.map(leaseOf), { ...params, preferLanes: [LANE] });
    assert.ok(next.completed.every(Boolean), 'the first batch was completed');
    const live = next.claimed.filter((delivery) => delivery.eventType === 'live');
    assert.deepEqual(
      live.map((delivery) => delivery.key),
      [fresh],
      'the new key runs in this claim; the busy key waits for its first delivery',
    );
    assert.equal(next.claimed.length, 10);

    // Without the wake-up, the same new row waits behind the backlog's older heads in a full batch.
    await publish([fresh!], 'unnamed');
    const unnamed = await owners.completeAndClaim(store, next.claimed.map(leaseOf), params);
    assert.equal(unnamed.claimed.filter((delivery) => delivery.eventType === 'unnamed').length, 0);
    await owners.relinquish(store, 'w');
  });
});
