/**
 * The memory store's replay where the contract suite cannot reach it (its late-commit case needs concurrent
 * connections): a memory transaction open at a backfill's start may commit an event without the handler, and the
 * replay must look again before it finishes; a re-drive does not look again. A step's live waits look at the newest
 * `LIVE_WAIT_IDS` deliveries, as the Postgres store's do (the contract suite would publish that many on every target).
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { LIVE_WAIT_IDS } from '../../src/core/limits.js';
import { memoryStore } from '../../src/memory/memory-store.js';
import type { PublishParams, Store } from '../../src/store/contract.js';
import type { MemoryTransaction } from '../../src/memory/memory-store.js';
import * as owners from '../support/claims.js';
import { deferred } from '../support/wait.js';

function event(id: string, key?: string): PublishParams {
  return {
    id,
    type: 'test.event',
    payload: { id },
    handlers: [{ name: 'h1', maxAttempts: 5 }],
    ...(key === undefined ? {} : { key }),
  };
}

/** Claim every due delivery of `handler` and complete it; returns the event ids, in claim order. */
async function drain(store: Store<MemoryTransaction>, handler: string): Promise<string[]> {
  const ids: string[] = [];
  for (;;) {
    const claimed = await owners.claim(store, { owner: 'w1', handlers: [handler], limit: 1, leaseDurationMs: 30_000 });
    if (claimed.length === 0) return ids;
    ids.push(...claimed.map((c) => c.eventId));
    await store.completeMany(claimed.map((c) => ({ deliveryId: c.id, leaseToken: c.leaseToken })));
  }
}

describe('memory replay', () => {
  it('a backfill waits for a transaction open at its start, then replays the event it committed', async () => {
    const store = memoryStore();
    await store.transaction((tx) => store.publish(tx, [event('ev01', 'k1')]));
    const published = deferred();
    const commit = deferred();
    const late = store.transaction(async (tx) => {
      await store.publish(tx, [event('ev02', 'k1')]);
      published.resolve();
      await commit.promise;
    });
    await published.promise;
    await store.subscribe([{ eventType: 'test.event', handler: 'h2', maxAttempts: 3 }]);
    const replay = await store.startReplay({ mode: 'backfill', handlers: ['h2'] });
    assert.equal(replay.total, 1);
    assert.equal((await store.replayStep({ replayId: replay.id })).created, 1);
    assert.deepEqual(await drain(store, 'h2'), ['ev01']);
    const waiting = await store.replayStep({ replayId: replay.id });
    assert.equal(waiting.waiting, 'draining');
    commit.resolve();
    await late;
    const lateStep = await store.replayStep({ replayId: replay.id });
    assert.equal(lateStep.created, 1);
    assert.equal(lateStep.replay.total, 2);
    assert.deepEqual(await drain(store, 'h2'), ['ev02']);
    const done = await store.replayStep({ replayId: replay.id });
    assert.equal(done.replay.state, 'finished');
    assert.equal(done.replay.created, 2);
  });

  it('a re-drive finishes without a second look, and a replayed key keeps its original order', async () => {
    const store = memoryStore();
    await store.subscribe([{ eventType: 'test.event', handler: 'h1', maxAttempts: 3 }]);
    await store.transaction((tx) => store.publish(tx, [event('ev01', 'k1'), event('ev02', 'k1'), event('ev03')]));
    assert.deepEqual(await drain(store, 'h1'), ['ev01', 'ev02', 'ev03']);
    const replay = await store.startReplay({ mode: 'redrive', handlers: ['h1'], key: 'k1', reason: 'bug fixed' });
    assert.equal(replay.total, 2);
    await store.transaction((tx) => store.publish(tx, [event('ev04', 'k1')]));
    assert.equal((await store.replayStep({ replayId: replay.id, limit: 1 })).created, 1);
    assert.equal((await store.replayStep({ replayId: replay.id, limit: 1 })).created, 1);
    assert.deepEqual(await drain(store, 'h1'), ['ev01', 'ev02'], 'the live ev04 waits while the replay runs');
    const done = await store.replayStep({ replayId: replay.id });
    assert.equal(done.replay.state, 'finished');
    assert.deepEqual(await drain(store, 'h1'), ['ev04']);
    const listed = await store.listDeliveries({ status: 'pending' });
    assert.deepEqual(listed.items, []);
  });
  it("a step's live waits look at the newest LIVE_WAIT_IDS deliveries only, as the Postgres store's", async () => {
    const store = memoryStore();
    await store.transaction((tx) => store.publish(tx, [event('waiting', 'k1')]));
    // Deliveries scheduled an hour ahead: newer ids that wait for nothing yet.
    const later = new Date(Date.now() + 3_600_000);
    const fillers = async (from: number, count: number): Promise<void> => {
      const events = Array.from({ length: count }, (_, i) => ({
        id: `later-${from + i}`,
        type: 'later.event',
        payload: {},
        handlers: [{ name: 'h3', maxAttempts: 1 }],
        availableAt: later,
      }));
      await store.transaction((tx) => store.publish(tx, events));
    };
    await fillers(0, LIVE_WAIT_IDS - 1);
    await store.subscribe([{ eventType: 'test.event', handler: 'h2', maxAttempts: 3 }]);
    const replay = await store.startReplay({ mode: 'backfill', handlers: ['h2'] });
    const seen = await store.replayStep({ replayId: replay.id, limit: 0 });
    assert.deepEqual(
      seen.liveWaits.map((w) => w.handler),
      ['h1'],
      'the waiting delivery is among the newest ids',
    );
    await fillers(LIVE_WAIT_IDS, 1);
    const past = await store.replayStep({ replayId: replay.id, limit: 0 });
    assert.deepEqual(past.liveWaits, [], 'one more delivery puts it past the window');
  });
});
