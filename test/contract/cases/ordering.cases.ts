/**
 * Per-key ordering: deliveries of one key run one at a time per handler, in the order their
 * publishing transactions committed; other handlers of the same key are independent.
 */
import assert from 'node:assert/strict';
import {
  claim,
  claimExpecting,
  compareSequence,
  deferred,
  event,
  H1,
  H2,
  handlers,
  leaseOf,
  pause,
  publish,
  viewOf,
  type CaseGroup,
} from './kit.js';

export const orderingCases: CaseGroup = {
  area: 'ordering',
  cases: [
    {
      name: 'keyed deliveries of one handler are claimed one at a time in sequence order',
      async run({ harness }) {
        await publish(harness, [event({ id: 'k-1', key: 'k' }), event({ id: 'k-2', key: 'k' })]);
        await publish(harness, [event({ id: 'k-3', key: 'k' })]);
        const sequences: (string | null)[] = [];
        for (const expected of ['k-1', 'k-2', 'k-3']) {
          const [claimed] = await claimExpecting(harness, 'w1', [expected]);
          sequences.push(claimed!.sequence);
          assert.deepEqual(await claim(harness, 'w1'), [], 'nothing else of the key while it runs');
          assert.deepEqual(await claim(harness, 'w2'), []);
          assert.deepEqual(await harness.store.completeMany([leaseOf(claimed!)], harness.clock.now()), [true]);
        }
        assert.ok(
          compareSequence(sequences[0]!, sequences[1]!) < 0 && compareSequence(sequences[1]!, sequences[2]!) < 0,
          `increasing: ${sequences.join(', ')}`,
        );
      },
    },
    {
      name: "another handler's deliveries of the same key are independent",
      async run({ harness }) {
        await publish(harness, [
          event({ id: 'k-1', key: 'k', handlers: handlers(H1, H2) }),
          event({ id: 'k-2', key: 'k', handlers: handlers(H1, H2) }),
        ]);
        const first = await claim(harness, 'w1');
        assert.deepEqual(first.map((c) => `${c.eventId}/${c.handler}`).sort(), ['k-1/h1', 'k-1/h2']);
        const h1 = first.find((c) => c.handler === H1)!;
        assert.deepEqual(await harness.store.completeMany([leaseOf(h1)], harness.clock.now()), [true]);
        // k-1/h2 is still running; it does not hold back h1's next delivery.
        const next = await claim(harness, 'w1');
        assert.deepEqual(
          next.map((c) => `${c.eventId}/${c.handler}`),
          ['k-2/h1'],
        );
      },
    },
    {
      name: 'unkeyed deliveries of one handler do not wait for each other',
      async run({ harness }) {
        await publish(harness, [event({ id: 'u-1' }), event({ id: 'u-2' }), event({ id: 'u-3' })]);
        const claimed = await claim(harness, 'w1');
        assert.deepEqual(claimed.map((c) => c.eventId).sort(), ['u-1', 'u-2', 'u-3']);
        assert.ok(claimed.every((c) => c.key === null && c.sequence === null));
      },
    },
    {
      name: 'a rescheduled head blocks the rest of its key until it is done',
      async run({ harness }) {
        await publish(harness, [event({ id: 'k-1', key: 'k' }), event({ id: 'k-2', key: 'k' })]);
        const [head] = await claimExpecting(harness, 'w1', ['k-1']);
        const retryAt = new Date(harness.clock.now().getTime() + 60_000);
        assert.equal(
          await harness.store.reschedule(leaseOf(head!), {
            availableAt: retryAt,
            error: 'later',
            now: harness.clock.now(),
          }),
          true,
        );
        assert.deepEqual(await claim(harness, 'w1'), [], 'k-2 is due but waits for k-1');
        harness.clock.advance(30_000);
        assert.deepEqual(await claim(harness, 'w2'), []);
        harness.clock.advance(30_000);
        const [again] = await claimExpecting(harness, 'w2', ['k-1']);
        assert.equal(again!.attempts, 1);
        await harness.store.completeMany([leaseOf(again!)], harness.clock.now());
        await claimExpecting(harness, 'w2', ['k-2']);
      },
    },
    {
      name: 'a dead head no longer blocks its key, and a requeued one goes to the back of it',
      async run({ harness }) {
        await publish(harness, [
          event({ id: 'k-1', key: 'k' }),
          event({ id: 'k-2', key: 'k' }),
          event({ id: 'k-3', key: 'k' }),
        ]);
        const [head] = await claimExpecting(harness, 'w1', ['k-1']);
        await harness.store.bury(leaseOf(head!), { error: 'poison', now: harness.clock.now() });
        const [second] = await claimExpecting(harness, 'w1', ['k-2']);
        assert.equal(await harness.store.requeue({ deliveryIds: [head!.id], now: harness.clock.now() }), 1);
        const requeued = await viewOf(harness, head!.id);
        assert.ok(
          compareSequence(requeued.sequence, second!.sequence) > 0,
          'the requeued delivery takes a new, later sequence',
        );
        await harness.store.completeMany([leaseOf(second!)], harness.clock.now());
        const [third] = await claimExpecting(harness, 'w1', ['k-3']);
        await harness.store.completeMany([leaseOf(third!)], harness.clock.now());
        await claimExpecting(harness, 'w1', ['k-1']);
      },
    },
    {
      name: 'keyed deliveries run in the order their publishing transactions committed',
      needs: ['transactions', 'concurrentConnections'],
      async run({ harness }) {
        const { store, clock } = harness;
        const now = clock.now();
        const aPublished = deferred();
        const commitA = deferred();
        // A publishes first and keeps its transaction open.
        const txA = harness.inTransaction(async (tx) => {
          await store.publish(tx, [event({ id: 'A', key: 'k' })], now);
          aPublished.resolve();
          await commitA.promise;
        });
        await aPublished.promise;
        // B publishes the same key and tries to commit while A is still open. A store that keeps the
        // key locked until commit makes B wait for A (then A committed first); a store that lets B
        // commit first must then run B first.
        const txB = harness.inTransaction((tx) => store.publish(tx, [event({ id: 'B', key: 'k' })], now));
        const bCommittedFirst = await Promise.race([txB.then(() => true), pause(50).then(() => false)]);
        commitA.resolve();
        await Promise.all([txA, txB]);
        const order = bCommittedFirst ? ['B', 'A'] : ['A', 'B'];

        const [first] = await claimExpecting(harness, 'w1', [order[0]!]);
        assert.deepEqual(await claim(harness, 'w1'), []);
        await store.completeMany([leaseOf(first!)], clock.now());
        const [second] = await claimExpecting(harness, 'w1', [order[1]!]);
        assert.ok(compareSequence(first!.sequence, second!.sequence) < 0, 'sequence order is commit order');
      },
    },
  ],
};
