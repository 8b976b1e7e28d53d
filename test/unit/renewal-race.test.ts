/**
 * A renewal that races a completion. Under a backlog a claim completes the last runs of a lane and hands the lane back
 * (it runs nothing more) while a renewal of that lane waits for the lane's lock; the renewal then finds the lane gone
 * and reports it lost before the runs hear that their completion committed. Those runs are done: they must be reported
 * delivered, not "lease lost: the delivery runs again on another worker" (4 dispatcher processes on 2 cores logged
 * thousands of these in a 30 s bench run, one per delivery of each such lane).
 * Real dispatcher, in-memory store; the race is made certain by holding the first completion's answer until a renewal
 * has seen the lane handed back.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { Type } from '@sinclair/typebox';
import { createRelayBus } from '../../src/bus/bus.js';
import { defineEvent } from '../../src/core/events.js';
import type { Logger } from '../../src/core/logger.js';
import { memoryStore } from '../../src/memory/memory-store.js';
import type { DeliveryLease, ExtendLeaseResult } from '../../src/store/contract.js';
import { aroundCompletionWrites, collect, deferred, pause, spyStore, waitFor } from '../support/wait.js';
import * as owners from '../support/claims.js';

const Ping = defineEvent('ping', Type.Object({ n: Type.Integer() }));

describe('a renewal that finds a lane handed back by a completion still on its way', () => {
  for (const [kind, handler] of [
    ['returns at once', () => {}],
    ['returns a promise', async () => {}],
  ] as const) {
    it(`reports the run delivered, not a lost lease (a handler that ${kind})`, async (t) => {
      const memory = memoryStore();
      let owner: string | undefined;
      let held = false;
      const lostSeen = deferred<void>();
      /** The first completion commits, its lane is handed back, and its answer waits until a renewal found the lane lost. */
      const holdFirst = async <T>(leases: readonly DeliveryLease[], write: () => Promise<T>): Promise<T> => {
        if (held || leases.length === 0) return write();
        held = true;
        const answer = await write();
        // What the owner's next claim does with a lane that runs nothing (the store's own hand-back).
        await owners.relinquish(memory, owner!);
        await lostSeen.promise;
        await pause(5); // the renewer's answer is handled
        return answer;
      };
      const { store } = spyStore(memory, {
        claim: (params) => {
          owner ??= params.owner;
          return owners.claim(memory, params);
        },
        ...aroundCompletionWrites(memory, holdFirst),
        extendLease: async (params): Promise<ExtendLeaseResult> => {
          const result = await memory.extendLease(params);
          if (result.lost.length > 0) lostSeen.resolve();
          return result;
        },
      });
      const warnings: string[] = [];
      const logger: Logger = {
        debug: () => {},
        info: () => {},
        warn: (message) => warnings.push(message),
        error: () => {},
      };
      // A 300 ms lease: the renewer runs every 100 ms.
      const bus = createRelayBus({
        store,
        events: [Ping],
        logger,
        dispatcher: { pollIntervalMs: 10, leaseDurationMs: 300 },
      });
      t.after(() => bus.stop({ graceMs: 0 }));
      bus.on(Ping, 'h', handler);
      const delivered = collect(bus.lifecycle, 'delivered');
      const lost = collect(bus.lifecycle, 'lease-lost');
      await store.transaction((tx) => bus.publish(tx, Ping, { n: 1 }));
      await bus.start();
      await waitFor(() => delivered.length === 1, 'the delivery reported delivered');
      assert.equal(held, true, 'the completion was held');
      assert.deepEqual(lost, [], 'no lease-lost event');
      assert.deepEqual(warnings, []);
      assert.equal((await memory.listDeliveries({})).items.length, 0, 'completed once, nothing runs again');
    });
  }
});
