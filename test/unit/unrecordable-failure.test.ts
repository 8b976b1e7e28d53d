/**
 * A failed delivery whose outcome cannot be written. A retryable write failure (database down)
 * releases the delivery: it runs again later. A non-retryable one (data the database refuses, a
 * constraint, a privilege) would fail the same way on every run, so the runner buries the delivery
 * with the write's error instead of running it, failing and failing to record, forever. Real
 * dispatcher, in-memory store; the failing writes are injected by replacing one store method.
 */
import assert from 'node:assert/strict';
import { describe, it, type TestContext } from 'node:test';
import { Type } from '@sinclair/typebox';
import { createRelayBus } from '../../src/bus/bus.js';
import { StoreUnavailableError } from '../../src/core/errors.js';
import { defineEvent } from '../../src/core/events.js';
import type { LogFields, Logger } from '../../src/core/logger.js';
import { memoryStore, type MemoryTransaction } from '../../src/memory/memory-store.js';
import type { BuryParams, DeliveryLease, RescheduleParams, Store } from '../../src/store/contract.js';
import { StubClock } from '../support/clock.js';
import { nextEvent, spyStore } from '../support/wait.js';
import * as owners from '../support/claims.js';

const Order = defineEvent('order', Type.Object({ n: Type.Integer() }));

const refused = (what: string) =>
  new StoreUnavailableError(`Postgres statement "${what}" failed (SQLSTATE 22008): timestamp out of range.`, {
    retryable: false,
  });
const unreachable = () =>
  new StoreUnavailableError('Postgres statement failed: Connection terminated unexpectedly. It is safe to retry.', {
    retryable: true,
  });

function harness(t: TestContext, overrides: Partial<Store<MemoryTransaction>> & Partial<owners.OwnerClaimCalls>) {
  const clock = new StubClock();
  const memory = memoryStore();
  const { store, calls } = spyStore(memory, overrides);
  const lines: { message: string; fields?: LogFields }[] = [];
  const record = (message: string, fields?: LogFields) => {
    lines.push({ message, fields });
  };
  const logger: Logger = { debug: () => {}, info: () => {}, warn: record, error: record };
  const bus = createRelayBus({
    store,
    events: [Order],
    clock,
    logger,
    backoff: { jitter: 0 },
    dispatcher: { pollIntervalMs: 10 },
  });
  t.after(() => bus.stop({ graceMs: 0 }));
  const publish = (n: number) => store.transaction((tx) => bus.publish(tx, Order, { n }));
  return { bus, memory, calls, clock, lines, publish };
}

describe('a failure whose outcome cannot be recorded', () => {
  it('a reschedule refused for good buries the delivery with both errors, once', async (t) => {
    const { bus, memory, calls, lines, publish } = harness(t, {
      reschedule(): Promise<boolean> {
        return Promise.reject(refused('reschedule'));
      },
    });
    let runs = 0;
    bus.on(Order, 'fails', { maxAttempts: 5 }, () => {
      runs += 1;
      throw new Error('handler broke');
    });
    const dead = nextEvent(bus.lifecycle, 'dead');
    await publish(1);
    await bus.start();
    const { error } = await dead;
    assert.match(String(error), /handler broke/);
    const { items } = await memory.listDeliveries({ status: 'dead' });
    assert.equal(items.length, 1);
    assert.match(
      items[0]!.lastError ?? '',
      /^Error: handler broke \[relaybus could not record this failure with reschedule \(StoreUnavailableError: .*timestamp out of range/,
    );
    assert.equal(runs, 1, 'not run again');
    assert.deepEqual(
      calls.filter((c) => c.method === 'release'),
      [],
    );
    assert.ok(lines.some((line) => /buried it instead/.test(line.message) && line.fields?.write === 'reschedule'));
  });

  it('a bury refused for its text is retried with the write error alone', async (t) => {
    const { bus, memory, publish } = harness(t, {
      bury(this: Store<MemoryTransaction>, lease: DeliveryLease, params: BuryParams): Promise<boolean> {
        // A failure text the database refuses (a stand-in for any data error): only texts naming the handler's error.
        if (params.error.includes('poison')) return Promise.reject(refused('bury'));
        return memory.bury(lease, params);
      },
    });
    bus.on(Order, 'poisoned', { maxAttempts: 1 }, () => {
      throw new Error('poison');
    });
    const dead = nextEvent(bus.lifecycle, 'dead');
    await publish(1);
    await bus.start();
    await dead;
    const { items } = await memory.listDeliveries({ status: 'dead' });
    assert.match(
      items[0]!.lastError ?? '',
      /^relaybus could not record this failure with bury .*the handler's error is in the worker log$/,
    );
  });

  it('when nothing can be recorded it releases the delivery and logs that the error is not retryable', async (t) => {
    // Every bury of the first run fails (both texts); from the second run on, bury works again.
    let buryFailures = 2;
    const { bus, memory, calls, lines, publish } = harness(t, {
      reschedule(): Promise<boolean> {
        return Promise.reject(refused('reschedule'));
      },
      bury(this: Store<MemoryTransaction>, lease: DeliveryLease, params: BuryParams): Promise<boolean> {
        if (buryFailures > 0) {
          buryFailures -= 1;
          return Promise.reject(refused('bury'));
        }
        return memory.bury(lease, params);
      },
    });
    let runs = 0;
    bus.on(Order, 'fails', { maxAttempts: 5 }, () => {
      runs += 1;
      throw new Error('handler broke');
    });
    const dead = nextEvent(bus.lifecycle, 'dead');
    await publish(1);
    await bus.start();
    await dead;
    assert.equal(runs, 2, 'released after the first run, buried after the second');
    assert.equal(calls.filter((c) => c.method === 'release').length, 1);
    assert.equal(
      calls.filter((c) => c.method === 'bury').length,
      3,
      'both texts, then the first one on the second run',
    );
    const line = lines.find((l) => /could not record the outcome/.test(l.message));
    assert.ok(line);
    assert.match(line.message, /not retryable/);
    assert.equal(line.fields?.retryable, false);
    const { items } = await memory.listDeliveries({ status: 'dead' });
    assert.equal(items[0]!.attempts, 1, 'the released run charged no attempt');
  });

  it("a handler's completion refused for good releases the delivery: it runs again, and is completed then", async (t) => {
    // The first completion write of the run is refused (not retryable: the batcher does not retry it); later ones work.
    let refuse = true;
    const failFirst = <T>(write: () => Promise<T>): Promise<T> => {
      if (!refuse) return write();
      refuse = false;
      return Promise.reject(refused('complete-many'));
    };
    const { bus, memory, calls, lines, publish } = harness(t, {
      completeMany: (leases, now) => failFirst(() => memory.completeMany(leases, now)),
      completeAndClaim: (leases, params) => failFirst(() => owners.completeAndClaim(memory, leases, params)),
    });
    let runs = 0;
    bus.on(Order, 'succeeds', { maxAttempts: 5 }, () => {
      runs += 1;
    });
    const delivered = nextEvent(bus.lifecycle, 'delivered');
    await publish(1);
    await bus.start();
    await delivered;
    assert.equal(runs, 2, 'released after the first run, completed after the second');
    assert.equal(calls.filter((c) => c.method === 'release').length, 1);
    const line = lines.find((l) => /could not record the outcome/.test(l.message));
    assert.equal(line?.fields?.write, 'complete');
    assert.equal((await memory.statistics(new Date())).pending, 0);
  });

  it('a retryable write failure only releases the delivery: it runs again, no bury', async (t) => {
    let failNext = true;
    const { bus, memory, calls, publish } = harness(t, {
      reschedule(this: Store<MemoryTransaction>, lease: DeliveryLease, params: RescheduleParams): Promise<boolean> {
        if (failNext) {
          failNext = false;
          return Promise.reject(unreachable());
        }
        return memory.reschedule(lease, params);
      },
    });
    let runs = 0;
    bus.on(Order, 'fails-once', { maxAttempts: 5 }, () => {
      runs += 1;
      if (runs === 1) throw new Error('first run fails');
    });
    const delivered = nextEvent(bus.lifecycle, 'delivered');
    await publish(1);
    await bus.start();
    await delivered;
    assert.equal(runs, 2);
    assert.equal(calls.filter((c) => c.method === 'bury').length, 0);
    assert.equal(calls.filter((c) => c.method === 'release').length, 1);
  });
});
