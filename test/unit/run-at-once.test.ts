/**
 * A handler that returns at once runs without a promise of its own (handler-runner `runAtOnce`): its run waits as its
 * completion in the batch. stop() must still wait for that completion within its grace period, as for any run: the
 * run is not over, and not aborted, until its completion is written. Real dispatcher, in-memory store; the completion
 * write is held back by wrapping the store's methods.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { Type } from '@sinclair/typebox';
import { createRelayBus } from '../../src/bus/bus.js';
import { defineEvent } from '../../src/core/events.js';
import type { LogFields, Logger } from '../../src/core/logger.js';
import { memoryStore } from '../../src/memory/memory-store.js';
import { deferred, pause, spyStore, waitFor } from '../support/wait.js';
import * as owners from '../support/claims.js';

const Ping = defineEvent('ping', Type.Object({ n: Type.Integer() }));

describe('a run that finished at once', () => {
  it('is waited for by stop() until its completion is written, and counts as drained, not aborted', {
    timeout: 15_000,
  }, async () => {
    const memory = memoryStore();
    const release = deferred();
    let writes = 0;
    const held = <T>(write: () => Promise<T>): Promise<T> => {
      writes += 1;
      return release.promise.then(write);
    };
    const { store } = spyStore(memory, {
      completeMany: (leases, now) => held(() => memory.completeMany(leases, now)),
      completeAndClaim: (leases, params) => held(() => owners.completeAndClaim(memory, leases, params)),
    });
    const stopped: LogFields[] = [];
    const logger: Logger = {
      debug: () => {},
      info: (message, fields) => {
        if (message === 'dispatcher stopped' && fields) stopped.push(fields);
      },
      warn: () => {},
      error: () => {},
    };
    const bus = createRelayBus({ store, events: [Ping], logger, dispatcher: { pollIntervalMs: 10 } });
    let runs = 0;
    bus.on(Ping, 'sync', () => {
      runs += 1;
    });
    await store.transaction((tx) => bus.publish(tx, Ping, { n: 1 }));
    await bus.start();
    await waitFor(() => runs === 1 && writes > 0, 'the handler ran and its completion is being written', 5_000);

    let stopDone = false;
    const stopping = bus.stop({ graceMs: 5_000 }).then(() => {
      stopDone = true;
    });
    await pause(50);
    assert.equal(stopDone, false, 'stop() waits while the completion is being written');
    release.resolve();
    await stopping;
    assert.equal(stopped.length, 1);
    assert.equal(stopped[0]!.drained, true);
    assert.equal(stopped[0]!.aborted, 0, 'the run ended with its completion, within the grace period');
    assert.equal((await memory.statistics(new Date())).pending, 0, 'completed, not released');
    assert.equal(runs, 1);
  });

  it('ends every run of a batch even when ending one throws (a logger that throws on "delivered")', {
    timeout: 15_000,
  }, async () => {
    const memory = memoryStore();
    const unexpected: LogFields[] = [];
    const logger: Logger = {
      debug: (message) => {
        if (message === 'delivered') throw new Error('logger broke');
      },
      info: () => {},
      warn: () => {},
      error: (message, fields) => {
        if (message === 'a handler run failed unexpectedly' && fields) unexpected.push(fields);
      },
    };
    const bus = createRelayBus({ store: memory, events: [Ping], logger, dispatcher: { pollIntervalMs: 10 } });
    let runs = 0;
    bus.on(Ping, 'sync', () => {
      runs += 1;
    });
    await memory.transaction((tx) =>
      bus.publishMany(
        tx,
        [1, 2, 3].map((n) => ({ event: Ping, payload: { n } })),
      ),
    );
    await bus.start();
    await waitFor(() => unexpected.length === 3, 'each run reported and ended', 5_000);
    await bus.stop({ graceMs: 1_000 });
    assert.equal(runs, 3);
    assert.equal((await memory.statistics(new Date())).pending, 0, 'their completions were written');
  });
});
