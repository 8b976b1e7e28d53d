import assert from 'node:assert/strict';
import { describe, it, type TestContext } from 'node:test';
import {
  DEFAULT_MAX_ATTEMPTS,
  DuplicateHandlerError,
  InvalidInputError,
  InvalidOptionsError,
  InvalidPayloadError,
  InvalidStateError,
  Type,
  UnknownEventError,
  UnknownHandlerError,
  createRelayBus,
  defineEvent,
  memoryStore,
  type MemoryTransaction,
  type RelayBus,
  type Store,
} from '../../src/index.js';
import { StubClock } from '../support/clock.js';
import { collect, nextEvent, spyStore, waitFor } from '../support/wait.js';

/** The public surface of the bus: registration, publish, start/stop, and every bad input. */

const OrderPlaced = defineEvent(
  'order.placed',
  Type.Object({ orderId: Type.String({ minLength: 1 }), totalCents: Type.Integer({ minimum: 0 }) }),
);
const UserCreated = defineEvent('user.created', Type.Object({ userId: Type.String() }));
const NotListed = defineEvent('not.listed', Type.Object({}));

function harness(t: TestContext, store: Store<MemoryTransaction> = memoryStore()) {
  const clock = new StubClock();
  const spied = spyStore(store);
  const bus = createRelayBus({
    store: spied.store,
    events: [OrderPlaced, UserCreated],
    clock,
    dispatcher: { pollIntervalMs: 10 },
  });
  t.after(() => bus.stop({ graceMs: 0 }));
  return { bus, store: spied.store, calls: spied.calls, clock };
}

async function nothingWritten(store: Store<MemoryTransaction>): Promise<void> {
  assert.deepEqual((await store.listDeliveries({})).items, []);
}

describe('bus: registration', () => {
  it('rejects a handler name registered twice, with a typed error', (t) => {
    const { bus } = harness(t);
    bus.on(OrderPlaced, 'notify', () => undefined);
    for (const event of [OrderPlaced, UserCreated] as const) {
      assert.throws(
        () => bus.on(event, 'notify', () => undefined),
        (error: unknown) => {
          assert.ok(error instanceof DuplicateHandlerError);
          assert.ok(error instanceof UnknownHandlerError);
          assert.equal(error.code, 'RELAYBUS_UNKNOWN_HANDLER');
          assert.match(error.message, /"notify" is already registered \(for event "order.placed"\)/);
          return true;
        },
      );
    }
  });

  it('rejects an event the bus was not created with', (t) => {
    const { bus } = harness(t);
    // @ts-expect-error not one of the bus's events
    assert.throws(() => bus.on(NotListed, 'h', () => undefined), /"not.listed" is not one of this bus's events/);
    const lookalike = defineEvent('order.placed', Type.Object({ orderId: Type.String(), totalCents: Type.Integer() }));
    assert.throws(
      () => bus.on(lookalike, 'h', () => undefined),
      (error: unknown) =>
        error instanceof UnknownEventError && /not the one the bus was created with/.test(error.message),
    );
    assert.throws(() => bus.on({ type: 'order.placed' } as never, 'h', () => undefined), UnknownEventError);
  });

  it('rejects bad names, missing functions and bad handler options', (t) => {
    const { bus } = harness(t);
    assert.throws(() => bus.on(OrderPlaced, '', () => undefined), InvalidInputError);
    assert.throws(() => bus.on(OrderPlaced, 'h', {} as never), /last argument must be the handler function/);
    assert.throws(
      () => bus.on(OrderPlaced, 'h', { maxAttempts: 0 }, () => undefined),
      (error: unknown) => error instanceof InvalidOptionsError && /handler "h": maxAttempts/.test(error.message),
    );
    assert.throws(
      () => bus.on(OrderPlaced, 'h', { timeout: 5 } as never, () => undefined),
      /timeout: Unexpected property/,
    );
  });

  it('rejects a transactional handler on a store without transactions', (t) => {
    const memory = memoryStore();
    const noTx = Object.create(memory, {
      capabilities: { value: { ...memory.capabilities, transactions: false } },
    }) as Store<MemoryTransaction>;
    const bus = createRelayBus({ store: noTx, events: [OrderPlaced] });
    t.after(() => bus.stop());
    assert.throws(
      () => bus.on(OrderPlaced, 'h', { transactional: true }, () => undefined),
      (error: unknown) => error instanceof InvalidOptionsError && /has no transactions/.test(error.message),
    );
  });

  it('types payloads and contexts from the schema and the store', (t) => {
    const { bus } = harness(t);
    bus.on(OrderPlaced, 'typed', (order, ctx) => {
      order.orderId satisfies string;
      order.totalCents satisfies number;
      // @ts-expect-error not in the schema
      void order.userId;
      // @ts-expect-error only transactional handlers get a transaction
      void ctx.transaction;
    });
    bus.on(OrderPlaced, 'typed-tx', { transactional: true }, (_order, ctx) => {
      ctx.transaction satisfies MemoryTransaction;
    });
    const typed: RelayBus<MemoryTransaction, typeof OrderPlaced | typeof UserCreated> = bus;
    void typed;
  });
});

describe('bus: publish', () => {
  it("writes one delivery per registered handler, with each handler's maxAttempts", async (t) => {
    const { bus, store, calls } = harness(t);
    bus.on(OrderPlaced, 'receipt', () => undefined);
    bus.on(OrderPlaced, 'ledger', { maxAttempts: 3 }, () => undefined);
    bus.on(UserCreated, 'welcome', () => undefined);
    const result = await store.transaction((tx) =>
      bus.publish(tx, OrderPlaced, { orderId: 'o-1', totalCents: 5 }, { key: 'c-1', id: 'm-1', headers: { a: 'b' } }),
    );
    assert.deepEqual(result, { eventId: 'm-1', addedHandlers: ['receipt', 'ledger'], duplicate: false });
    const publishCall = calls.find((call) => call.method === 'publish');
    assert.deepEqual((publishCall?.args[1] as unknown[] | undefined)?.[0], {
      type: 'order.placed',
      payload: { orderId: 'o-1', totalCents: 5 },
      id: 'm-1',
      key: 'c-1',
      headers: { a: 'b' },
      handlers: [
        { name: 'receipt', maxAttempts: DEFAULT_MAX_ATTEMPTS },
        { name: 'ledger', maxAttempts: 3 },
      ],
    });
    const { items } = await store.listDeliveries({});
    assert.deepEqual(
      items.map((item) => [item.handler, item.maxAttempts, item.key]),
      [
        ['receipt', 10, 'c-1'],
        ['ledger', 3, 'c-1'],
      ],
    );
  });

  it('deduplicates by event id (inbox): publishing the same id again adds nothing', async (t) => {
    const { bus, store } = harness(t);
    bus.on(OrderPlaced, 'receipt', () => undefined);
    const payload = { orderId: 'o-1', totalCents: 5 };
    await store.transaction((tx) => bus.publish(tx, OrderPlaced, payload, { id: 'broker-42' }));
    const again = await store.transaction((tx) => bus.publish(tx, OrderPlaced, payload, { id: 'broker-42' }));
    assert.deepEqual(again, { eventId: 'broker-42', addedHandlers: [], duplicate: true });
    assert.equal((await store.listDeliveries({})).items.length, 1);
  });

  it("is atomic with the caller's transaction: a rollback leaves nothing", async (t) => {
    const { bus, store } = harness(t);
    bus.on(OrderPlaced, 'receipt', () => undefined);
    await assert.rejects(
      store.transaction(async (tx) => {
        await bus.publish(tx, OrderPlaced, { orderId: 'o-1', totalCents: 5 });
        throw new Error('business rule failed');
      }),
      /business rule failed/,
    );
    await nothingWritten(store);
  });

  it('rejects an invalid payload, naming the path and the rule, and writes nothing', async (t) => {
    const { bus, store, calls } = harness(t);
    bus.on(OrderPlaced, 'receipt', () => undefined);
    await assert.rejects(
      store.transaction((tx) => bus.publish(tx, OrderPlaced, { orderId: '', totalCents: -1 })),
      (error: unknown) => {
        assert.ok(error instanceof InvalidPayloadError);
        assert.deepEqual(
          error.issues.map((issue) => issue.path),
          ['/orderId', '/totalCents'],
        );
        assert.match(error.message, /\/orderId: Expected string length greater or equal to 1/);
        return true;
      },
    );
    await assert.rejects(
      // @ts-expect-error the payload type comes from the schema
      store.transaction((tx) => bus.publish(tx, OrderPlaced, { orderId: 'o-1' })),
      InvalidPayloadError,
    );
    assert.equal(calls.filter((call) => call.method === 'publish').length, 0, 'the store was never called');
    await nothingWritten(store);
  });

  it('rejects an unknown event type', async (t) => {
    const { bus, store } = harness(t);
    bus.on(OrderPlaced, 'receipt', () => undefined);
    await assert.rejects(
      // @ts-expect-error not one of the bus's events
      store.transaction((tx) => bus.publish(tx, NotListed, {})),
      UnknownEventError,
    );
    await nothingWritten(store);
  });

  it('rejects an event that has no handler registered and no subscription, saying what to do', async (t) => {
    const { bus, store } = harness(t);
    bus.on(OrderPlaced, 'receipt', () => undefined);
    await assert.rejects(
      store.transaction((tx) => bus.publish(tx, UserCreated, { userId: 'u-1' })),
      (error: unknown) => {
        assert.ok(error instanceof InvalidInputError);
        assert.match(
          error.message,
          /"user.created" has no handler here and no subscription.*Start a worker that runs its handlers/,
        );
        return true;
      },
    );
    await nothingWritten(store);
  });

  it('a publisher that registers no handler fans out to the handlers a started bus subscribed', async (t) => {
    const { bus: worker, store } = harness(t);
    const handled: string[] = [];
    worker.on(UserCreated, 'welcome', (user) => {
      handled.push(user.userId);
    });
    await worker.start();
    const publisher = createRelayBus({ store, events: [OrderPlaced, UserCreated] });
    await store.transaction((tx) => publisher.publish(tx, UserCreated, { userId: 'u-7' }));
    await waitFor(() => handled.includes('u-7'), 'the subscribed handler ran', 5_000);
    assert.deepEqual(
      (await store.listSubscriptions()).map((s) => [s.eventType, s.handler]),
      [['user.created', 'welcome']],
    );
  });

  it('rejects unknown publish options and a non-transaction', async (t) => {
    const { bus, store } = harness(t);
    bus.on(OrderPlaced, 'receipt', () => undefined);
    const payload = { orderId: 'o-1', totalCents: 1 };
    await assert.rejects(
      // @ts-expect-error misspelt option
      store.transaction((tx) => bus.publish(tx, OrderPlaced, payload, { keys: 'x' })),
      /unknown publish option "keys"/,
    );
    // @ts-expect-error a plain object is not the store's transaction type
    await assert.rejects(bus.publish({}, OrderPlaced, payload), InvalidInputError);
    await assert.rejects(
      store.transaction((tx) => bus.publish(tx, OrderPlaced, payload, { key: '' })),
      InvalidInputError,
    );
    await nothingWritten(store);
  });

  it('publishMany validates every item before writing any, in one store call', async (t) => {
    const { bus, store, calls } = harness(t);
    bus.on(OrderPlaced, 'receipt', () => undefined);
    bus.on(UserCreated, 'welcome', () => undefined);
    await assert.rejects(
      store.transaction((tx) =>
        bus.publishMany(tx, [
          { event: OrderPlaced, payload: { orderId: 'o-1', totalCents: 1 } },
          { event: UserCreated, payload: { userId: 7 as unknown as string } },
        ]),
      ),
      /items\[1\]|user.created/,
    );
    await nothingWritten(store);
    const results = await store.transaction((tx) =>
      bus.publishMany(tx, [
        { event: OrderPlaced, payload: { orderId: 'o-1', totalCents: 1 }, options: { id: 'a' } },
        { event: UserCreated, payload: { userId: 'u-1' }, options: { id: 'b' } },
      ]),
    );
    assert.deepEqual(
      results.map((result) => [result.eventId, result.addedHandlers]),
      [
        ['a', ['receipt']],
        ['b', ['welcome']],
      ],
    );
    assert.equal(calls.filter((call) => call.method === 'publish').length, 1);
    assert.deepEqual(await store.transaction((tx) => bus.publishMany(tx, [])), []);
    assert.equal(calls.filter((call) => call.method === 'publish').length, 1, 'an empty batch calls nothing');
  });

  it('holds a delayed event until availableAt', async (t) => {
    const { bus, store, clock } = harness(t);
    const handled = collect(bus.lifecycle, 'delivered');
    bus.on(OrderPlaced, 'later', () => undefined);
    await store.transaction((tx) =>
      bus.publish(
        tx,
        OrderPlaced,
        { orderId: 'o-1', totalCents: 1 },
        { availableAt: new Date(clock.now().getTime() + 60_000) },
      ),
    );
    await bus.start();
    await new Promise((resolve) => setTimeout(resolve, 40));
    assert.equal(handled.length, 0);
    const delivered = nextEvent(bus.lifecycle, 'delivered');
    clock.advance(60_000);
    await delivered;
  });
});

describe('bus: lifecycle', () => {
  it('start() runs store.setup() then the dispatcher; stop() is graceful and idempotent', async (t) => {
    const { bus, calls } = harness(t);
    bus.on(OrderPlaced, 'receipt', () => undefined);
    assert.equal(bus.state, 'idle');
    assert.equal(bus.owner, undefined);
    await bus.start();
    assert.equal(bus.state, 'running');
    assert.equal(calls[0]?.method, 'setup');
    assert.match(bus.owner ?? '', /^.+:\d+:[0-9a-f]{12}$/);
    await Promise.all([bus.stop(), bus.stop()]);
    assert.equal(bus.state, 'stopped');
    assert.equal(calls.filter((call) => call.method === 'relinquish').length, 1);
    await bus.stop();
  });

  it('skips setup with setupStore: false', async (t) => {
    const spied = spyStore(memoryStore());
    const bus = createRelayBus({
      store: spied.store,
      events: [OrderPlaced],
      setupStore: false,
      dispatcher: { ownerPrefix: 'worker-a' },
    });
    t.after(() => bus.stop());
    bus.on(OrderPlaced, 'receipt', () => undefined);
    await bus.start();
    assert.equal(spied.calls.filter((call) => call.method === 'setup').length, 0);
    assert.match(bus.owner ?? '', /^worker-a:\d+:/);
  });

  it('a failed setup leaves the bus startable again', async (t) => {
    const memory = memoryStore();
    let failures = 1;
    const { store } = spyStore(memory, {
      setup: async () => {
        if (failures-- > 0) throw new Error('db not ready');
      },
    });
    const bus = createRelayBus({ store, events: [OrderPlaced] });
    t.after(() => bus.stop());
    bus.on(OrderPlaced, 'receipt', () => undefined);
    await assert.rejects(bus.start(), /db not ready/);
    assert.equal(bus.state, 'idle');
    await bus.start();
    assert.equal(bus.state, 'running');
  });

  it('refuses start() without handlers, a second start(), and on() after start()', async (t) => {
    const { bus } = harness(t);
    await assert.rejects(
      bus.start(),
      (error: unknown) => error instanceof InvalidStateError && /no handler is registered/.test(error.message),
    );
    bus.on(OrderPlaced, 'receipt', () => undefined);
    await bus.start();
    await assert.rejects(bus.start(), InvalidStateError);
    assert.throws(
      () => bus.on(UserCreated, 'late', () => undefined),
      (error: unknown) => error instanceof InvalidStateError && /before start\(\)/.test(error.message),
    );
    await bus.stop();
    await assert.rejects(bus.start(), InvalidStateError);
  });

  it('publishing works on a bus that is never started (publisher processes)', async (t) => {
    const { bus, store } = harness(t);
    bus.on(OrderPlaced, 'receipt', () => undefined);
    await store.transaction((tx) => bus.publish(tx, OrderPlaced, { orderId: 'o-1', totalCents: 1 }));
    assert.equal((await store.listDeliveries({})).items.length, 1);
    await bus.stop();
    assert.equal(bus.state, 'idle');
  });

  it('emits typed lifecycle events; unsubscribe stops them', async (t) => {
    const { bus, store } = harness(t);
    bus.on(OrderPlaced, 'receipt', () => undefined);
    let count = 0;
    const off = bus.lifecycle.on('delivered', () => {
      count += 1;
    });
    const first = nextEvent(bus.lifecycle, 'delivered');
    await store.transaction((tx) => bus.publish(tx, OrderPlaced, { orderId: 'o-1', totalCents: 1 }));
    await bus.start();
    const event = await first;
    event.delivery.handler satisfies string;
    event.durationMs satisfies number;
    assert.equal(count, 1);
    off();
    const second = nextEvent(bus.lifecycle, 'delivered');
    await store.transaction((tx) => bus.publish(tx, OrderPlaced, { orderId: 'o-2', totalCents: 1 }));
    await second;
    assert.equal(count, 1);
  });
});
