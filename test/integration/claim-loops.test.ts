/**
 * Two claim loops in one dispatcher on real Postgres: each loop is a lease owner of its own (lanes are held per
 * owner), they share the handler slots, and the guarantees hold as with one loop: every (event, handler) runs once,
 * a key's deliveries run one at a time in sequence order, never more handlers at once than `concurrency`, and at
 * stop both owners hand their lanes back. A wake-up (NOTIFY) wakes both loops: a publish into an idle bus is
 * delivered at once. While the first loop keeps up, the second stays dormant (no claims that find nothing); it joins
 * in when a claim comes back full. Once another worker holds lanes, the second loop rests: it hands its lanes back and
 * claims no more, and the guarantees hold; a worker that starts beside another keeps its second loop dormant from the
 * start.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type pg from 'pg';
import { createRelayBus, defineEvent, type RelayBus, Type } from '../../src/index.js';
import { laneOf } from '../../src/core/lanes.js';
import { fromPg, postgresStore, type PgClientLike, type PostgresStore } from '../../src/postgres/index.js';
import { findPostgres } from '../support/databases.js';
import { usePgStore } from '../support/pg-store.js';
import { pause, waitFor } from '../support/wait.js';
import * as owners from '../support/claims.js';

const found = await findPostgres();
const Step = defineEvent('claim-loops.step', Type.Object({ key: Type.String(), n: Type.Integer() }));
const KEYS = 40;
const PER_KEY = 25;

/**
 * `target` as the bus calls it: each claim reported to `onClaim` once it returned (its owner, how many deliveries it
 * brought, the lanes other workers hold when it says, and how many completions rode on it), each `relinquish` to
 * `onRelinquish` before it runs.
 */
function countingClaims(
  target: PostgresStore<PgClientLike>,
  onClaim: (owner: string, claimed: number, peerLanes?: number, completed?: number) => void,
  onRelinquish: (owner: string) => void = () => {},
): PostgresStore<PgClientLike> {
  return owners.overrideClaims(target, {
    claim: async (params) => {
      const claimed = await owners.claim(target, params);
      onClaim(params.owner, claimed.length);
      return claimed;
    },
    completeAndClaim: async (...args) => {
      const result = await owners.completeAndClaim(target, ...args);
      onClaim(args[1].owner, result.claimed.length, result.peerLanes, result.completed.filter(Boolean).length);
      return result;
    },
    relinquish: (owner) => {
      onRelinquish(owner);
      return owners.relinquish(target, owner);
    },
  });
}

/** Every list of what ran (per key, or per handler and key) is 0..PER_KEY-1: each once, in order. */
function assertOnceEachInOrder(seen: ReadonlyMap<string, readonly number[]>): void {
  for (const [key, list] of seen) {
    assert.deepEqual(
      list,
      Array.from({ length: PER_KEY }, (_, n) => n),
      `${key}: once each, in order`,
    );
  }
}

describe('claim loops on real Postgres', { skip: 'skip' in found ? found.skip : false }, () => {
  let pool: pg.Pool;
  let store: PostgresStore<PgClientLike>;
  const schema = usePgStore('claim_loops', 16, (opened) => ({ pool, store } = opened));

  /** KEYS keys (`prefix` + n) of PER_KEY events each, in one transaction, interleaved across keys. */
  async function publishBacklog(bus: RelayBus<PgClientLike, typeof Step>, prefix: string): Promise<void> {
    await store.transaction((tx) =>
      bus.publishMany(
        tx,
        Array.from({ length: KEYS * PER_KEY }, (_, i) => ({
          event: Step,
          payload: { key: `${prefix}${i % KEYS}`, n: Math.floor(i / KEYS) },
          options: { key: `${prefix}${i % KEYS}` },
        })),
      ),
    );
  }

  it('two loops: every pair runs once, per-key order, at most concurrency at once, both owners claim and hand back', {
    timeout: 60_000,
  }, async () => {
    const bus = createRelayBus({
      store,
      events: [Step],
      setupStore: false,
      dispatcher: { claimLoops: 2, concurrency: 16, batchSize: 16, pollIntervalMs: 20 },
    });
    const seen = new Map<string, number[]>();
    let running = 0;
    let most = 0;
    const runningKeys = new Set<string>();
    let overlaps = 0;
    for (const handler of ['a', 'b']) {
      bus.on(Step, handler, async ({ key, n }) => {
        const slot = `${handler}/${key}`;
        if (runningKeys.has(slot)) overlaps += 1;
        runningKeys.add(slot);
        running += 1;
        most = Math.max(most, running);
        await pause(n % 3);
        (seen.get(slot) ?? seen.set(slot, []).get(slot)!).push(n);
        running -= 1;
        runningKeys.delete(slot);
      });
    }
    await publishBacklog(bus, 'k');
    const owners = new Set<string>();
    const watch = setInterval(() => {
      void store.listLanes().then((lanes) => {
        for (const lane of lanes) owners.add(lane.owner);
      });
    }, 10);
    await bus.start();
    try {
      await waitFor(
        () => [...seen.values()].reduce((sum, list) => sum + list.length, 0) === 2 * KEYS * PER_KEY,
        'every delivery ran',
        45_000,
      );
    } finally {
      clearInterval(watch);
    }
    await bus.stop();
    assertOnceEachInOrder(seen);
    assert.equal(overlaps, 0, 'no two deliveries of one (handler, key) at once');
    assert.ok(most <= 16, `at most concurrency (16) handlers at once, saw ${most}`);
    assert.equal(owners.size, 2, `both loops held lanes (${[...owners].join(', ')})`);
    assert.deepEqual(await store.listLanes(), [], 'every lane handed back at stop');
    const { rows } = await pool.query('SELECT 1');
    assert.equal(rows.length, 1);
  });

  it('a publish into an idle two-loop bus is delivered at once (a wake-up, not the poll)', {
    timeout: 30_000,
  }, async () => {
    const bus = createRelayBus({
      store,
      events: [Step],
      setupStore: false,
      dispatcher: { claimLoops: 2, pollIntervalMs: 20_000 },
    });
    const at: number[] = [];
    bus.on(Step, 'idle', () => {
      at.push(Date.now());
    });
    await bus.start();
    try {
      await pause(300);
      for (let i = 0; i < 4; i += 1) {
        const sent = Date.now();
        await store.transaction((tx) => bus.publish(tx, Step, { key: `idle-${i}`, n: i }, { key: `idle-${i}` }));
        await waitFor(() => at.length === i + 1, `delivery ${i}`, 5_000);
        assert.ok(at[i]! - sent < 2_000, `delivered by a wake-up, not the 20 s poll (${at[i]! - sent} ms)`);
      }
    } finally {
      await bus.stop();
    }
  });

  it('the second loop stays dormant while the first keeps up, and claims as soon as a claim comes back full', {
    timeout: 30_000,
  }, async () => {
    // Claims per owner and what they returned, counted at the store the bus calls.
    const claims = new Map<string, { calls: number; delivered: number }>();
    const count = (owner: string, delivered: number) => {
      const entry = claims.get(owner) ?? { calls: 0, delivered: 0 };
      claims.set(owner, { calls: entry.calls + 1, delivered: entry.delivered + delivered });
    };
    const counted = countingClaims(store, count);
    const bus = createRelayBus({
      store: counted,
      events: [Step],
      setupStore: false,
      dispatcher: { claimLoops: 2, concurrency: 16, batchSize: 16, pollIntervalMs: 50 },
    });
    let ran = 0;
    bus.on(Step, 'dormant', async () => {
      ran += 1;
      await pause(2);
    });
    await bus.start();
    try {
      const first = bus.owner!;
      /** Claims of the second loop: every owner but the first's. */
      const second = (field: 'calls' | 'delivered') =>
        [...claims].filter(([owner]) => owner !== first).reduce((sum, [, entry]) => sum + entry[field], 0);
      await pause(300);
      claims.clear();
      // A trickle: the first loop keeps up with it alone.
      for (let i = 0; i < 10; i += 1) {
        await store.transaction((tx) => bus.publish(tx, Step, { key: `t-${i}`, n: i }, { key: `t-${i}` }));
        await pause(30);
      }
      await waitFor(() => ran === 10, 'the trickle ran', 5_000);
      assert.equal(second('calls'), 0, 'the second loop made no claim while the first kept up');
      assert.ok((claims.get(first)?.calls ?? 0) >= 10, 'the first loop claimed the trickle');
      // A backlog: claims come back full, and the second loop joins in.
      await store.transaction((tx) =>
        bus.publishMany(
          tx,
          Array.from({ length: 400 }, (_, i) => ({
            event: Step,
            payload: { key: `b-${i % 50}`, n: i },
            options: { key: `b-${i % 50}` },
          })),
        ),
      );
      await waitFor(() => ran === 410, 'the backlog ran', 20_000);
      assert.ok(second('delivered') > 0, 'the second loop claimed part of the backlog');
    } finally {
      await bus.stop();
    }
  });
  it('a loop whose claim finds nothing while its sibling holds the only busy lane claims once a poll, not at every run end', {
    timeout: 30_000,
  }, async () => {
    /** Per owner: claims that brought no delivery and completed none. */
    const barren = new Map<string, number>();
    const counted = countingClaims(store, (owner, claimed, _peerLanes, completed = 0) => {
      if (claimed === 0 && completed === 0) barren.set(owner, (barren.get(owner) ?? 0) + 1);
    });
    const pollIntervalMs = 250;
    const bus = createRelayBus({
      store: counted,
      events: [Step],
      setupStore: false,
      dispatcher: { claimLoops: 2, concurrency: 16, batchSize: 16, pollIntervalMs },
    });
    // Every key in one lane: the loop that holds it has all the work, and the other finds none (the lane may change
    // hands when its holder runs nothing for a moment).
    const keys: string[] = [];
    for (let n = 0; keys.length < KEYS; n += 1) if (laneOf(`one-${n}`, '') === 7) keys.push(`one-${n}`);
    let ran = 0;
    bus.on(Step, 'one-lane', async () => {
      await pause(1);
      ran += 1;
    });
    await store.transaction((tx) =>
      bus.publishMany(
        tx,
        Array.from({ length: KEYS * PER_KEY }, (_, i) => ({
          event: Step,
          payload: { key: keys[i % KEYS]!, n: Math.floor(i / KEYS) },
          options: { key: keys[i % KEYS]! },
        })),
      ),
    );
    const started = performance.now();
    await bus.start();
    try {
      await waitFor(() => ran === KEYS * PER_KEY, 'the backlog ran', 20_000);
    } finally {
      await bus.stop();
    }
    const elapsedMs = performance.now() - started;
    // A loop woken at each of its sibling's run ends would claim beside every claim of the sibling (318 claims that
    // found nothing in 1.4 s); each loop finds nothing at most a few times a poll (a claim that finds nothing may also
    // follow a publish's wake-up or a run end of its own: up to 23 in 6 polls under the whole suite's load). The bound
    // stays an order of magnitude below the woken loop's count.
    const polls = Math.ceil(elapsedMs / pollIntervalMs);
    const total = [...barren.values()].reduce((sum, n) => sum + n, 0);
    assert.ok(
      total <= 4 * polls + 10,
      `claims that found nothing: ${[...barren.values()].join(' and ')} in ${Math.round(elapsedMs)} ms (${polls} polls)`,
    );
  });

  it("once another worker starts, the first worker's second loop rests, and the newcomer's waits until it is alone", {
    timeout: 60_000,
  }, async () => {
    /** Per owner: claims made, and whether (and after how many claims) its lanes were handed back while running. */
    const claims = new Map<string, number>();
    const rested = new Map<string, number>();
    /** Per owner: how many claims of any owner preceded its first rest (an index into `order`). */
    const firstRestAt = new Map<string, number>();
    /** Every claim in order: its owner and how many lanes other workers held, as it reported. */
    const order: { owner: string; peerLanes: number | undefined }[] = [];
    let stopping = false;
    /** A store of its own for each worker (as each process has), counting at the store the bus calls. */
    const workerStore = () =>
      countingClaims(
        postgresStore({ driver: fromPg(pool), schema }),
        (owner, _claimed, peerLanes) => {
          claims.set(owner, (claims.get(owner) ?? 0) + 1);
          order.push({ owner, peerLanes });
        },
        (owner) => {
          if (stopping) return;
          rested.set(owner, claims.get(owner) ?? 0);
          if (!firstRestAt.has(owner)) firstRestAt.set(owner, order.length);
        },
      );
    const seen = new Map<string, number[]>();
    const [early, late] = [workerStore(), workerStore()].map((own) => {
      const bus = createRelayBus({
        store: own,
        events: [Step],
        setupStore: false,
        dispatcher: { claimLoops: 2, concurrency: 8, batchSize: 8, pollIntervalMs: 20 },
      });
      bus.on(Step, 'rest', async ({ key, n }) => {
        await pause(1);
        (seen.get(key) ?? seen.set(key, []).get(key)!).push(n);
      });
      return bus;
    }) as [RelayBus<PgClientLike, typeof Step>, RelayBus<PgClientLike, typeof Step>];
    await publishBacklog(early, 'r');
    await early.start();
    try {
      // Alone, its claims come back full and its second loop joins in.
      await waitFor(() => claims.size === 2, "both of the first worker's loops claimed", 10_000);
      const earlySecond = [...claims.keys()].find((owner) => owner !== early.owner)!;
      await late.start();
      await waitFor(
        () => [...seen.values()].reduce((sum, list) => sum + list.length, 0) === KEYS * PER_KEY,
        'every delivery ran',
        45_000,
      );
      assertOnceEachInOrder(seen);
      assert.ok(rested.has(earlySecond), "the first worker's second loop handed its lanes back while it ran");
      // Its claims stopped there (it schedules no retry here), unless a claim of its first loop then saw no other
      // worker's lane: a resting loop claims again once no other worker holds one (near the end of the drain, with
      // other test files running, the newcomer's lanes were all handed back while the first worker had work left).
      const sinceRest = order.slice(firstRestAt.get(earlySecond));
      const again = sinceRest.findIndex((c) => c.owner === earlySecond);
      if (again >= 0)
        assert.ok(
          sinceRest.slice(0, again).some((c) => c.owner === early.owner && c.peerLanes === 0),
          'once it rested, it claimed again only after its first loop saw no other worker hold a lane',
        );
      assert.ok((claims.get(late.owner!) ?? 0) > 0, "the newcomer's first loop claimed");
      // The newcomer's second loop starts dormant: it claims only once a claim of its worker saw no other worker's
      // lane (the first worker's lanes drained and handed back, near the end), never at its start.
      const lateSecond = order.findIndex(
        (c) => c.owner !== early.owner && c.owner !== earlySecond && c.owner !== late.owner,
      );
      if (lateSecond >= 0) {
        const alone = order.slice(0, lateSecond).some((c) => c.owner === late.owner && c.peerLanes === 0);
        assert.ok(alone, "the newcomer's second loop claimed while the first worker held lanes");
      }
      for (const first of [early.owner!, late.owner!])
        assert.equal(rested.has(first), false, 'a first loop never rests');
    } finally {
      stopping = true;
      await Promise.all([early, late].map((bus) => bus.stop()));
    }
  });
});
