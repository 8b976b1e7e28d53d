/**
 * `runReplay` against the memory store: it drives a replay to its end in steps bounded by the batch size and the
 * outstanding cap, waits while the store says so, stops on its signal with the replay resumable, retries retryable
 * store failures and rejects bad options.
 */
import assert from 'node:assert/strict';
import { setTimeout as sleep } from 'node:timers/promises';
import { describe, it } from 'node:test';
import {
  InvalidInputError,
  InvalidOptionsError,
  StoreUnavailableError,
  runReplay,
  type LogFields,
  type ReplayPaceView,
  type ReplayStepResult,
  type ReplayView,
  type RunReplayOptions,
} from '../../src/index.js';
import { memoryStore, type MemoryTransaction } from '../../src/memory/memory-store.js';
import type { PublishParams, Store } from '../../src/store/contract.js';
import * as owners from '../support/claims.js';

function event(id: string, key?: string): PublishParams {
  return {
    id,
    type: 'test.event',
    payload: { id },
    handlers: [{ name: 'h1', maxAttempts: 5 }],
    ...(key === undefined ? {} : { key }),
  };
}

/** A store with `count` events over three keys (and some unkeyed), published (at `at`) before handler h2 subscribed. */
async function history(count: number, at?: Date): Promise<Store<MemoryTransaction>> {
  const store = memoryStore();
  await store.subscribe([{ eventType: 'test.event', handler: 'h1', maxAttempts: 5 }]);
  const events = Array.from({ length: count }, (_, i) => {
    const id = `ev${String(i).padStart(4, '0')}`;
    return event(id, i % 4 === 3 ? undefined : `k${i % 3}`);
  });
  await store.transaction((tx) => store.publish(tx, events, at));
  await store.subscribe([{ eventType: 'test.event', handler: 'h2', maxAttempts: 3 }]);
  return store;
}

/** A worker of `handler` completing what it claims until stopped; records the event ids per key in claim order. */
function worker(store: Store<MemoryTransaction>, handler: string) {
  const byKey = new Map<string | null, string[]>();
  let running = true;
  const done = (async () => {
    while (running) {
      const claimed = await owners.claim(store, {
        owner: 'w1',
        handlers: [handler],
        limit: 7,
        leaseDurationMs: 30_000,
      });
      for (const delivery of claimed) {
        const list = byKey.get(delivery.key) ?? [];
        list.push(delivery.eventId);
        byKey.set(delivery.key, list);
      }
      if (claimed.length > 0)
        await store.completeMany(claimed.map((c) => ({ deliveryId: c.id, leaseToken: c.leaseToken })));
      else await sleep(2);
    }
  })();
  return {
    byKey,
    async stop() {
      running = false;
      await done;
    },
  };
}

/**
 * A yield's case: 40 events a minute old (h1's deliveries already wait: it is left out), a backfill of h2 and a worker
 * of h2; a logger that keeps its info lines (the yield's decisions) and the paces seen.
 */
async function yieldCase() {
  const store = await history(40, new Date(Date.now() - 60_000));
  const replay = await store.startReplay({ mode: 'backfill', handlers: ['h2'] });
  const running = worker(store, 'h2');
  const infos: { message: string; fields: LogFields }[] = [];
  const logger = {
    debug() {},
    info: (message: string, fields?: LogFields) => infos.push({ message, fields: fields ?? {} }),
    warn() {},
    error() {},
  };
  const paces: ReplayPaceView[] = [];
  /** Drive the replay in steps of two, each step's pace recorded before `afterStep` sees them; stops the worker. */
  const drive = async (afterStep: () => void): Promise<ReplayView> => {
    const final = await runReplay(store, replay.id, {
      batchSize: 2,
      pollMs: 1,
      logger,
      onProgress: (_view, _step, pace) => {
        paces.push(pace);
        afterStep();
      },
    });
    await running.stop();
    return final;
  };
  return { store, drive, infos, paces };
}

describe('runReplay', () => {
  it('drives a backfill to its end, each step within the batch size and the outstanding cap', async () => {
    const store = await history(60);
    const replay = await store.startReplay({ mode: 'backfill', handlers: ['h2'] });
    assert.equal(replay.total, 60);
    const running = worker(store, 'h2');
    const steps: ReplayStepResult[] = [];
    const final = await runReplay(store, replay.id, {
      batchSize: 8,
      maxOutstanding: 10,
      pollMs: 5,
      onProgress: (_view, step) => steps.push(step),
    });
    await running.stop();
    assert.equal(final.state, 'finished');
    assert.equal(final.created, 60);
    assert.ok(final.finishedAt instanceof Date);
    assert.ok(
      steps.every((step) => step.created <= 8),
      'no step creates more than batchSize',
    );
    assert.ok(
      steps.every((step) => step.outstanding <= 10),
      `outstanding stays within the cap: ${steps.map((s) => s.outstanding).join(',')}`,
    );
    for (const [key, ids] of running.byKey) {
      if (key === null) continue;
      assert.deepEqual(ids, [...ids].sort(), `key ${key} in its original order`);
    }
    const all = [...running.byKey.values()].flat();
    assert.equal(all.length, 60, 'every event once');
    assert.equal(new Set(all).size, 60);
  });

  it('stops on its signal with the replay running, and a second run goes on without repeating anything', async () => {
    const store = await history(30);
    const replay = await store.startReplay({ mode: 'backfill', handlers: ['h2'] });
    const stop = new AbortController();
    const first = await runReplay(store, replay.id, {
      batchSize: 5,
      onProgress: (view) => {
        if (view.created >= 10) stop.abort();
      },
      signal: stop.signal,
    });
    assert.equal(first.state, 'running');
    assert.equal(first.created, 10);
    const running = worker(store, 'h2');
    const second = await runReplay(store, replay.id, { batchSize: 5, pollMs: 5 });
    await running.stop();
    assert.equal(second.state, 'finished');
    assert.equal(second.created, 30);
    const all = [...running.byKey.values()].flat();
    assert.equal(all.length, 30);
    assert.equal(new Set(all).size, 30, 'nothing created twice');
  });

  it('waits at the outstanding cap until the workers finish deliveries', async () => {
    const store = await history(12);
    const replay = await store.startReplay({ mode: 'backfill', handlers: ['h2'] });
    const result = runReplay(store, replay.id, { maxOutstanding: 4, pollMs: 5 });
    await sleep(60);
    const stalled = await store.getReplay(replay.id);
    assert.equal(stalled?.created, 4, 'no worker runs: the cap holds the replay at 4 outstanding');
    const running = worker(store, 'h2');
    const final = await result;
    await running.stop();
    assert.equal(final.state, 'finished');
    assert.equal(final.created, 12);
  });

  it('returns a cancelled replay as it stands', async () => {
    const store = await history(20);
    const replay = await store.startReplay({ mode: 'backfill', handlers: ['h2'] });
    let cancelled = false;
    const final = await runReplay(store, replay.id, {
      batchSize: 5,
      onProgress: (view) => {
        if (view.created >= 5 && !cancelled) {
          cancelled = true;
          void store.cancelReplay(replay.id);
        }
      },
    });
    assert.equal(final.state, 'cancelled');
    assert.ok(final.created >= 5 && final.created < 20, `created ${final.created}`);
  });

  it('keeps to the rate of events per second', async () => {
    const store = await history(12);
    const replay = await store.startReplay({ mode: 'backfill', handlers: ['h2'] });
    const running = worker(store, 'h2');
    const started = performance.now();
    const final = await runReplay(store, replay.id, { rate: 40, pollMs: 5 });
    const took = performance.now() - started;
    await running.stop();
    assert.equal(final.state, 'finished');
    assert.ok(took >= 250, `12 events at 40/s take at least 0.25 s after the first second's worth, took ${took} ms`);
  });

  it('yields to live traffic: slower while another handler waits, not for one already behind at its start', async () => {
    const { store, drive, infos, paces } = await yieldCase();
    let published = false;
    const final = await drive(() => {
      if (published) return;
      published = true;
      // A live delivery of h3 due a second ago that no worker starts: the replay slows down for it.
      void store.transaction((tx) =>
        store.publish(
          tx,
          [{ ...event('live'), handlers: [{ name: 'h3', maxAttempts: 1 }] }],
          new Date(Date.now() - 1_000),
        ),
      );
    });
    assert.equal(final.state, 'finished');
    // Two events a step: unlimited from the start (the rate allows more than a batch a step), h1 waiting a minute.
    assert.deepEqual(
      paces[0],
      { eventsPerSecond: null, yielding: false, leftOut: ['h1'] },
      'h1 was behind at the start',
    );
    const yielding = paces.filter((pace) => pace.yielding);
    assert.ok(yielding.length > 0, 'it yielded');
    const rates = yielding.map((pace) => pace.eventsPerSecond!);
    assert.ok(
      rates.every((rate, i) => i === 0 || rate <= rates[i - 1]!),
      `falling: ${rates}`,
    );
    assert.deepEqual(
      infos.map((info) => info.message),
      [
        'live deliveries of these handlers already wait; the replay does not slow down for them',
        'live deliveries are waiting; the replay slows down for them',
      ],
    );
    assert.equal(infos[0]!.fields.handlers, 'h1');
    assert.equal(infos[1]!.fields.handler, 'h3');
    assert.ok(Number(infos[1]!.fields.waitedMs) >= 1_000);

    const unyielding = await history(6);
    const second = await unyielding.startReplay({ mode: 'backfill', handlers: ['h2'] });
    const seen: ReplayPaceView[] = [];
    const secondWorker = worker(unyielding, 'h2');
    await runReplay(unyielding, second.id, { liveWaitMs: false, onProgress: (_v, _s, pace) => seen.push(pace) });
    await secondWorker.stop();
    assert.ok(seen.every((pace) => pace.eventsPerSecond === null && !pace.yielding && pace.leftOut.length === 0));
  });

  it("yields to the workers' reports of their live deliveries' start lag, never to the replay's own handlers", async () => {
    const { store, drive, infos, paces } = await yieldCase();
    const final = await drive(() => {
      // What a worker reports: first the replay's own handler (its live keyed deliveries wait for history by design),
      // then another handler's deliveries that waited half a second to start.
      if (paces.length === 2) void store.reportLiveLag!([{ handler: 'h2', ms: 5_000 }]);
      if (paces.length === 4) void store.reportLiveLag!([{ handler: 'h3', ms: 500 }]);
    });
    assert.equal(final.state, 'finished');
    assert.deepEqual(
      paces.slice(0, 4).map((pace) => pace.yielding),
      [false, false, false, false],
      "h1 is left out (behind at the start) and h2 is the replay's",
    );
    assert.equal(paces[4]?.yielding, true, 'the step after the report of h3 yields');
    assert.equal(paces[3]?.eventsPerSecond, null, 'unlimited before');
    assert.ok(paces[4]!.eventsPerSecond! > 0, 'limited from then on');
    assert.deepEqual(
      infos
        .filter((info) => info.message.startsWith('live deliveries are waiting'))
        .map(({ fields }) => [fields.handler, fields.waitedMs]),
      [['h3', 500]],
    );
  });

  it('retries retryable store failures with a log line, and throws the others', async () => {
    const store = await history(3);
    const replay = await store.startReplay({ mode: 'backfill', handlers: ['h2'] });
    let failures = 2;
    const flaky: Pick<Store<unknown>, 'replayStep'> = {
      replayStep: async (params) => {
        if (failures > 0) {
          failures -= 1;
          throw new StoreUnavailableError('connection lost', { retryable: true });
        }
        return store.replayStep(params);
      },
    };
    const warnings: LogFields[] = [];
    const logger = { debug() {}, info() {}, warn: (_m: string, f?: LogFields) => warnings.push(f ?? {}), error() {} };
    const running = worker(store, 'h2');
    const final = await runReplay(flaky, replay.id, { pollMs: 1, logger });
    await running.stop();
    assert.equal(final.state, 'finished');
    assert.equal(warnings.length, 2);
    assert.equal(warnings[0]!.replayId, replay.id);

    const broken: Pick<Store<unknown>, 'replayStep'> = {
      replayStep: async () => {
        throw new StoreUnavailableError('permission denied', { retryable: false });
      },
    };
    await assert.rejects(runReplay(broken, replay.id, { pollMs: 1 }), /permission denied/);
    let calls = 0;
    const down: Pick<Store<unknown>, 'replayStep'> = {
      replayStep: async () => {
        calls += 1;
        throw new StoreUnavailableError('down', { retryable: true });
      },
    };
    await assert.rejects(runReplay(down, replay.id, { pollMs: 1, maxRetries: 2 }), /down/);
    assert.equal(calls, 3, 'the first call and two retries');
  });

  it('passes the store’s refusal of an unknown replay id through', async () => {
    const store = memoryStore();
    await assert.rejects(runReplay(store, '999'), InvalidInputError);
  });

  it('rejects bad options with InvalidOptionsError before any step', async () => {
    let steps = 0;
    const store: Pick<Store<unknown>, 'replayStep'> = {
      replayStep: async () => {
        steps += 1;
        throw new Error('not reached');
      },
    };
    const bad: unknown[] = [
      null,
      { batchSize: 0 },
      { batchSize: 10_001 },
      { batchSize: 1.5 },
      { maxOutstanding: 0 },
      { rate: 0 },
      { rate: Number.POSITIVE_INFINITY },
      { pollMs: 0 },
      { liveWaitMs: 0 },
      { liveWaitMs: true },
      { liveWaitMs: 3_600_001 },
      { maxRetries: -1 },
      { onProgress: 'yes' },
      { signal: {} },
      { logger: { info() {} } },
    ];
    for (const options of bad)
      await assert.rejects(
        runReplay(store, '1', options as RunReplayOptions),
        InvalidOptionsError,
        JSON.stringify(options),
      );
    assert.equal(steps, 0);
  });
});
