/** Subscriptions: publishers fan out to the handlers workers subscribed, without registering them. */
import assert from 'node:assert/strict';
import { RelayBusError } from '../../../src/core/errors.js';
import type { Subscription } from '../../../src/store/contract.js';
import type { Harness } from '../../support/harness.js';
import {
  allDeliveries,
  claim,
  event,
  H1,
  H2,
  handlers,
  leaseOf,
  publish,
  rejectsWithCode,
  type CaseGroup,
} from './kit.js';

const TYPE = 'test.event';

function subscription(handler: string, maxAttempts = 3, eventType = TYPE): Subscription {
  return { eventType, handler, maxAttempts, retry: { backoff: { initialDelayMs: 1000 } } };
}

/** Two workers, each subscribing the handler it runs. */
async function twoWorkersSubscribe<TTx>(harness: Harness<TTx>): Promise<void> {
  await harness.store.subscribe([subscription(H1, 3)], { now: harness.clock.now() });
  await harness.store.subscribe([subscription(H2, 7)], { now: harness.clock.now() });
}

const byHandler = <T extends { handler: string }>(views: readonly T[]): T[] =>
  [...views].sort((a, b) => a.handler.localeCompare(b.handler));

export const subscriptionCases: CaseGroup = {
  area: 'subscriptions',
  cases: [
    {
      name: 'a publisher with no handler of its own fans out to every handler the workers subscribed, with their budgets',
      async run({ harness }) {
        await twoWorkersSubscribe(harness);
        const [result] = await publish(harness, [event({ id: 'e1', handlers: [] })]);
        assert.deepEqual(result, { eventId: 'e1', addedHandlers: [H1, H2], duplicate: false });
        const deliveries = byHandler(await allDeliveries(harness));
        assert.deepEqual(
          deliveries.map((d) => [d.handler, d.maxAttempts]),
          [
            [H1, 3],
            [H2, 7],
          ],
        );
      },
    },
    {
      name: "the publishing process's own registration wins for the handlers it names; subscriptions add the rest",
      async run({ harness }) {
        await twoWorkersSubscribe(harness);
        await publish(harness, [event({ id: 'e1', handlers: [{ name: H1, maxAttempts: 9 }] })]);
        const deliveries = byHandler(await allDeliveries(harness));
        assert.deepEqual(
          deliveries.map((d) => [d.handler, d.maxAttempts]),
          [
            [H1, 9],
            [H2, 7],
          ],
        );
      },
    },
    {
      name: 'a subscription of another event type adds nothing',
      async run({ harness }) {
        await harness.store.subscribe([subscription(H2, 3, 'other.event')], { now: harness.clock.now() });
        const [result] = await publish(harness, [event({ id: 'e1', handlers: handlers(H1) })]);
        assert.deepEqual(result?.addedHandlers, [H1]);
      },
    },
    {
      name: 'an event with no handler and no subscription is refused: nothing written, the transaction stays usable',
      async run({ harness }) {
        await harness.store.subscribe([subscription(H1, 3, 'other.event')], { now: harness.clock.now() });
        const now = harness.clock.now();
        let caught: unknown;
        await harness.inTransaction(async (tx) => {
          caught = await harness.store
            .publish(
              tx,
              [
                event({ id: 'ok-1', handlers: handlers(H1) }),
                event({ id: 'nobody', type: 'nobody.listens', handlers: [] }),
              ],
              now,
            )
            .then(
              () => undefined,
              (error: unknown) => error,
            );
          await harness.store.publish(tx, [event({ id: 'after', handlers: handlers(H1) })], now);
        });
        assert.ok(caught instanceof RelayBusError && caught.code === 'RELAYBUS_INVALID_INPUT', String(caught));
        assert.match(caught.message, /nobody\.listens/);
        assert.deepEqual(
          (await allDeliveries(harness)).map((d) => d.eventId),
          ['after'],
          'only the later publish was written',
        );
      },
    },
    {
      name: 'a handler subscribed after an event was published gets no delivery for it; the next event fans out to it',
      async run({ harness }) {
        await harness.store.subscribe([subscription(H1)], { now: harness.clock.now() });
        await publish(harness, [event({ id: 'before', handlers: [] })]);
        await harness.store.subscribe([subscription(H2)], { now: harness.clock.now() });
        await publish(harness, [event({ id: 'after', handlers: [] })]);
        const deliveries = await allDeliveries(harness);
        assert.deepEqual(
          deliveries.filter((d) => d.eventId === 'before').map((d) => d.handler),
          [H1],
        );
        assert.deepEqual(
          deliveries
            .filter((d) => d.eventId === 'after')
            .map((d) => d.handler)
            .sort(),
          [H1, H2],
        );
      },
    },
    {
      name: 'republishing an id adds deliveries only for subscriptions it never had, completed ones included',
      async run({ harness }) {
        await harness.store.subscribe([subscription(H1)], { now: harness.clock.now() });
        await publish(harness, [event({ id: 'e1', handlers: [] })]);
        const [first] = await claim(harness, 'w1');
        assert.deepEqual(await harness.store.completeMany([leaseOf(first!)], harness.clock.now()), [true]);
        await harness.store.subscribe([subscription(H2)], { now: harness.clock.now() });
        const [again] = await publish(harness, [event({ id: 'e1', handlers: [] })]);
        assert.deepEqual(again, { eventId: 'e1', addedHandlers: [H2], duplicate: true });
        assert.deepEqual(
          (await allDeliveries(harness)).map((d) => d.handler),
          [H2],
        );
      },
    },
    {
      name: 'subscribing again updates the budget and the last-seen time; the list counts pending deliveries',
      async run({ harness }) {
        const first = harness.clock.now();
        await harness.store.subscribe([subscription(H1, 3)], { now: first });
        harness.clock.advance(60_000);
        await harness.store.subscribe([subscription(H1, 4)], { now: harness.clock.now() });
        await publish(harness, [event({ id: 'e1', handlers: [] }), event({ id: 'e2', handlers: [] })]);
        const [listed] = await harness.store.listSubscriptions();
        assert.equal(listed?.handler, H1);
        assert.equal(listed?.eventType, TYPE);
        assert.equal(listed?.maxAttempts, 4);
        assert.deepEqual(listed?.retry, { backoff: { initialDelayMs: 1000 } });
        assert.equal(listed?.createdAt.getTime(), first.getTime());
        assert.equal(listed?.seenAt?.getTime(), harness.clock.now().getTime());
        assert.equal(listed?.pending, 2);
      },
    },
    {
      name: 'a deploy step records subscriptions without saying a worker runs them ({ seen: false })',
      async run({ harness }) {
        await harness.store.subscribe([subscription(H1)], { now: harness.clock.now(), seen: false });
        assert.equal((await harness.store.listSubscriptions())[0]?.seenAt, null, 'never seen');
        const [result] = await publish(harness, [event({ id: 'e1', handlers: [] })]);
        assert.deepEqual(result?.addedHandlers, [H1], 'publishes fan out to it all the same');
        const workerSaw = harness.clock.now();
        await harness.store.subscribe([subscription(H1)], { now: workerSaw });
        harness.clock.advance(60_000);
        await harness.store.subscribe([subscription(H1, 4)], { now: harness.clock.now(), seen: false });
        const [listed] = await harness.store.listSubscriptions();
        assert.equal(
          listed?.seenAt?.getTime(),
          workerSaw.getTime(),
          "a deploy step leaves the worker's last-seen time",
        );
        assert.equal(listed?.maxAttempts, 4);
      },
    },
    {
      name: 'unsubscribing a handler with pending deliveries is refused and changes nothing; with a reason they are buried',
      async run({ harness }) {
        await twoWorkersSubscribe(harness);
        await publish(harness, [event({ id: 'e1', handlers: [] })]);
        await rejectsWithCode(harness.store.unsubscribe({ handler: H2 }), 'RELAYBUS_INVALID_STATE');
        assert.deepEqual(
          (await harness.store.listSubscriptions()).map((s) => s.handler),
          [H1, H2],
          'still subscribed',
        );
        assert.equal((await allDeliveries(harness)).filter((d) => d.status === 'pending').length, 2, 'still pending');

        const result = await harness.store.unsubscribe({
          handler: H2,
          buryPending: 'h2 was retired',
          now: harness.clock.now(),
        });
        assert.deepEqual(result, { removed: 1, buried: 1 });
        const dead = (await harness.store.listDeliveries({ status: 'dead' })).items;
        assert.deepEqual(
          dead.map((d) => [d.handler, d.lastError]),
          [[H2, 'h2 was retired']],
        );
        await publish(harness, [event({ id: 'e2', handlers: [] })]);
        assert.deepEqual(
          (await allDeliveries(harness)).filter((d) => d.eventId === 'e2').map((d) => d.handler),
          [H1],
          'no longer fanned out to',
        );
      },
    },
    {
      name: 'unsubscribing a handler whose delivery runs now is refused even with a reason',
      async run({ harness }) {
        await harness.store.subscribe([subscription(H1)], { now: harness.clock.now() });
        await publish(harness, [event({ id: 'e1', handlers: [] })]);
        const [running] = await claim(harness, 'w1');
        assert.ok(running);
        await rejectsWithCode(
          harness.store.unsubscribe({ handler: H1, buryPending: 'retired' }),
          'RELAYBUS_INVALID_STATE',
        );
        assert.equal((await harness.store.listSubscriptions()).length, 1);
        assert.deepEqual(
          await harness.store.completeMany([leaseOf(running)], harness.clock.now()),
          [true],
          'the running delivery is untouched',
        );
        assert.deepEqual(await harness.store.unsubscribe({ handler: H1 }), { removed: 1, buried: 0 });
      },
    },
    {
      name: 'bad subscriptions are refused with RELAYBUS_INVALID_INPUT and record nothing',
      async run({ harness }) {
        await rejectsWithCode(harness.store.subscribe([subscription(H1, 0)]), 'RELAYBUS_INVALID_INPUT');
        await rejectsWithCode(
          harness.store.subscribe([subscription(H1)], { now: new Date(Number.NaN) }),
          'RELAYBUS_INVALID_INPUT',
        );
        await rejectsWithCode(
          harness.store.subscribe([subscription(H1)], new Date() as unknown as { now: Date }),
          'RELAYBUS_INVALID_INPUT',
        );
        await rejectsWithCode(harness.store.subscribe([subscription(H1), subscription(H1)]), 'RELAYBUS_INVALID_INPUT');
        await rejectsWithCode(
          harness.store.subscribe([{ ...subscription(H1), handler: 'a\u0000b' }]),
          'RELAYBUS_INVALID_INPUT',
        );
        await rejectsWithCode(harness.store.unsubscribe({ handler: H1, buryPending: '' }), 'RELAYBUS_INVALID_INPUT');
        assert.deepEqual(await harness.store.listSubscriptions(), []);
      },
    },
  ],
};
