/**
 * `store.cancel` against a claim at the same moment, on real Postgres: either the delivery runs or it is cancelled,
 * never both. The two statements are lined up behind a lock on the lane held by a third transaction, so both read
 * the deliveries before either writes; whichever gets the lane first wins, and the other must see it:
 *
 * - the claim first: it records the delivery in flight; the cancel, which reads the locked (latest) lane row, reports
 *   it running and deletes nothing;
 * - the cancel first: it deletes the delivery and rewrites the lane row; the claim, whose snapshot still shows the
 *   delivery pending, skips the lane because its row changed (without that rewrite it would hand the delivery out).
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import type pg from 'pg';
import { laneOf } from '../../src/core/lanes.js';
import type { PgClientLike, PostgresStore } from '../../src/postgres/index.js';
import type { CancelResult, ClaimedDelivery } from '../../src/store/contract.js';
import * as owners from '../support/claims.js';
import { findPostgres } from '../support/databases.js';
import { usePgStore } from '../support/pg-store.js';

const found = await findPostgres();
const handlers = [{ name: 'a', maxAttempts: 3 }];
const ROUNDS = 4;

/** A key other than `taken` whose lane is `lane`. */
function keyInLane(lane: number, prefix: string): string {
  for (let n = 0; ; n += 1) if (laneOf(`${prefix}-${n}`, '') === lane) return `${prefix}-${n}`;
}

describe('cancel and a claim at the same moment, on real Postgres', {
  skip: 'skip' in found ? found.skip : undefined,
}, () => {
  let pool: pg.Pool;
  let store: PostgresStore<PgClientLike>;
  const schema = usePgStore('cancel_race', 6, (opened) => ({ pool, store } = opened));

  /**
   * The owner holds a lane (it runs a delivery there); a target event is published in the same lane; the claim and
   * the cancel are sent, in `first`'s order, while another transaction holds the lane; then the lane is let go.
   */
  async function race(
    round: string,
    first: 'claim' | 'cancel',
  ): Promise<{ claimed: ClaimedDelivery[]; cancel: CancelResult }> {
    const owner = `race-${round}`;
    const params = { owner, handlers: ['a'], limit: 10, leaseDurationMs: 30_000 };
    const holderKey = `holder-${round}`;
    await store.transaction((tx) => store.publish(tx, [{ type: 't', key: holderKey, payload: {}, handlers }]));
    const [holder] = await owners.claim(store, params);
    assert.ok(holder, 'the owner holds a lane');
    const targetId = `target-${round}`;
    await store.transaction((tx) =>
      store.publish(tx, [{ id: targetId, type: 't', key: keyInLane(holder.lane, round), payload: {}, handlers }]),
    );

    const blocker = await pool.connect();
    try {
      await blocker.query('BEGIN');
      const blockerPid = (await blocker.query<{ pid: number }>('SELECT pg_backend_pid() AS pid')).rows[0]!.pid;
      await blocker.query(`SELECT 1 FROM "${schema}".relaybus_lanes WHERE lane = $1 FOR NO KEY UPDATE`, [holder.lane]);
      const sends = { claim: () => owners.claim(store, params), cancel: () => store.cancel({ eventId: targetId }) };
      const other = first === 'claim' ? 'cancel' : 'claim';
      const firstDone = sends[first]();
      await waitingForLocks(blockerPid, 1);
      const otherDone = sends[other]();
      await waitingForLocks(blockerPid, 2);
      await blocker.query('COMMIT');
      const [a, b] = await Promise.all([firstDone, otherDone]);
      const claimed = (first === 'claim' ? a : b) as ClaimedDelivery[];
      const cancel = (first === 'cancel' ? a : b) as CancelResult;
      return { claimed: claimed.filter((delivery) => delivery.eventId === targetId), cancel };
    } finally {
      blocker.release();
    }
  }

  /** Until `count` sessions wait, directly or behind one another, for the blocker's lock on the lane. */
  async function waitingForLocks(blockerPid: number, count: number): Promise<void> {
    for (let tries = 0; tries < 500; tries += 1) {
      const { rows } = await pool.query<{ waiting: number }>(
        // Blocked by the blocker, or by a session it blocks (the second waiter queues behind the first's tuple lock).
        `WITH RECURSIVE chain(pid) AS (
           SELECT $1::int
           UNION SELECT a.pid FROM pg_stat_activity a JOIN chain c ON c.pid = ANY (pg_blocking_pids(a.pid)))
         SELECT (count(*) - 1)::int AS waiting FROM chain`,
        [blockerPid],
      );
      if (rows[0]!.waiting >= count) return;
      await sleep(10);
    }
    assert.fail(`${count} statements never waited for the lane`);
  }

  it('the claim first: the delivery runs, and the cancel reports it running and deletes nothing', async () => {
    for (let round = 0; round < ROUNDS; round += 1) {
      const { claimed, cancel } = await race(`c${round}`, 'claim');
      assert.equal(claimed.length, 1, 'the claim handed the delivery out');
      assert.deepEqual(
        cancel.deliveries.map((d) => d.outcome),
        ['running'],
      );
    }
  });

  it('the cancel first: the delivery is cancelled, and the claim does not hand it out', async () => {
    for (let round = 0; round < ROUNDS; round += 1) {
      const { claimed, cancel } = await race(`x${round}`, 'cancel');
      assert.deepEqual(
        cancel.deliveries.map((d) => d.outcome),
        ['cancelled'],
      );
      assert.deepEqual(claimed, [], 'a cancelled delivery never runs');
    }
  });
});
