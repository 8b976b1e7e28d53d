/** Graceful shutdown: release charges nothing, closing a claim session hands idle lanes back at once. */
import assert from 'node:assert/strict';
import { InvalidInputError } from '../../../src/core/errors.js';
import {
  claim,
  claimExpecting,
  claimsOf,
  event,
  H1,
  H2,
  handlers,
  leaseOf,
  publish,
  LEASE_MS,
  rejectsWithCode,
  viewOf,
  type CaseGroup,
} from './kit.js';
import * as owners from '../../support/claims.js';

export const shutdownCases: CaseGroup = {
  area: 'shutdown',
  cases: [
    {
      name: 'a closed claim session hands its idle lanes back and claims no more; a new session of the owner claims again',
      async run({ harness }) {
        const params = () => ({ handlers: [H1], limit: 10, leaseDurationMs: LEASE_MS, now: harness.clock.now() });
        await publish(harness, [event({ id: 'e1' })]);
        const session = harness.store.openClaims('w1');
        assert.equal(session.owner, 'w1');
        const [claimed] = await session.claim(params());
        assert.equal(claimed?.eventId, 'e1');
        assert.deepEqual(await harness.store.completeMany([leaseOf(claimed!)], harness.clock.now()), [true]);
        assert.equal(await session.close(), 1, 'its one lane, idle now');
        assert.deepEqual(await harness.store.listLanes(), []);
        await rejectsWithCode(session.claim(params()), 'RELAYBUS_INVALID_STATE');
        await rejectsWithCode(session.completeAndClaim([], params()), 'RELAYBUS_INVALID_STATE');
        await publish(harness, [event({ id: 'e2' })]);
        const again = harness.store.openClaims('w1');
        assert.deepEqual(
          (await again.claim(params())).map((d) => d.eventId),
          ['e2'],
        );
        assert.equal(await again.close(), 0, 'a lane with work in flight stays');
      },
    },
    {
      name: 'openClaims refuses a bad owner or options before anything opens',
      async run({ harness }) {
        const refused = (open: () => unknown, pattern: RegExp) =>
          assert.throws(open, (error: unknown) => error instanceof InvalidInputError && pattern.test(error.message));
        refused(() => harness.store.openClaims(''), /owner/);
        refused(() => harness.store.openClaims('w1', { siblingOwners: ['ok', ''] }), /siblingOwners\[1\]/);
        refused(
          () => harness.store.openClaims('w1', { holdConnection: 'yes' as never }),
          /holdConnection must be a boolean/,
        );
      },
    },
    {
      name: 'release gives a delivery back without charging an attempt',
      async run({ harness }) {
        await publish(harness, [event({ id: 'e1' })]);
        const [claimed] = await claimExpecting(harness, 'w1', ['e1']);
        harness.clock.advance(1_000);
        assert.deepEqual(await harness.store.release([leaseOf(claimed!)], harness.clock.now()), [true]);
        const view = await viewOf(harness, claimed!.id);
        assert.deepEqual([view.status, view.attempts, view.lastError], ['pending', 0, null]);
        assert.ok(view.availableAt.getTime() <= harness.clock.now().getTime(), 'claimable at once');
        const [again] = await claimExpecting(harness, 'w1', ['e1']);
        assert.equal(again!.attempts, 0);
        assert.equal(claimsOf(again!), claimsOf(claimed!) + 1, 'the released claim is over');
        assert.deepEqual(await harness.store.release([leaseOf(claimed!)], harness.clock.now()), [false]);
      },
    },
    {
      name: 'relinquish hands lanes back so another owner claims at once, without waiting for the lease',
      async run({ harness }) {
        // Both deliveries live in one lane (one key); w1 only runs h1.
        await publish(harness, [event({ id: 'e1', key: 'k', handlers: handlers(H1, H2) })]);
        const [claimed] = await claimExpecting(harness, 'w1', ['e1'], { handlers: [H1] });
        assert.deepEqual(await harness.store.release([leaseOf(claimed!)], harness.clock.now()), [true]);
        assert.deepEqual(await claim(harness, 'w2'), [], 'w1 still holds the lane');
        assert.equal(await owners.relinquish(harness.store, 'w1'), 1);
        assert.equal((await harness.store.statistics(harness.clock.now())).lanesLeased, 0);
        const taken = await claim(harness, 'w2');
        assert.deepEqual(taken.map((c) => c.handler).sort(), [H1, H2]);
        assert.ok(
          taken.every((c) => c.attempts === 0),
          'relinquish is not a takeover: nothing is charged',
        );
      },
    },
    {
      name: 'relinquish keeps lanes that still run something',
      async run({ harness }) {
        await publish(harness, [event({ id: 'e1' }), event({ id: 'e2', key: 'other' })]);
        const claimed = await claim(harness, 'w1');
        assert.equal(claimed.length, 2);
        const [done, running] = claimed;
        await harness.store.completeMany([leaseOf(done!)], harness.clock.now());
        const handedBack = await owners.relinquish(harness.store, 'w1');
        assert.equal(handedBack, done!.lane === running!.lane ? 0 : 1);
        assert.equal((await viewOf(harness, running!.id)).status, 'processing');
        assert.deepEqual(await claim(harness, 'w2'), []);
        assert.deepEqual(
          await harness.store.completeMany([leaseOf(running!)], harness.clock.now()),
          [true],
          'the running delivery keeps its lease',
        );
        assert.equal(await owners.relinquish(harness.store, 'nobody'), 0);
      },
    },
    {
      name: 'relinquish with an invalid owner throws RELAYBUS_INVALID_INPUT',
      async run({ harness }) {
        await rejectsWithCode(owners.relinquish(harness.store, ''), 'RELAYBUS_INVALID_INPUT');
      },
    },
  ],
};
