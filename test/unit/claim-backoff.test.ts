import assert from 'node:assert/strict';
import { describe, it, type TestContext } from 'node:test';
import { Type } from '@sinclair/typebox';
import { createRelayBus } from '../../src/bus/bus.js';
import { InvalidOptionsError, StoreUnavailableError } from '../../src/core/errors.js';
import { defineEvent } from '../../src/core/events.js';
import type { LogFields, Logger, LogLevel } from '../../src/core/logger.js';
import { RetryBackoff, STORE_RETRY_BACKOFF } from '../../src/core/retry-backoff.js';
import { memoryStore } from '../../src/memory/memory-store.js';
import type { OwnerClaimParams as ClaimParams } from '../support/claims.js';
import { nextEvent, spyStore, waitFor } from '../support/wait.js';
import * as owners from '../support/claims.js';

/**
 * A store that fails must not make the claim loop spin or go quiet: failed claims are retried after
 * a capped exponential backoff (not the poll interval), logged once per attempt with the next
 * retry time, and reflected in `bus.health()`; the next successful claim resets all of it.
 */

const Order = defineEvent('order', Type.Object({ n: Type.Integer() }));

interface Line {
  readonly level: LogLevel;
  readonly message: string;
  readonly fields: LogFields;
}

function recordingLogger(): Logger & { readonly lines: Line[] } {
  const lines: Line[] = [];
  const at =
    (level: LogLevel) =>
    (message: string, fields: LogFields = {}) => {
      lines.push({ level, message, fields });
    };
  return { lines, debug: at('debug'), info: at('info'), warn: at('warn'), error: at('error') };
}

const down = () => new StoreUnavailableError('connect ECONNREFUSED 127.0.0.1:5999', { retryable: true });

/** A bus over the memory store whose first `failures` claims throw `error()`. */
function failingBus(t: TestContext, failures: number, error: () => Error = down) {
  const memory = memoryStore();
  const claims: number[] = [];
  let left = failures;
  const { store } = spyStore(memory, {
    claim: (params: ClaimParams) => {
      claims.push(Date.now());
      return left-- > 0 ? Promise.reject(error()) : owners.claim(memory, params);
    },
  });
  const logger = recordingLogger();
  const bus = createRelayBus({ store, events: [Order], logger, dispatcher: { pollIntervalMs: 10 } });
  t.after(() => bus.stop({ graceMs: 0 }));
  bus.on(Order, 'h', () => undefined);
  return {
    bus,
    store,
    claims,
    logger,
    publish: (n: number) => store.transaction((tx) => bus.publish(tx, Order, { n })),
  };
}

describe('RetryBackoff', () => {
  it('doubles from 250 ms to a 30 s cap and starts over after a success', () => {
    const backoff = new RetryBackoff({ ...STORE_RETRY_BACKOFF, jitter: 0 });
    const delays = Array.from({ length: 10 }, () => backoff.failed());
    assert.deepEqual(delays, [250, 500, 1_000, 2_000, 4_000, 8_000, 16_000, 30_000, 30_000, 30_000]);
    assert.equal(backoff.failures, 10);
    assert.equal(backoff.succeeded(), 10);
    assert.equal(backoff.failures, 0);
    assert.equal(backoff.failed(), 250);
  });

  it('jitters by +-20% and never exceeds the cap', () => {
    const low = new RetryBackoff(STORE_RETRY_BACKOFF, () => 0);
    const high = new RetryBackoff(STORE_RETRY_BACKOFF, () => 0.999_999);
    assert.equal(low.failed(), 200);
    assert.equal(high.failed(), 300);
    for (let i = 0; i < 12; i += 1) {
      low.failed();
      assert.ok(high.failed() <= 30_000);
    }
    assert.equal(low.failed(), 24_000);
  });
});

describe('dispatcher: failed claims', () => {
  it('retries after the backoff, not the poll interval; logs each failure once with the retry time; resets on success', {
    timeout: 10_000,
  }, async (t) => {
    const { bus, claims, logger, publish } = failingBus(t, 3);
    await publish(1);
    const delivered = nextEvent(bus.lifecycle, 'delivered', { timeoutMs: 5_000 });
    await bus.start();
    await delivered;
    const gaps = claims.slice(1, 4).map((at, i) => at - claims[i]!);
    // 250, 500, 1000 ms +-20%; the poll interval is 10 ms.
    assert.ok(gaps[0]! >= 195 && gaps[0]! < 600, `first retry after ${gaps[0]} ms`);
    assert.ok(gaps[1]! >= 395, `second retry after ${gaps[1]} ms`);
    assert.ok(gaps[2]! >= 795, `third retry after ${gaps[2]} ms`);

    const failures = logger.lines.filter((line) => line.level === 'warn');
    assert.deepEqual(
      failures.map((line) => line.message),
      [
        'database unreachable; claiming again after a backoff',
        'database still unreachable; claiming again after a backoff',
        'database still unreachable; claiming again after a backoff',
      ],
    );
    failures.forEach((line, i) => {
      assert.equal(line.fields.attempt, i + 1);
      assert.match(String(line.fields.error), /StoreUnavailableError: connect ECONNREFUSED/);
      const retryAt = Date.parse(String(line.fields.retryAt));
      assert.ok(Math.abs(retryAt - claims[i + 1]!) < 150, `attempt ${i + 2} ran at the logged retry time`);
    });
    const back = logger.lines.filter((line) => line.message === 'database reachable again; claiming resumed');
    assert.equal(back.length, 1);
    assert.equal(back[0]!.fields.failedAttempts, 3);

    // Reset: idle claims after the recovery run at the poll interval again.
    const before = claims.length;
    await waitFor(() => claims.length >= before + 5, 'idle claims at the poll interval', 1_000);
  });

  it('logs an error a retry cannot fix at error level, and keeps retrying', { timeout: 5_000 }, async (t) => {
    const { bus, logger } = failingBus(
      t,
      1,
      () => new StoreUnavailableError('permission denied for table relaybus_lanes'),
    );
    await bus.start();
    await waitFor(
      () => logger.lines.some((line) => line.message === 'database reachable again; claiming resumed'),
      'recovery',
      2_000,
    );
    const errors = logger.lines.filter((line) => line.level === 'error');
    assert.deepEqual(
      errors.map((line) => line.message),
      ['claiming deliveries failed; claiming again after a backoff'],
    );
  });

  it('stop() ends a backoff at once', { timeout: 5_000 }, async (t) => {
    const { bus, claims } = failingBus(t, 1_000);
    await bus.start();
    await waitFor(() => claims.length >= 3, 'three failed claims', 3_000); // now waiting ~1 s
    const started = Date.now();
    await bus.stop();
    assert.ok(Date.now() - started < 200, `stopped in ${Date.now() - started} ms`);
    assert.equal(bus.state, 'stopped');
  });
});

describe('bus.health()', () => {
  it('is unready before the first claim, unready after a failed claim, ready after a successful one, unready once stopped', {
    timeout: 5_000,
  }, async (t) => {
    const { bus, claims } = failingBus(t, 1);
    const created = bus.health();
    assert.equal(created.ready, false);
    assert.equal(created.lastError, undefined);
    assert.ok(created.since instanceof Date);
    await bus.start();
    await waitFor(() => claims.length >= 1 && bus.health().lastError !== undefined, 'the failed claim is reported');
    assert.equal(bus.health().ready, false);
    assert.match(bus.health().lastError!, /ECONNREFUSED/);
    await waitFor(() => bus.health().ready, 'ready after the backoff', 2_000);
    const ready = bus.health();
    assert.equal(ready.lastError, undefined);
    assert.ok(ready.since.getTime() >= created.since.getTime(), 'since moves when ready changes');
    assert.ok(Object.isFrozen(ready), 'a snapshot, not live state');
    await bus.stop();
    assert.equal(bus.health().ready, false);
    assert.equal(bus.health().lastError, undefined);
  });

  it('reports a failed setup', async (t) => {
    const memory = memoryStore();
    const { store } = spyStore(memory, { setup: () => Promise.reject(down()) });
    const bus = createRelayBus({ store, events: [Order] });
    t.after(() => bus.stop());
    bus.on(Order, 'h', () => undefined);
    await assert.rejects(bus.start(), StoreUnavailableError);
    assert.equal(bus.state, 'idle');
    assert.deepEqual(
      { ...bus.health(), since: undefined },
      { ready: false, since: undefined, lastError: 'StoreUnavailableError: connect ECONNREFUSED 127.0.0.1:5999' },
    );
  });
});

describe('bus.start({ logger })', () => {
  it("routes this run's setup and dispatcher logs to the given logger instead of the bus's", async (t) => {
    const own = recordingLogger();
    const run = recordingLogger();
    const memory = memoryStore();
    let setups = 0;
    const { store } = spyStore(memory, {
      setup: async () => {
        if (setups++ === 0) throw down();
      },
    });
    const bus = createRelayBus({ store, events: [Order], logger: own, dispatcher: { pollIntervalMs: 10 } });
    t.after(() => bus.stop());
    bus.on(Order, 'h', () => {
      throw new Error('boom');
    });
    bus.lifecycle.on('failed', () => {
      throw new Error('a listener that throws');
    });
    await assert.rejects(bus.start({ logger: run }));
    await store.transaction((tx) => bus.publish(tx, Order, { n: 1 }));
    await bus.start({ logger: run });
    await waitFor(
      () => run.lines.some((line) => line.message.includes('listener threw')),
      'the emitter logs through the run logger',
    );
    await bus.stop();
    assert.deepEqual(own.lines, [], "nothing reached the bus's own logger");
    const messages = run.lines.map((line) => line.message);
    assert.ok(messages.includes('store setup failed; the bus did not start'));
    assert.ok(messages.includes('dispatcher started'));
    assert.ok(messages.includes('dispatcher stopped'));
  });

  it('rejects a logger without the four methods before starting', async () => {
    const bus = createRelayBus({ store: memoryStore(), events: [Order] });
    bus.on(Order, 'h', () => undefined);
    await assert.rejects(
      bus.start({ logger: { info: () => {} } as unknown as Logger }),
      (error: unknown) =>
        error instanceof InvalidOptionsError &&
        /bus\.start\(\{ logger \}\) must be an object with methods debug, info, warn, error/.test(error.message),
    );
    assert.equal(bus.state, 'idle');
  });
});

describe('stop after a failed claim', () => {
  it('says so when the store cannot forget what the failed claim recorded, and still relinquishes', async (t) => {
    const memory = memoryStore();
    let claims = 0;
    let relinquished = 0;
    const { store } = spyStore(memory, {
      claim: (params: ClaimParams) => (claims++ === 0 ? Promise.reject(down()) : owners.claim(memory, params)),
      forgetInFlight: () => Promise.reject(down()),
      relinquish: (owner: string) => {
        relinquished += 1;
        return owners.relinquish(memory, owner);
      },
    });
    const logger = recordingLogger();
    const bus = createRelayBus({ store, events: [Order], logger, dispatcher: { pollIntervalMs: 10 } });
    t.after(() => bus.stop({ graceMs: 0 }));
    bus.on(Order, 'h', () => undefined);
    await bus.start();
    await waitFor(() => claims === 1, 'the failed claim');
    await bus.stop();
    const line = logger.lines.find((l) => l.message.startsWith('forgetting the deliveries a failed claim'));
    assert.ok(line, `logged: ${logger.lines.map((l) => l.message).join(' | ')}`);
    assert.equal(line.level, 'warn');
    assert.match(String(line.fields.error), /ECONNREFUSED/);
    assert.equal(relinquished, 1, 'the lanes were relinquished all the same');
  });
});
