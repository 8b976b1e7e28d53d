/**
 * A handler that throws `PermanentFailure` has its delivery buried at once, on every store: dead after one attempt
 * whatever `maxAttempts` says, the failure's message as its last error, and its key free for the next delivery. A
 * plain error beside it is rescheduled as before (the control: the same handler shape, retried).
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import {
  createRelayBus,
  defineEvent,
  isPermanentFailure,
  PermanentFailure,
  type DeadEvent,
  type FailedEvent,
  Type,
} from '../../src/index.js';
import type { ContractTarget, Harness } from '../support/harness.js';
import { memoryTarget } from '../support/memory-target.js';
import { pgTarget } from '../support/postgres-targets.js';
import { waitFor } from '../support/wait.js';

const OrderPlaced = defineEvent('order.placed', Type.Object({ orderId: Type.String() }));

for (const target of [memoryTarget, pgTarget()] as ContractTarget<unknown>[]) {
  const skip = await target.probe();
  describe(`PermanentFailure on the ${target.name} store`, { skip }, () => {
    let harness: Harness<unknown>;
    before(async () => {
      harness = await target.open();
    });
    after(async () => {
      await harness?.close();
    });

    for (const transactional of [false, true]) {
      it(`a ${transactional ? 'transactional ' : ''}handler throwing it is dead after 1 attempt with its message as last error; the key's next delivery runs`, {
        timeout: 20_000,
      }, async () => {
        await harness.reset();
        const errors: string[] = [];
        const logger = { debug() {}, info() {}, warn() {}, error: (message: string) => errors.push(message) };
        const bus = createRelayBus({
          logger,
          store: harness.store,
          events: [OrderPlaced],
          backoff: { initialDelayMs: 60_000, maxDelayMs: 60_000, jitter: 0 },
          dispatcher: { pollIntervalMs: 20 },
        });
        const ran: string[] = [];
        const handler = async (order: { orderId: string }) => {
          ran.push(order.orderId);
          if (order.orderId === 'o-gone') throw new PermanentFailure('customer c-9 does not exist');
          if (order.orderId === 'o-flaky') throw new Error('the mailer timed out');
        };
        bus.on(OrderPlaced, 'charge', { maxAttempts: 10, transactional }, handler);
        const dead: DeadEvent[] = [];
        const failed: FailedEvent[] = [];
        bus.lifecycle.on('dead', (event) => dead.push(event));
        bus.lifecycle.on('failed', (event) => failed.push(event));
        await harness.inTransaction((tx) =>
          bus.publishMany(tx, [
            { event: OrderPlaced, payload: { orderId: 'o-gone' }, options: { id: 'e-gone', key: 'c-9' } },
            { event: OrderPlaced, payload: { orderId: 'o-next' }, options: { id: 'e-next', key: 'c-9' } },
            { event: OrderPlaced, payload: { orderId: 'o-flaky' }, options: { id: 'e-flaky', key: 'c-1' } },
          ]),
        );
        await bus.start();
        try {
          await waitFor(
            () => ran.includes('o-next') && failed.length >= 1,
            'the key of the buried delivery moved on, and the plain error was rescheduled',
            10_000,
          );
        } finally {
          await bus.stop();
        }
        assert.deepEqual(
          ran.filter((id) => id === 'o-gone'),
          ['o-gone'],
          'run once: no retry of a permanent failure',
        );
        assert.equal(dead.length, 1);
        assert.equal(dead[0]!.delivery.eventId, 'e-gone');
        assert.equal(dead[0]!.delivery.attempt, 1);
        assert.ok(isPermanentFailure(dead[0]!.error));
        const [view] = (await harness.store.listDeliveries({ eventId: 'e-gone' })).items;
        assert.deepEqual(
          [view?.status, view?.attempts, view?.maxAttempts, view?.lastError],
          ['dead', 1, 10, 'PermanentFailure: customer c-9 does not exist'],
        );
        assert.ok(ran.indexOf('o-next') > ran.indexOf('o-gone'), 'the next delivery of the key ran after it');
        assert.deepEqual(errors, [
          'handler failed permanently (a retry cannot fix it); the delivery is dead until requeued',
        ]);
        // The control: a plain error is retried later, not buried.
        const [flaky] = (await harness.store.listDeliveries({ eventId: 'e-flaky' })).items;
        assert.deepEqual([flaky?.status, flaky?.attempts], ['pending', 1]);
        assert.deepEqual(
          failed.map((f) => f.delivery.eventId),
          ['e-flaky'],
        );
      });
    }
  });
}

describe('isPermanentFailure', () => {
  it('accepts PermanentFailure (also one made by another copy of relaybus) and nothing else', () => {
    assert.equal(isPermanentFailure(new PermanentFailure('no')), true);
    assert.equal(isPermanentFailure(new PermanentFailure('no', { cause: new Error('why') })), true);
    const foreign = new Error('from another copy');
    Object.defineProperty(foreign, Symbol.for('relaybus.permanentFailure'), { value: true });
    assert.equal(isPermanentFailure(foreign), true);
    for (const other of [new Error('x'), 'text', null, undefined, { permanent: true }])
      assert.equal(isPermanentFailure(other), false);
    assert.equal(new PermanentFailure('no').name, 'PermanentFailure');
  });
});
