/**
 * completeAndClaim: the completions of one batch ride on the next claim. A completed keyed delivery
 * was its key's head, and every sequence given later is larger, so its key's next pending delivery
 * is the new head and may be claimed in the same call. These cases pin that invariant where it could
 * break: a successor not due yet, a requeued delivery, handler subsets, a takeover between the claim
 * and the completion, and the completion history.
 */
import assert from 'node:assert/strict';
import { InvalidInputError } from '../../../src/core/errors.js';
import { laneOf } from '../../../src/core/lanes.js';
import type { ClaimedDelivery } from '../../../src/store/contract.js';
import type { Harness } from '../../support/harness.js';
import {
  claim,
  claimExpecting,
  event,
  H1,
  H2,
  handlers,
  LEASE_MS,
  leaseOf,
  PAST_LEASE_MS,
  publish,
  viewOf,
  type CaseGroup,
} from './kit.js';
import * as owners from '../../support/claims.js';

function completeAndClaim<TTx>(
  harness: Harness<TTx>,
  owner: string,
  done: readonly ClaimedDelivery[],
  names = [H1, H2],
  limit = 10,
) {
  return owners.completeAndClaim(harness.store, done.map(leaseOf), {
    owner,
    handlers: names,
    limit,
    leaseDurationMs: LEASE_MS,
    now: harness.clock.now(),
  });
}

/** `count` keys, each in a lane of its own. */
function distinctLaneKeys(count: number): string[] {
  const lanes = new Set<number>();
  const keys: string[] = [];
  for (let i = 0; keys.length < count; i += 1) {
    const lane = laneOf(`peer-key-${i}`, '');
    if (!lanes.has(lane)) {
      lanes.add(lane);
      keys.push(`peer-key-${i}`);
    }
  }
  return keys;
}

export const ridingCases: CaseGroup = {
  area: 'complete and claim',
  cases: [
    {
      name: "completes a batch and claims in one call; a completed head's successor comes in the same call",
      async run({ harness }) {
        await publish(harness, [event({ id: 'k-1', key: 'k' }), event({ id: 'k-2', key: 'k' }), event({ id: 'u-1' })]);
        const first = await claim(harness, 'w1');
        assert.deepEqual(first.map((c) => c.eventId).sort(), ['k-1', 'u-1']);
        const result = await completeAndClaim(harness, 'w1', first);
        assert.deepEqual(result.completed, [true, true]);
        assert.deepEqual(
          result.claimed.map((c) => c.eventId),
          ['k-2'],
        );
        const next = await completeAndClaim(harness, 'w1', result.claimed);
        assert.deepEqual(next.completed, [true]);
        assert.deepEqual(next.claimed, []);
        assert.equal((await harness.store.statistics(harness.clock.now())).pending, 0);
      },
    },
    {
      name: 'a stale lease completes nothing and reports false; the rest of the call goes on',
      async run({ harness }) {
        await publish(harness, [event({ id: 'a' }), event({ id: 'b' })]);
        const claimed = await claim(harness, 'w1');
        assert.equal(claimed.length, 2);
        const stale = {
          ...claimed[0]!,
          leaseToken: claimed[0]!.leaseToken.replace(/:(\d+)$/, (_, n: string) => `:${Number(n) + 1}`),
        };
        const result = await completeAndClaim(harness, 'w1', [stale, claimed[1]!]);
        assert.deepEqual(result.completed, [false, true]);
        assert.equal((await viewOf(harness, claimed[0]!.id)).status, 'processing', 'the stale one is still in flight');
      },
    },
    {
      name: 'a successor that is not due yet is not claimed until it is',
      async run({ harness }) {
        await publish(harness, [event({ id: 'k-1', key: 'k' })]);
        await publish(harness, [
          event({ id: 'k-2', key: 'k', availableAt: new Date(harness.clock.now().getTime() + 5_000) }),
        ]);
        const [head] = await claimExpecting(harness, 'w1', ['k-1']);
        const result = await completeAndClaim(harness, 'w1', [head!]);
        assert.deepEqual(result.completed, [true]);
        assert.deepEqual(result.claimed, []);
        harness.clock.advance(5_000);
        await claimExpecting(harness, 'w1', ['k-2']);
      },
    },
    {
      name: 'a completed head of one handler does not hand its successor to a claim for other handlers',
      async run({ harness }) {
        await publish(harness, [
          event({ id: 'k-1', key: 'k', handlers: handlers(H1, H2) }),
          event({ id: 'k-2', key: 'k', handlers: handlers(H1, H2) }),
        ]);
        const both = await claim(harness, 'w1');
        const h1 = both.find((c) => c.handler === H1)!;
        const result = await completeAndClaim(harness, 'w1', [h1], [H2]);
        assert.deepEqual(result.completed, [true]);
        assert.deepEqual(result.claimed, [], 'k-2/h1 is not for an H2-only claim, and k-2/h2 waits for k-1/h2');
        const later = await completeAndClaim(harness, 'w1', [], [H1]);
        assert.deepEqual(
          later.claimed.map((c) => `${c.eventId}/${c.handler}`),
          ['k-2/h1'],
        );
      },
    },
    {
      name: 'a requeued delivery waits at the end of its key: the successor of a completed head is the next in order',
      async run({ harness }) {
        await publish(harness, [
          event({ id: 'k-1', key: 'k' }),
          event({ id: 'k-2', key: 'k' }),
          event({ id: 'k-3', key: 'k' }),
        ]);
        const [first] = await claimExpecting(harness, 'w1', ['k-1']);
        assert.equal(await harness.store.bury(leaseOf(first!), { error: 'poison', now: harness.clock.now() }), true);
        const [second] = await claimExpecting(harness, 'w1', ['k-2']);
        assert.equal(await harness.store.requeue({ deliveryIds: [first!.id], now: harness.clock.now() }), 1);
        const result = await completeAndClaim(harness, 'w1', [second!]);
        assert.deepEqual(
          result.claimed.map((c) => c.eventId),
          ['k-3'],
        );
        const last = await completeAndClaim(harness, 'w1', result.claimed);
        assert.deepEqual(
          last.claimed.map((c) => c.eventId),
          ['k-1'],
          'the requeued one runs last',
        );
      },
    },
    {
      name: 'after a takeover between claim and completion, the old holder completes nothing and gets nothing of that key',
      async run({ harness }) {
        await publish(harness, [event({ id: 'k-1', key: 'k' }), event({ id: 'k-2', key: 'k' })]);
        const [old] = await claimExpecting(harness, 'w1', ['k-1']);
        harness.clock.advance(PAST_LEASE_MS);
        const [taken] = await claimExpecting(harness, 'w2', ['k-1']);
        const result = await completeAndClaim(harness, 'w1', [old!]);
        assert.deepEqual(result.completed, [false]);
        assert.deepEqual(result.claimed, [], 'the lane belongs to w2');
        assert.equal((await viewOf(harness, taken!.id)).status, 'processing');
        const byNewHolder = await completeAndClaim(harness, 'w2', [taken!]);
        assert.deepEqual(byNewHolder.completed, [true]);
        assert.deepEqual(
          byNewHolder.claimed.map((c) => c.eventId),
          ['k-2'],
        );
      },
    },
    {
      name: 'completions that ride on a claim are kept in the completion history',
      needs: ['completionHistory'],
      async run({ target }) {
        const harness = await target.open({ completionHistory: true });
        try {
          await harness.reset();
          await publish(harness, [event({ id: 'k-1', key: 'k' }), event({ id: 'k-2', key: 'k' })]);
          const [head] = await claimExpecting(harness, 'w1', ['k-1']);
          const result = await completeAndClaim(harness, 'w1', [head!]);
          assert.deepEqual(
            result.claimed.map((c) => c.eventId),
            ['k-2'],
          );
          const completed = await harness.store.listDeliveries({ status: 'completed' });
          assert.deepEqual(
            completed.items.map((d) => d.eventId),
            ['k-1'],
          );
        } finally {
          await harness.close();
        }
      },
    },
    {
      name: "reports the lanes other workers hold: neither the claimer's own nor its siblings', nor expired ones",
      async run({ harness }) {
        const keys = distinctLaneKeys(3);
        const claimOne = async (owner: string, id: string, key: string) => {
          await publish(harness, [event({ id, key })]);
          return claimExpecting(harness, owner, [id]);
        };
        const mine = await claimOne('w1', 'mine', keys[0]!);
        await claimOne('w1-sibling', 'sibling', keys[1]!);
        await claimOne('peer', 'peer', keys[2]!);
        // Siblings are named when a session opens: each ask opens one of w1 (a session keeps nothing it needs here).
        const ask = async (siblingOwners?: readonly string[], done: readonly ClaimedDelivery[] = []) =>
          harness.store
            .openClaims('w1', siblingOwners === undefined ? undefined : { siblingOwners })
            .completeAndClaim(done.map(leaseOf), {
              handlers: [H1],
              limit: 10,
              leaseDurationMs: LEASE_MS,
              now: harness.clock.now(),
            });
        assert.equal((await ask(['w1-sibling'], mine)).peerLanes, 1, 'the peer');
        assert.equal((await ask()).peerLanes, 2, 'without siblings named, the sibling counts as a peer');
        harness.clock.advance(PAST_LEASE_MS);
        assert.equal((await ask(['w1-sibling'])).peerLanes, 0, 'expired leases are nobody');
        await assert.rejects(
          ask(['w1-sibling', '']),
          (error: unknown) => error instanceof InvalidInputError && /siblingOwners\[1\]/.test(error.message),
        );
      },
    },
    {
      name: 'completeAndClaim with invalid leases throws RELAYBUS_INVALID_LEASE and changes nothing',
      async run({ harness }) {
        await publish(harness, [event({ id: 'a' })]);
        const [claimed] = await claimExpecting(harness, 'w1', ['a']);
        await assert.rejects(
          owners.completeAndClaim(harness.store, [{ deliveryId: claimed!.id, leaseToken: 'not-a-lease' }], {
            owner: 'w1',
            handlers: [H1],
            limit: 10,
            leaseDurationMs: LEASE_MS,
            now: harness.clock.now(),
          }),
          (error: unknown) => (error as { code?: string }).code === 'RELAYBUS_INVALID_LEASE',
        );
        assert.equal((await viewOf(harness, claimed!.id)).status, 'processing');
      },
    },
  ],
};
