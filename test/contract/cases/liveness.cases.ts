/**
 * Liveness of the claim: no shape of backlog may stop a due head of a key from being claimed. A
 * capped scan in due-time order stalled a lane for good when the window filled with blocked
 * followers: a retried head due later than its followers, a delayed head, or a deep backlog of one
 * key whose head is in flight (holding back every other key of its lane). And a crashed worker's lane
 * must be taken over although every worker's own lanes fill its claims (`acquireWhenFull`).
 */
import assert from 'node:assert/strict';
import { laneOf } from '../../../src/core/lanes.js';
import type { ClaimedDelivery, PublishParams } from '../../../src/store/contract.js';
import {
  claim,
  claimExpecting,
  epochOf,
  event,
  H1,
  H2,
  LEASE_MS,
  leaseOf,
  PAST_LEASE_MS,
  publish,
  viewOf,
  type CaseGroup,
} from './kit.js';
import * as owners from '../../support/claims.js';

/** `count` distinct keys that share the lane of `key` (so they compete in one lane). */
function keysInLaneOf(key: string, count: number): string[] {
  const lane = laneOf(key, 'unused');
  const found: string[] = [];
  for (let i = 0; found.length < count; i += 1) {
    const candidate = `other-${i}`;
    if (laneOf(candidate, 'unused') === lane) found.push(candidate);
  }
  return found;
}

/** `count` event ids `${prefix}N` of unkeyed events that land in `lane`. */
function idsInLane(lane: number, count: number, prefix: string): string[] {
  const found: string[] = [];
  for (let i = 0; found.length < count; i += 1) if (laneOf(null, `${prefix}${i}`) === lane) found.push(`${prefix}${i}`);
  return found;
}

function backlog(key: string, count: number, prefix = key): PublishParams[] {
  return Array.from({ length: count }, (_, i) => event({ id: `${prefix}-${i + 1}`, key }));
}

export const livenessCases: CaseGroup = {
  area: 'liveness',
  cases: [
    {
      name: 'a retried head is claimed as soon as it is due, behind any number of due followers of its key',
      async run({ harness }) {
        await publish(harness, backlog('k', 60));
        const [head] = await claimExpecting(harness, 'w1', ['k-1']);
        const retryAt = new Date(harness.clock.now().getTime() + 10_000);
        assert.equal(
          await harness.store.reschedule(leaseOf(head!), {
            availableAt: retryAt,
            error: 'once',
            now: harness.clock.now(),
          }),
          true,
        );
        assert.deepEqual(await claim(harness, 'w1'), [], 'the followers wait for the head');
        harness.clock.advance(10_000);
        const [retried] = await claimExpecting(harness, 'w1', ['k-1']);
        assert.equal(retried!.attempts, 1);
        assert.deepEqual(await harness.store.completeMany([leaseOf(retried!)], harness.clock.now()), [true]);
        for (let n = 2; n <= 60; n += 1) {
          const [next] = await claimExpecting(harness, 'w1', [`k-${n}`]);
          assert.deepEqual(await harness.store.completeMany([leaseOf(next!)], harness.clock.now()), [true]);
        }
      },
    },
    {
      name: 'a delayed head is claimed when due, although followers of its key were due long before',
      async run({ harness }) {
        await publish(harness, [
          event({ id: 'k-1', key: 'k', availableAt: new Date(harness.clock.now().getTime() + 60_000) }),
        ]);
        await publish(
          harness,
          backlog('k', 60, 'later').map((e) => ({ ...e, key: 'k' })),
        );
        assert.deepEqual(await claim(harness, 'w1'), []);
        harness.clock.advance(60_000);
        const [head] = await claimExpecting(harness, 'w1', ['k-1']);
        await harness.store.completeMany([leaseOf(head!)], harness.clock.now());
        await claimExpecting(harness, 'w1', ['later-1']);
      },
    },
    {
      name: 'a deep backlog of one key whose head is in flight does not hold back the other keys of its lane',
      async run({ harness }) {
        await publish(harness, backlog('deep', 120));
        const others = keysInLaneOf('deep', 12);
        await publish(
          harness,
          others.map((key) => event({ id: `${key}-1`, key })),
        );
        // One claim of 10: the deep key gives its head; the other nine come from the other keys of the lane.
        const first = await claim(harness, 'w1', { limit: 10 });
        assert.equal(first.length, 10, `a full batch (got ${first.map((c) => c.eventId).join(', ')})`);
        assert.deepEqual(
          first.filter((c) => c.key === 'deep').map((c) => c.eventId),
          ['deep-1'],
        );
        // With the deep head still running, the rest of the lane's other keys come next.
        const second = await claim(harness, 'w1', { limit: 10 });
        assert.deepEqual(
          second.map((c) => c.key).sort(),
          others.filter((key) => !first.some((c) => c.key === key)).sort(),
        );
      },
    },
    {
      name: 'every due head of a lane with many blocked keys is claimed within a few claims',
      async run({ harness }) {
        // 30 keys of one lane, each with a running head and 5 blocked followers, then 30 fresh keys of that lane.
        const busy = keysInLaneOf('lane-of-this', 60);
        await publish(
          harness,
          busy.slice(0, 30).flatMap((key) => backlog(key, 6)),
        );
        const heads = [];
        for (let round = 0; round < 10 && heads.length < 30; round += 1)
          heads.push(...(await claim(harness, 'w1', { limit: 10 })));
        assert.equal(heads.length, 30, 'every busy key has its head running');
        await publish(
          harness,
          busy.slice(30).map((key) => event({ id: `${key}-fresh`, key })),
        );
        const fresh = new Set<string>();
        for (let round = 0; round < 6; round += 1) {
          for (const c of await claim(harness, 'w1', { limit: 10 })) fresh.add(c.eventId);
        }
        assert.equal(fresh.size, 30, `every fresh key was claimed (got ${fresh.size})`);
        assert.ok(
          [...fresh].every((id) => id.endsWith('-fresh')),
          'no follower of a running head',
        );
      },
    },
    {
      name: 'a worker whose own lane fills every claim takes over an expired lane only when its claim asks to acquire when full',
      async run({ harness }) {
        const crashedId = 'crashed-0';
        const crashedLane = laneOf(null, crashedId);
        const busyLane = (crashedLane + 1) % 256;
        // The crashed worker's event is older than the whole backlog: once taken over, it is the next one claimed.
        await publish(harness, [event({ id: crashedId, handlers: [{ name: H2, maxAttempts: 5 }] })]);
        harness.clock.advance(1);
        await publish(
          harness,
          idsInLane(busyLane, 20, 'busy-').map((id) => event({ id })),
        );
        const claimAs = (
          owner: string,
          handlers: readonly string[],
          limit: number,
          acquireWhenFull?: boolean,
        ): Promise<ClaimedDelivery[]> =>
          owners.claim(harness.store, {
            owner,
            handlers,
            limit,
            leaseDurationMs: LEASE_MS,
            now: harness.clock.now(),
            ...(acquireWhenFull === undefined ? {} : { acquireWhenFull }),
          });
        const [lost] = await claimAs('crashes', [H2], 1);
        assert.equal(lost?.eventId, crashedId, 'the crashed worker held its lane with this delivery in flight');
        const busyBatch = (claimed: readonly ClaimedDelivery[], what: string) => {
          assert.equal(claimed.length, 2, `${what}: the busy worker's own lane fills the batch`);
          assert.ok(
            claimed.every((c) => c.lane === busyLane),
            `${what}: only from its own lane (got lanes ${claimed.map((c) => c.lane).join(', ')})`,
          );
        };
        busyBatch(await claimAs('busy', [H1, H2], 2), 'first claim');

        harness.clock.advance(PAST_LEASE_MS); // the crashed worker's lease is over
        busyBatch(await claimAs('busy', [H1, H2], 2), 'claim without acquireWhenFull');
        busyBatch(await claimAs('busy', [H1, H2], 2, false), 'claim with acquireWhenFull: false');
        const untouched = await viewOf(harness, lost.id);
        assert.equal(
          untouched.status,
          'processing',
          'without a takeover the expired lane stays with the crashed worker',
        );
        assert.equal(untouched.attempts, 0);

        busyBatch(await claimAs('busy', [H1, H2], 2, true), 'claim with acquireWhenFull');
        const charged = await viewOf(harness, lost.id);
        assert.equal(charged.status, 'pending', 'the takeover took it out of flight');
        assert.equal(charged.attempts, 1, 'the takeover charged the in-flight delivery one attempt');
        assert.match(charged.lastError ?? '', /taken over/);
        assert.deepEqual(
          await harness.store.completeMany([leaseOf(lost)], harness.clock.now()),
          [false],
          'the crashed worker is fenced',
        );

        const next = await claimAs('busy', [H1, H2], 2);
        const rerun = next.find((c) => c.id === lost.id);
        assert.ok(
          rerun,
          `the busy worker re-runs the taken-over delivery (got ${next.map((c) => c.eventId).join(', ')})`,
        );
        assert.equal(rerun.attempts, 1);
        assert.ok(epochOf(rerun) > epochOf(lost), 'under the new epoch of the lane');
      },
    },
  ],
};
