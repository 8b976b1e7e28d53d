/**
 * Claims racing on real connections: several workers (and two claim loops sharing one owner) drain a
 * keyed backlog at once. Nothing may be handed out twice while in flight, nothing may be lost, and
 * deliveries of one (handler, key) must come in sequence order, one at a time.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import pg from 'pg';
import { fromPg, postgresStore, type PgClientLike, type PostgresStore } from '../../src/postgres/index.js';
import type { ClaimedDelivery } from '../../src/store/contract.js';
import { laneOf } from '../../src/core/lanes.js';
import { parseLeaseToken } from '../../src/core/lease-token.js';
import { loadStatements } from '../../src/postgres/statements.js';
import { findPostgres, uniqueSchemaName } from '../support/databases.js';
import { usePgStore } from '../support/pg-store.js';
import * as owners from '../support/claims.js';

const found = await findPostgres();

describe('concurrent claims on real Postgres', { skip: 'skip' in found ? found.skip : undefined }, () => {
  let store: PostgresStore<PgClientLike>;
  usePgStore('concurrent_claims', 10, (opened) => ({ store } = opened));

  for (const hinted of [false, true])
    it(`four owners and a doubled claim loop drain 1,200 deliveries exactly once, in per-key order${hinted ? ', each claim naming lanes as wake-ups do' : ''}`, async () => {
      const handlers = [
        { name: 'a', maxAttempts: 3 },
        { name: 'b', maxAttempts: 3 },
      ];
      for (let batch = 0; batch < 6; batch += 1) {
        await store.transaction((tx) =>
          store.publish(
            tx,
            Array.from({ length: 100 }, (_, i) => ({
              type: 'thing.happened',
              key: i % 4 === 0 ? null : `k-${i % 30}`,
              payload: { n: batch * 100 + i },
              handlers,
            })),
          ),
        );
      }
      const total = 1200;
      const running = new Set<string>();
      const runningSlots = new Map<string, string>();
      const seen = new Map<string, number>();
      const lastSequence = new Map<string, number>();
      let duplicates = 0;
      let overlaps = 0;
      let outOfOrder = 0;
      let completed = 0;

      async function loop(owner: string): Promise<void> {
        for (let idle = 0; idle < 20 && completed < total; ) {
          // Named lanes are claimed from in the claim's own statement (and taken when they give work).
          const preferLanes = hinted
            ? Array.from({ length: 8 }, () => laneOf(null, `k-${Math.floor(Math.random() * 30)}`))
            : undefined;
          const batch = await owners.claim(store, {
            owner,
            handlers: ['a', 'b'],
            limit: 25,
            leaseDurationMs: 60_000,
            ...(preferLanes ? { preferLanes } : {}),
          });
          if (batch.length === 0) {
            idle += 1;
            await new Promise((resolve) => setTimeout(resolve, 5));
            continue;
          }
          idle = 0;
          for (const d of batch) {
            if (running.has(d.id)) duplicates += 1;
            running.add(d.id);
            seen.set(d.id, (seen.get(d.id) ?? 0) + 1);
            if (d.key !== null) {
              const slot = `${d.handler}/${d.key}`;
              if ([...running].some((id) => id !== d.id && runningSlots.get(id) === slot)) overlaps += 1;
              runningSlots.set(d.id, slot);
              if ((lastSequence.get(slot) ?? 0) >= Number(d.sequence)) outOfOrder += 1;
              lastSequence.set(slot, Number(d.sequence));
            }
          }
          await new Promise((resolve) => setTimeout(resolve, 1));
          // The handlers are done: from here on only the completion write is in flight. The key's next delivery
          // may be claimed as soon as that write commits, which can be before this loop hears back from it.
          for (const d of batch) {
            running.delete(d.id);
            runningSlots.delete(d.id);
          }
          const results = await store.completeMany(batch.map((d) => ({ deliveryId: d.id, leaseToken: d.leaseToken })));
          completed += results.filter(Boolean).length;
        }
      }
      await Promise.all(['w1', 'w2', 'w3', 'w4', 'w1'].map(loop));

      assert.equal(duplicates, 0, 'no delivery handed out while already in flight');
      assert.equal(overlaps, 0, 'no two deliveries of one (handler, key) in flight together');
      assert.equal(outOfOrder, 0, 'per-key sequence order');
      assert.equal(completed, total, 'every delivery completed');
      assert.equal([...seen.values()].filter((n) => n > 1).length, 0, 'each delivery claimed once');
      const stats = await store.statistics();
      assert.equal(stats.pending + stats.inFlight + stats.dead, 0, 'nothing left');
    });
});

describe('a claim naming free lanes on real Postgres', { skip: 'skip' in found ? found.skip : undefined }, () => {
  it('claims their work in its one statement and takes only the lanes that gave work', () =>
    withPrivateStore('named_lanes', 2, async ({ pool, schema }) => {
      const statements: string[] = [];
      const driver = fromPg(pool);
      const run = driver.executor.run.bind(driver.executor);
      (driver.executor as { run: typeof run }).run = (statement, params) => {
        statements.push(statement.name);
        return run(statement, params);
      };
      const store = postgresStore({ driver, schema });
      const [busy, idle] = [laneOf('k-busy', 'e'), laneOf('k-idle', 'e')];
      assert.notEqual(busy, idle);
      await store.transaction((tx) =>
        store.publish(tx, [{ type: 't', key: 'k-busy', payload: {}, handlers: [{ name: 'a', maxAttempts: 3 }] }]),
      );
      const epochs = async () =>
        new Map(
          (
            await pool.query<{ lane: number; epoch: string; lease_owner: string | null }>(
              `SELECT lane, epoch::text, lease_owner FROM "${schema}".relaybus_lanes WHERE lane = ANY ($1)`,
              [[busy, idle]],
            )
          ).rows.map((row) => [row.lane, row]),
        );
      const before = await epochs();
      statements.length = 0;
      const claimed = await owners.claim(store, {
        owner: 'w1',
        handlers: ['a'],
        limit: 10,
        leaseDurationMs: 60_000,
        preferLanes: [busy, idle],
      });
      assert.deepEqual(
        claimed.map((d) => d.key),
        ['k-busy'],
      );
      // The named lanes' work comes in the claim's own statement; a claim that may look at free lanes (no
      // freeLanes 'skip') looks once after it, and takes none: no other lane has work, so no claim statement follows.
      // (The store's look at its tables' statistics after a claim is not part of it.)
      const names = loadStatements(schema);
      assert.deepEqual(
        statements.filter((name) => name !== names['planner-statistics'].name),
        [names['claim-held-lanes'].name, names['acquire-lanes'].name],
        `the claim, then one look at the free lanes: ${statements.join(', ')}`,
      );
      const after = await epochs();
      assert.equal(after.get(busy)!.lease_owner, 'w1', 'the lane that gave work is taken');
      assert.equal(BigInt(after.get(busy)!.epoch), BigInt(before.get(busy)!.epoch) + 1n, 'at a new epoch');
      assert.equal(parseLeaseToken(claimed[0]!.leaseToken).epoch, after.get(busy)!.epoch);
      assert.equal(after.get(idle)!.lease_owner, null, 'a named lane without work stays free');
      assert.equal(after.get(idle)!.epoch, before.get(idle)!.epoch);
      assert.deepEqual(await store.completeMany([{ deliveryId: claimed[0]!.id, leaseToken: claimed[0]!.leaseToken }]), [
        true,
      ]);
    }));
});

describe('walk cursors on real Postgres', { skip: 'skip' in found ? found.skip : undefined }, () => {
  it('a lane the claim hands back stops sending its cursor; a lane still held keeps it', () =>
    withPrivateStore('walk_cursors', 2, async ({ pool, schema }) => {
      const cursorLanes: number[][] = [];
      const driver = fromPg(pool);
      const run = driver.executor.run.bind(driver.executor);
      (driver.executor as { run: typeof run }).run = (statement, params) => {
        if (statement.name.startsWith('relaybus_claim_held_lanes')) cursorLanes.push([...(params[5] as number[])]);
        return run(statement, params);
      };
      const store = postgresStore({ driver, schema });
      const [done, busy] = [laneOf('k-done', 'e'), laneOf('k-busy', 'e')];
      assert.notEqual(done, busy);
      const handlers = [{ name: 'a', maxAttempts: 3 }];
      await store.transaction((tx) =>
        store.publish(tx, [
          { type: 't', key: 'k-done', payload: {}, handlers },
          { type: 't', key: 'k-busy', payload: {}, handlers },
          { type: 't', key: 'k-busy', payload: {}, handlers },
        ]),
      );
      const params = { owner: 'w1', handlers: ['a'], limit: 10, leaseDurationMs: 60_000, preferLanes: [done, busy] };
      const first = await owners.claim(store, params);
      assert.deepEqual(first.map((d) => d.key).sort(), ['k-busy', 'k-done']);
      const lease = (key: string) => {
        const d = first.find((c) => c.key === key)!;
        return { deliveryId: d.id, leaseToken: d.leaseToken };
      };
      // Completing k-done leaves its lane without work (handed back); k-busy's next delivery keeps its lane held.
      const second = await owners.completeAndClaim(store, [lease('k-done'), lease('k-busy')], {
        ...params,
        preferLanes: [],
      });
      assert.deepEqual(second.completed, [true, true]);
      assert.deepEqual(
        second.claimed.map((d) => d.key),
        ['k-busy'],
      );
      await owners.claim(store, { ...params, preferLanes: [] });
      const last = cursorLanes.at(-1)!;
      assert.ok(!last.includes(done), `the handed-back lane's cursor is not sent: ${last.join(',')}`);
      assert.ok(last.includes(busy), `the held lane's cursor is: ${last.join(',')}`);
    }));
});

describe('the walk under a flow of successors on real Postgres', {
  skip: 'skip' in found ? found.skip : undefined,
}, () => {
  it('visits a few keys per claim and goes on from the last one it visited: a due head behind many busy keys comes within a few claims', () =>
    withPrivateStore('walk_flow', 2, async ({ schema, pool }) => {
      const store = postgresStore({ driver: fromPg(pool), schema });
      const lane = laneOf('k-anchor', 'e');
      /** `count` keys with this prefix in the lane, in (handler, key) order: the walk's order. */
      const keysInLane = (prefix: string, count: number) => {
        const keys: string[] = [];
        for (let i = 0; keys.length < count; i += 1) {
          const key = `${prefix}-${String(i).padStart(5, '0')}`;
          if (laneOf(key, 'e') === lane) keys.push(key);
        }
        return keys;
      };
      const busy = keysInLane('b', 30); // heads claimed and never completed: the walk finds nothing in them
      const flow = keysInLane('c', 5); // chains of 10: every claim completes their heads and takes the successors
      // Published after the first claim, whose walk ends at the last flow key: the next walks wrap round to the busy keys
      // and reach the target after them.
      const [target] = keysInLane('bz', 1);
      const handlers = [{ name: 'a', maxAttempts: 3 }];
      const publish = (keys: readonly string[], perKey: number) =>
        store.transaction((tx) =>
          store.publish(
            tx,
            keys.flatMap((key) => Array.from({ length: perKey }, () => ({ type: 't', key, payload: {}, handlers }))),
          ),
        );
      await publish(busy, 2);
      await publish(flow, 10);
      const params = { owner: 'w1', handlers: ['a'], limit: busy.length + flow.length, leaseDurationMs: 60_000 };
      const first = await owners.claim(store, params);
      assert.equal(first.length, busy.length + flow.length, 'every head');
      await publish([target!], 1);
      let inFlight = first.filter((d) => d.key!.startsWith('c-'));
      // Each claim completes the flow's deliveries in flight and has room for one more: the successors are more than
      // half the batch, so the walk visits at most twice its share (4) of keys.
      let claims = 1;
      let found: ClaimedDelivery | undefined;
      while (found === undefined && claims < 10) {
        const next = await owners.completeAndClaim(
          store,
          inFlight.map((d) => ({ deliveryId: d.id, leaseToken: d.leaseToken })),
          { ...params, limit: flow.length + 1 },
        );
        claims += 1;
        assert.deepEqual(
          next.completed,
          inFlight.map(() => true),
        );
        inFlight = next.claimed.filter((d) => d.key!.startsWith('c-'));
        assert.equal(inFlight.length, flow.length, `claim ${claims} takes every successor`);
        found = next.claimed.find((d) => d.key === target);
      }
      // 30 busy keys to pass at up to 8 visits a claim: the 5th claim; a walk that did not go on from its last visited
      // key would never get there, and an uncapped one gets there in the 2nd.
      assert.ok(found, 'the due head behind the busy keys is claimed');
      assert.ok(claims >= 4 && claims <= 7, `claimed by claim ${claims}`);
    }));
});

describe('a claim racing a reschedule on real Postgres', { skip: 'skip' in found ? found.skip : undefined }, () => {
  it('does not hand out again a delivery rescheduled while the claim waited for its lane', async () => {
    await withPrivateStore('claim_vs_reschedule', 4, async ({ pool, store, schema }) => {
      await store.transaction((tx) =>
        store.publish(tx, [{ type: 't', payload: {}, handlers: [{ name: 'h', maxAttempts: 5 }] }]),
      );
      const [first] = await owners.claim(store, { owner: 'w', handlers: ['h'], limit: 10, leaseDurationMs: 60_000 });
      assert.ok(first);
      // Hold the reschedule's transaction open so the next claim takes its snapshot first, then waits for the lane.
      const { lane, epoch, claims } = parseLeaseToken(first.leaseToken);
      const holder = await pool.connect();
      try {
        await holder.query('BEGIN');
        await holder.query(loadStatements(schema).reschedule.text, [
          first.id,
          lane,
          epoch,
          claims,
          new Date(Date.now() + 60_000).toISOString(),
          'boom',
          null,
        ]);
        const racing = owners.claim(store, { owner: 'w', handlers: ['h'], limit: 10, leaseDurationMs: 60_000 });
        await waitUntilBlocked(pool);
        await holder.query('COMMIT');
        assert.deepEqual(await racing, [], 'the rescheduled delivery is not due for a minute');
      } finally {
        holder.release();
      }
      const [view] = (await store.listDeliveries()).items;
      assert.equal(view?.status, 'pending');
      assert.equal(view?.attempts, 1);
      const later = await owners.claim(store, {
        owner: 'w',
        handlers: ['h'],
        limit: 10,
        leaseDurationMs: 60_000,
        now: new Date(Date.now() + 61_000),
      });
      assert.deepEqual(
        later.map((d) => d.id),
        [first.id],
        'claimable once its backoff is over, not stuck in flight',
      );
    });
  });
});

describe('a claim racing claims of its own owner on real Postgres', {
  skip: 'skip' in found ? found.skip : undefined,
}, () => {
  it('does not hand out again a head completed and pruned while the claim waited for its lane', async () => {
    await withPrivateStore('claim_vs_own_claims', 4, async ({ pool, store, schema }) => {
      const handlers = [{ name: 'h', maxAttempts: 5 }];
      await store.transaction((tx) =>
        store.publish(tx, [
          { type: 't', key: 'k', payload: { n: 1 }, handlers },
          { type: 't', key: 'k', payload: { n: 2 }, handlers },
        ]),
      );
      const [head] = await owners.claim(store, { owner: 'w', handlers: ['h'], limit: 10, leaseDurationMs: 60_000 });
      assert.ok(head);
      // Another claim of the same owner holds the lane while this one takes its snapshot (the head still pending)
      // and waits; meanwhile the head is completed and the other claim prunes it from the lane's in-flight list.
      const holder = await pool.connect();
      try {
        await holder.query('BEGIN');
        await holder.query(`SELECT 1 FROM "${schema}".relaybus_lanes WHERE lane = $1 FOR NO KEY UPDATE`, [head.lane]);
        const racing = owners.claim(store, { owner: 'w', handlers: ['h'], limit: 10, leaseDurationMs: 60_000 });
        await waitUntilBlocked(pool);
        await holder.query(`DELETE FROM "${schema}".relaybus_deliveries WHERE id = $1`, [head.id]);
        await holder.query(`UPDATE "${schema}".relaybus_lanes SET in_flight = '{}' WHERE lane = $1`, [head.lane]);
        await holder.query('COMMIT');
        assert.deepEqual(
          (await racing).map((d) => Number(d.sequence)),
          [Number(head.sequence) + 1],
          'the completed head is not handed out again; the lane is asked again afresh and gives the new head',
        );
      } finally {
        holder.release();
      }
    });
  });
});

describe('a retried head behind a full batch on real Postgres', {
  skip: 'skip' in found ? found.skip : undefined,
}, () => {
  it("takes the retried head's lane back once due, though the owner's own lanes fill every claim", async () => {
    await withPrivateStore('retry_behind_full', 2, async ({ store }) => {
      const handlers = [{ name: 'h', maxAttempts: 5 }];
      const [retryKey] = namesInLanes([77], 1, 'retry-');
      const busyKeys = namesInLanes([10, 11, 12, 13], 40, 'busy-');
      await store.transaction((tx) =>
        store.publish(tx, [
          { type: 't', key: retryKey!, payload: {}, handlers },
          ...busyKeys.flatMap((key) => [1, 2, 3].map(() => ({ type: 't', key, payload: {}, handlers }))),
        ]),
      );
      const claim = () => owners.claim(store, { owner: 'w', handlers: ['h'], limit: 5, leaseDurationMs: 60_000 });
      let head: ClaimedDelivery | undefined;
      for (let i = 0; i < 60 && head === undefined; i += 1) {
        const batch = await claim();
        head = batch.find((d) => d.key === retryKey);
        await store.completeMany(
          batch.filter((d) => d !== head).map((d) => ({ deliveryId: d.id, leaseToken: d.leaseToken })),
        );
      }
      assert.ok(head, 'the head was claimed');
      const dueAt = new Date(Date.now() + 150);
      assert.ok(
        await store.reschedule(
          { deliveryId: head.id, leaseToken: head.leaseToken },
          { availableAt: dueAt, error: 'boom' },
        ),
      );
      // The next claim finds nothing due in lane 77 and nothing in flight there: it hands the lane back.
      const batch = await claim();
      await store.completeMany(batch.map((d) => ({ deliveryId: d.id, leaseToken: d.leaseToken })));
      const lanes = await store.listLanes();
      assert.equal(lanes.find((l) => l.lane === 77)?.owner ?? null, null, 'lane 77 handed back');
      await new Promise((resolve) => setTimeout(resolve, 200));
      // Every claim is full with the busy keys; the retried head must still come within two claims.
      const seen: ClaimedDelivery[] = [];
      for (let i = 0; i < 2; i += 1) {
        const next = await claim();
        assert.equal(next.length, 5, 'a full batch');
        seen.push(...next);
        await store.completeMany(next.map((d) => ({ deliveryId: d.id, leaseToken: d.leaseToken })));
      }
      assert.ok(
        seen.some((d) => d.key === retryKey),
        'the retried head came back while the batches stayed full',
      );
    });
  });
});

/** Run `test` against a store in a schema of its own on a pool of `max` connections; both go away after. */
async function withPrivateStore(
  label: string,
  max: number,
  test: (opened: { pool: pg.Pool; store: PostgresStore<PgClientLike>; schema: string }) => Promise<void>,
): Promise<void> {
  const pool = new pg.Pool({ connectionString: 'url' in found ? found.url : '', max });
  const schema = uniqueSchemaName(label);
  const store = postgresStore({ driver: fromPg(pool), schema });
  try {
    await store.setup();
    await test({ pool, store, schema });
  } finally {
    await pool.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
    await pool.end();
  }
}

/** `count` names `<prefix><n>` whose lane (as a key or an event id) is one of `lanes`. */
function namesInLanes(lanes: readonly number[], count: number, prefix: string): string[] {
  const names: string[] = [];
  for (let i = 0; names.length < count; i += 1)
    if (lanes.includes(laneOf(null, `${prefix}${i}`))) names.push(`${prefix}${i}`);
  return names;
}

/** Wait until some backend of this database waits for a lock (the racing claim). */
async function waitUntilBlocked(pool: pg.Pool): Promise<void> {
  for (let i = 0; i < 200; i += 1) {
    const { rows } = await pool.query<{ n: number }>(
      `SELECT count(*)::int AS n FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'`,
    );
    if (rows[0]!.n > 0) return;
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
  throw new Error('the racing claim never waited for the lane lock');
}

describe('takeover under a deep backlog on real Postgres', { skip: 'skip' in found ? found.skip : undefined }, () => {
  it("a worker whose own lanes fill every claim still takes over a crashed worker's expired lane", async () => {
    await withPrivateStore('busy_takeover', 2, async ({ store }) => {
      const busyLanes = [10, 11, 12, 13];
      const crashedLane = 200;
      const event = (id: string, handler: string) => ({
        id,
        type: 't',
        payload: {},
        handlers: [{ name: handler, maxAttempts: 5 }],
      });
      await store.transaction((tx) =>
        store.publish(tx, [
          ...namesInLanes(busyLanes, 40, 'busy-').map((id) => event(id, 'ha')),
          ...namesInLanes([crashedLane], 2, 'crashed-hb-').map((id) => event(id, 'hb')),
          ...namesInLanes([crashedLane], 1, 'crashed-ha-').map((id) => event(id, 'ha')),
        ]),
      );
      const t0 = new Date();
      const lease = 10_000;
      const [lost] = await owners.claim(store, {
        owner: 'crashes',
        handlers: ['hb'],
        limit: 1,
        leaseDurationMs: lease,
        now: t0,
      });
      assert.equal(lost?.lane, crashedLane);
      const first = await owners.claim(store, {
        owner: 'busy',
        handlers: ['ha'],
        limit: 5,
        leaseDurationMs: lease,
        now: t0,
      });
      assert.equal(first.length, 5);
      // The crashed worker's lease is over; the busy worker's own lanes still fill its batch.
      const later = new Date(t0.getTime() + lease + 1);
      const again = await owners.claim(store, {
        owner: 'busy',
        handlers: ['ha'],
        limit: 5,
        leaseDurationMs: lease,
        now: later,
        acquireWhenFull: true,
      });
      assert.equal(again.length, 5);
      const [charged] = (await store.listDeliveries({ eventId: lost.eventId })).items;
      assert.equal(
        charged?.attempts,
        1,
        "the crashed worker's in-flight delivery was charged: its lane was taken over",
      );
      assert.match(charged?.lastError ?? '', /lease expired/);
    });
  });
});
