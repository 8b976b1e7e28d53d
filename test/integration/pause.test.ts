/**
 * A pause holds for every worker, on real Postgres: two stores (two worker processes, each with its own pool) claim
 * and complete side by side; one pauses a handler, and from the next claim on neither brings any of its deliveries,
 * while the other handler's keep flowing and publishing goes on creating both. After a resume (from the other store)
 * the deliveries that waited are claimed, each key's in publish order, and nothing is lost.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import pg from 'pg';
import { laneOf } from '../../src/core/lanes.js';
import { createRelayBus, defineEvent, Type } from '../../src/index.js';
import { fromPg, postgresStore, type PgClientLike, type PostgresStore } from '../../src/postgres/index.js';
import type { ClaimedDelivery } from '../../src/store/contract.js';
import * as owners from '../support/claims.js';
import { findPostgres } from '../support/databases.js';
import { usePgStore } from '../support/pg-store.js';
import { pause, waitFor } from '../support/wait.js';

const found = await findPostgres();
const HANDLERS = ['emails', 'ledger'];
const KEYS = Array.from({ length: 8 }, (_, i) => `customer-${i}`);

describe('pause and resume a handler across workers, on real Postgres', {
  skip: 'skip' in found ? found.skip : undefined,
}, () => {
  let first: PostgresStore<PgClientLike>;
  const schema = usePgStore('pause', 6, (opened) => ({ store: first } = opened));
  /** A second worker process: its own pool on the same schema. */
  let secondPool: pg.Pool;
  let second: PostgresStore<PgClientLike>;
  before(() => {
    secondPool = new pg.Pool({ connectionString: 'url' in found ? found.url : '', max: 4 });
    second = postgresStore({ driver: fromPg(secondPool), schema });
  });
  after(async () => {
    await owners.relinquish(second, 'worker-2').catch(() => {});
    await secondPool?.end();
  });

  async function publishRound(n: number): Promise<void> {
    await first.transaction((tx) =>
      first.publish(
        tx,
        KEYS.map((key) => ({
          id: `${key}/${n}`,
          type: 'order.placed',
          key,
          payload: { n },
          handlers: HANDLERS.map((name) => ({ name, maxAttempts: 3 })),
        })),
      ),
    );
  }

  it("no worker claims a paused handler's deliveries; the other handler's keep flowing; resumed, they come in key order", {
    timeout: 60_000,
  }, async () => {
    const workers = [
      { store: first, owner: 'worker-1' },
      { store: second, owner: 'worker-2' },
    ];
    /** What each worker ran, in the order it completed it: `handler key n`. */
    const ran: { handler: string; key: string; n: number; owner: string }[] = [];

    /** One claim of each worker, each completing what it claimed; returns what the claims brought. */
    async function round(): Promise<ClaimedDelivery[]> {
      const brought: ClaimedDelivery[] = [];
      for (const { store, owner } of workers) {
        const claimed = await owners.claim(store, { owner, handlers: HANDLERS, limit: 5, leaseDurationMs: 30_000 });
        for (const c of claimed)
          ran.push({ handler: c.handler, key: c.key!, n: (c.payload as { n: number }).n, owner });
        const leases = claimed.map((c) => ({ deliveryId: c.id, leaseToken: c.leaseToken }));
        if (claimed.length > 0) assert.ok((await store.completeMany(leases)).every(Boolean));
        brought.push(...claimed);
      }
      return brought;
    }

    try {
      await publishRound(0);
      // Both workers claim before the pause (each takes some lanes).
      const before = await round();
      assert.ok(before.length > 0);
      const ranBefore = new Set(ran.map((r) => r.owner));
      assert.equal(ranBefore.size, 2, 'both workers claimed before the pause');

      assert.equal(await second.pauseHandler({ handler: 'emails', reason: 'provider outage' }), true);
      const pausedAt = ran.length;
      await publishRound(1);
      await publishRound(2);

      // Until the ledger's work is done: not one email from either worker, the ledger's keep coming.
      for (let i = 0; i < 30; i += 1) {
        const brought = await round();
        assert.deepEqual(
          brought.filter((c) => c.handler === 'emails').map((c) => c.eventId),
          [],
          'no worker claims the paused handler',
        );
        if (brought.length === 0) break;
      }
      const ledger = ran.filter((r) => r.handler === 'ledger');
      assert.equal(ledger.length, KEYS.length * 3, 'every ledger delivery ran while emails was paused');
      assert.ok(ran.slice(pausedAt).every((r) => r.handler === 'ledger'));
      const waiting = (await first.listDeliveries({ handler: 'emails', status: 'pending', limit: 100 })).items;
      const emailsBefore = ran.filter((r) => r.handler === 'emails').length;
      assert.equal(waiting.length, KEYS.length * 3 - emailsBefore, 'the paused deliveries wait, none lost');
      assert.equal(waiting.length >= KEYS.length * 2, true, 'published while paused: created all the same');
      assert.deepEqual(
        (await first.listPausedHandlers()).map((p) => [p.handler, p.reason]),
        [['emails', 'provider outage']],
        'both stores see the pause',
      );

      assert.equal(await first.resumeHandler({ handler: 'emails' }), true);
      for (let i = 0; i < 30; i += 1) if ((await round()).length === 0) break;

      const emails = ran.filter((r) => r.handler === 'emails');
      assert.equal(emails.length, KEYS.length * 3, 'every email ran after the resume');
      for (const key of KEYS)
        assert.deepEqual(
          emails.filter((r) => r.key === key).map((r) => r.n),
          [0, 1, 2],
          `${key}'s emails in publish order`,
        );
      assert.equal((await second.listDeliveries({ status: 'pending' })).items.length, 0);
      assert.equal(new Set(emails.slice(emailsBefore).map((r) => r.owner)).size >= 1, true);
    } finally {
      await owners.relinquish(first, 'worker-1');
      await owners.relinquish(second, 'worker-2');
    }
  });
  it('the claim of a wake-up (a named free lane, claim-light under a light load) leaves a paused handler out too', {
    timeout: 30_000,
  }, async () => {
    const key = 'wake-up-key';
    const lane = laneOf(key, '');
    const params = {
      owner: 'light',
      handlers: HANDLERS,
      limit: 10,
      leaseDurationMs: 30_000,
      preferLanes: [lane],
      freeLanes: 'skip' as const,
    };
    await first.pauseHandler({ handler: 'emails' });
    try {
      await first.transaction((tx) =>
        first.publish(tx, [
          {
            type: 'order.placed',
            key,
            payload: { n: 0 },
            handlers: HANDLERS.map((name) => ({ name, maxAttempts: 3 })),
          },
        ]),
      );
      const claimed = await owners.claim(first, params);
      assert.deepEqual(
        claimed.map((c) => c.handler),
        ['ledger'],
      );
      await first.completeMany(claimed.map((c) => ({ deliveryId: c.id, leaseToken: c.leaseToken })));
      assert.deepEqual(await owners.claim(first, params), [], 'only the paused delivery is left in the lane');
      assert.ok(!(await first.listLanes()).some((l) => l.lane === lane), 'and the lane was handed back');
    } finally {
      assert.equal(await first.resumeHandler({ handler: 'emails' }), true);
    }
    const resumed = await owners.claim(first, params);
    assert.deepEqual(
      resumed.map((c) => c.handler),
      ['emails'],
    );
    await first.completeMany(resumed.map((c) => ({ deliveryId: c.id, leaseToken: c.leaseToken })));
    await owners.relinquish(first, 'light');
  });

  it("a claim's key walk passes over a paused handler's keys in one step: a backlog of them does not hide the others'", {
    timeout: 30_000,
  }, async () => {
    // Keys of one lane: 60 with a delivery for the paused handler only ('emails' sorts first), 4 for 'ledger'.
    const lane = laneOf('walk-anchor', '');
    const keys: string[] = [];
    for (let n = 0; keys.length < 64; n += 1) if (laneOf(`walk-${n}`, '') === lane) keys.push(`walk-${n}`);
    await first.pauseHandler({ handler: 'emails' });
    try {
      await first.transaction((tx) =>
        first.publish(
          tx,
          keys.map((key, n) => ({
            type: 'order.placed',
            key,
            payload: { n },
            handlers: [{ name: n < 60 ? 'emails' : 'ledger', maxAttempts: 3 }],
          })),
        ),
      );
      // The walk reaches 'ledger's keys past the paused handler's, which sort first (in one step now; this checks the
      // step passes over the paused handler and not the one that runs).
      const claimed = await owners.claim(first, {
        owner: 'walker',
        handlers: HANDLERS,
        limit: 4,
        leaseDurationMs: 30_000,
      });
      assert.deepEqual(
        claimed.map((c) => c.key).sort(),
        keys.slice(60).sort(),
        "the live handler's heads, in one claim",
      );
      await first.completeMany(claimed.map((c) => ({ deliveryId: c.id, leaseToken: c.leaseToken })));
      await owners.relinquish(first, 'walker');
    } finally {
      assert.equal(await first.resumeHandler({ handler: 'emails' }), true);
    }
    // Drained after the resume, so the suite's later cases start from an empty lane.
    for (let round = 0; round < 20; round += 1) {
      const rest = await owners.claim(first, {
        owner: 'walker',
        handlers: HANDLERS,
        limit: 100,
        leaseDurationMs: 30_000,
      });
      if (rest.length === 0) break;
      await first.completeMany(rest.map((c) => ({ deliveryId: c.id, leaseToken: c.leaseToken })));
    }
    await owners.relinquish(first, 'walker');
  });

  it('a running bus stops running a paused handler and runs what waited, in order, soon after the resume', {
    timeout: 30_000,
  }, async () => {
    const Placed = defineEvent('pause.placed', Type.Object({ n: Type.Integer() }));
    const ran: string[] = [];
    const bus = createRelayBus({
      store: first,
      events: [Placed],
      setupStore: false,
      // A long poll: what the resume lets run must come from its wake-up, not from the next poll.
      dispatcher: { pollIntervalMs: 10_000, concurrency: 4, batchSize: 8 },
    });
    bus.on(Placed, 'emails', ({ n }) => {
      ran.push(`emails ${n}`);
    });
    bus.on(Placed, 'ledger', ({ n }) => {
      ran.push(`ledger ${n}`);
    });
    await bus.start();
    try {
      await second.pauseHandler({ handler: 'emails' });
      for (let n = 0; n < 3; n += 1)
        await first.transaction((tx) => bus.publish(tx, Placed, { n }, { key: 'bus-key' }));
      await waitFor(() => ran.filter((r) => r.startsWith('ledger')).length === 3, 'the ledger ran', 10_000);
      await pause(300);
      assert.deepEqual(ran, ['ledger 0', 'ledger 1', 'ledger 2'], 'no email while paused');
      const resumedAt = Date.now();
      assert.equal(await second.resumeHandler({ handler: 'emails' }), true);
      await waitFor(() => ran.length === 6, 'the emails ran after the resume', 10_000);
      assert.ok(Date.now() - resumedAt < 5_000, 'woken by the resume, not the 10 s poll');
      assert.deepEqual(ran.slice(3), ['emails 0', 'emails 1', 'emails 2']);
    } finally {
      await bus.stop();
    }
  });
});
