/** Claim: due work only, limits, handler filter, lane exclusivity, takeover after lease expiry, lease renewal. */
import assert from 'node:assert/strict';
import { laneOf } from '../../../src/core/lanes.js';
import { parseLeaseToken } from '../../../src/core/lease-token.js';
import {
  allDeliveries,
  claim,
  claimExpecting,
  epochOf,
  event,
  H1,
  H2,
  handlers,
  LEASE_MS,
  leaseOf,
  PAST_LEASE_MS,
  publish,
  rejectsWithCode,
  viewOf,
  type CaseGroup,
} from './kit.js';
import * as owners from '../../support/claims.js';

export const claimCases: CaseGroup = {
  area: 'claim',
  cases: [
    {
      name: 'a claim returns due deliveries with a lane:epoch:claims lease token',
      async run({ harness }) {
        await publish(harness, [event({ id: 'e1' })]);
        const [claimed] = await claimExpecting(harness, 'w1', ['e1']);
        const token = parseLeaseToken(claimed!.leaseToken);
        assert.equal(token.lane, claimed!.lane);
        assert.equal(token.claims, 0);
        assert.ok(BigInt(token.epoch) >= 1n, 'acquiring a lane bumps its epoch');
        assert.equal((await viewOf(harness, claimed!.id)).status, 'processing');
      },
    },
    {
      name: 'a claim hands back every field as published: quotes, backslashes, unicode, nesting, big numbers',
      async run({ harness }) {
        const awkward = 'quote " backslash \\ tab \t newline \n unicode é 😀 end';
        const payload = { text: awkward, nested: { list: [1, -2.5, null, true, 'x'] }, big: 9_007_199_254_740_991 };
        const headers = { 'trace-id': awkward, plain: 'v' };
        const large = { text: 'x'.repeat(4_000) }; // too big to travel inline: an events row carries it
        await publish(harness, [
          event({ id: 'e-awkward', key: awkward, payload, headers }),
          event({ id: 'e-large', payload: large }),
          event({ payload: [awkward, 0] }),
        ]);
        const claimed = await claim(harness, 'w1', { limit: 10 });
        assert.equal(claimed.length, 3);
        const byPayloadKind = (predicate: (p: unknown) => boolean) => claimed.find((c) => predicate(c.payload))!;
        const first = claimed.find((c) => c.eventId === 'e-awkward')!;
        assert.deepEqual(first.payload, payload);
        assert.deepEqual(first.headers, headers);
        assert.equal(first.key, awkward);
        assert.equal(first.eventType, 'test.event');
        assert.equal(first.handler, H1);
        assert.equal(first.attempts, 0);
        assert.equal(first.maxAttempts, 5);
        assert.ok(first.sequence !== null && /^\d+$/.test(first.sequence), 'a keyed delivery has a sequence');
        assert.equal(first.createdAt.getTime(), harness.clock.now().getTime());
        assert.equal(first.availableAt.getTime(), harness.clock.now().getTime());
        assert.equal(first.notBefore, undefined);
        assert.deepEqual(claimed.find((c) => c.eventId === 'e-large')!.payload, large);
        const unkeyed = byPayloadKind((p) => Array.isArray(p));
        assert.deepEqual(unkeyed.payload, [awkward, 0]);
        assert.equal(unkeyed.key, null);
        assert.equal(unkeyed.sequence, null);
        assert.deepEqual(unkeyed.headers, {});
      },
    },
    {
      name: 'a claim respects its limit and never returns a delivery twice while it is in flight',
      async run({ harness }) {
        const ids = Array.from({ length: 10 }, (_, i) => `e${i}`);
        await publish(
          harness,
          ids.map((id) => event({ id })),
        );
        const seen: string[] = [];
        const first = await claim(harness, 'w1', { limit: 3 });
        assert.equal(first.length, 3);
        seen.push(...first.map((c) => c.id));
        harness.clock.advance(1_000);
        const second = await claim(harness, 'w1', { limit: 3 });
        assert.equal(second.length, 3);
        seen.push(...second.map((c) => c.id));
        for (let round = 0; round < 4; round += 1) {
          for (const owner of ['w2', 'w1']) {
            const more = await claim(harness, owner, { limit: 10 });
            assert.ok(more.length <= 10);
            seen.push(...more.map((c) => c.id));
          }
        }
        assert.equal(new Set(seen).size, seen.length, 'no delivery was returned twice');
        assert.equal(seen.length, 10, 'every delivery was claimed once');
        assert.deepEqual(await claim(harness, 'w3'), []);
        assert.ok((await allDeliveries(harness)).every((d) => d.status === 'processing'));
      },
    },
    {
      name: 'a claim returns only deliveries of the handlers it asks for',
      async run({ harness }) {
        await publish(harness, [
          event({ id: 'e1', handlers: handlers(H1, H2) }),
          event({ id: 'e2', handlers: handlers(H2) }),
        ]);
        const onlyH2 = await claim(harness, 'w1', { handlers: [H2] });
        assert.deepEqual(onlyH2.map((c) => [c.eventId, c.handler]).sort(), [
          ['e1', H2],
          ['e2', H2],
        ]);
        const rest = await claim(harness, 'w1', { handlers: [H1] });
        assert.deepEqual(
          rest.map((c) => [c.eventId, c.handler]),
          [['e1', H1]],
        );
        assert.deepEqual(await claim(harness, 'w1', { handlers: ['h3'] }), []);
      },
    },
    {
      name: 'a claim takes no lane for work of handlers it does not run',
      async run({ harness }) {
        await publish(harness, [event({ id: 'e1', handlers: handlers(H2) })]);
        assert.deepEqual(await claim(harness, 'w1', { handlers: [H1] }), []);
        assert.equal((await harness.store.statistics(harness.clock.now())).lanesLeased, 0);
        await claimExpecting(harness, 'w2', ['e1'], { handlers: [H2] });
      },
    },
    {
      name: 'a delivery with a delayed availableAt is not claimable before it',
      async run({ harness }) {
        const at = new Date(harness.clock.now().getTime() + 60_000);
        await publish(harness, [event({ id: 'later', availableAt: at })]);
        assert.equal((await allDeliveries(harness))[0]?.availableAt.getTime(), at.getTime());
        assert.deepEqual(await claim(harness, 'w1'), []);
        harness.clock.advance(59_999);
        assert.deepEqual(await claim(harness, 'w1'), []);
        harness.clock.advance(1);
        await claimExpecting(harness, 'w1', ['later']);
      },
    },
    {
      name: 'a claimed delivery carries its due time and creation time to the millisecond, as listed',
      async run({ harness }) {
        // An odd millisecond count: a claim that read the times in other units, or rounded, would differ.
        const at = new Date(Math.floor(harness.clock.now().getTime() / 1000) * 1000 + 60_007);
        await publish(harness, [event({ id: 'timed', availableAt: at })]);
        const [listed] = await allDeliveries(harness);
        harness.clock.advance(61_000);
        const [claimed] = await claimExpecting(harness, 'w1', ['timed']);
        assert.equal(claimed?.availableAt.getTime(), at.getTime());
        assert.equal(claimed?.createdAt.getTime(), listed?.createdAt.getTime());
      },
    },
    {
      name: 'another owner cannot claim from a lane held under a live lease',
      async run({ harness }) {
        // One keyed event with two handlers: both deliveries live in the same lane.
        await publish(harness, [event({ id: 'e1', key: 'k', handlers: handlers(H1, H2) })]);
        const [first] = await claim(harness, 'w1', { limit: 1 });
        assert.ok(first);
        harness.clock.advance(LEASE_MS - 1);
        assert.deepEqual(await claim(harness, 'w2'), []);
        const [second] = await claim(harness, 'w1');
        assert.ok(second);
        assert.notEqual(second.handler, first.handler);
        assert.equal(epochOf(second), epochOf(first), 'the owner keeps its lane at the same epoch');
      },
    },
    {
      name: 'a takeover after the lease expired charges one attempt and returns the delivery again',
      async run({ harness }) {
        await publish(harness, [event({ id: 'e1' })]);
        const [crashed] = await claimExpecting(harness, 'w1', ['e1']);
        harness.clock.advance(LEASE_MS - 1);
        assert.deepEqual(await claim(harness, 'w2'), [], 'not before the lease expired');
        harness.clock.advance(2);
        const [again] = await claimExpecting(harness, 'w2', ['e1']);
        assert.equal(again!.id, crashed!.id);
        assert.equal(again!.attempts, 1);
        assert.ok(epochOf(again!) > epochOf(crashed!), 'a takeover bumps the epoch');
        const view = await viewOf(harness, again!.id);
        assert.equal(view.status, 'processing');
        assert.equal(view.attempts, 1);
        assert.equal(typeof view.lastError, 'string');
        assert.match(view.lastError!, /lease|taken over/i);
      },
    },
    {
      name: 'a poison delivery whose workers keep crashing ends dead with lastError set',
      async run({ harness }) {
        await publish(harness, [event({ id: 'poison', handlers: [{ name: H1, maxAttempts: 3 }] })]);
        let [claimed] = await claimExpecting(harness, 'worker-0', ['poison']);
        for (let crash = 1; crash < 3; crash += 1) {
          harness.clock.advance(PAST_LEASE_MS);
          [claimed] = await claimExpecting(harness, `worker-${crash}`, ['poison']);
          assert.equal(claimed!.attempts, crash);
        }
        harness.clock.advance(PAST_LEASE_MS);
        assert.deepEqual(await claim(harness, 'worker-3'), [], 'the third lost attempt dead-letters it');
        const view = await viewOf(harness, claimed!.id);
        assert.equal(view.status, 'dead');
        assert.equal(view.attempts, 3);
        assert.ok(view.lastError && view.lastError.length > 0);
        harness.clock.advance(86_400_000);
        assert.deepEqual(await claim(harness, 'worker-4'), []);
      },
    },
    {
      name: 'extendLease keeps a lane past its original lease',
      async run({ harness }) {
        await publish(harness, [event({ id: 'e1' })]);
        const [claimed] = await claimExpecting(harness, 'w1', ['e1']);
        harness.clock.advance(LEASE_MS - 10_000);
        const lanes = [{ lane: claimed!.lane, epoch: String(epochOf(claimed!)) }];
        assert.deepEqual(
          await harness.store.extendLease({ owner: 'w1', lanes, leaseDurationMs: LEASE_MS, now: harness.clock.now() }),
          { extended: [claimed!.lane], lost: [] },
        );
        harness.clock.advance(20_000); // past the original lease, inside the extended one
        assert.deepEqual(await claim(harness, 'w2'), []);
        const view = await viewOf(harness, claimed!.id);
        assert.equal(view.attempts, 0);
        assert.equal(view.status, 'processing');
        assert.deepEqual(await harness.store.completeMany([leaseOf(claimed!)], harness.clock.now()), [true]);
      },
    },
    {
      name: 'extendLease reports a lane as lost after another owner took it over',
      async run({ harness }) {
        await publish(harness, [event({ id: 'e1' })]);
        const [claimed] = await claimExpecting(harness, 'w1', ['e1']);
        harness.clock.advance(PAST_LEASE_MS);
        await claimExpecting(harness, 'w2', ['e1']);
        const lanes = [{ lane: claimed!.lane, epoch: String(epochOf(claimed!)) }];
        assert.deepEqual(
          await harness.store.extendLease({ owner: 'w1', lanes, leaseDurationMs: LEASE_MS, now: harness.clock.now() }),
          { extended: [], lost: [claimed!.lane] },
        );
      },
    },
    {
      name: 'extendLease reports a lane as lost when its owner holds it again at a newer epoch',
      async run({ harness }) {
        // w1 loses the lane to w2, w2 finishes and hands it back, w1 acquires it again: work claimed
        // at the first epoch is fenced, and renewing that epoch must say so.
        await publish(harness, [event({ id: 'e1', key: 'k' })]);
        const [old] = await claimExpecting(harness, 'w1', ['e1']);
        harness.clock.advance(PAST_LEASE_MS);
        const [taken] = await claimExpecting(harness, 'w2', ['e1']);
        await harness.store.completeMany([leaseOf(taken!)], harness.clock.now());
        assert.equal(await owners.relinquish(harness.store, 'w2'), 1);
        await publish(harness, [event({ id: 'e2', key: 'k' })]);
        const [fresh] = await claimExpecting(harness, 'w1', ['e2']);
        assert.equal(fresh!.lane, old!.lane);
        const renew = (claimed: typeof old) =>
          harness.store.extendLease({
            owner: 'w1',
            lanes: [{ lane: claimed!.lane, epoch: String(epochOf(claimed!)) }],
            leaseDurationMs: LEASE_MS,
            now: harness.clock.now(),
          });
        assert.deepEqual(await renew(old), { extended: [], lost: [old!.lane] });
        assert.deepEqual(await renew(fresh), { extended: [fresh!.lane], lost: [] });
      },
    },
    {
      name: 'a claim hands back held lanes that run nothing',
      async run({ harness }) {
        await publish(harness, [event({ id: 'e1' })]);
        const [claimed] = await claimExpecting(harness, 'w1', ['e1']);
        assert.equal((await harness.store.statistics(harness.clock.now())).lanesLeased, 1);
        assert.deepEqual(await harness.store.completeMany([leaseOf(claimed!)], harness.clock.now()), [true]);
        assert.deepEqual(await claim(harness, 'w1'), []);
        assert.equal((await harness.store.statistics(harness.clock.now())).lanesLeased, 0);
      },
    },
    {
      name: 'forgetInFlight: what a claim whose answer was lost recorded is claimable again; what the worker holds is not',
      async run({ harness }) {
        // Two keys: the worker got e1; the claim that recorded e2 lost its answer (e2 in flight, run by no one).
        await publish(harness, [event({ id: 'e1', key: 'k1' }), event({ id: 'e2', key: 'k2' })]);
        const [held] = await claimExpecting(harness, 'w1', ['e1'], { limit: 1 });
        const [lost] = await claimExpecting(harness, 'w1', ['e2'], { limit: 1 });
        await claimExpecting(harness, 'w1', [], { limit: 10 });
        assert.equal(await owners.forgetInFlight(harness.store, { owner: 'w1', holding: [held!.id] }), 1);
        const [again] = await claimExpecting(harness, 'w1', ['e2'], { limit: 10 });
        assert.equal(again!.id, lost!.id);
        assert.equal(again!.attempts, 0, 'no attempt charged');
        assert.deepEqual(
          await harness.store.completeMany([leaseOf(held!), leaseOf(again!)], harness.clock.now()),
          [true, true],
          'the held lease still completes',
        );
        assert.equal(
          await owners.forgetInFlight(harness.store, { owner: 'w1', holding: [] }),
          0,
          'nothing left to forget',
        );
        assert.equal(await owners.forgetInFlight(harness.store, { owner: 'nobody', holding: [] }), 0);
        await rejectsWithCode(
          owners.forgetInFlight(harness.store, { owner: 'w1', holding: ['x'] }),
          'RELAYBUS_INVALID_INPUT',
        );
      },
    },
    {
      name: 'a claim takes the lanes named in preferLanes first',
      async run({ harness }) {
        // 32 keys in 32 different lanes, each with due work; the first round takes only four lanes. The wanted lane's
        // event is the oldest, so once its lane is taken it is the one claimed; without the preference a store that
        // starts from another lane would take it 1 time in 8 at most.
        const keys: string[] = [];
        const lanes = new Set<number>();
        for (let i = 0; keys.length < 32; i += 1) {
          const lane = laneOf(`pref-${i}`, '');
          if (lanes.has(lane)) continue;
          lanes.add(lane);
          keys.push(`pref-${i}`);
        }
        for (const [i, key] of keys.entries()) {
          await publish(harness, [event({ id: `p${i}`, key })]);
          harness.clock.advance(1);
        }
        const wanted = laneOf(keys[0]!, '');
        const claimed = await owners.claim(harness.store, {
          owner: 'w1',
          handlers: [H1],
          limit: 1,
          leaseDurationMs: LEASE_MS,
          now: harness.clock.now(),
          preferLanes: [wanted],
        });
        assert.deepEqual(
          claimed.map((c) => [c.eventId, c.lane]),
          [['p0', wanted]],
        );
      },
    },
    {
      name: 'a claim with invalid parameters throws RELAYBUS_INVALID_INPUT and takes no lane',
      async run({ harness }) {
        await publish(harness, [event({ id: 'e1' })]);
        const now = harness.clock.now();
        const base = { owner: 'w1', handlers: [H1], limit: 10, leaseDurationMs: LEASE_MS, now };
        await rejectsWithCode(owners.claim(harness.store, { ...base, limit: 0 }), 'RELAYBUS_INVALID_INPUT');
        await rejectsWithCode(owners.claim(harness.store, { ...base, handlers: [] }), 'RELAYBUS_INVALID_INPUT');
        await rejectsWithCode(
          owners.claim(harness.store, { ...base, acquireWhenFull: 'yes' as unknown as boolean }),
          'RELAYBUS_INVALID_INPUT',
        );
        await rejectsWithCode(owners.claim(harness.store, { ...base, owner: '' }), 'RELAYBUS_INVALID_INPUT');
        await rejectsWithCode(owners.claim(harness.store, { ...base, preferLanes: [256] }), 'RELAYBUS_INVALID_INPUT');
        await rejectsWithCode(owners.claim(harness.store, { ...base, leaseDurationMs: 0 }), 'RELAYBUS_INVALID_INPUT');
        await rejectsWithCode(
          owners.claim(harness.store, { ...base, now: new Date(Number.NaN) }),
          'RELAYBUS_INVALID_INPUT',
        );
        assert.equal((await harness.store.statistics(now)).lanesLeased, 0);
        // Had a rejected claim taken the lane for w1, w2 would get nothing under w1's live lease.
        const [claimed] = await claimExpecting(harness, 'w2', ['e1']);
        assert.equal(claimed!.attempts, 0);
      },
    },
  ],
};
