/**
 * A completion write the connection dropped under may have committed before its answer was lost: the batcher's retry
 * then finds the delivery gone and is refused. The run must not be reported as a lost lease ("runs again elsewhere")
 * when it is done: the runner looks the delivery up and reports it delivered; still pending, the lease was lost.
 * Real dispatcher, in-memory store; the first completion write is cut by wrapping the store's methods.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { Type } from '@sinclair/typebox';
import { createRelayBus } from '../../src/bus/bus.js';
import { StoreUnavailableError } from '../../src/core/errors.js';
import { defineEvent } from '../../src/core/events.js';
import type { Logger } from '../../src/core/logger.js';
import { memoryStore } from '../../src/memory/memory-store.js';
import type { DeliveryLease } from '../../src/store/contract.js';
import { aroundCompletionWrites, spyStore, waitFor } from '../support/wait.js';
import * as owners from '../support/claims.js';

const Ping = defineEvent('ping', Type.Object({ n: Type.Integer() }));

/**
 * A bus whose first completion write (whichever method carries it) runs `before` and fails as a dropped connection:
 * with `commits`, after the write committed; otherwise before it.
 */
function cutFirstWrite(commits: boolean, handler: () => void | Promise<void>) {
  const memory = memoryStore();
  let cut = false;
  /** Claims find nothing from the cut until the first run ends: its retry must find the delivery still pending. */
  let claimsHeld = false;
  const once = async <T>(leases: readonly DeliveryLease[], write: () => Promise<T>): Promise<T> => {
    if (cut || leases.length === 0) return write();
    cut = true;
    if (commits) await write();
    // Not committed, and the deliveries are taken from their runs meanwhile (as a takeover would): the retry's leases
    // are stale.
    else {
      await memory.release(leases);
      claimsHeld = true;
    }
    throw new StoreUnavailableError('connection terminated unexpectedly', { retryable: true });
  };
  const { store } = spyStore(memory, {
    claim: (params) => (claimsHeld ? Promise.resolve([]) : owners.claim(memory, params)),
    ...aroundCompletionWrites(memory, once),
  });
  const infos: string[] = [];
  const logger: Logger = {
    debug: () => {},
    info: (message) => infos.push(message),
    warn: () => {},
    error: () => {},
  };
  const bus = createRelayBus({ store, events: [Ping], logger, dispatcher: { pollIntervalMs: 10 } });
  const outcomes = { delivered: 0, leaseLost: 0, runs: 0 };
  bus.on(Ping, 'h', () => {
    outcomes.runs += 1;
    return handler();
  });
  bus.lifecycle.on('delivered', () => {
    outcomes.delivered += 1;
  });
  bus.lifecycle.on('lease-lost', () => {
    outcomes.leaseLost += 1;
    claimsHeld = false;
  });
  return { bus, store, memory, outcomes, infos, wasCut: () => cut };
}

describe('a completion whose write was cut', () => {
  for (const [kind, handler] of [
    ['returns at once', () => {}],
    ['returns a promise', async () => {}],
  ] as const) {
    it(`committed before its answer was lost: delivered, not a lost lease (a handler that ${kind})`, {
      timeout: 15_000,
    }, async () => {
      const { bus, store, memory, outcomes, infos, wasCut } = cutFirstWrite(true, handler);
      await store.transaction((tx) => bus.publish(tx, Ping, { n: 1 }));
      await bus.start();
      await waitFor(() => wasCut() && outcomes.delivered + outcomes.leaseLost > 0, 'the run ended', 10_000);
      await bus.stop();
      assert.deepEqual(outcomes, { delivered: 1, leaseLost: 0, runs: 1 });
      assert.ok(
        infos.some((m) => m.startsWith('completion confirmed')),
        'the log says what happened',
      );
      assert.equal((await memory.statistics(new Date())).pending, 0);
    });

    it(`not committed, and the lease lost meanwhile: a lost lease, and it runs again (a handler that ${kind})`, {
      timeout: 15_000,
    }, async () => {
      const { bus, store, memory, outcomes, wasCut } = cutFirstWrite(false, handler);
      await store.transaction((tx) => bus.publish(tx, Ping, { n: 1 }));
      await bus.start();
      await waitFor(() => wasCut() && outcomes.delivered > 0, 'delivered by its second run', 10_000);
      await bus.stop();
      assert.deepEqual(outcomes, { delivered: 1, leaseLost: 1, runs: 2 });
      assert.equal((await memory.statistics(new Date())).pending, 0);
    });
  }
});
