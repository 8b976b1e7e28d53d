import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { backoffDelayMs, decideRetry, type BackoffOptions } from '../../src/core/retry-policy.js';

const exact: BackoffOptions = { initialDelayMs: 1_000, maxDelayMs: 60_000, multiplier: 2, jitter: 0 };
const now = new Date('2030-01-01T00:00:00.000Z');

describe('backoffDelayMs', () => {
  it('grows exponentially from the first failed attempt', () => {
    assert.deepEqual(
      [1, 2, 3, 4, 5].map((attempt) => backoffDelayMs(attempt, exact)),
      [1_000, 2_000, 4_000, 8_000, 16_000],
    );
  });

  it('is capped at maxDelayMs, even for huge attempts', () => {
    assert.equal(backoffDelayMs(7, exact), 60_000);
    assert.equal(backoffDelayMs(5_000, exact), 60_000);
  });

  it('a multiplier of 1 is a constant delay', () => {
    assert.equal(backoffDelayMs(9, { ...exact, multiplier: 1 }), 1_000);
  });

  it('spreads by +-jitter and never exceeds the cap', () => {
    const jittered = { ...exact, jitter: 0.2 };
    assert.equal(
      backoffDelayMs(1, jittered, () => 0),
      800,
    );
    assert.equal(
      backoffDelayMs(1, jittered, () => 0.5),
      1_000,
    );
    assert.equal(
      backoffDelayMs(1, jittered, () => 0.999999),
      1_200,
    );
    assert.equal(
      backoffDelayMs(20, jittered, () => 0.999999),
      60_000,
    );
    assert.equal(
      backoffDelayMs(20, jittered, () => 0),
      48_000,
    );
    for (let i = 0; i < 200; i += 1) {
      const delay = backoffDelayMs(3, jittered);
      assert.ok(delay >= 3_200 && delay <= 4_800, `delay ${delay} within +-20% of 4000`);
    }
  });

  it('a zero delay stays zero', () => {
    assert.equal(backoffDelayMs(3, { initialDelayMs: 0, maxDelayMs: 0, multiplier: 2, jitter: 0.5 }), 0);
  });
});

describe('decideRetry', () => {
  it('reschedules while attempts remain, at now + backoff', () => {
    const decision = decideRetry({ attempt: 2, maxAttempts: 3, backoff: exact, now });
    assert.deepEqual(decision, { action: 'reschedule', delayMs: 2_000, availableAt: new Date(now.getTime() + 2_000) });
  });

  it('buries the last allowed attempt', () => {
    assert.deepEqual(decideRetry({ attempt: 3, maxAttempts: 3, backoff: exact, now }), { action: 'bury' });
    assert.deepEqual(decideRetry({ attempt: 1, maxAttempts: 1, backoff: exact, now }), { action: 'bury' });
  });

  it('buries an attempt beyond the budget (a lowered maxAttempts)', () => {
    assert.deepEqual(decideRetry({ attempt: 7, maxAttempts: 3, backoff: exact, now }), { action: 'bury' });
  });

  it('uses the injected random source', () => {
    const decision = decideRetry({
      attempt: 1,
      maxAttempts: 5,
      backoff: { ...exact, jitter: 0.5 },
      now,
      random: () => 0,
    });
    assert.equal(decision.action === 'reschedule' && decision.delayMs, 500);
  });
});
