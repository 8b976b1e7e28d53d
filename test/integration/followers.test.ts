/**
 * Followers (`ClaimParams.followers`, the dispatcher's `followers`), on real Postgres: a claim brings each due keyed
 * head's next due deliveries of its key, beyond the limit, each marked with the one before it; the dispatcher runs
 * them one after another and gives back, unrun, what waits behind a delivery that did not succeed.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type pg from 'pg';
import { createRelayBus, defineEvent, Type } from '../../src/index.js';
import type { ClaimedDelivery } from '../../src/store/contract.js';
import type { PgClientLike, PostgresStore } from '../../src/postgres/index.js';
import { findPostgres } from '../support/databases.js';
import { usePgStore } from '../support/pg-store.js';
import { pause, waitFor } from '../support/wait.js';
import * as owners from '../support/claims.js';

const found = await findPostgres();
const Step = defineEvent('followers.step', Type.Object({ n: Type.Integer() }));
/** Its own type: the subscriptions other cases record for Step would fan its events out to their handlers too. */
const Slot = defineEvent('followers.slot', Type.Object({ n: Type.Integer() }));

describe('followers on real Postgres', { skip: 'skip' in found ? found.skip : undefined }, () => {
  let store: PostgresStore<PgClientLike>;
  let pool: pg.Pool;
  usePgStore('followers', 6, (opened) => ({ store, pool } = opened));

  /** Publish `count` events of `key` for `handlers` (one transaction); the n-th is due `delayed(n)` ms from now. */
  async function publish(
    key: string,
    count: number,
    handlers: readonly string[],
    delayed: (n: number) => number = () => 0,
  ): Promise<void> {
    await store.transaction((tx) =>
      store.publish(
        tx,
        Array.from({ length: count }, (_, n) => ({
          type: Step.type,
          key,
          payload: { n },
          handlers: handlers.map((name) => ({ name, maxAttempts: 3 })),
          ...(delayed(n) > 0 ? { availableAt: new Date(Date.now() + delayed(n)) } : {}),
        })),
      ),
    );
  }

  const range = (count: number) => Array.from({ length: count }, (_, n) => n);

  const payloads = (claimed: readonly ClaimedDelivery[], key: string) =>
    claimed.filter((d) => d.key === key).map((d) => (d.payload as { n: number }).n);

  it('a claim brings each keyed head and its next due deliveries, beyond the limit, each after the one before it', async () => {
    await publish('run-a', 6, ['h1', 'h2']);
    await publish('run-b', 2, ['h1']);
    // A delayed delivery in the middle ends its key's run: nothing after it may run first.
    await publish('run-c', 4, ['h1'], (n) => (n === 2 ? 60_000 : 0));
    const owner = 'followers-claim';
    try {
      const claimed = await owners.claim(store, {
        owner,
        handlers: ['h1'],
        limit: 3,
        leaseDurationMs: 10_000,
        followers: 3,
      });
      assert.deepEqual(payloads(claimed, 'run-a'), [0, 1, 2, 3], 'the head and 3 followers, no more');
      assert.deepEqual(payloads(claimed, 'run-b'), [0, 1], 'a key with less behind its head');
      assert.deepEqual(payloads(claimed, 'run-c'), [0, 1], 'up to the delivery that is not due');
      assert.ok(
        claimed.every((d) => d.handler === 'h1'),
        'only the handler asked for (h2 has the same keys)',
      );
      for (const key of ['run-a', 'run-b', 'run-c']) {
        const run = claimed.filter((d) => d.key === key).sort((a, b) => Number(a.sequence) - Number(b.sequence));
        assert.equal(run[0]!.follows, undefined, `${key}: the head follows nothing`);
        for (let i = 1; i < run.length; i += 1)
          assert.equal(run[i]!.follows, run[i - 1]!.id, `${key}: each follower names the one before it`);
      }
      assert.equal(claimed.filter((d) => d.follows === undefined).length, 3, 'the limit counts heads only');
      const again = await owners.claim(store, {
        owner,
        handlers: ['h1'],
        limit: 10,
        leaseDurationMs: 10_000,
        followers: 3,
      });
      assert.deepEqual(again, [], 'every key of h1 is in flight: nothing more');

      // Completing the head and its followers together: the next claim goes on after the last of them.
      const runA = claimed.filter((d) => d.key === 'run-a');
      const next = await owners.completeAndClaim(
        store,
        runA.map((d) => ({ deliveryId: d.id, leaseToken: d.leaseToken })),
        { owner, handlers: ['h1'], limit: 10, leaseDurationMs: 10_000, followers: 3 },
      );
      assert.deepEqual(next.completed, [true, true, true, true]);
      assert.deepEqual(
        payloads(next.claimed, 'run-a'),
        [4, 5],
        'the new head, after the last completed, and its follower',
      );
      const leases = [...claimed.filter((d) => d.key !== 'run-a'), ...next.claimed];
      await store.release(leases.map((d) => ({ deliveryId: d.id, leaseToken: d.leaseToken })));
      const h2 = await owners.claim(store, { owner, handlers: ['h2'], limit: 10, leaseDurationMs: 10_000 });
      assert.deepEqual(payloads(h2, 'run-a'), [0], 'without followers: the head alone');
      assert.equal(h2[0]!.follows, undefined);
      await store.release(h2.map((d) => ({ deliveryId: d.id, leaseToken: d.leaseToken })));
    } finally {
      await owners.relinquish(store, owner);
      await pool.query(`DELETE FROM "${store.schema}".relaybus_deliveries WHERE key LIKE 'run-%'`);
    }
    await assert.rejects(
      owners.claim(store, { owner, handlers: ['h1'], limit: 1, leaseDurationMs: 1_000, followers: 101 }),
      /followers must be an integer from 0 to 100, got 101/,
    );
  });

  it('a claim whose held lanes give few heads and that then takes free lanes stays within limit x (1 + followers) rows', async () => {
    // The owner holds the lane of one deep key; twelve other keys wait in free lanes. The held lane's head gets the room
    // the missing heads leave (7 followers), and the free lanes taken after it may add only what is left of the 8 rows.
    await publish('held-deep', 30, ['budget']);
    for (let k = 0; k < 12; k += 1) await publish(`free-${k}`, 5, ['budget']);
    const owner = 'followers-budget';
    try {
      const [first] = await owners.claim(store, { owner, handlers: ['budget'], limit: 1, leaseDurationMs: 10_000 });
      assert.ok(first !== undefined);
      const next = await owners.completeAndClaim(store, [{ deliveryId: first.id, leaseToken: first.leaseToken }], {
        owner,
        handlers: ['budget'],
        limit: 4,
        leaseDurationMs: 10_000,
        followers: 1,
      });
      assert.deepEqual(next.completed, [true]);
      assert.ok(next.claimed.length <= 8, `at most 4 x (1 + 1) rows, got ${next.claimed.length}`);
      assert.ok(next.claimed.length > 0, 'the claim claimed');
      await store.release(next.claimed.map((d) => ({ deliveryId: d.id, leaseToken: d.leaseToken })));
    } finally {
      await owners.relinquish(store, owner);
      await pool.query(
        `DELETE FROM "${store.schema}".relaybus_deliveries WHERE key = 'held-deep' OR key LIKE 'free-%'`,
      );
    }
  });

  it('a claim that finds fewer heads than its limit gives their keys longer runs, within limit x (1 + followers) rows', async () => {
    await publish('deep-a', 40, ['deep']);
    await publish('deep-b', 40, ['deep']);
    await publish('deeper', 150, ['deepest']);
    const owner = 'followers-room';
    try {
      // Two heads of a batch of 10 with 2 followers each: 30 rows at most, 14 followers a head.
      const two = await owners.claim(store, {
        owner,
        handlers: ['deep'],
        limit: 10,
        leaseDurationMs: 10_000,
        followers: 2,
      });
      assert.deepEqual(payloads(two, 'deep-a'), range(15), 'deep-a: its head and 14 followers');
      assert.deepEqual(payloads(two, 'deep-b'), range(15), 'deep-b: the same share');
      // One head of a batch of 100 with 5 followers: the room is 599 rows, but a head brings 100 followers at most.
      const one = await owners.claim(store, {
        owner,
        handlers: ['deepest'],
        limit: 100,
        leaseDurationMs: 10_000,
        followers: 5,
      });
      assert.deepEqual(payloads(one, 'deeper'), range(101), 'its head and 100 followers');
      for (const key of ['deep-a', 'deep-b', 'deeper']) {
        const run = [...two, ...one]
          .filter((d) => d.key === key)
          .sort((a, b) => Number(a.sequence) - Number(b.sequence));
        for (let i = 1; i < run.length; i += 1)
          assert.equal(run[i]!.follows, run[i - 1]!.id, `${key}: each follower names the one before it`);
      }
      // A full batch of heads keeps the count asked for: 12 keys, a batch of 4 with 1 follower: 8 rows.
      for (let k = 0; k < 12; k += 1) await publish(`wide-${k}`, 5, ['wide']);
      const full = await owners.claim(store, {
        owner,
        handlers: ['wide'],
        limit: 4,
        leaseDurationMs: 10_000,
        followers: 1,
      });
      assert.equal(full.length, 8, 'four heads with one follower each');
      await store.release([...two, ...one, ...full].map((d) => ({ deliveryId: d.id, leaseToken: d.leaseToken })));
    } finally {
      await owners.relinquish(store, owner);
      await pool.query(`DELETE FROM "${store.schema}".relaybus_deliveries WHERE key LIKE 'deep%' OR key LIKE 'wide-%'`);
    }
  });

  /** A bus with followers whose handler records each run, failing where `fails` says (first attempt only). */
  function busWith(fails: (key: string, n: number) => boolean, slowMs = 0) {
    const bus = createRelayBus({
      store,
      events: [Step],
      setupStore: false,
      backoff: { initialDelayMs: 200, maxDelayMs: 200, jitter: 0 },
      dispatcher: { pollIntervalMs: 50, concurrency: 8, batchSize: 8, followers: 6, shutdownGraceMs: 0 },
    });
    const runs: { key: string; n: number; attempt: number; start: number; end: number }[] = [];
    const started: number[] = [];
    bus.on(Step, 'chain', { maxAttempts: 3 }, async (payload, ctx) => {
      const start = performance.now();
      started.push(payload.n);
      if (slowMs > 0) await new Promise((resolve) => setTimeout(resolve, slowMs));
      runs.push({ key: ctx.delivery.key!, n: payload.n, attempt: ctx.delivery.attempt, start, end: performance.now() });
      if (ctx.delivery.attempt === 1 && fails(ctx.delivery.key!, payload.n)) throw new Error('fails once');
    });
    return { bus, runs, started };
  }

  /** Per key: the runs in the order they started, never two at once. */
  function assertSerialPerKey(runs: readonly { key: string; start: number; end: number }[]): void {
    const last = new Map<string, number>();
    for (const run of [...runs].sort((a, b) => a.start - b.start)) {
      assert.ok((last.get(run.key) ?? -Infinity) <= run.start, `two runs of ${run.key} overlapped`);
      last.set(run.key, run.end);
    }
  }

  it('the dispatcher runs a key run in order, one at a time; a failure gives back what waits behind it, unrun', async () => {
    const keys = ['chain-a', 'chain-b', 'chain-c'];
    const { bus, runs } = busWith((key, n) => key === 'chain-b' && n === 3);
    for (const key of keys)
      await store.transaction((tx) =>
        bus.publishMany(
          tx,
          Array.from({ length: 30 }, (_, n) => ({ event: Step, payload: { n }, options: { key } })),
        ),
      );
    await bus.start();
    try {
      const delivered = () =>
        new Set(runs.filter((r) => r.attempt > 1 || !(r.key === 'chain-b' && r.n === 3)).map((r) => `${r.key}/${r.n}`));
      await waitFor(() => delivered().size >= 90, 'all 90 delivered', 15_000);
    } finally {
      await bus.stop();
    }
    assertSerialPerKey(runs);
    for (const key of keys) {
      const order = runs.filter((r) => r.key === key).map((r) => r.n);
      const expected = Array.from({ length: 30 }, (_, n) => n);
      // chain-b: 3 fails once and runs again when due; nothing after it ran in between.
      assert.deepEqual(order, key === 'chain-b' ? [0, 1, 2, 3, ...expected.slice(3)] : expected, key);
    }
    const retried = runs.filter((r) => r.attempt > 1);
    assert.deepEqual(
      retried.map((r) => `${r.key}/${r.n}`),
      ['chain-b/3'],
      'the followers given back were not charged an attempt',
    );
    const { rows } = await pool.query(`SELECT count(*)::int AS n FROM "${store.schema}".relaybus_deliveries`);
    assert.equal(rows[0].n, 0, 'nothing left pending');
  });

  it('stop() lets a running head finish and gives back its followers unrun, with no attempt charged', async () => {
    const { bus, runs, started } = busWith(() => false, 300);
    await store.transaction((tx) =>
      bus.publishMany(
        tx,
        Array.from({ length: 5 }, (_, n) => ({ event: Step, payload: { n }, options: { key: 'stop-run' } })),
      ),
    );
    await bus.start();
    await waitFor(() => started.length >= 1, 'the head started', 5_000);
    await bus.stop({ graceMs: 5_000 });
    assert.deepEqual(
      runs.map((r) => r.n),
      [0],
      'the head finished within the grace period; nothing after it started',
    );
    const { rows } = await pool.query<{ n: number; attempts: number; claims: number }>(
      `SELECT (coalesce(e.payload, d.payload)->>'n')::int AS n, d.attempts, d.claims FROM "${store.schema}".relaybus_deliveries d
       LEFT JOIN "${store.schema}".relaybus_events e ON e.id = d.event_id WHERE d.key = 'stop-run' ORDER BY d.sequence`,
    );
    assert.deepEqual(
      rows.map((row) => row.n),
      [1, 2, 3, 4],
      'the head is done, its followers pending',
    );
    for (const row of rows) assert.equal(row.attempts, 0, `no attempt charged to ${row.n}`);
    const { rows: lanes } = await pool.query(
      `SELECT count(*)::int AS n FROM "${store.schema}".relaybus_lanes WHERE lease_owner IS NOT NULL OR cardinality(in_flight) > 0`,
    );
    assert.equal(lanes[0].n, 0, 'every lane handed back, nothing left in flight');
    // A new worker runs what is left, in order, after what ran.
    const next = busWith(() => false);
    await next.bus.start();
    try {
      await waitFor(() => next.runs.length >= rows.length, 'the rest delivered by the next worker', 10_000);
    } finally {
      await next.bus.stop();
    }
    assert.deepEqual(
      next.runs.map((r) => r.n),
      rows.map((row) => row.n),
    );
  });
  it('a retried head due while runs of followers hold every slot starts within a poll interval of its due time', async () => {
    const bus = createRelayBus({
      store,
      events: [Slot],
      setupStore: false,
      // Beyond what a claim takes ahead of its due time (twice a recent claim's time): only a claim at about its due
      // time finds it.
      backoff: { initialDelayMs: 300, maxDelayMs: 300, jitter: 0 },
      dispatcher: { pollIntervalMs: 50, concurrency: 2, batchSize: 2, followers: 80, shutdownGraceMs: 0 },
    });
    const starts: { key: string; n: number; attempt: number; at: number }[] = [];
    bus.on(Slot, 'slots', { maxAttempts: 3 }, async (payload, ctx) => {
      starts.push({ key: ctx.delivery.key!, n: payload.n, attempt: ctx.delivery.attempt, at: Date.now() });
      if (ctx.delivery.key === 'slot-retry' && payload.n === 0 && ctx.delivery.attempt === 1) throw new Error('once');
      await new Promise((resolve) => setTimeout(resolve, 10));
    });
    let dueAt = 0;
    bus.lifecycle.on('failed', ({ retryAt }) => {
      dueAt = retryAt.getTime();
    });
    await bus.start();
    // Claims of an idle bus are short, and each doubles the followers the next one asks for (from 1): after a dozen
    // polls, claims bring whole runs of 81.
    await pause(600);
    // The retried key first (its head is claimed first and fails at once), then two keys whose runs of 81 take a
    // slot each for 800 ms and more: without the slot going to the retry, it would wait about 500 ms past due.
    await store.transaction((tx) =>
      bus.publishMany(
        tx,
        (
          [
            ['slot-retry', 2],
            ['slot-busy-a', 81],
            ['slot-busy-b', 81],
          ] as const
        ).flatMap(([key, count]) =>
          Array.from({ length: count }, (_, n) => ({ event: Slot, payload: { n }, options: { key } })),
        ),
      ),
    );
    try {
      await waitFor(() => starts.length >= 165, 'every delivery started', 15_000);
    } finally {
      await bus.stop();
      await pool.query(`DELETE FROM "${store.schema}".relaybus_deliveries WHERE key LIKE 'slot-%'`);
    }
    const retry = starts.find((s) => s.key === 'slot-retry' && s.attempt === 2);
    assert.ok(retry !== undefined && dueAt > 0, 'the head failed once and ran again');
    const lateMs = retry.at - dueAt;
    assert.ok(lateMs >= -5 && lateMs < 50, `the retry started ${lateMs} ms after it was due`);
    const busyDone = Math.max(...starts.filter((s) => s.key !== 'slot-retry').map((s) => s.at));
    assert.ok(retry.at < busyDone - 100, 'it did not wait for the runs of followers to end');
    assertSerialPerKey(starts.map((s) => ({ key: s.key, start: s.at, end: s.at })));
  });

  it('a lost lane drops the followers waiting in it: the new holder runs them, in order, after the head', async () => {
    let release: () => void = () => {};
    const blocked = new Promise<void>((resolve) => {
      release = resolve;
    });
    const first = createRelayBus({
      store,
      events: [Step],
      setupStore: false,
      dispatcher: { pollIntervalMs: 50, concurrency: 4, batchSize: 4, followers: 6, leaseDurationMs: 600 },
    });
    const ran: number[] = [];
    const lost = new Promise<void>((resolve) => first.lifecycle.on('lease-lost', () => resolve()));
    first.on(Step, 'chain', async (payload) => {
      ran.push(payload.n);
      if (payload.n === 0) await blocked;
    });
    await store.transaction((tx) =>
      first.publishMany(
        tx,
        Array.from({ length: 5 }, (_, n) => ({ event: Step, payload: { n }, options: { key: 'lost-run' } })),
      ),
    );
    await first.start();
    try {
      await waitFor(() => ran.length >= 1, 'the head started', 5_000);
      // Another owner takes the lane over (a new epoch), as after an expired lease.
      await pool.query(
        `UPDATE "${store.schema}".relaybus_lanes SET epoch = epoch + 1, lease_owner = 'elsewhere', in_flight = '{}',
           lease_expires_at = now() + interval '1 min'
         WHERE lease_owner IS NOT NULL`,
      );
      await lost;
      release();
      await new Promise((resolve) => setTimeout(resolve, 300));
      assert.deepEqual(ran, [0], 'nothing behind the head ran on the worker that lost the lane');
    } finally {
      release();
      await first.stop();
    }
    // The other owner lets go of the lane (as its crash and expired lease would).
    await pool.query(
      `UPDATE "${store.schema}".relaybus_lanes SET lease_owner = NULL, lease_expires_at = NULL WHERE lease_owner = 'elsewhere'`,
    );
    const next = busWith(() => false);
    await next.bus.start();
    try {
      await waitFor(() => next.runs.length >= 5, 'the new holder ran the whole run', 10_000);
    } finally {
      await next.bus.stop();
    }
    assert.deepEqual(
      next.runs.map((r) => r.n),
      [0, 1, 2, 3, 4],
    );
  });
});
