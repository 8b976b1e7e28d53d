import assert from 'node:assert/strict';
import { describe, it, type TestContext } from 'node:test';
import { Type } from '@sinclair/typebox';
import { createRelayBus } from '../../src/bus/bus.js';
import { defineEvent } from '../../src/core/events.js';
import { laneOf } from '../../src/core/lanes.js';
import type { HandlerContext } from '../../src/core/handlers.js';
import type { DispatcherOptions } from '../../src/core/options.js';
import { CompletionBatcher, type CompletionBatcherOptions } from '../../src/dispatcher/completion-batcher.js';
import { LeaseRenewer } from '../../src/dispatcher/lease-renewer.js';
import { memoryStore, type MemoryTransaction } from '../../src/memory/memory-store.js';
import { noopLogger } from '../../src/core/logger.js';
import { StoreUnavailableError } from '../../src/core/errors.js';
import type { ClaimedDelivery, DeliveryLease, Store } from '../../src/store/contract.js';
import type { OwnerClaimParams as ClaimParams } from '../support/claims.js';
import { StubClock } from '../support/clock.js';
import { collect, deferred, nextEvent, pause, spyStore, waitFor, type Deferred } from '../support/wait.js';
import * as owners from '../support/claims.js';

/**
 * The dispatcher, run for real through the bus against the in-memory store. Time that matters to
 * the store (lease expiry, backoff) is a stub clock moved by hand; real waits are only the few
 * milliseconds of the poll interval and the completion window.
 */

const Order = defineEvent('order', Type.Object({ n: Type.Integer() }));
const Audit = defineEvent('audit', Type.Object({ of: Type.Integer() }));

function harness(
  t: TestContext,
  dispatcher: DispatcherOptions = {},
  storeOverrides: Partial<Store<MemoryTransaction>> & Partial<owners.OwnerClaimCalls> = {},
) {
  const clock = new StubClock();
  const memory = memoryStore();
  const { store, calls } = spyStore(memory, storeOverrides);
  const bus = createRelayBus({
    store,
    events: [Order, Audit],
    clock,
    backoff: { jitter: 0 },
    dispatcher: { pollIntervalMs: 10, ...dispatcher },
  });
  t.after(() => bus.stop({ graceMs: 0 }));
  const publish = (n: number, key?: string) =>
    store.transaction((tx) => bus.publish(tx, Order, { n }, key === undefined ? {} : { key }));
  const callsOf = (method: string) => calls.filter((call) => call.method === method);
  return { bus, store, memory, calls, callsOf, clock, publish };
}

describe('dispatcher: delivery', () => {
  it('delivers every (event, handler) pair exactly once', async (t) => {
    const { bus, store } = harness(t);
    const seen: string[] = [];
    bus.on(Order, 'order-a', async (order, ctx) => {
      seen.push(`order-a:${order.n}:${ctx.delivery.attempt}`);
    });
    bus.on(Order, 'order-b', (order) => {
      seen.push(`order-b:${order.n}:1`);
    });
    bus.on(Audit, 'audit-a', async (audit) => {
      seen.push(`audit-a:${audit.of}:1`);
    });
    const delivered = collect(bus.lifecycle, 'delivered');
    await store.transaction((tx) =>
      bus.publishMany(tx, [
        ...Array.from({ length: 10 }, (_, n) => ({
          event: Order,
          payload: { n },
          options: n % 2 === 0 ? { key: `k${n % 3}` } : {},
        })),
        ...Array.from({ length: 5 }, (_, of) => ({ event: Audit, payload: { of } })),
      ]),
    );
    await bus.start();
    await waitFor(() => delivered.length === 25, '25 deliveries');
    const expected = [
      ...Array.from({ length: 10 }, (_, n) => [`order-a:${n}:1`, `order-b:${n}:1`]).flat(),
      ...Array.from({ length: 5 }, (_, of) => `audit-a:${of}:1`),
    ];
    assert.deepEqual([...seen].sort(), expected.sort());
    await pause(30);
    assert.equal(seen.length, 25, 'nothing ran twice');
    const stats = await store.statistics();
    assert.equal(stats.pending + stats.inFlight + stats.dead, 0);
  });

  it('never runs more than `concurrency` handlers nor claims more than the free slots', async (t) => {
    const { bus, publish, callsOf } = harness(t, { concurrency: 3, batchSize: 10 });
    const gate = deferred();
    let running = 0;
    let peak = 0;
    bus.on(Order, 'blocking', async () => {
      running += 1;
      peak = Math.max(peak, running);
      await gate.promise;
      running -= 1;
    });
    const delivered = collect(bus.lifecycle, 'delivered');
    for (let n = 0; n < 8; n += 1) await publish(n);
    await bus.start();
    await waitFor(() => running === 3, 'three handlers running');
    await pause(50); // several poll intervals with every slot taken
    assert.equal(running, 3);
    gate.resolve();
    await waitFor(() => delivered.length === 8, 'all 8 delivered');
    assert.equal(peak, 3);
    for (const call of callsOf('claim'))
      assert.ok((call.args[0] as ClaimParams).limit <= 3, 'claim limit <= free slots');
  });

  it('runs the deliveries of one key one at a time, in sequence order', async (t) => {
    const { bus, publish } = harness(t, { concurrency: 10 });
    const active = new Set<string>();
    const order = new Map<string, number[]>();
    let overlaps = 0;
    bus.on(Order, 'ordered', async (payload, ctx) => {
      const key = ctx.delivery.key ?? 'none';
      if (active.has(key)) overlaps += 1;
      active.add(key);
      await pause(2);
      order.set(key, [...(order.get(key) ?? []), payload.n]);
      active.delete(key);
    });
    const delivered = collect(bus.lifecycle, 'delivered');
    for (let n = 0; n < 5; n += 1) {
      await publish(n, 'k1');
      await publish(100 + n, 'k2');
    }
    await bus.start();
    await waitFor(() => delivered.length === 10, '10 keyed deliveries', 5_000);
    assert.equal(overlaps, 0);
    assert.deepEqual(order.get('k1'), [0, 1, 2, 3, 4]);
    assert.deepEqual(order.get('k2'), [100, 101, 102, 103, 104]);
  });

  it("claims a key's next delivery as soon as its predecessor completes, not a poll interval later", async (t) => {
    const { bus, publish } = harness(t, { pollIntervalMs: 60_000 });
    bus.on(Order, 'chained', () => undefined);
    const delivered = collect(bus.lifecycle, 'delivered');
    for (let n = 0; n < 5; n += 1) await publish(n, 'one-key');
    await bus.start();
    await waitFor(() => delivered.length === 5, 'the whole key drained without polling', 1_500);
    assert.deepEqual(
      delivered.map((event) => event.delivery.sequence),
      ['1', '2', '3', '4', '5'],
    );
  });

  it('writes completions finishing within the window in one store call (riding on the next claim)', async (t) => {
    const { bus, publish, callsOf } = harness(t, { completionBatchWindowMs: 20 });
    bus.on(Order, 'fast', () => undefined);
    const delivered = collect(bus.lifecycle, 'delivered');
    for (let n = 0; n < 5; n += 1) await publish(n);
    await bus.start();
    await waitFor(() => delivered.length === 5, '5 delivered');
    const writes = [...callsOf('completeMany'), ...callsOf('completeAndClaim')]
      .map((call) => call.args[0] as DeliveryLease[])
      .filter((leases) => leases.length > 0);
    assert.deepEqual(
      writes.map((leases) => leases.length),
      [5],
    );
  });

  it('hands handlers their delivery, a live signal and the typed payload', async (t) => {
    const { bus, store } = harness(t);
    const seen = deferred<{ payload: { n: number }; ctx: HandlerContext }>();
    bus.on(Order, 'inspect', (payload, ctx) => seen.resolve({ payload, ctx }));
    const [result] = await store.transaction((tx) =>
      bus.publishMany(tx, [
        { event: Order, payload: { n: 7 }, options: { key: 'c-1', id: 'evt-1', headers: { trace: 't-1' } } },
      ]),
    );
    await bus.start();
    const { payload, ctx } = await seen.promise;
    assert.deepEqual(payload, { n: 7 });
    assert.equal(result?.eventId, 'evt-1');
    const { delivery } = ctx;
    assert.equal(delivery.eventId, 'evt-1');
    assert.equal(delivery.eventType, 'order');
    assert.equal(delivery.handler, 'inspect');
    assert.equal(delivery.key, 'c-1');
    assert.equal(delivery.sequence, '1');
    assert.equal(delivery.attempt, 1);
    assert.equal(delivery.maxAttempts, 10);
    assert.deepEqual(delivery.headers, { trace: 't-1' });
    assert.ok(delivery.createdAt instanceof Date);
    assert.equal(ctx.signal.aborted, false);
    assert.equal('transaction' in ctx, false);
  });
});

describe('dispatcher: failures', () => {
  it('retries a failing handler with backoff, then dead-letters it with its last error; requeue revives it', async (t) => {
    const { bus, publish, store, clock } = harness(t);
    let calls = 0;
    let healthy = false;
    bus.on(
      Order,
      'flaky',
      { maxAttempts: 3, backoff: { initialDelayMs: 1_000, maxDelayMs: 1_000 } },
      async (_payload, ctx) => {
        calls += 1;
        if (!healthy) throw new Error(`boom ${ctx.delivery.attempt}`);
      },
    );
    const failed: Date[] = [];
    const failedAt: Date[] = [];
    bus.lifecycle.on('failed', (event) => {
      failed.push(event.retryAt);
      failedAt.push(clock.now());
      clock.advance(1_000); // make the retry due
    });
    const dead = nextEvent(bus.lifecycle, 'dead');
    await publish(1);
    await bus.start();
    const { delivery, error } = await dead;
    assert.equal(delivery.attempt, 3);
    assert.match(String(error), /boom 3/);
    assert.equal(calls, 3);
    assert.deepEqual(
      failed.map((at) => at.getTime()),
      failedAt.map((at) => at.getTime() + 1_000),
      'retryAt = now + backoff',
    );
    const { items } = await store.listDeliveries({ status: 'dead' });
    assert.equal(items.length, 1);
    assert.equal(items[0]!.attempts, 3);
    assert.equal(items[0]!.lastError, 'Error: boom 3');

    healthy = true;
    const delivered = nextEvent(bus.lifecycle, 'delivered');
    assert.equal(await store.requeue({ handler: 'flaky', now: clock.now() }), 1);
    assert.equal((await delivered).delivery.attempt, 1);
    assert.equal(calls, 4);
  });

  it('aborts a handler that exceeds its timeout and counts the attempt as failed', async (t) => {
    const { bus, publish, store } = harness(t);
    let signal: AbortSignal | undefined;
    bus.on(Order, 'hang', { timeoutMs: 30, maxAttempts: 1 }, (_payload, ctx) => {
      signal = ctx.signal;
      return new Promise(() => undefined); // ignores its signal
    });
    const dead = nextEvent(bus.lifecycle, 'dead');
    await publish(1);
    await bus.start();
    const { error, durationMs } = await dead;
    assert.equal((error as DOMException).name, 'TimeoutError');
    assert.ok(durationMs >= 25, `aborted after ${durationMs} ms`);
    assert.equal(signal?.aborted, true);
    const { items } = await store.listDeliveries({ status: 'dead' });
    assert.match(items[0]?.lastError ?? '', /TimeoutError: handler "hang" did not finish within 30 ms/);
  });

  it("counts a handler's synchronous part against its timeout", async (t) => {
    const { bus, publish } = harness(t);
    bus.on(Order, 'slow-start', { timeoutMs: 50, maxAttempts: 1 }, () => {
      const until = performance.now() + 80;
      while (performance.now() < until); // 80 ms of synchronous work, then a promise that settles 30 ms later
      return new Promise<void>((resolve) => setTimeout(resolve, 30));
    });
    const dead = nextEvent(bus.lifecycle, 'dead');
    await publish(1);
    await bus.start();
    assert.equal(((await dead).error as DOMException).name, 'TimeoutError');
  });

  it('takes the result of a handler that returns synchronously, however long it took', async (t) => {
    const { bus, publish } = harness(t);
    bus.on(Order, 'slow-sync', { timeoutMs: 20, maxAttempts: 1 }, () => {
      const until = performance.now() + 40;
      while (performance.now() < until); // nothing can interrupt it: its return is its outcome
    });
    const delivered = nextEvent(bus.lifecycle, 'delivered');
    await publish(1);
    await bus.start();
    assert.ok((await delivered).durationMs >= 40);
  });

  it('keeps running when a claim fails', async (t) => {
    let failures = 1;
    const memory = memoryStore();
    const { bus, publish } = harness(
      t,
      {},
      {
        claim: (params: ClaimParams) =>
          failures-- > 0 ? Promise.reject(new StoreUnavailableError('db down')) : owners.claim(memory, params),
        transaction: (fn) => memory.transaction(fn),
        publish: (tx, events, now) => memory.publish(tx, events, now),
        completeMany: (leases, now) => memory.completeMany(leases, now),
        completeAndClaim: (leases, params) => owners.completeAndClaim(memory, leases, params),
      },
    );
    bus.on(Order, 'after-outage', () => undefined);
    await publish(1);
    const delivered = nextEvent(bus.lifecycle, 'delivered');
    await bus.start();
    await delivered;
  });

  it('a throwing lifecycle listener does not disturb the dispatcher', async (t) => {
    const { bus, publish } = harness(t);
    bus.on(Order, 'ok', () => undefined);
    bus.lifecycle.on('delivered', () => {
      throw new Error('metrics are broken');
    });
    const delivered = collect(bus.lifecycle, 'delivered');
    await publish(1);
    await publish(2);
    await bus.start();
    await waitFor(() => delivered.length === 2, 'both delivered');
  });
});

describe('dispatcher: transactional handlers', () => {
  it('completes the delivery in the transaction the handler wrote in', async (t) => {
    const { bus, publish, callsOf, store } = harness(t);
    let handlerTx: MemoryTransaction | undefined;
    bus.on(Order, 'tx-handler', { transactional: true }, async (order, ctx) => {
      handlerTx = ctx.transaction;
      await bus.publish(ctx.transaction, Audit, { of: order.n });
    });
    const audited = deferred<number>();
    bus.on(Audit, 'audit-sink', (audit) => audited.resolve(audit.of));
    const delivered = nextEvent(bus.lifecycle, 'delivered', {
      filter: (event) => event.delivery.handler === 'tx-handler',
    });
    await publish(42);
    await bus.start();
    await delivered;
    assert.equal(await audited.promise, 42, "the handler's write committed");
    const completes = callsOf('complete');
    assert.equal(completes.length, 1);
    assert.equal(completes[0]!.args[1], handlerTx, "complete() ran in the handler's transaction");
    assert.equal(
      callsOf('completeMany').filter((call) =>
        (call.args[0] as DeliveryLease[]).some(
          (lease) => lease.deliveryId === (completes[0]!.args[0] as DeliveryLease).deliveryId,
        ),
      ).length,
      0,
    );
    assert.equal((await store.listDeliveries({ handler: 'tx-handler' })).items.length, 0);
  });

  it("rolls back the handler's writes when it throws, and retries", async (t) => {
    const { bus, publish, store } = harness(t);
    bus.on(Order, 'tx-fails', { transactional: true }, async (order, ctx) => {
      await bus.publish(ctx.transaction, Audit, { of: order.n });
      throw new Error('after writing');
    });
    bus.on(Audit, 'audit-sink', () => undefined);
    const failed = nextEvent(bus.lifecycle, 'failed');
    await publish(1);
    await bus.start();
    await failed;
    assert.equal((await store.listDeliveries({ handler: 'audit-sink' })).items.length, 0, 'the write was rolled back');
    const [delivery] = (await store.listDeliveries({ handler: 'tx-fails' })).items;
    assert.equal(delivery?.attempts, 1);
    assert.equal(delivery?.lastError, 'Error: after writing');
  });

  it('rolls back and reports lease-lost (not a failure) when the completion is fenced', async (t) => {
    const { bus, publish, store, clock } = harness(t);
    const started = deferred();
    const gate = deferred();
    bus.on(Order, 'tx-slow', { transactional: true }, async (order, ctx) => {
      started.resolve();
      await gate.promise;
      await bus.publish(ctx.transaction, Audit, { of: order.n });
    });
    bus.on(Audit, 'audit-sink', () => undefined);
    const failures = collect(bus.lifecycle, 'failed');
    const lost = nextEvent(bus.lifecycle, 'lease-lost');
    await publish(1);
    await bus.start();
    await started.promise;
    clock.advance(60_000); // the 30 s lease expired; the renewer (every 10 s of real time) has not run
    const stolen = await owners.claim(store, {
      owner: 'thief',
      handlers: ['tx-slow'],
      limit: 10,
      leaseDurationMs: 60_000,
      now: clock.now(),
    });
    assert.equal(stolen.length, 1);
    gate.resolve();
    const event = await lost;
    assert.equal(event.detectedBy, 'outcome');
    await pause(20);
    assert.equal(failures.length, 0);
    assert.equal(
      (await store.listDeliveries({ handler: 'audit-sink' })).items.length,
      0,
      "the handler's write was rolled back",
    );
    const [delivery] = (await store.listDeliveries({ handler: 'tx-slow' })).items;
    assert.equal(delivery?.status, 'processing', 'held by the thief');
    assert.equal(delivery?.attempts, 1, 'charged once, by the takeover');
  });
});

describe('dispatcher: lost leases', () => {
  it('aborts the handler when renewal finds the lane taken over, and drops its late result', async (t) => {
    const { bus, publish, store, clock, callsOf } = harness(t, { leaseDurationMs: 300 });
    const started = deferred();
    const gate = deferred();
    let signal: AbortSignal | undefined;
    bus.on(Order, 'slow', async (_payload, ctx) => {
      signal = ctx.signal;
      started.resolve();
      await gate.promise;
    });
    const delivered = collect(bus.lifecycle, 'delivered');
    const lost = nextEvent(bus.lifecycle, 'lease-lost');
    await publish(1);
    await bus.start();
    await started.promise;
    clock.advance(1_000);
    const [stolen] = await owners.claim(store, {
      owner: 'thief',
      handlers: ['slow'],
      limit: 10,
      leaseDurationMs: 60_000,
      now: clock.now(),
    });
    assert.ok(stolen);
    const event = await lost; // the renewer runs every 100 ms
    assert.equal(event.detectedBy, 'renewal');
    assert.equal(event.delivery.id, stolen.id);
    assert.equal(signal?.aborted, true);
    gate.resolve();
    await pause(30);
    assert.equal(delivered.length, 0);
    assert.equal(callsOf('completeMany').length, 0, 'the late result was never written');
    assert.deepEqual(
      await store.completeMany([{ deliveryId: stolen.id, leaseToken: stolen.leaseToken }], clock.now()),
      [true],
      'the thief still holds it',
    );
  });

  it('drops the result when the completion is fenced', async (t) => {
    const { bus, publish, store, clock } = harness(t);
    const started = deferred();
    const gate = deferred();
    bus.on(Order, 'slow', async () => {
      started.resolve();
      await gate.promise;
    });
    const delivered = collect(bus.lifecycle, 'delivered');
    const lost = nextEvent(bus.lifecycle, 'lease-lost');
    await publish(1);
    await bus.start();
    await started.promise;
    clock.advance(60_000);
    const [stolen] = await owners.claim(store, {
      owner: 'thief',
      handlers: ['slow'],
      limit: 10,
      leaseDurationMs: 60_000,
      now: clock.now(),
    });
    gate.resolve();
    assert.equal((await lost).detectedBy, 'outcome');
    assert.equal(delivered.length, 0);
    const [delivery] = (await store.listDeliveries({})).items;
    assert.equal(delivery?.id, stolen?.id);
    assert.equal(delivery?.status, 'processing');
  });

  it('LeaseRenewer: a claim at a newer epoch fences what runs at the older one', () => {
    const lost: string[] = [];
    const renewer = new LeaseRenewer({
      store: { extendLease: async () => ({ extended: [], lost: [] }) },
      owner: 'o',
      leaseDurationMs: 1_000,
      intervalMs: 1_000,
      now: () => undefined,
      logger: noopLogger,
      onLost: (lane, epoch, detectedBy) => lost.push(`${lane}@${epoch}:${detectedBy}`),
    });
    assert.equal(renewer.track(7, '3'), true);
    assert.equal(renewer.track(7, '3'), true);
    assert.equal(renewer.lanes.get(7)?.inFlight, 2);
    assert.equal(renewer.track(7, '4'), true);
    assert.deepEqual(lost, ['7@3:claim']);
    assert.deepEqual(renewer.lanes.get(7), { epoch: '4', inFlight: 1 });
    assert.equal(renewer.track(7, '2'), false, 'an older epoch is stale');
    renewer.untrack(7, '3'); // a late untrack of the lost epoch changes nothing
    assert.equal(renewer.lanes.get(7)?.inFlight, 1);
    renewer.untrack(7, '4');
    assert.equal(renewer.lanes.size, 0);
  });

  it('LeaseRenewer: extends only lanes with work and reports the lost ones', async () => {
    const sent: unknown[] = [];
    const lost: string[] = [];
    const renewer = new LeaseRenewer({
      store: {
        extendLease: async (params) => {
          sent.push(params.lanes);
          return { extended: [1], lost: [2] };
        },
      },
      owner: 'o',
      leaseDurationMs: 1_000,
      intervalMs: 1_000,
      now: () => undefined,
      logger: noopLogger,
      onLost: (lane, epoch, detectedBy) => lost.push(`${lane}@${epoch}:${detectedBy}`),
    });
    await renewer.renew();
    assert.equal(sent.length, 0, 'nothing to renew');
    renewer.track(1, '5');
    renewer.track(2, '9');
    await renewer.renew();
    assert.deepEqual(sent, [
      [
        { lane: 1, epoch: '5' },
        { lane: 2, epoch: '9' },
      ],
    ]);
    assert.deepEqual(lost, ['2@9:renewal']);
    assert.deepEqual([...renewer.lanes.keys()], [1]);
  });
});

describe('dispatcher: followers claimed again', () => {
  it("a key run claimed again at a later epoch of its lane runs after its head's new run, never after the old one", async (t) => {
    // A scripted store: the first claim hands out head 1 and its follower 2 in lane 5 at epoch 9; the second, while the
    // head's first run still runs, the same two at epoch 10 (the lane lost and taken back). Epochs 9 and 10 compare
    // differently as numbers and as text.
    const memory = memoryStore();
    const gate = deferred();
    let claims = 0;
    const run = (id: string, epoch: number, attempts: number, follows?: string): ClaimedDelivery => ({
      id,
      leaseToken: `5:${epoch}:${attempts}`,
      lane: 5,
      eventId: `event-${id}`,
      eventType: 'order',
      handler: 'keyed',
      key: 'k',
      sequence: id,
      payload: { n: Number(id) },
      headers: {},
      attempts,
      maxAttempts: 5,
      availableAt: new Date(0),
      createdAt: new Date(0),
      ...(follows === undefined ? {} : { follows }),
    });
    const { store } = spyStore(memory, {
      async claim() {
        claims += 1;
        if (claims === 1) return [run('1', 9, 0), run('2', 9, 0, '1')];
        if (claims === 2) {
          await started.promise;
          return [run('1', 10, 1), run('2', 10, 1, '1')];
        }
        await pause(5);
        return [];
      },
    });
    const bus = createRelayBus({
      store,
      events: [Order],
      dispatcher: { pollIntervalMs: 5, followers: 9, claimLoops: 1 },
    });
    t.after(() => bus.stop({ graceMs: 0 }));
    const started = deferred();
    /** Each run's event (n) and attempt, in the order they started. */
    const ran: string[] = [];
    bus.on(Order, 'keyed', async ({ n }, ctx) => {
      ran.push(`${n}#${ctx.delivery.attempt}`);
      if (n === 1 && ctx.delivery.attempt === 1) {
        started.resolve();
        await Promise.race([gate.promise, new Promise((resolve) => ctx.signal.addEventListener('abort', resolve))]);
      }
    });
    await bus.start();
    await waitFor(() => ran.includes('2#2'), 'the follower of the later claim ran', 5_000);
    gate.resolve();
    await pause(30);
    assert.deepEqual(ran, ['1#1', '1#2', '2#2'], 'the old follower never ran, the new one after its head');
  });
});

describe('dispatcher: wake-up lane hints', () => {
  it('the next claim prefers the lanes a wake-up named, once', async (t) => {
    let wake: ((lanes?: readonly number[]) => void) | undefined;
    const { bus, callsOf } = harness(
      t,
      { pollIntervalMs: 60_000 },
      {
        subscribeWakeups: async (onWake) => {
          wake = onWake;
          return async () => {};
        },
      },
    );
    bus.on(Order, 'hinted', () => undefined);
    await bus.start();
    await waitFor(() => wake !== undefined && callsOf('claim').length >= 1, 'subscribed and claimed once');
    const before = callsOf('claim').length;
    wake!([7, 42]);
    await waitFor(() => callsOf('claim').length > before, 'a claim after the wake-up');
    assert.deepEqual((callsOf('claim')[before]!.args[0] as ClaimParams).preferLanes, [7, 42]);
    wake!();
    await waitFor(() => callsOf('claim').length > before + 1, 'a claim after a wake-up without lanes');
    assert.equal((callsOf('claim')[before + 1]!.args[0] as ClaimParams).preferLanes, undefined, 'used once');
  });
});

describe('dispatcher: claim loops', () => {
  it('two loops claim as two owners, share the handler slots, deliver every pair once and hand back every lane', async (t) => {
    const { bus, store, callsOf, memory } = harness(t, { claimLoops: 2, concurrency: 4, batchSize: 4 });
    let running = 0;
    let most = 0;
    const seen: number[] = [];
    bus.on(Order, 'order-a', async (order) => {
      running += 1;
      most = Math.max(most, running);
      await pause(2);
      seen.push(order.n);
      running -= 1;
    });
    const delivered = collect(bus.lifecycle, 'delivered');
    await store.transaction((tx) =>
      bus.publishMany(
        tx,
        Array.from({ length: 60 }, (_, n) => ({ event: Order, payload: { n }, options: { key: `k${n % 20}` } })),
      ),
    );
    await bus.start();
    await waitFor(() => delivered.length === 60, '60 deliveries', 10_000);
    assert.deepEqual(
      [...seen].sort((a, b) => a - b),
      Array.from({ length: 60 }, (_, n) => n),
    );
    assert.ok(most <= 4, `at most concurrency (4) handlers at once across both loops, saw ${most}`);
    // A claim with completions riding, or (with two loops) the first of each loop, is a completeAndClaim.
    const owners = new Set([
      ...callsOf('claim').map((call) => (call.args[0] as ClaimParams).owner),
      ...callsOf('completeAndClaim').map((call) => (call.args[1] as ClaimParams).owner),
    ]);
    assert.equal(owners.size, 2, 'each loop claims as an owner of its own');
    await bus.stop();
    const relinquished = callsOf('relinquish').map((call) => call.args[0]);
    assert.deepEqual([...relinquished].sort(), [...owners].sort());
    assert.equal((await memory.statistics()).lanesLeased, 0);
  });
});

/**
 * A harness whose claims (with completions riding or not) go to the memory store after `beforeClaim` (awaited), with
 * the followers each asked for and when (performance.now()).
 */
function followersHarness(t: TestContext, beforeClaim: (at: number) => Promise<void> | void = () => {}) {
  const asked: { followers: number | undefined; freeLanesFirst: boolean | undefined; at: number }[] = [];
  let inner: Store<MemoryTransaction> | undefined;
  const record = async (params: ClaimParams) => {
    const at = performance.now();
    asked.push({ followers: params.followers, freeLanesFirst: params.freeLanes === 'first' ? true : undefined, at });
    await beforeClaim(at);
  };
  const parts = harness(
    t,
    { followers: 8, concurrency: 4, batchSize: 2 },
    {
      async claim(params: ClaimParams) {
        await record(params);
        return owners.claim(inner!, params);
      },
      async completeAndClaim(leases: readonly DeliveryLease[], params: ClaimParams) {
        await record(params);
        return owners.completeAndClaim(inner!, leases, params);
      },
    },
  );
  inner = parts.memory;
  return { ...parts, asked };
}

/** When (performance.now()) the bus's first `failed` event came; 0 until then. */
function firstFailureAt(bus: { lifecycle: { on(name: 'failed', listener: () => void): unknown } }): () => number {
  let at = 0;
  bus.lifecycle.on('failed', () => {
    at ||= performance.now();
  });
  return () => at;
}

describe('dispatcher: followers per claim', () => {
  it('start at one and double to the most, however long the claim cycles take', async (t) => {
    // Claims of 80 ms, longer than half the handler's first retry (100 ms): the count grows all the same.
    const asked: (number | undefined)[] = [];
    const { bus } = harness(
      t,
      { followers: 8, concurrency: 4, batchSize: 2 },
      {
        async claim(params: ClaimParams) {
          asked.push(params.followers);
          await pause(80);
          return [];
        },
      },
    );
    bus.on(Order, 'order-a', { backoff: { initialDelayMs: 100 } }, () => {});
    await bus.start();
    await waitFor(() => asked.length >= 7, 'seven claims');
    assert.deepEqual(asked.slice(0, 7), [1, 2, 4, 8, 8, 8, 8]);
  });

  it('keep doubling after a retry was scheduled, however long the claim cycles take', async (t) => {
    // A retried head is taken ahead of its due time by the claims' lookahead, not by smaller claims: once at 8, every
    // claim after the failure still asks for 8 while the claims take 80 ms, before and after the retry is due (100 ms;
    // the alarm counts real time, the stub clock does not move, so the store never hands the retry out).
    let slowSince = Number.POSITIVE_INFINITY;
    const { bus, publish, asked } = followersHarness(t, async (at) => {
      if (at > slowSince) await pause(80);
    });
    bus.on(Order, 'fails', { backoff: { initialDelayMs: 100 } }, () => {
      throw new Error('fails');
    });
    const failedAt = firstFailureAt(bus);
    await bus.start();
    await waitFor(() => asked.some((a) => a.followers === 8), 'all 8 followers');
    slowSince = performance.now();
    await publish(1, 'k');
    await waitFor(() => failedAt() > 0, 'the failure');
    await waitFor(() => asked.some((a) => a.at > failedAt() + 300), 'claims until 300 ms after the failure');
    const after = asked.filter((a) => a.at > failedAt()).map((a) => a.followers);
    assert.ok(after.length >= 3, `claims after the failure: ${after.length}`);
    assert.deepEqual(
      after,
      after.map(() => 8),
      'the count after the failure',
    );
  });
});

describe('dispatcher: free lanes first', () => {
  it('asks to take free lanes first while its loop is not busy, and not while a backlog keeps it busy', async (t) => {
    // A loop that is not busy holds too little work to fill its batch, so a claim that looks at free lanes will take
    // some anyway: first, so one claim of the held lanes follows instead of two (ClaimHints.freeLanes 'first'). Batches
    // of 2: a full one marks the loop busy.
    const { bus, publish, asked } = followersHarness(t);
    let ran = 0;
    bus.on(Order, 'slow', async () => {
      await pause(2);
      ran += 1;
    });
    for (let n = 0; n < 20; n += 1) await publish(n);
    await bus.start();
    await waitFor(() => ran === 20, 'the backlog drained');
    assert.equal(asked[0]?.freeLanesFirst, true, 'the first claim: nothing held, nothing busy');
    assert.ok(
      asked.some((a) => a.freeLanesFirst === undefined),
      'a claim under the backlog (a full batch before it) did not ask',
    );
  });
});

describe('dispatcher: deliveries claimed before they are due', () => {
  it('asks to take a retried head as early as two claims, each up to twice the longest recent one, may take', async (t) => {
    // Claims of 60 ms: a retry due while one is in progress waits for it and the next, and on a loaded machine either
    // may run two or three times as long (the bench's liveness cell: 241 ms after claims of 93 at most, the retry 56 ms
    // late with a lookahead of two claims). The lookahead must cover that: at least four such claims.
    const lookaheads: number[] = [];
    const { bus } = harness(
      t,
      { concurrency: 4, batchSize: 2 },
      {
        async claim(params: ClaimParams) {
          lookaheads.push(params.retryLookaheadMs ?? 0);
          await pause(60);
          return [];
        },
      },
    );
    bus.on(Order, 'order-a', () => {});
    await bus.start();
    await waitFor(() => lookaheads.length >= 4, 'four claims');
    const settled = lookaheads.slice(2);
    for (const lookahead of settled)
      assert.ok(lookahead >= 4 * 60 && lookahead <= 1_000, `lookahead ${lookahead} ms after claims of 60 ms`);
  });

  it('start at their time while handler ends keep the event loop from its timers', async (t) => {
    // Twenty handlers end one after another in one turn of the event loop, each after 10 ms of work: about 200 ms before
    // the loop's timers run again. A delivery claimed early (as a store's retry lookahead does) that is due 60 ms in
    // must start at the first handler end past its time, not when its timer fires (140 ms late or more).
    const memory = memoryStore();
    let notBefore = 0;
    const { store } = spyStore(memory, {
      async claim(params: ClaimParams) {
        const claimed = await owners.claim(memory, params);
        return claimed.map((delivery) => {
          if (delivery.handler !== 'due-later') return delivery;
          notBefore = Date.now() + 60;
          return { ...delivery, notBefore: new Date(notBefore) };
        });
      },
    });
    const bus = createRelayBus({
      store,
      events: [Order, Audit],
      dispatcher: { pollIntervalMs: 10, concurrency: 30, batchSize: 30 },
    });
    t.after(() => bus.stop({ graceMs: 0 }));
    let startedAt = 0;
    bus.on(Audit, 'due-later', () => {
      startedAt = Date.now();
    });
    bus.on(Order, 'busy', async () => {
      await new Promise((resolve) => setImmediate(resolve));
      const until = performance.now() + 10;
      while (performance.now() < until) {
        // the event loop's turn goes on: no timer can fire
      }
    });
    await memory.transaction((tx) =>
      bus.publishMany(tx, [
        { event: Audit, payload: { of: 1 } },
        ...Array.from({ length: 20 }, (_, n) => ({ event: Order, payload: { n } })),
      ]),
    );
    await bus.start();
    await waitFor(() => startedAt > 0, 'the early delivery started', 5_000);
    const late = startedAt - notBefore;
    assert.ok(late >= 0, `started ${-late} ms before its time`);
    assert.ok(late < 40, `started ${late} ms after its time`);
  });
});

describe('dispatcher: completion batcher', () => {
  const lease = (id: string): DeliveryLease => ({ deliveryId: id, leaseToken: `1:1:0` });
  /** A batcher over a store whose writes succeed at once, recording the ids of each write. */
  const recordingBatcher = (options: Partial<CompletionBatcherOptions> = {}) => {
    const writes: string[][] = [];
    const batcher = new CompletionBatcher({
      store: {
        completeMany: async (leases) => {
          writes.push(leases.map((item) => item.deliveryId));
          return leases.map(() => true);
        },
      },
      windowMs: 1,
      now: () => undefined,
      logger: noopLogger,
      ...options,
    });
    return { batcher, writes };
  };

  it('maps each result to its caller and retries a failing write', async () => {
    let attempts = 0;
    const batcher = new CompletionBatcher({
      store: {
        completeMany: async (leases) => {
          attempts += 1;
          if (attempts === 1) throw new Error('connection reset');
          return leases.map((item) => item.deliveryId !== '2');
        },
      },
      windowMs: 5,
      retryDelaysMs: [1],
      now: () => undefined,
      logger: noopLogger,
    });
    const results = await Promise.all([
      batcher.complete(lease('1')),
      batcher.complete(lease('2')),
      batcher.complete(lease('3')),
    ]);
    // Refused by the retry: the failed first attempt may have deleted it.
    assert.deepEqual(results, ['completed', 'unconfirmed', 'completed']);
    assert.equal(attempts, 2);
  });

  it('runs one write at a time: what completes meanwhile goes out in one batch when it ends, and flush waits for it', async () => {
    const writes: string[][] = [];
    const gates: Deferred<void>[] = [];
    let inFlight = 0;
    let mostInFlight = 0;
    const batcher = new CompletionBatcher({
      store: {
        completeMany: async (leases) => {
          writes.push(leases.map((item) => item.deliveryId));
          inFlight += 1;
          mostInFlight = Math.max(mostInFlight, inFlight);
          const gate = deferred();
          gates.push(gate);
          await gate.promise;
          inFlight -= 1;
          return leases.map(() => true);
        },
      },
      windowMs: 0,
      now: () => undefined,
      logger: noopLogger,
    });
    const first = batcher.complete(lease('1'));
    await waitFor(() => writes.length === 1, 'the first write');
    // Three windows pass while the first write is held.
    const later = [batcher.complete(lease('2'))];
    await pause(5);
    later.push(batcher.complete(lease('3')));
    await pause(5);
    later.push(batcher.complete(lease('4')));
    await pause(5);
    assert.deepEqual(writes, [['1']]);
    const flushed = batcher.flush();
    gates[0]!.resolve();
    assert.equal(await first, 'completed');
    await waitFor(() => writes.length === 2, 'the second write');
    assert.deepEqual(writes[1], ['2', '3', '4']);
    let flushDone = false;
    void flushed.then(() => (flushDone = true));
    await pause(5);
    assert.equal(flushDone, false, 'flush waits for the write of what waited');
    gates[1]!.resolve();
    await flushed;
    assert.deepEqual(await Promise.all(later), ['completed', 'completed', 'completed']);
    assert.equal(mostInFlight, 1);
  });

  it('starts a second write beside the first once maxBatchSize completions wait', async () => {
    const writes: string[][] = [];
    const gate = deferred();
    const batcher = new CompletionBatcher({
      store: {
        completeMany: async (leases) => {
          writes.push(leases.map((item) => item.deliveryId));
          await gate.promise;
          return leases.map(() => true);
        },
      },
      windowMs: 0,
      maxBatchSize: 2,
      now: () => undefined,
      logger: noopLogger,
    });
    const all = [batcher.complete(lease('1')), batcher.complete(lease('2'))];
    all.push(batcher.complete(lease('3')), batcher.complete(lease('4')));
    await waitFor(() => writes.length === 2, 'two writes');
    assert.deepEqual(writes, [
      ['1', '2'],
      ['3', '4'],
    ]);
    gate.resolve();
    assert.deepEqual(await Promise.all(all), ['completed', 'completed', 'completed', 'completed']);
  });

  it('in order (followers): one write at a time, none beside it at maxBatchSize, and no claim takes what waits meanwhile', async () => {
    const writes: string[][] = [];
    const gates: Deferred<void>[] = [];
    const batcher = new CompletionBatcher({
      store: {
        completeMany: async (leases) => {
          writes.push(leases.map((item) => item.deliveryId));
          const gate = deferred();
          gates.push(gate);
          await gate.promise;
          return leases.map(() => true);
        },
      },
      windowMs: 1,
      maxBatchSize: 2,
      inOrder: true,
      now: () => undefined,
      logger: noopLogger,
    });
    const all = [batcher.complete(lease('1'))];
    await waitFor(() => writes.length === 1, 'the first write');
    all.push(batcher.complete(lease('2')), batcher.complete(lease('3')));
    assert.equal(batcher.take(), undefined, 'a claim takes none while a write is out');
    await pause(10);
    assert.deepEqual(writes, [['1']], 'no second write beside it, even at maxBatchSize');
    gates[0]!.resolve();
    await waitFor(() => writes.length === 2, 'the second write');
    assert.deepEqual(writes[1], ['2', '3']);
    gates[1]!.resolve();
    assert.deepEqual(await Promise.all(all), ['completed', 'completed', 'completed']);
  });

  it('in order (followers): no write of its own while a claim carries earlier completions; the next claim takes it', async () => {
    const { batcher, writes } = recordingBatcher({ inOrder: true });
    const earlier = [batcher.complete(lease('1')), batcher.complete(lease('2'))];
    const riding = batcher.take();
    const later = batcher.complete(lease('3'));
    await pause(10);
    assert.deepEqual(writes, [], 'its window closed while the claim was out: nothing written');
    riding!.settle([true, true]);
    assert.deepEqual(await Promise.all(earlier), ['completed', 'completed']);
    const next = batcher.take();
    assert.deepEqual(
      next?.leases.map((item) => item.deliveryId),
      ['3'],
      'the next claim carries it',
    );
    next!.giveBack(); // that claim failed: a write of its own
    assert.equal(await later, 'completed');
    assert.deepEqual(writes, [['3']]);
  });

  it('a claim that fails gives its completions back ahead of the ones asked for since', async () => {
    const { batcher, writes } = recordingBatcher();
    const taken = batcher.complete(lease('1'));
    const riding = batcher.take();
    const since = batcher.complete(lease('2'));
    riding!.giveBack();
    assert.deepEqual(await Promise.all([taken, since]), ['completed', 'completed']);
    assert.deepEqual(writes, [['1', '2']]);
  });

  it('a refusal after a write of it failed is unconfirmed (that write may have committed); a first refusal is a lost lease', async () => {
    // The store refuses every lease: as if the failed claim, or the failed first attempt, had deleted them.
    let attempts = 0;
    const batcher = new CompletionBatcher({
      store: {
        completeMany: async (leases) => {
          attempts += 1;
          if (attempts === 2) throw new StoreUnavailableError('cut', { retryable: true });
          return leases.map(() => false);
        },
      },
      windowMs: 0,
      retryDelaysMs: [1],
      now: () => undefined,
      logger: noopLogger,
    });
    const carried = batcher.complete(lease('1'));
    batcher.take()!.giveBack();
    assert.equal(await carried, 'unconfirmed', 'given back by a failed claim');
    assert.equal(await batcher.complete(lease('2')), 'unconfirmed', 'its first write failed, the retry refused it');
    assert.equal(await batcher.complete(lease('3')), 'lease-lost', 'refused by its only write');
    assert.equal(attempts, 4);
  });

  it('held, a closing window writes nothing: the next claim takes it all, or unhold writes it', async () => {
    const { batcher, writes } = recordingBatcher();
    batcher.hold();
    const taken = [batcher.complete(lease('1')), batcher.complete(lease('2'))];
    await pause(20);
    assert.deepEqual(writes, [], 'the window closed while held: no write of its own');
    const riding = batcher.take();
    assert.deepEqual(
      riding?.leases.map((item) => item.deliveryId),
      ['1', '2'],
      'the claim carries them',
    );
    riding!.settle([true, true]);
    assert.deepEqual(await Promise.all(taken), ['completed', 'completed']);
    batcher.complete(lease('3'));
    await pause(20);
    assert.deepEqual(writes, [['3']], 'take ended the hold: the next window writes');
    batcher.hold();
    const late = batcher.complete(lease('4'));
    await pause(20);
    assert.deepEqual(writes, [['3']]);
    batcher.unhold();
    assert.equal(await late, 'completed');
    assert.deepEqual(writes, [['3'], ['4']], 'unhold writes what a closed window left');
  });

  it('rejects every caller when the write keeps failing, without retrying input errors', async () => {
    let attempts = 0;
    const batcher = new CompletionBatcher({
      store: {
        completeMany: async () => {
          attempts += 1;
          throw new StoreUnavailableError('down', { retryable: true });
        },
      },
      windowMs: 0,
      retryDelaysMs: [1, 1],
      now: () => undefined,
      logger: noopLogger,
    });
    await assert.rejects(batcher.complete(lease('1')), StoreUnavailableError);
    assert.equal(attempts, 3);
  });

  it('does not retry a write the store classified as not retryable (a data or constraint error)', async () => {
    let attempts = 0;
    const batcher = new CompletionBatcher({
      store: {
        completeMany: async () => {
          attempts += 1;
          throw new StoreUnavailableError('Postgres statement "complete-many" failed (SQLSTATE 22P02)', {
            retryable: false,
          });
        },
      },
      windowMs: 0,
      retryDelaysMs: [1, 1],
      now: () => undefined,
      logger: noopLogger,
    });
    await assert.rejects(batcher.complete(lease('1')), StoreUnavailableError);
    assert.equal(attempts, 1);
  });
});

describe('dispatcher: graceful stop', () => {
  it('lets handlers finish within the grace period, aborts and releases the rest, and relinquishes the lanes', async (t) => {
    const { bus, publish, store, clock, callsOf } = harness(t, { shutdownGraceMs: 100 });
    const stuckStarted = deferred();
    const finishStarted = deferred();
    let stuckSignal: AbortSignal | undefined;
    bus.on(Order, 'stuck', (_payload, ctx) => {
      stuckSignal = ctx.signal;
      stuckStarted.resolve();
      return new Promise((_resolve, reject) => ctx.signal.addEventListener('abort', () => reject(ctx.signal.reason)));
    });
    bus.on(Order, 'finishes', async () => {
      finishStarted.resolve();
      await pause(20);
    });
    const delivered = collect(bus.lifecycle, 'delivered');
    const failed = collect(bus.lifecycle, 'failed');
    await publish(1, 'key-1');
    await bus.start();
    await Promise.all([stuckStarted.promise, finishStarted.promise]);
    const owner = bus.owner;
    await bus.stop();

    assert.equal(bus.state, 'stopped');
    assert.deepEqual(
      delivered.map((event) => event.delivery.handler),
      ['finishes'],
      'finished within the grace period',
    );
    assert.equal(stuckSignal?.aborted, true);
    assert.equal((stuckSignal?.reason as DOMException | undefined)?.name, 'AbortError');
    assert.equal(failed.length, 0, 'an abort by stop() is not a failure');
    const [left] = (await store.listDeliveries({})).items;
    assert.equal(left?.handler, 'stuck');
    assert.equal(left?.status, 'pending', 'released');
    assert.equal(left?.attempts, 0, 'no attempt charged');
    assert.equal(left?.lastError, null);
    assert.equal(callsOf('release').length, 1);
    assert.deepEqual(
      callsOf('relinquish').map((call) => call.args[0]),
      [owner],
    );
    assert.equal((await store.statistics(clock.now())).lanesLeased, 0, 'every lane handed back');
    // another worker takes it at once, without waiting for the lease to expire
    const [taken] = await owners.claim(store, {
      owner: 'next-worker',
      handlers: ['stuck'],
      limit: 1,
      leaseDurationMs: 1_000,
      now: clock.now(),
    });
    assert.equal(taken?.attempts, 0);
  });

  it('stop({ graceMs: 0 }) during a stop aborts at once', async (t) => {
    const { bus, publish } = harness(t, { shutdownGraceMs: 60_000 });
    const started = deferred();
    bus.on(Order, 'stuck', (_payload, ctx) => {
      started.resolve();
      return new Promise((_resolve, reject) => ctx.signal.addEventListener('abort', () => reject(ctx.signal.reason)));
    });
    await publish(1);
    await bus.start();
    await started.promise;
    const began = Date.now();
    const stopping = bus.stop();
    await pause(10);
    await Promise.all([bus.stop({ graceMs: 0 }), stopping]);
    assert.ok(Date.now() - began < 1_000, 'did not wait for the 60 s grace period');
    assert.equal(bus.state, 'stopped');
  });

  it('releases, unrun, the deliveries of a claim that returns after stop() began', async (t) => {
    const gate = deferred();
    const memory = memoryStore();
    let first = true;
    const { bus, store, callsOf } = harness(
      t,
      {},
      {
        claim: async (params: ClaimParams) => {
          if (first) {
            first = false;
            await gate.promise;
          }
          return owners.claim(memory, params);
        },
        transaction: (fn) => memory.transaction(fn),
        publish: (tx, events, now) => memory.publish(tx, events, now),
        release: (leases, now) => memory.release(leases, now),
        relinquish: (owner) => owners.relinquish(memory, owner),
        listDeliveries: (params) => memory.listDeliveries(params),
      },
    );
    let ran = 0;
    bus.on(Order, 'never', () => {
      ran += 1;
    });
    await store.transaction((tx) => bus.publish(tx, Order, { n: 1 }));
    await bus.start();
    await waitFor(() => callsOf('claim').length === 1, 'the first claim is in progress');
    const stopping = bus.stop();
    gate.resolve();
    await stopping;
    assert.equal(ran, 0);
    assert.equal(callsOf('release').length, 1);
    const [left] = (await store.listDeliveries({})).items;
    assert.equal(left?.status, 'pending');
    assert.equal(left?.attempts, 0);
  });
});

describe("dispatcher: takeover of crashed workers' lanes", () => {
  /** A bus over a memory store whose claims (claim and completeAndClaim alike) are recorded. */
  function takeoverHarness(t: TestContext, dispatcher: DispatcherOptions) {
    const clock = new StubClock();
    const memory = memoryStore();
    const claims: ClaimParams[] = [];
    // Claims and claims with completions riding alike (the memory store's completeAndClaim claims through its claim).
    const store = owners.overrideClaims(memory, {
      claim: (params) => {
        claims.push(params);
        return owners.claim(memory, params);
      },
      completeAndClaim: (leases, params) => {
        claims.push(params);
        return owners.completeAndClaim(memory, leases, params);
      },
    });
    const bus = createRelayBus({
      store,
      events: [Order, Audit],
      clock,
      backoff: { jitter: 0 },
      dispatcher: { pollIntervalMs: 5, ...dispatcher },
    });
    t.after(() => bus.stop({ graceMs: 0 }));
    const takeovers = () => claims.filter((params) => params.acquireWhenFull === true).length;
    return { bus, memory, clock, claims, takeovers };
  }

  it('asks for a takeover on the first claim and then once per lease duration of the bus clock, not on every claim', async (t) => {
    const { bus, clock, claims, takeovers } = takeoverHarness(t, { leaseDurationMs: 1_000 });
    bus.on(Order, 'idle', () => undefined);
    await bus.start();
    const moreClaims = async (what: string) => {
      const seen = claims.length;
      await waitFor(() => claims.length >= seen + 5, what);
    };
    await moreClaims('several claims');
    assert.equal(claims[0]!.acquireWhenFull, true, 'the first claim asks');
    assert.equal(takeovers(), 1, 'the claims after it do not');
    clock.advance(999);
    await moreClaims('claims just before a lease duration passed');
    assert.equal(takeovers(), 1, 'not before a lease duration has passed');
    clock.advance(1);
    await waitFor(() => takeovers() === 2, 'a claim asks again once a lease duration has passed');
    await moreClaims('claims after that one');
    assert.equal(takeovers(), 2, 'once per lease duration');
  });

  it("re-runs a crashed worker's delivery while its own lane still fills every claim", async (t) => {
    const { bus, memory, clock } = takeoverHarness(t, { concurrency: 2, batchSize: 2 });
    const crashedId = 'crashed-0';
    const busyLane = (laneOf(null, crashedId) + 1) % 256;
    const backlog: string[] = [];
    for (let i = 0; backlog.length < 300; i += 1) if (laneOf(null, `busy-${i}`) === busyLane) backlog.push(`busy-${i}`);
    let backlogDone = 0;
    let rerun: { attempt: number; backlogDone: number } | undefined;
    bus.on(Order, 'worker', async (_payload, ctx) => {
      if (ctx.delivery.eventId === crashedId) {
        rerun = { attempt: ctx.delivery.attempt, backlogDone };
        return;
      }
      await pause(1);
      backlogDone += 1;
    });
    // The crashed worker holds its lane with the delivery in flight, then never claims again.
    await memory.transaction((tx) => bus.publish(tx, Order, { n: 0 }, { id: crashedId }));
    const [lost] = await owners.claim(memory, {
      owner: 'crashed',
      handlers: ['worker'],
      limit: 1,
      leaseDurationMs: 30_000,
      now: clock.now(),
    });
    assert.equal(lost?.eventId, crashedId);
    clock.advance(1);
    await memory.transaction((tx) =>
      bus.publishMany(
        tx,
        backlog.map((id, n) => ({ event: Order, payload: { n }, options: { id } })),
      ),
    );
    await bus.start();
    await waitFor(() => backlogDone >= 10, 'the busy worker runs its own lane');
    clock.advance(30_001); // the crashed worker's lease is over
    await waitFor(() => rerun !== undefined, "the crashed worker's delivery runs again", 10_000);
    assert.equal(rerun!.attempt, 2, 'the takeover charged the lost attempt');
    // Without the takeover it would run only once the backlog ran short (a claim that comes back short takes lanes).
    assert.ok(
      rerun!.backlogDone < backlog.length / 2,
      `re-run while the busy worker's own lane still fills its claims (${rerun!.backlogDone} of ${backlog.length} done)`,
    );
  });
});
