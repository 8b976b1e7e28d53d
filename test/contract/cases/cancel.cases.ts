/** Cancel: an event's pending deliveries that no worker runs are withdrawn; running, dead and finished ones are named. */
import assert from 'node:assert/strict';
import type { CancelResult } from '../../../src/store/contract.js';
import type { Harness } from '../../support/harness.js';
import {
  allDeliveries,
  claim,
  claimExpecting,
  event,
  H1,
  H2,
  handlers,
  leaseOf,
  publish,
  rejectsWithCode,
  type CaseGroup,
} from './kit.js';

/** The outcomes as `handler:outcome`, in the store's order. */
function outcomes(result: CancelResult): string[] {
  return result.deliveries.map((d) => `${d.handler}:${d.outcome}`);
}

async function remaining<TTx>(harness: Harness<TTx>): Promise<string[]> {
  return (await allDeliveries(harness)).map((d) => `${d.eventId}/${d.handler}:${d.status}`).sort();
}

export const cancelCases: CaseGroup = {
  area: 'cancel',
  cases: [
    {
      name: 'cancel withdraws the pending deliveries nobody runs and leaves a running one, which still completes',
      async run({ harness }) {
        await publish(harness, [event({ id: 'e1', key: 'k1', handlers: handlers(H1, H2) })]);
        const [running] = await claimExpecting(harness, 'w1', ['e1'], { handlers: [H1] });
        const result = await harness.store.cancel({ eventId: 'e1' });
        assert.equal(result.found, true);
        assert.deepEqual(outcomes(result), [`${H1}:running`, `${H2}:cancelled`]);
        assert.ok(result.deliveries.every((d) => d.deliveryId !== null));
        assert.deepEqual(await remaining(harness), ['e1/h1:processing'], 'the cancelled delivery is gone');
        assert.deepEqual(await harness.store.completeMany([leaseOf(running!)], harness.clock.now()), [true]);
        assert.deepEqual(await claim(harness, 'w2'), [], 'nothing of the event is left to claim');
        assert.deepEqual(
          outcomes(await harness.store.cancel({ eventId: 'e1' })),
          [`${H1}:finished`, `${H2}:finished`],
          'asked again: both handlers are done with the event (one completed, one cancelled)',
        );
      },
    },
    {
      name: 'a scheduled delivery is cancelled before it is due and never runs',
      async run({ harness }) {
        const later = new Date(harness.clock.now().getTime() + 60_000);
        await publish(harness, [event({ id: 'reminder', availableAt: later })]);
        assert.deepEqual(outcomes(await harness.store.cancel({ eventId: 'reminder' })), [`${H1}:cancelled`]);
        harness.clock.advance(120_000);
        assert.deepEqual(await claim(harness, 'w1'), []);
        assert.deepEqual(await remaining(harness), []);
      },
    },
    {
      name: "cancel with a handler withdraws only that handler's delivery",
      async run({ harness }) {
        await publish(harness, [event({ id: 'e1', handlers: handlers(H1, H2) })]);
        const result = await harness.store.cancel({ eventId: 'e1', handler: H2 });
        assert.deepEqual(outcomes(result), [`${H2}:cancelled`]);
        assert.deepEqual(await remaining(harness), ['e1/h1:pending']);
        await claimExpecting(harness, 'w1', ['e1'], { handlers: [H1, H2] });
      },
    },
    {
      name: 'a dead delivery is named and left alone; an unknown event is not found',
      async run({ harness }) {
        await publish(harness, [event({ id: 'e1' })]);
        const [claimed] = await claimExpecting(harness, 'w1', ['e1']);
        assert.equal(await harness.store.bury(leaseOf(claimed!), { error: 'broken', now: harness.clock.now() }), true);
        assert.deepEqual(outcomes(await harness.store.cancel({ eventId: 'e1' })), [`${H1}:dead`]);
        assert.deepEqual(await remaining(harness), ['e1/h1:dead']);
        assert.deepEqual(await harness.store.cancel({ eventId: 'no-such-event' }), { found: false, deliveries: [] });
      },
    },
    {
      name: "a cancelled head lets its key's next delivery run, in order",
      async run({ harness }) {
        await publish(harness, [
          event({ id: 'a', key: 'k' }),
          event({ id: 'b', key: 'k' }),
          event({ id: 'c', key: 'k' }),
        ]);
        assert.deepEqual(outcomes(await harness.store.cancel({ eventId: 'a' })), [`${H1}:cancelled`]);
        const [b] = await claimExpecting(harness, 'w1', ['b']);
        assert.deepEqual(await harness.store.completeMany([leaseOf(b!)], harness.clock.now()), [true]);
        await claimExpecting(harness, 'w1', ['c']);
      },
    },
    {
      name: 'publishing a cancelled event id again does not bring its delivery back',
      async run({ harness }) {
        await publish(harness, [event({ id: 'e1', handlers: handlers(H1, H2) })]);
        await harness.store.cancel({ eventId: 'e1', handler: H1 });
        const [again] = await publish(harness, [event({ id: 'e1', handlers: handlers(H1, H2) })]);
        assert.equal(again!.duplicate, true);
        assert.deepEqual(again!.addedHandlers, []);
        assert.deepEqual(await remaining(harness), ['e1/h2:pending']);
      },
    },
    {
      name: 'cancel refuses bad input with a typed error and changes nothing',
      async run({ harness }) {
        await publish(harness, [event({ id: 'e1' })]);
        await rejectsWithCode(harness.store.cancel({ eventId: '' }), 'RELAYBUS_INVALID_INPUT');
        await rejectsWithCode(harness.store.cancel({ eventId: 'e1', handler: 'x\u0000' }), 'RELAYBUS_INVALID_INPUT');
        await rejectsWithCode(harness.store.cancel(null as unknown as { eventId: string }), 'RELAYBUS_INVALID_INPUT');
        assert.deepEqual(await remaining(harness), ['e1/h1:pending']);
      },
    },
  ],
};
