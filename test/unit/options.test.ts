import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { Type } from '@sinclair/typebox';
import { InvalidOptionsError } from '../../src/core/errors.js';
import { defineEvent } from '../../src/core/events.js';
import { noopLogger } from '../../src/core/logger.js';
import {
  DEFAULT_BACKOFF,
  DEFAULT_BATCH_SIZE,
  DEFAULT_COMPLETION_BATCH_WINDOW_MS,
  DEFAULT_CONCURRENCY,
  DEFAULT_HANDLER_TIMEOUT_MS,
  DEFAULT_LEASE_DURATION_MS,
  DEFAULT_MAX_ATTEMPTS,
  DEFAULT_POLL_INTERVAL_MS,
  DEFAULT_SHUTDOWN_GRACE_MS,
  resolveDispatcherOptions,
  resolveHandlerOptions,
} from '../../src/core/options.js';
import { resolveRelayBusOptions, type RelayBusOptions } from '../../src/bus/options.js';
import { memoryStore } from '../../src/memory/memory-store.js';

const Ping = defineEvent('ping', Type.Object({ n: Type.Integer() }));
const base = { store: memoryStore(), events: [Ping] };

function invalid(input: unknown, pattern: RegExp): void {
  assert.throws(
    () => resolveRelayBusOptions(input as RelayBusOptions<unknown>),
    (error: unknown) => {
      assert.ok(error instanceof InvalidOptionsError, `expected InvalidOptionsError, got ${String(error)}`);
      assert.equal(error.code, 'RELAYBUS_INVALID_OPTIONS');
      assert.match(error.message, pattern);
      return true;
    },
  );
}

describe('resolveRelayBusOptions', () => {
  it('applies every default and freezes the result', () => {
    const options = resolveRelayBusOptions(base);
    assert.equal(options.setupStore, true);
    assert.equal(options.logger, noopLogger);
    assert.equal(options.clock, undefined);
    assert.equal(options.maxAttempts, DEFAULT_MAX_ATTEMPTS);
    assert.equal(options.handlerTimeoutMs, DEFAULT_HANDLER_TIMEOUT_MS);
    assert.deepEqual(options.backoff, DEFAULT_BACKOFF);
    assert.deepEqual(options.dispatcher, {
      concurrency: DEFAULT_CONCURRENCY,
      batchSize: DEFAULT_BATCH_SIZE,
      pollIntervalMs: DEFAULT_POLL_INTERVAL_MS,
      leaseDurationMs: DEFAULT_LEASE_DURATION_MS,
      completionBatchWindowMs: DEFAULT_COMPLETION_BATCH_WINDOW_MS,
      shutdownGraceMs: DEFAULT_SHUTDOWN_GRACE_MS,
      ownerPrefix: undefined,
      claimLoops: 1,
      followers: 0,
    });
    assert.equal(options.events.get('ping'), Ping);
    assert.ok(Object.isFrozen(options));
    assert.ok(Object.isFrozen(options.dispatcher));
    assert.ok(Object.isFrozen(options.backoff));
  });

  it('documents the defaults the reference relies on', () => {
    assert.equal(DEFAULT_LEASE_DURATION_MS, 30_000);
    assert.equal(DEFAULT_COMPLETION_BATCH_WINDOW_MS, 2);
  });

  it('keeps given values and merges a partial backoff over the default', () => {
    const options = resolveRelayBusOptions({
      ...base,
      setupStore: false,
      maxAttempts: 3,
      backoff: { initialDelayMs: 10 },
      dispatcher: { concurrency: 50, completionBatchWindowMs: 0 },
    });
    assert.equal(options.setupStore, false);
    assert.equal(options.maxAttempts, 3);
    assert.deepEqual(options.backoff, { ...DEFAULT_BACKOFF, initialDelayMs: 10 });
    assert.equal(options.dispatcher.concurrency, 50);
    assert.equal(options.dispatcher.completionBatchWindowMs, 0);
    assert.equal(options.dispatcher.batchSize, DEFAULT_BATCH_SIZE);
  });

  it('names the option, the rule and the value of an out-of-range option', () => {
    invalid(
      { ...base, dispatcher: { concurrency: 0 } },
      /dispatcher\.concurrency: Expected integer to be greater or equal to 1 \(got 0\)/,
    );
    invalid({ ...base, dispatcher: { leaseDurationMs: 10 } }, /dispatcher\.leaseDurationMs: .*greater or equal to 100/);
    invalid({ ...base, dispatcher: { pollIntervalMs: 1.5 } }, /dispatcher\.pollIntervalMs: Expected integer/);
    invalid(
      { ...base, dispatcher: { completionBatchWindowMs: 5_000 } },
      /completionBatchWindowMs: .*less or equal to 1000/,
    );
    invalid({ ...base, dispatcher: { claimLoops: 9 } }, /dispatcher\.claimLoops: .*less or equal to 8 \(got 9\)/);
    invalid({ ...base, dispatcher: { followers: 101 } }, /dispatcher\.followers: .*less or equal to 100 \(got 101\)/);
    invalid({ ...base, dispatcher: { followers: -1 } }, /dispatcher\.followers: .*greater or equal to 0 \(got -1\)/);
    invalid({ ...base, maxAttempts: 0 }, /maxAttempts: .*greater or equal to 1/);
    invalid({ ...base, handlerTimeoutMs: Number.POSITIVE_INFINITY }, /handlerTimeoutMs: .*\(got Infinity\)/);
    invalid({ ...base, backoff: { jitter: 2 } }, /backoff\.jitter: .*less or equal to 1/);
    invalid({ ...base, backoff: { multiplier: Number.NaN } }, /backoff\.multiplier/);
    invalid({ ...base, setupStore: 'yes' }, /setupStore: Expected boolean/);
    invalid({ ...base, dispatcher: { ownerPrefix: '' } }, /dispatcher\.ownerPrefix/);
  });

  it('rejects unknown (misspelt) options', () => {
    invalid({ ...base, dispatcher: { concurency: 5 } }, /dispatcher\.concurency: Unexpected property/);
    invalid({ ...base, maxAttempt: 5 }, /maxAttempt: Unexpected property/);
  });

  it('rejects a backoff whose cap is below its first delay', () => {
    invalid(
      { ...base, backoff: { initialDelayMs: 5_000, maxDelayMs: 1_000 } },
      /maxDelayMs \(1000\) is below initialDelayMs \(5000\)/,
    );
  });

  it('requires a store that implements the contract', () => {
    invalid({ events: [Ping] }, /`store` is required/);
    invalid(
      { ...base, store: { publish() {} } },
      /does not implement the Store contract \(missing methods setup, openClaims/,
    );
    // Every method a bus calls but openClaims (the dispatcher's claim sessions).
    const methods = ['setup', 'publish', 'extendLease', 'completeMany', 'complete', 'reschedule', 'bury'];
    const rest = ['release', 'transaction', 'subscribe'];
    const store = { capabilities: {}, ...Object.fromEntries([...methods, ...rest].map((name) => [name, () => {}])) };
    invalid({ ...base, store }, /missing methods openClaims\)/);
  });

  it('requires at least one event definition, each once', () => {
    invalid({ ...base, events: [] }, /at least one event definition/);
    invalid({ ...base, events: undefined }, /at least one event definition/);
    invalid({ ...base, events: [{ type: 'ping' }] }, /events\[0\] is not an event definition/);
    invalid({ ...base, events: [Ping, defineEvent('ping', Type.String())] }, /"ping" is listed twice/);
  });

  it('checks the shape of logger and clock', () => {
    invalid({ ...base, logger: console.log }, /logger must be an object with methods debug, info, warn, error/);
    invalid({ ...base, clock: Date }, /clock must be an object with methods now/);
    assert.ok(resolveRelayBusOptions({ ...base, clock: { now: () => new Date() } }).clock);
  });

  it('rejects a non-object', () => {
    invalid(null, /must be an object, got null/);
    invalid([], /must be an object, got an array/);
  });
});

describe('resolveDispatcherOptions', () => {
  it('can be used on its own', () => {
    assert.equal(resolveDispatcherOptions({ batchSize: 100 }).batchSize, 100);
    assert.throws(() => resolveDispatcherOptions({ batchSize: 1_001 }), InvalidOptionsError);
  });
});

describe('resolveHandlerOptions', () => {
  const defaults = resolveRelayBusOptions({
    ...base,
    maxAttempts: 4,
    handlerTimeoutMs: 500,
    backoff: { initialDelayMs: 100, maxDelayMs: 1_000 },
  });

  it('fills missing options from the bus defaults', () => {
    assert.deepEqual(resolveHandlerOptions({}, defaults, 'h'), {
      transactional: false,
      maxAttempts: 4,
      timeoutMs: 500,
      backoff: { ...DEFAULT_BACKOFF, initialDelayMs: 100, maxDelayMs: 1_000 },
    });
  });

  it('overrides per handler, merging backoff fields over the bus backoff', () => {
    const resolved = resolveHandlerOptions(
      { transactional: true, maxAttempts: 1, timeoutMs: 50, backoff: { jitter: 0 } },
      defaults,
      'h',
    );
    assert.equal(resolved.transactional, true);
    assert.equal(resolved.maxAttempts, 1);
    assert.equal(resolved.timeoutMs, 50);
    assert.deepEqual(resolved.backoff, { ...defaults.backoff, jitter: 0 });
  });

  it('names the handler in errors', () => {
    assert.throws(
      () => resolveHandlerOptions({ maxAttempts: -1 }, defaults, 'send-mail'),
      /options of handler "send-mail": maxAttempts/,
    );
    assert.throws(
      () => resolveHandlerOptions({ retries: 3 } as never, defaults, 'send-mail'),
      /retries: Unexpected property/,
    );
    assert.throws(
      () => resolveHandlerOptions({ backoff: { initialDelayMs: 5_000 } }, defaults, 'h'),
      /maxDelayMs \(1000\) is below initialDelayMs/,
    );
  });
});
