/** Publish: atomic with the caller's transaction, one delivery per handler, inbox dedup, input checks. */
import assert from 'node:assert/strict';
import { laneOf } from '../../../src/core/lanes.js';
import {
  allDeliveries, claim, claimExpecting, event, H1, H2, handlers, leaseOf, publish, rejectsWithCode,
  type CaseGroup,
} from './kit.js';

export const publishCases: CaseGroup = {
  area: 'publish',
  cases: [
    {
      name: 'a committed publish creates one pending delivery per handler',
      async run({ harness }) {
        const [result] = await publish(harness, [event({ id: 'e1', key: 'k1', handlers: handlers(H1, H2) })]);
        assert.deepEqual(result, { eventId: 'e1', addedHandlers: [H1, H2], duplicate: false });
        const deliveries = await allDeliveries(harness);
        assert.deepEqual(deliveries.map((d) => d.handler).sort(), [H1, H2]);
        for (const d of deliveries) {
          assert.equal(d.eventId, 'e1');
          assert.equal(d.eventType, 'test.event');
          assert.equal(d.status, 'pending');
          assert.equal(d.attempts, 0);
          assert.equal(d.maxAttempts, 5);
          assert.equal(d.key, 'k1');
          assert.equal(d.lane, laneOf('k1', 'e1'));
          assert.equal(d.lastError, null);
          assert.equal(d.availableAt.getTime(), harness.clock.now().getTime());
          assert.equal(d.createdAt.getTime(), harness.clock.now().getTime());
        }
      },
    },
    {
      name: 'a rolled-back publish leaves nothing',
      needs: ['transactions'],
      async run({ harness }) {
        const now = harness.clock.now();
        const results = await harness.inTransaction((tx) => harness.store.publish(tx, [event({ id: 'e1', key: 'k1' })], now), { rollback: true });
        assert.equal(results.length, 1);
        assert.deepEqual((await harness.store.listDeliveries()).items, []);
        assert.deepEqual(await claim(harness, 'w1'), []);
        const stats = await harness.store.statistics(now);
        assert.equal(stats.pending + stats.inFlight + stats.dead, 0);
        // The event itself is gone too: publishing its id again is not a duplicate.
        const [again] = await publish(harness, [event({ id: 'e1', key: 'k1' })]);
        assert.equal(again?.duplicate, false);
      },
    },
    {
      name: 'a publish whose transaction throws leaves nothing',
      needs: ['transactions'],
      async run({ harness }) {
        const now = harness.clock.now();
        await assert.rejects(harness.inTransaction(async (tx) => {
          await harness.store.publish(tx, [event({ id: 'e1', handlers: handlers(H1, H2) })], now);
          throw new Error('business change failed');
        }), /business change failed/);
        assert.deepEqual((await harness.store.listDeliveries()).items, []);
        assert.deepEqual(await claim(harness, 'w1'), []);
      },
    },
    {
      name: 'results come back in input order and an id is generated when absent',
      async run({ harness }) {
        const results = await publish(harness, [event({ id: 'b' }), event(), event({ id: 'a' }), event()]);
        assert.deepEqual(results.map((r) => r.eventId).filter((_, i) => i % 2 === 0), ['b', 'a']);
        const generated = [results[1]!.eventId, results[3]!.eventId];
        for (const id of generated) assert.ok(typeof id === 'string' && id.length > 0);
        assert.notEqual(generated[0], generated[1]);
        assert.equal((await allDeliveries(harness)).length, 4);
      },
    },
    {
      name: 'a claimed delivery carries the published type, key, payload and headers',
      async run({ harness }) {
        const payload = { orderId: 'o-1', lines: [{ sku: 'x', qty: 2 }], note: null, ok: true };
        await publish(harness, [event({ id: 'e1', type: 'order.placed', key: 'customer-7', payload, headers: { traceparent: 't-1' } })]);
        const [claimed] = await claimExpecting(harness, 'w1', ['e1']);
        assert.equal(claimed!.eventType, 'order.placed');
        assert.equal(claimed!.handler, H1);
        assert.equal(claimed!.key, 'customer-7');
        assert.equal(claimed!.lane, laneOf('customer-7', 'e1'));
        assert.deepEqual(claimed!.payload, payload);
        assert.deepEqual(claimed!.headers, { traceparent: 't-1' });
        assert.equal(claimed!.attempts, 0);
        assert.equal(claimed!.maxAttempts, 5);
        assert.equal(claimed!.availableAt.getTime(), harness.clock.now().getTime());
        assert.equal(claimed!.createdAt.getTime(), harness.clock.now().getTime());
      },
    },
    {
      name: 'republishing an event id adds deliveries only for handlers it never had',
      async run({ harness }) {
        await publish(harness, [event({ id: 'e1', handlers: handlers(H1, H2) })]);
        const [again] = await publish(harness, [event({ id: 'e1', handlers: handlers(H2, 'h3') })]);
        assert.deepEqual(again, { eventId: 'e1', addedHandlers: ['h3'], duplicate: true });
        const [same] = await publish(harness, [event({ id: 'e1', handlers: handlers(H1) })]);
        assert.deepEqual(same, { eventId: 'e1', addedHandlers: [], duplicate: true });
        assert.deepEqual((await allDeliveries(harness)).map((d) => d.handler).sort(), [H1, H2, 'h3']);
      },
    },
    {
      name: 'a completed handler is not re-added when the event is published again',
      async run({ harness }) {
        await publish(harness, [event({ id: 'e1', handlers: handlers(H1) })]);
        const [claimed] = await claimExpecting(harness, 'w1', ['e1']);
        assert.deepEqual(await harness.store.completeMany([leaseOf(claimed!)], harness.clock.now()), [true]);
        const [again] = await publish(harness, [event({ id: 'e1', handlers: handlers(H1, H2) })]);
        assert.deepEqual(again, { eventId: 'e1', addedHandlers: [H2], duplicate: true });
        const remaining = await harness.store.listDeliveries({ eventId: 'e1', status: 'pending' });
        assert.deepEqual(remaining.items.map((d) => d.handler), [H2]);
        const next = await claim(harness, 'w1');
        assert.deepEqual(next.map((c) => c.handler), [H2]);
      },
    },
    {
      name: 'a dead-lettered handler is not re-added when the event is published again',
      async run({ harness }) {
        await publish(harness, [event({ id: 'e1', handlers: handlers(H1) })]);
        const [claimed] = await claimExpecting(harness, 'w1', ['e1']);
        assert.equal(await harness.store.bury(leaseOf(claimed!), { error: 'bad', now: harness.clock.now() }), true);
        const [again] = await publish(harness, [event({ id: 'e1', handlers: handlers(H1) })]);
        assert.deepEqual(again, { eventId: 'e1', addedHandlers: [], duplicate: true });
        const deliveries = await allDeliveries(harness);
        assert.deepEqual(deliveries.map((d) => [d.handler, d.status]), [[H1, 'dead']]);
      },
    },
    {
      name: 'a publish with an invalid event throws RELAYBUS_INVALID_INPUT and writes none of the batch',
      async run({ harness }) {
        const now = harness.clock.now();
        const bad = [
          event({ handlers: [] }),
          event({ handlers: [{ name: H1, maxAttempts: 0 }] }),
          event({ payload: { amount: BigInt(10) } }),
          event({ handlers: handlers(H1, H1) }),
          event({ type: '' }),
          event({ availableAt: new Date(Number.NaN) }),
        ];
        for (const invalid of bad) {
          // The transaction commits (the error is caught inside it): only validation-before-write keeps e-good out.
          await harness.inTransaction(async (tx) => {
            await rejectsWithCode(harness.store.publish(tx, [event({ id: 'e-good' }), invalid], now), 'RELAYBUS_INVALID_INPUT');
          });
        }
        await harness.inTransaction(async (tx) => {
          await rejectsWithCode(harness.store.publish(tx, [event({ id: 'twice' }), event({ id: 'twice' })], now), 'RELAYBUS_INVALID_INPUT');
        });
        assert.deepEqual((await harness.store.listDeliveries()).items, []);
        const [later] = await publish(harness, [event({ id: 'e-good' })]);
        assert.equal(later?.duplicate, false);
      },
    },
  ],
};
