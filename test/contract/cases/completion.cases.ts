/**
 * Completion: delete on complete (batched or inside the handler's transaction), optional completion
 * history, and the race a transactional completion runs against a takeover.
 */
import assert from 'node:assert/strict';
import type { ClaimedDelivery } from '../../../src/store/contract.js';
import {
  allDeliveries,
  claim,
  claimExpecting,
  deferred,
  event,
  H1,
  H2,
  handlers,
  LEASE_MS,
  leaseOf,
  PAST_LEASE_MS,
  pause,
  publish,
  viewOf,
  type CaseGroup,
} from './kit.js';
import * as owners from '../../support/claims.js';

export const completionCases: CaseGroup = {
  area: 'completion',
  cases: [
    {
      name: 'completeMany deletes completed deliveries and answers per lease in input order',
      async run({ harness }) {
        await publish(harness, [event({ id: 'e1' }), event({ id: 'e2' }), event({ id: 'e3' })]);
        const claimed = await claim(harness, 'w1');
        assert.equal(claimed.length, 3);
        const byEvent = new Map(claimed.map((c) => [c.eventId, c]));
        const unknown = { deliveryId: '999999999', leaseToken: byEvent.get('e1')!.leaseToken };
        const results = await harness.store.completeMany(
          [leaseOf(byEvent.get('e3')!), unknown, leaseOf(byEvent.get('e1')!)],
          harness.clock.now(),
        );
        assert.deepEqual(results, [true, false, true]);
        const left = await allDeliveries(harness);
        assert.deepEqual(
          left.map((d) => [d.eventId, d.status]),
          [['e2', 'processing']],
        );
        const stats = await harness.store.statistics(harness.clock.now());
        assert.equal(stats.inFlight, 1);
        assert.equal(stats.pending, 0);
      },
    },
    {
      name: 'a lease listed twice in one completeMany succeeds once',
      async run({ harness }) {
        await publish(harness, [event({ id: 'e1' })]);
        const [claimed] = await claimExpecting(harness, 'w1', ['e1']);
        const results = await harness.store.completeMany([leaseOf(claimed!), leaseOf(claimed!)], harness.clock.now());
        assert.deepEqual(results, [true, false]);
        assert.deepEqual(await allDeliveries(harness), []);
      },
    },
    {
      name: 'a transactional complete deletes the delivery when its transaction commits',
      needs: ['transactions'],
      async run({ harness }) {
        await publish(harness, [event({ id: 'e1' })]);
        const [claimed] = await claimExpecting(harness, 'w1', ['e1']);
        const ok = await harness.inTransaction((tx) =>
          harness.store.complete(leaseOf(claimed!), tx, harness.clock.now()),
        );
        assert.equal(ok, true);
        assert.deepEqual(await allDeliveries(harness), []);
      },
    },
    {
      name: 'a transactional complete that rolls back leaves the delivery in flight',
      needs: ['transactions'],
      async run({ harness }) {
        await publish(harness, [event({ id: 'e1' })]);
        const [claimed] = await claimExpecting(harness, 'w1', ['e1']);
        const ok = await harness.inTransaction(
          (tx) => harness.store.complete(leaseOf(claimed!), tx, harness.clock.now()),
          { rollback: true },
        );
        assert.equal(ok, true);
        const view = await viewOf(harness, claimed!.id);
        assert.equal(view.status, 'processing');
        assert.equal(view.attempts, 0);
        await assert.rejects(
          harness.inTransaction(async (tx) => {
            assert.equal(await harness.store.complete(leaseOf(claimed!), tx, harness.clock.now()), true);
            throw new Error('handler write failed');
          }),
          /handler write failed/,
        );
        assert.equal((await viewOf(harness, claimed!.id)).status, 'processing');
        assert.deepEqual(
          await harness.store.completeMany([leaseOf(claimed!)], harness.clock.now()),
          [true],
          'the lease is still held',
        );
      },
    },
    {
      name: 'without completion history a completed delivery is gone',
      async run({ harness }) {
        await publish(harness, [event({ id: 'e1' })]);
        const [claimed] = await claimExpecting(harness, 'w1', ['e1']);
        await harness.store.completeMany([leaseOf(claimed!)], harness.clock.now());
        for (const status of ['pending', 'processing', 'dead'] as const) {
          assert.deepEqual((await harness.store.listDeliveries({ status })).items, [], status);
        }
        const stats = await harness.store.statistics(harness.clock.now());
        assert.deepEqual([stats.pending, stats.inFlight, stats.dead], [0, 0, 0]);
      },
    },
    {
      name: 'completion history lists completed deliveries and counts them',
      needs: ['completionHistory'],
      async run({ target }) {
        const harness = await target.open({ completionHistory: true });
        try {
          await harness.reset();
          await publish(harness, [event({ id: 'e1', handlers: handlers(H1, H2) }), event({ id: 'e2' })]);
          const claimed = await claim(harness, 'w1', { limit: 10 });
          assert.equal(claimed.length, 3);
          harness.clock.advance(500);
          const done = claimed.filter((c) => c.eventId === 'e1');
          assert.deepEqual(await harness.store.completeMany(done.map(leaseOf), harness.clock.now()), [true, true]);
          const completed = await harness.store.listDeliveries({ status: 'completed' });
          assert.deepEqual(completed.items.map((d) => [d.eventId, d.handler, d.status]).sort(), [
            ['e1', H1, 'completed'],
            ['e1', H2, 'completed'],
          ]);
          assert.deepEqual(new Set(completed.items.map((d) => d.id)), new Set(done.map((c) => c.id)));
          assert.deepEqual(
            (await harness.store.listDeliveries({ status: 'completed', withPayload: true })).items.map((d) => [
              d.payload,
              d.headers,
            ]),
            [
              [{ n: 1 }, {}],
              [{ n: 1 }, {}],
            ],
            'a completed delivery of the history with its payload',
          );
          assert.deepEqual(
            (await harness.store.listDeliveries({ status: 'completed', handler: H2 })).items.map((d) => d.handler),
            [H2],
          );
          const stats = await harness.store.statistics(harness.clock.now());
          assert.equal(stats.completed, 2);
          assert.equal(stats.handlers[H1]?.completed, 1);
          assert.equal(stats.handlers[H2]?.completed, 1);
          assert.equal(stats.inFlight, 1);
          // A completed handler still is not re-added, history or not.
          const [again] = await publish(harness, [event({ id: 'e1', handlers: handlers(H1, H2) })]);
          assert.deepEqual(again?.addedHandlers, []);
        } finally {
          await harness.close();
        }
      },
    },
    {
      name: 'completion history is purged after the completed retention',
      needs: ['completionHistory'],
      async run({ target }) {
        const harness = await target.open({ completionHistory: true });
        try {
          await harness.reset();
          await publish(harness, [event({ id: 'e1' })]);
          const [claimed] = await claimExpecting(harness, 'w1', ['e1']);
          await harness.store.completeMany([leaseOf(claimed!)], harness.clock.now());
          harness.clock.advance(10_000);
          const kept = await harness.store.purgeExpired({
            completedRetentionMs: 60_000,
            deadRetentionMs: 60_000,
            now: harness.clock.now(),
          });
          assert.deepEqual(kept, { events: 0, deadDeliveries: 0, history: 0 });
          assert.equal((await harness.store.listDeliveries({ status: 'completed' })).items.length, 1);
          harness.clock.advance(60_000);
          const purged = await harness.store.purgeExpired({
            completedRetentionMs: 60_000,
            deadRetentionMs: 60_000,
            now: harness.clock.now(),
          });
          assert.deepEqual(purged, { events: 1, deadDeliveries: 0, history: 1 });
          assert.deepEqual((await harness.store.listDeliveries({ status: 'completed' })).items, []);
          assert.equal((await harness.store.statistics(harness.clock.now())).completed, 0);
        } finally {
          await harness.close();
        }
      },
    },
    {
      name: 'a transactional completion and a takeover never both win',
      needs: ['transactions', 'concurrentConnections'],
      async run({ harness }) {
        const { store, clock } = harness;
        for (let round = 0; round < 30; round += 1) {
          const [a, b] = [`a-${round}`, `b-${round}`];
          await publish(harness, [event({ id: `race-${round}`, key: `race-key-${round}` })]);
          const [claimed] = await claimExpecting(harness, a, [`race-${round}`], { handlers: [H1], limit: 1 });
          clock.advance(PAST_LEASE_MS);
          const now = clock.now();

          // The completion holds its transaction open a little before committing. The takeover starts
          // while that transaction is open (variant 0), at the same time (1), or just before it (2).
          const variant = round % 3;
          const startTakeover = () =>
            owners.claim(store, { owner: b, handlers: [H1], limit: 1, leaseDurationMs: LEASE_MS, now });
          let takeover = variant === 2 ? startTakeover() : undefined;
          const completedInTx = deferred();
          const completion = harness.inTransaction(async (tx) => {
            const ok = await store.complete(leaseOf(claimed!), tx, now);
            completedInTx.resolve();
            await pause(5 + (round % 4) * 5);
            return ok;
          });
          if (variant === 0) await Promise.race([completedInTx.promise, completion.catch(() => undefined)]);
          takeover ??= startTakeover();
          const [completed, taken] = await Promise.all([completion, takeover]);

          const takenOver = taken.find((c: ClaimedDelivery) => c.id === claimed!.id);
          const remaining = (await store.listDeliveries({ eventId: `race-${round}` })).items;
          if (completed) {
            assert.equal(
              takenOver,
              undefined,
              `round ${round}: completion won, yet the takeover returned the delivery`,
            );
            assert.deepEqual(remaining, [], `round ${round}: completion won, yet the delivery still exists`);
          } else {
            assert.ok(takenOver, `round ${round}: the completion lost, so the takeover must have the delivery`);
            assert.equal(takenOver.attempts, 1);
            assert.deepEqual(await store.completeMany([leaseOf(takenOver)], clock.now()), [true]);
          }
          await owners.relinquish(store, a);
          await owners.relinquish(store, b);
          clock.advance(1_000);
        }
      },
    },
  ],
};
