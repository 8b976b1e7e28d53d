/**
 * Every statement that locks several lane rows takes them in one order (ascending lane), so two
 * statements of the same worker never deadlock. Before this was true, `claim-held-lanes` (lane order)
 * and `extend-lease` (the renewer's map order) of one owner deadlocked under a short lease, and the
 * renewal that Postgres cancelled could cost the lease. Here one owner holds many lanes and claims and
 * renews them concurrently, renewals listing the lanes in reverse and shuffled order.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { PgClientLike, PostgresStore } from '../../src/postgres/index.js';
import { parseLeaseToken } from '../../src/core/lease-token.js';
import { findPostgres } from '../support/databases.js';
import { usePgStore } from '../support/pg-store.js';
import * as owners from '../support/claims.js';

const found = await findPostgres();
/** How long claims and renewals race; a deadlock showed within a second or two before the fix. */
const RACE_MS = 6_000;

describe('lane lock order on real Postgres', { skip: 'skip' in found ? found.skip : undefined }, () => {
  let store: PostgresStore<PgClientLike>;
  usePgStore('lock_order', 8, (opened) => ({ store } = opened));

  it('claims and lease renewals of one owner over many lanes never deadlock', async () => {
    const handlers = [{ name: 'h', maxAttempts: 3 }];
    // Unkeyed events spread over every lane; nothing is completed, so every claimed lane stays held.
    for (let batch = 0; batch < 8; batch += 1) {
      await store.transaction((tx) =>
        store.publish(
          tx,
          Array.from({ length: 500 }, (_, i) => ({
            type: 'thing.happened',
            payload: { n: batch * 500 + i },
            handlers,
          })),
        ),
      );
    }
    const owner = 'lock-order-worker';
    const leaseDurationMs = 2_000;
    const epochs = new Map<number, string>();
    const record = (leases: readonly string[]) => {
      for (const lease of leases) {
        const { lane, epoch } = parseLeaseToken(lease);
        epochs.set(lane, epoch);
      }
    };
    record(
      (await owners.claim(store, { owner, handlers: ['h'], limit: 2_000, leaseDurationMs })).map((d) => d.leaseToken),
    );
    assert.ok(epochs.size >= 64, `the owner holds many lanes (held ${epochs.size})`);

    const deadline = Date.now() + RACE_MS;
    const failures: string[] = [];
    let claims = 0;
    let renewals = 0;
    let lost = 0;
    const guard = async (what: string, fn: () => Promise<void>) => {
      while (Date.now() < deadline) {
        try {
          await fn();
        } catch (error) {
          failures.push(`${what}: ${(error as Error).message}`);
        }
      }
    };
    const claimer = () =>
      guard('claim', async () => {
        record(
          (await owners.claim(store, { owner, handlers: ['h'], limit: 4, leaseDurationMs })).map((d) => d.leaseToken),
        );
        claims += 1;
      });
    const renewer = (order: 'reverse' | 'shuffled') =>
      guard('extendLease', async () => {
        const lanes = [...epochs].map(([lane, epoch]) => ({ lane, epoch }));
        if (order === 'reverse') lanes.sort((a, b) => b.lane - a.lane);
        else lanes.sort(() => Math.random() - 0.5);
        const result = await store.extendLease({ owner, lanes, leaseDurationMs });
        lost += result.lost.length;
        renewals += 1;
      });
    await Promise.all([claimer(), claimer(), renewer('reverse'), renewer('shuffled')]);

    assert.deepEqual(failures.slice(0, 5), [], `${failures.length} statements failed (deadlocks are 40P01)`);
    assert.equal(lost, 0, 'no lane lease was lost while its owner renewed it');
    assert.ok(claims > 10 && renewals > 10, `both sides ran (claims ${claims}, renewals ${renewals})`);
  });
});
