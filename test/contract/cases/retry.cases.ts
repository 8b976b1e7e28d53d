/** Retry and dead letter: reschedule with backoff, bury, requeue with a fresh budget. */
import assert from 'node:assert/strict';
import {
  allDeliveries,
  claim,
  claimExpecting,
  claimsOf,
  event,
  H1,
  H2,
  handlers,
  leaseOf,
  publish,
  rejectsWithCode,
  viewOf,
  type CaseGroup,
} from './kit.js';

export const retryCases: CaseGroup = {
  area: 'retry',
  cases: [
    {
      name: 'a rescheduled delivery is not claimable before its availableAt and is claimable from then on',
      async run({ harness }) {
        await publish(harness, [event({ id: 'e1' })]);
        const [claimed] = await claimExpecting(harness, 'w1', ['e1']);
        const retryAt = new Date(harness.clock.now().getTime() + 5_000);
        assert.equal(
          await harness.store.reschedule(leaseOf(claimed!), {
            availableAt: retryAt,
            error: 'timeout',
            now: harness.clock.now(),
          }),
          true,
        );
        const view = await viewOf(harness, claimed!.id);
        assert.deepEqual(
          [view.status, view.attempts, view.lastError, view.availableAt.getTime()],
          ['pending', 1, 'timeout', retryAt.getTime()],
        );
        harness.clock.advance(4_999);
        assert.deepEqual(await claim(harness, 'w1'), []);
        assert.deepEqual(await claim(harness, 'w2'), []);
        harness.clock.advance(1);
        const [again] = await claimExpecting(harness, 'w2', ['e1']);
        assert.equal(again!.attempts, 1);
        assert.equal(claimsOf(again!), 1);
      },
    },
    {
      name: 'a buried delivery is dead and never claimed again',
      async run({ harness }) {
        await publish(harness, [event({ id: 'e1' })]);
        const [claimed] = await claimExpecting(harness, 'w1', ['e1']);
        assert.equal(
          await harness.store.bury(leaseOf(claimed!), { error: 'invalid order', now: harness.clock.now() }),
          true,
        );
        const view = await viewOf(harness, claimed!.id);
        assert.deepEqual([view.status, view.attempts, view.lastError], ['dead', 1, 'invalid order']);
        harness.clock.advance(86_400_000);
        assert.deepEqual(await claim(harness, 'w1'), []);
        assert.deepEqual(await claim(harness, 'w2'), []);
        const stats = await harness.store.statistics(harness.clock.now());
        assert.equal(stats.dead, 1);
        assert.equal(stats.due, 0);
      },
    },
    {
      name: 'requeue brings a dead delivery back with a fresh attempt budget',
      async run({ harness }) {
        await publish(harness, [event({ id: 'e1', handlers: [{ name: H1, maxAttempts: 2 }] })]);
        let [claimed] = await claimExpecting(harness, 'w1', ['e1']);
        await harness.store.reschedule(leaseOf(claimed!), {
          availableAt: harness.clock.now(),
          error: 'first',
          now: harness.clock.now(),
        });
        [claimed] = await claimExpecting(harness, 'w1', ['e1']);
        await harness.store.bury(leaseOf(claimed!), { error: 'second', now: harness.clock.now() });
        assert.equal((await viewOf(harness, claimed!.id)).attempts, 2);
        harness.clock.advance(60_000);
        assert.equal(await harness.store.requeue({ deliveryIds: [claimed!.id], now: harness.clock.now() }), 1);
        const view = await viewOf(harness, claimed!.id);
        assert.deepEqual(
          [view.status, view.attempts, view.availableAt.getTime()],
          ['pending', 0, harness.clock.now().getTime()],
        );
        const [back] = await claimExpecting(harness, 'w2', ['e1']);
        assert.equal(back!.attempts, 0);
        assert.equal(
          await harness.store.requeue({ deliveryIds: [claimed!.id], now: harness.clock.now() }),
          0,
          'only dead deliveries are requeued',
        );
        // An old token of the delivery stays fenced after requeue.
        assert.deepEqual(await harness.store.completeMany([leaseOf(claimed!)], harness.clock.now()), [false]);
        assert.deepEqual(await harness.store.completeMany([leaseOf(back!)], harness.clock.now()), [true]);
      },
    },
    {
      name: 'requeue selectors choose by handler, event or all, and combine with AND',
      async run({ harness }) {
        await publish(harness, [
          event({ id: 'e1', handlers: handlers(H1, H2) }),
          event({ id: 'e2', handlers: handlers(H1, H2) }),
        ]);
        const buryAll = async () => {
          for (const c of await claim(harness, 'w1'))
            await harness.store.bury(leaseOf(c), { error: 'x', now: harness.clock.now() });
          assert.equal((await harness.store.listDeliveries({ status: 'dead' })).items.length, 4);
        };
        const requeued = async () =>
          (await harness.store.listDeliveries({ status: 'pending' })).items
            .map((d) => `${d.eventId}/${d.handler}`)
            .sort();
        const now = () => harness.clock.now();

        await buryAll();
        assert.equal(await harness.store.requeue({ handler: H2, eventId: 'e1', now: now() }), 1);
        assert.deepEqual(await requeued(), ['e1/h2']);
        assert.equal(await harness.store.requeue({ handler: H1, now: now() }), 2);
        assert.deepEqual(await requeued(), ['e1/h1', 'e1/h2', 'e2/h1']);
        assert.equal(await harness.store.requeue({ eventId: 'e2', now: now() }), 1);
        assert.equal(await harness.store.requeue({ all: true, now: now() }), 0);

        await buryAll();
        assert.equal(await harness.store.requeue({ all: true, now: now() }), 4);
        assert.equal(
          (await allDeliveries(harness)).filter((d) => d.status === 'pending' && d.attempts === 0).length,
          4,
        );
      },
    },
    {
      name: 'requeue without a selector throws RELAYBUS_INVALID_INPUT and changes nothing',
      async run({ harness }) {
        await publish(harness, [event({ id: 'e1' })]);
        const [claimed] = await claimExpecting(harness, 'w1', ['e1']);
        await harness.store.bury(leaseOf(claimed!), { error: 'x', now: harness.clock.now() });
        await rejectsWithCode(harness.store.requeue({ now: harness.clock.now() }), 'RELAYBUS_INVALID_INPUT');
        await rejectsWithCode(
          harness.store.requeue({ all: false, now: harness.clock.now() }),
          'RELAYBUS_INVALID_INPUT',
        );
        await rejectsWithCode(
          harness.store.requeue({ deliveryIds: [claimed!.id, 'not-an-id'], now: harness.clock.now() }),
          'RELAYBUS_INVALID_INPUT',
        );
        assert.equal((await viewOf(harness, claimed!.id)).status, 'dead');
      },
    },
    {
      name: 'a failure text with NUL characters is recorded without them (reschedule and bury)',
      async run({ harness }) {
        await publish(harness, [event({ id: 'e1' }), event({ id: 'e2' })]);
        const claimed = await claim(harness, 'w1');
        const first = claimed.find((c) => c.eventId === 'e1');
        const second = claimed.find((c) => c.eventId === 'e2');
        const now = harness.clock.now();
        assert.equal(
          await harness.store.reschedule(leaseOf(first!), { availableAt: now, error: 'bad\u0000byte', now }),
          true,
        );
        assert.equal(await harness.store.bury(leaseOf(second!), { error: '\u0000nul\u0000', now }), true);
        assert.equal((await viewOf(harness, first!.id)).lastError, 'badbyte');
        assert.equal((await viewOf(harness, second!.id)).lastError, 'nul');
      },
    },
  ],
};
