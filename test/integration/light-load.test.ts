/**
 * A worker under a light load on real Postgres: a run that ends does not make the claim loop claim again (that claim
 * would find nothing, and a publish would wait behind it). Its completion is written by the batcher, whose write says
 * whether a completed key's next delivery is due: only then does the loop claim at once, so a key's deliveries still
 * follow each other without waiting for the poll.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { laneOf } from '../../src/core/lanes.js';
import { createRelayBus, defineEvent, Type } from '../../src/index.js';
import type { PgClientLike, PostgresStore } from '../../src/postgres/index.js';
import type { OwnerClaimParams as ClaimParams } from '../support/claims.js';
import { findPostgres } from '../support/databases.js';
import { usePgStore } from '../support/pg-store.js';
import { deferred, pause, spyStore, waitFor, type Deferred } from '../support/wait.js';
import * as owners from '../support/claims.js';

const found = await findPostgres();
const Step = defineEvent('light-load.step', Type.Object({ n: Type.Integer() }));
const handlers = [{ name: 'h', maxAttempts: 3 }];

describe('a light load on real Postgres', { skip: 'skip' in found ? found.skip : false }, () => {
  let store: PostgresStore<PgClientLike>;
  usePgStore('light_load', 8, (opened) => ({ store } = opened));

  /**
   * A started bus over a spied store, its handler recording each payload. A 20 s poll unless given: within these tests
   * only wake-ups and the batcher's reports make the loop claim.
   */
  async function startSpiedBus(
    completionBatchWindowMs?: number,
    overrides: Partial<typeof store> & Partial<owners.OwnerClaimCalls> = {},
    pollIntervalMs = 20_000,
  ) {
    const spied = spyStore(store, overrides);
    const bus = createRelayBus({
      store: spied.store as typeof store,
      events: [Step],
      setupStore: false,
      dispatcher: {
        pollIntervalMs,
        concurrency: 8,
        batchSize: 8,
        ...(completionBatchWindowMs === undefined ? {} : { completionBatchWindowMs }),
      },
    });
    const ran: number[] = [];
    bus.on(Step, 'light', ({ n }) => {
      ran.push(n);
    });
    await bus.start();
    return { spied, bus, ran };
  }

  it("completeManyReportingNext says whether a completed key's next delivery is due", async () => {
    const later = new Date(Date.now() + 60_000);
    await store.transaction((tx) =>
      store.publish(tx, [
        { type: 't', key: 'chain', payload: { n: 1 }, handlers },
        { type: 't', key: 'chain', payload: { n: 2 }, handlers },
        { type: 't', key: 'alone', payload: { n: 3 }, handlers },
        { type: 't', key: null, payload: { n: 4 }, handlers },
        { type: 't', key: 'delayed', payload: { n: 5 }, handlers },
      ]),
    );
    await store.transaction((tx) =>
      store.publish(tx, [{ type: 't', key: 'delayed', payload: { n: 6 }, handlers, availableAt: later }]),
    );
    const claimed = await owners.claim(store, { owner: 'w', handlers: ['h'], limit: 10, leaseDurationMs: 60_000 });
    const byPayload = new Map(claimed.map((d) => [(d.payload as { n: number }).n, d]));
    assert.deepEqual([...byPayload.keys()].sort(), [1, 3, 4, 5], 'the heads and the unkeyed one');
    const complete = (n: number) => {
      const d = byPayload.get(n)!;
      return store.completeManyReportingNext!([{ deliveryId: d.id, leaseToken: d.leaseToken }]);
    };
    assert.deepEqual(await complete(3), { completed: [true], nextDue: false }, 'a key with nothing after it');
    assert.deepEqual(await complete(4), { completed: [true], nextDue: false }, 'unkeyed');
    assert.deepEqual(await complete(5), { completed: [true], nextDue: false }, 'its next is not due yet');
    assert.deepEqual(await complete(1), { completed: [true], nextDue: true }, 'its next is due');
    assert.deepEqual(await complete(1), { completed: [false], nextDue: false }, 'already completed: lease lost');
    await owners.relinquish(store, 'w');
  });

  it('a trickle costs about one claim per publish, and a chain of one key runs through without the poll', {
    timeout: 30_000,
  }, async () => {
    const { spied, bus, ran } = await startSpiedBus();
    try {
      await pause(200);
      const claims = () => spied.calls.filter((c) => c.method === 'claim' || c.method === 'completeAndClaim').length;
      const before = claims();
      for (let n = 0; n < 20; n += 1) {
        await store.transaction((tx) => bus.publish(tx, Step, { n }, { key: `t-${n}` }));
        await waitFor(() => ran.length === n + 1, `trickle ${n}`, 5_000);
        await pause(20);
      }
      const perPublish = (claims() - before) / 20;
      assert.ok(
        perPublish <= 1.5,
        `claims per publish under a trickle: ${perPublish} (a claim per ended run: 2 or more)`,
      );
      // Five deliveries of one key, published together: each follows its predecessor's completion, not the poll.
      await store.transaction((tx) =>
        bus.publishMany(
          tx,
          Array.from({ length: 5 }, (_, i) => ({ event: Step, payload: { n: 100 + i }, options: { key: 'chain' } })),
        ),
      );
      await waitFor(() => ran.length === 25, 'the chain ran', 5_000);
      assert.deepEqual(ran.slice(20), [100, 101, 102, 103, 104]);
    } finally {
      await bus.stop();
    }
  });

  it('wake-ups naming more lanes than the dispatcher remembers make its next claim look at every free lane', {
    timeout: 30_000,
  }, async () => {
    // A claim held in progress while two publishes name 40 lanes each, then one more: the dispatcher remembers 64 named
    // lanes, so the last publish's lane is not named to the next claim. Unless that claim looks at the free lanes, its
    // delivery waits for the poll (20 s here). (One publish names at most 64 lanes; beyond, it names none: look
    // everywhere.)
    let gate: Deferred<void> | undefined;
    const entered = deferred();
    const held = async () => {
      if (gate === undefined) return;
      entered.resolve();
      await gate.promise;
    };
    const { bus, ran } = await startSpiedBus(undefined, {
      claim: async (params) => {
        await held();
        return owners.claim(store, params);
      },
      completeAndClaim: async (leases, params) => {
        await held();
        return owners.completeAndClaim(store, leases, params);
      },
    });
    try {
      await pause(200);
      const lanes = new Set<number>();
      const elsewhere: string[] = [];
      for (let i = 0; elsewhere.length < 80; i += 1)
        if (!lanes.has(laneOf(`elsewhere-${i}`, ''))) {
          lanes.add(laneOf(`elsewhere-${i}`, ''));
          elsewhere.push(`elsewhere-${i}`);
        }
      let mine = 'mine-0';
      for (let i = 1; lanes.has(laneOf(mine, '')); i += 1) mine = `mine-${i}`;
      // Work for a handler this bus does not run: named by a wake-up, such a lane gives the claim nothing.
      const publishElsewhere = (keys: readonly string[]) =>
        store.transaction((tx) =>
          store.publish(
            tx,
            keys.map((key, n) => ({
              type: 't',
              key,
              payload: { n },
              handlers: [{ name: 'elsewhere', maxAttempts: 3 }],
            })),
          ),
        );
      gate = deferred();
      await publishElsewhere(elsewhere.slice(0, 1));
      await entered.promise;
      // While that claim waits: 80 lanes named in two wake-ups, then the delivery of this bus's handler.
      await publishElsewhere(elsewhere.slice(0, 40));
      await publishElsewhere(elsewhere.slice(40));
      await pause(100);
      await store.transaction((tx) => bus.publish(tx, Step, { n: 1 }, { key: mine }));
      await pause(100);
      const release = gate;
      gate = undefined;
      release.resolve();
      await waitFor(() => ran.length === 1, 'the delivery in a lane no claim was told of ran before the poll', 5_000);
    } finally {
      await bus.stop();
    }
  });

  it('a publish heard when the look at free lanes is due is claimed by a light claim first, and the look follows at once', {
    timeout: 30_000,
  }, async () => {
    // Each claim as the loop made it: whether it left free lanes alone (light), the lanes it named, when it ended.
    const claims: { light: boolean; named: readonly number[]; endedAt: number; count: number }[] = [];
    const record = (params: ClaimParams, claimed: readonly unknown[]) =>
      claims.push({
        light: params.freeLanes === 'skip',
        named: params.preferLanes ?? [],
        endedAt: performance.now(),
        count: claimed.length,
      });
    const pollMs = 3_000;
    const { bus, ran } = await startSpiedBus(
      undefined,
      {
        claim: async (params) => {
          const claimed = await owners.claim(store, params);
          record(params, claimed);
          return claimed;
        },
        completeAndClaim: async (leases, params) => {
          const result = await owners.completeAndClaim(store, leases, params);
          record(params, result.claimed);
          return result;
        },
      },
      pollMs,
    );
    try {
      // The first claim looked at the free lanes; a publish half a poll later is claimed by a light one, and the poll's
      // wait starts over after it.
      await pause(pollMs / 2);
      await store.transaction((tx) => bus.publish(tx, Step, { n: 1 }, { key: 'due-a' }));
      await waitFor(() => ran.length === 1, 'the first publish ran', 5_000);
      assert.equal(claims.at(-1)?.light, true, 'a publish before the look is due: a light claim');
      // Now the look is due (a poll interval since the first claim) and the poll's wait is not over (it started after
      // the light claim): a publish wakes the loop.
      await pause(pollMs * 0.7);
      const from = claims.length;
      await store.transaction((tx) => bus.publish(tx, Step, { n: 2 }, { key: 'due-b' }));
      await waitFor(() => ran.length === 2 && claims.length >= from + 2, 'the publish and the look', 5_000);
      const [first, second] = claims.slice(from);
      assert.deepEqual(
        { light: first!.light, named: first!.named, count: first!.count },
        { light: true, named: [laneOf('due-b', '')], count: 1 },
        'the light claim of the named lane took the publish',
      );
      assert.equal(second!.light, false, 'then the claim that looks at free lanes');
      assert.ok(
        second!.endedAt - first!.endedAt < pollMs / 4,
        `the look followed at once, not at the poll: ${Math.round(second!.endedAt - first!.endedAt)} ms later`,
      );
    } finally {
      await bus.stop();
    }
  });

  it('under a light load no completion rides on a claim: the claim stays the light one, the batcher writes them', {
    timeout: 30_000,
  }, async () => {
    // A long completion window: a completion still waits in the batcher when the next publish's claim starts.
    const { spied, bus, ran } = await startSpiedBus(300);
    try {
      await pause(200);
      const from = spied.calls.length;
      for (let n = 0; n < 6; n += 1) {
        await store.transaction((tx) => bus.publish(tx, Step, { n }, { key: `r-${n}` }));
        await waitFor(() => ran.length === n + 1, `publish ${n}`, 5_000);
      }
      const calls = spied.calls.slice(from);
      const light = (call: (typeof calls)[number]) =>
        (call.args[call.method === 'claim' ? 0 : 1] as { freeLanes?: string } | undefined)?.freeLanes === 'skip';
      assert.ok(
        calls.some((call) => call.method === 'claim' && light(call)),
        'claims under the light load skip free lanes',
      );
      assert.deepEqual(
        calls.filter((call) => call.method === 'completeAndClaim' && light(call)).length,
        0,
        'no completion rode on such a claim',
      );
      await waitFor(
        () => spied.calls.slice(from).some((call) => call.method.startsWith('completeMany')),
        'the batcher wrote the completions',
        5_000,
      );
    } finally {
      await bus.stop();
    }
  });
});
