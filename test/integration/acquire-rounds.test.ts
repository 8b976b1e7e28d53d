/**
 * How many acquire-lanes statements a claim runs. A claim whose held lanes do not fill its batch takes free lanes in
 * rounds (an acquire, then a claim of the held lanes, per round). The first round is as large as what the owner's last
 * claim took in all (32 when it took none): a backlog drained lane by lane (followers read a key's whole run) hands
 * back and takes lanes in every claim, and rounds from 4 up cost a statement pair each. A new owner takes lanes first.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type pg from 'pg';
import type { PgClientLike, PostgresStore } from '../../src/postgres/index.js';
import type { OwnerClaimParams as ClaimParams } from '../support/claims.js';
import { findPostgres } from '../support/databases.js';
import { keysInLane } from '../support/lanes.js';
import { usePgStore } from '../support/pg-store.js';
import * as owners from '../support/claims.js';

const found = await findPostgres();
const handlers = [{ name: 'a', maxAttempts: 3 }];

describe('acquire rounds on real Postgres', { skip: 'skip' in found ? found.skip : undefined }, () => {
  let pool: pg.Pool;
  let store: PostgresStore<PgClientLike>;
  // One connection: the prepared statements' execution counters live per connection.
  usePgStore('acquire_rounds', 1, (opened) => ({ pool, store } = opened));

  /** How many times this connection ran a statement (by its file name) so far. */
  async function runs(statement: 'acquire-lanes' | 'claim-held-lanes'): Promise<number> {
    const { rows } = await pool.query<{ runs: string | null }>(
      `SELECT sum(generic_plans + custom_plans) AS runs FROM pg_prepared_statements WHERE name LIKE $1`,
      [`relaybus_${statement.replaceAll('-', '_')}%`],
    );
    return Number(rows[0]?.runs ?? 0);
  }
  const acquires = () => runs('acquire-lanes');

  /** One keyed event in each of `lanes`. */
  async function publishInto(lanes: readonly number[], prefix: string): Promise<void> {
    await store.transaction((tx) =>
      store.publish(
        tx,
        lanes.map((lane) => ({ type: 't', key: keysInLane(lane, prefix, 1)[0]!, payload: { lane }, handlers })),
      ),
    );
  }

  it("starts taking lanes at what the owner's last claim took, not at 32 again", async () => {
    const params: ClaimParams = { owner: 'rounds-w', handlers: ['a'], limit: 500, leaseDurationMs: 30_000 };
    const first = Array.from({ length: 160 }, (_, i) => i);
    const second = Array.from({ length: 96 }, (_, i) => 160 + i);
    await publishInto(first, 'one');

    const before = await acquires();
    const claimsBefore = await runs('claim-held-lanes');
    const wave = await owners.claim(store, params);
    assert.equal(wave.length, 160);
    // 32 and 64 lanes, then a round of 128 that finds the last 64.
    assert.equal((await acquires()) - before, 3);
    // A new owner holds no lane: it takes free lanes first, so each round is one acquire and one claim, with no claim
    // of its (no) held lanes before them.
    assert.equal((await runs('claim-held-lanes')) - claimsBefore, 3);

    // Every lane drained: the claim that completes the wave hands them back, and the next wave is in the 96 others.
    await publishInto(second, 'two');
    const between = await acquires();
    const next = await owners.completeAndClaim(
      store,
      wave.map((d) => ({ deliveryId: d.id, leaseToken: d.leaseToken })),
      params,
    );
    assert.ok(
      next.completed.every((done) => done),
      'the first wave completed',
    );
    assert.deepEqual(
      [...new Set(next.claimed.map((d) => d.lane))].sort((a, b) => a - b),
      second,
    );
    // One round of 160 takes them all (from 32 again: rounds of 32, 64 and 128).
    assert.equal((await acquires()) - between, 1);

    await store.completeMany(next.claimed.map((d) => ({ deliveryId: d.id, leaseToken: d.leaseToken })));
    await owners.relinquish(store, params.owner);
  });

  /**
   * An owner holding lane `held` (one delivery in flight), then a new key's event in that lane and one in the free lane
   * `free`: completes the first delivery riding on a claim with `extra`, and returns what that claim did.
   */
  async function completeAndClaimNext(owner: string, held: number, free: number, extra: Partial<ClaimParams>) {
    const params: ClaimParams = { owner, handlers: ['a'], limit: 500, leaseDurationMs: 30_000 };
    await publishInto([held], `${owner}-held`);
    const [inFlight] = await owners.claim(store, params);
    assert.equal(inFlight?.lane, held);
    await publishInto([held, free], `${owner}-more`);
    const claimsBefore = await runs('claim-held-lanes');
    const next = await owners.completeAndClaim(store, [{ deliveryId: inFlight.id, leaseToken: inFlight.leaseToken }], {
      ...params,
      ...extra,
    });
    const claims = (await runs('claim-held-lanes')) - claimsBefore;
    await store.completeMany(next.claimed.map((d) => ({ deliveryId: d.id, leaseToken: d.leaseToken })));
    await owners.relinquish(store, owner);
    return { completed: next.completed, lanes: next.claimed.map((d) => d.lane).sort((a, b) => a - b), claims };
  }

  it('with freeLanes first, takes the free lanes with work first and claims every held lane in one statement', async () => {
    // Under a light load the dispatcher's claim that looks at free lanes asks for this: its held lanes will not fill
    // the batch, so the free lanes are looked at anyway, and taking them first saves the second claim statement.
    const first = await completeAndClaimNext('free-first', 10, 11, { freeLanes: 'first' });
    assert.deepEqual(first.completed, [true], 'the completion rode on the claim');
    assert.deepEqual(first.lanes, [10, 11]);
    assert.equal(first.claims, 1, 'one claim of the held lanes, after the acquire');
    // Without it: the held lanes first, then the acquire, then a claim of the lane it took.
    const heldFirst = await completeAndClaimNext('held-first', 20, 21, {});
    assert.deepEqual(heldFirst.completed, [true]);
    assert.deepEqual(heldFirst.lanes, [20, 21]);
    assert.equal(heldFirst.claims, 2);
    await assert.rejects(
      owners.claim(store, { owner: 'x', handlers: ['a'], limit: 1, leaseDurationMs: 1_000, freeLanes: 1 as never }),
      /freeLanes must be 'skip', 'first' or 'when-due'/,
    );
  });
});
