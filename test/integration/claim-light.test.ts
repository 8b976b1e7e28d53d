/**
 * claim-light on real Postgres: the claim of a caller under a light load (`freeLanes: 'skip'`, nothing riding, no retried
 * head to look up) runs the small statement, and keeps what claim-held-lanes keeps: only a key's head, nothing of a
 * key whose head is in flight, a named free lane taken only when it gives work, held lanes that run nothing handed
 * back, leases that fence. A lane whose keys need more rows than it reads gives the heads it read, never a follower;
 * claim-held-lanes finds the others.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type pg from 'pg';
import { laneOf } from '../../src/core/lanes.js';
import { createRelayBus, defineEvent, Type } from '../../src/index.js';
import type { PgClientLike, PostgresStore } from '../../src/postgres/index.js';
import { loadStatements } from '../../src/postgres/statements.js';
import type { ClaimedDelivery } from '../../src/store/contract.js';
import type { OwnerClaimParams as ClaimParams } from '../support/claims.js';
import { findPostgres } from '../support/databases.js';
import { keysInLane } from '../support/lanes.js';
import { usePgStore } from '../support/pg-store.js';
import { pause, waitFor } from '../support/wait.js';
import * as owners from '../support/claims.js';

const found = await findPostgres();
const handlers = [{ name: 'h', maxAttempts: 3 }];

/** `count` distinct keys (with `prefix`) that fall into one lane, the lane of the first. */
function keysInOneLane(prefix: string, count: number): { lane: number; keys: string[] } {
  const lane = laneOf(`${prefix}-0`, '');
  return { lane, keys: keysInLane(lane, prefix, count) };
}

describe('claim-light on real Postgres', { skip: 'skip' in found ? found.skip : false }, () => {
  let pool: pg.Pool;
  let store: PostgresStore<PgClientLike>;
  // One connection: the test reads that backend's prepared statements to see which claim statement ran.
  const schema = usePgStore('claim_light', 1, (opened) => ({ pool, store } = opened));

  /** How often each claim statement ran on the connection so far. */
  async function runs(): Promise<{ light: number; full: number }> {
    const names = loadStatements(schema);
    const { rows } = await pool.query<{ name: string; n: string }>(
      'SELECT name, (generic_plans + custom_plans)::text AS n FROM pg_prepared_statements WHERE name = ANY ($1)',
      [[names['claim-light'].name, names['claim-held-lanes'].name]],
    );
    const of = (name: string) => Number(rows.find((row) => row.name === name)?.n ?? 0);
    return { light: of(names['claim-light'].name), full: of(names['claim-held-lanes'].name) };
  }

  /** A light claim (as the dispatcher makes one under a light load), checking that claim-light ran. */
  async function claimLight(
    owner: string,
    preferLanes: readonly number[],
    handlerNames: readonly string[] = ['h'],
  ): Promise<ClaimedDelivery[]> {
    const before = await runs();
    const params: ClaimParams = {
      owner,
      handlers: handlerNames,
      limit: 50,
      leaseDurationMs: 60_000,
      preferLanes,
      freeLanes: 'skip',
    };
    const claimed = await owners.claim(store, params);
    const after = await runs();
    assert.ok(after.light > before.light, 'claim-light ran');
    assert.equal(after.full, before.full, 'claim-held-lanes did not');
    return claimed;
  }

  const payloadOf = (d: ClaimedDelivery) => (d.payload as { n: number }).n;
  const complete = (batch: readonly ClaimedDelivery[]) =>
    store.completeMany(batch.map((d) => ({ deliveryId: d.id, leaseToken: d.leaseToken })));
  const ownerOf = async (lane: number) =>
    (
      await pool.query<{ lease_owner: string | null; epoch: string }>(
        `SELECT lease_owner, epoch::text FROM "${schema}".relaybus_lanes WHERE lane = $1`,
        [lane],
      )
    ).rows[0]!;

  it('gives only heads, nothing of a key whose head is in flight, and its leases complete', async () => {
    await store.transaction((tx) =>
      store.publish(tx, [
        { type: 't', key: 'light-a', payload: { n: 1 }, handlers },
        { type: 't', key: 'light-a', payload: { n: 2 }, handlers },
        { type: 't', key: 'light-b', payload: { n: 3 }, handlers },
        { type: 't', key: null, id: 'light-u', payload: { n: 4 }, handlers },
      ]),
    );
    const lanes = [laneOf('light-a', ''), laneOf('light-b', ''), laneOf(null, 'light-u')];
    const first = await claimLight('w1', lanes);
    assert.deepEqual(first.map(payloadOf).sort(), [1, 3, 4], 'the two heads and the unkeyed one');
    assert.deepEqual(await claimLight('w1', lanes), [], 'the heads are in flight: nothing of their keys');
    assert.deepEqual(await claimLight('w2', lanes), [], 'another owner leaves the held lanes alone');
    assert.deepEqual(await complete(first), [true, true, true], 'the leases fence and complete');
    const second = await claimLight('w1', lanes);
    assert.deepEqual(second.map(payloadOf), [2], "the key's next delivery, once its head is done");
    await complete(second);
    await owners.relinquish(store, 'w1');
  });

  it('takes a named free lane only when it gives work, and hands back a held lane that runs nothing', async () => {
    const { lane, keys } = keysInOneLane('light-take', 2);
    await store.transaction((tx) =>
      store.publish(tx, [
        { type: 't', key: keys[0]!, payload: { n: 1 }, handlers, availableAt: new Date(Date.now() + 60_000) },
      ]),
    );
    const before = await ownerOf(lane);
    assert.deepEqual(await claimLight('w3', [lane]), [], 'nothing due in the named lane');
    assert.deepEqual(await ownerOf(lane), before, 'the lane stays free, at its epoch');

    await store.transaction((tx) => store.publish(tx, [{ type: 't', key: keys[1]!, payload: { n: 2 }, handlers }]));
    const claimed = await claimLight('w3', [lane]);
    assert.deepEqual(claimed.map(payloadOf), [2]);
    const taken = await ownerOf(lane);
    assert.equal(taken.lease_owner, 'w3', 'taken by the claim');
    assert.equal(BigInt(taken.epoch), BigInt(before.epoch) + 1n, 'at a new epoch');

    await complete(claimed);
    assert.deepEqual(await claimLight('w3', []), []);
    assert.equal((await ownerOf(lane)).lease_owner, null, 'handed back: it ran nothing and got nothing');
  });

  it('a lane whose keys need more rows than it reads gives heads only; claim-held-lanes finds the rest', async () => {
    // Handler order, then key: every row of the first key comes before the second key's head in the lane's index.
    const { lane, keys } = keysInOneLane('light-deep', 2);
    const [deep, after] = [...keys].sort();
    await store.transaction((tx) =>
      store.publish(tx, [
        ...Array.from({ length: 300 }, (_, n) => ({ type: 't', key: deep!, payload: { n }, handlers })),
        { type: 't', key: after!, payload: { n: 1000 }, handlers },
      ]),
    );
    const light = await claimLight('w4', [lane]);
    assert.deepEqual(light.map(payloadOf), [0], "the deep key's head; the other key lies past the rows read");
    const full = await owners.claim(store, { owner: 'w4', handlers: ['h'], limit: 50, leaseDurationMs: 60_000 });
    assert.deepEqual(full.map(payloadOf), [1000], "claim-held-lanes finds the other key's head, and no follower");
    await complete([...light, ...full]);
    await owners.relinquish(store, 'w4');
  });

  it("while a replay holds a handler, its live rows are not read: another handler's head behind them runs, and a replayed head", async () => {
    // Index order in the lane: the held handler ('a-new') sorts first, and 300 of its live rows (more than the rows
    // claim-light reads a lane) lie before h's head.
    const { lane, keys } = keysInOneLane('light-hold', 2);
    const [history, other] = keys;
    const type = 'light.hold';
    await store.transaction((tx) =>
      store.publish(tx, [
        {
          type,
          id: 'light-hold-history',
          key: history!,
          payload: { n: -1 },
          handlers: [{ name: 'h-old', maxAttempts: 3 }],
        },
      ]),
    );
    await store.subscribe([{ eventType: type, handler: 'a-new', maxAttempts: 3 }]);
    const replay = await store.startReplay({ mode: 'backfill', handlers: ['a-new'], eventTypes: [type] });
    assert.equal(replay.total, 1);
    const held = [{ name: 'a-new', maxAttempts: 3 }];
    await store.transaction((tx) =>
      store.publish(tx, [
        ...Array.from({ length: 300 }, (_, n) => ({ type, key: history!, payload: { n }, handlers: held })),
        { type: 't', key: other!, payload: { n: 1000 }, handlers },
      ]),
    );
    const both = ['a-new', 'h'];
    const live = await claimLight('w7', [lane], both);
    assert.deepEqual(live.map(payloadOf), [1000], "h's head, past the held handler's live rows");
    assert.equal((await store.replayStep({ replayId: replay.id, limit: 10 })).created, 1);
    const replayed = await claimLight('w7', [lane], both);
    assert.deepEqual(
      replayed.map((d) => [d.handler, payloadOf(d)]),
      [['a-new', -1]],
      'the replayed head, no held live row',
    );
    await complete([...live, ...replayed]);
    assert.deepEqual(await claimLight('w7', [lane], both), [], 'the live rows wait for the replay');
    await store.cancelReplay(replay.id);
    await owners.relinquish(store, 'w7');
  });

  it('a retried head due again, or a completion riding on the claim, goes through claim-held-lanes', async () => {
    await store.transaction((tx) => store.publish(tx, [{ type: 't', key: 'light-r', payload: { n: 1 }, handlers }]));
    const lane = laneOf('light-r', '');
    const [head] = await claimLight('w5', [lane]);
    assert.ok(head);
    assert.ok(
      await store.reschedule(
        { deliveryId: head.id, leaseToken: head.leaseToken },
        { availableAt: new Date(Date.now() - 1), error: 'x' },
      ),
    );
    const before = await runs();
    const again = await owners.claim(store, {
      owner: 'w5',
      handlers: ['h'],
      limit: 50,
      leaseDurationMs: 60_000,
      freeLanes: 'skip',
    });
    assert.deepEqual(again.map(payloadOf), [1], 'the retried head');
    assert.equal((await runs()).full, before.full + 1, 'its probe needs claim-held-lanes');
    const riding = await owners.completeAndClaim(
      store,
      [{ deliveryId: again[0]!.id, leaseToken: again[0]!.leaseToken }],
      {
        owner: 'w5',
        handlers: ['h'],
        limit: 50,
        leaseDurationMs: 60_000,
        freeLanes: 'skip',
      },
    );
    assert.deepEqual(riding.completed, [true]);
    assert.equal((await runs()).full, before.full + 2, 'a riding completion needs claim-held-lanes');
    await owners.relinquish(store, 'w5');
  });

  it('looks at the held lanes its claims recorded and the named ones; claim-held-lanes finds any other held lane', async () => {
    const recorded = keysInOneLane('light-recorded', 2);
    const other = keysInOneLane('light-unrecorded', 2);
    assert.notEqual(recorded.lane, other.lane);
    await store.transaction((tx) =>
      store.publish(tx, [{ type: 't', key: recorded.keys[0]!, payload: { n: 1 }, handlers }]),
    );
    const first = await claimLight('w6', [recorded.lane]);
    assert.deepEqual(first.map(payloadOf), [1]);
    // A lane the owner holds that no claim of it recorded a delivery in (as one acquire-lanes took and the claim after
    // it left held), with work published into it by no wake-up the owner heard.
    await pool.query(
      `UPDATE "${schema}".relaybus_lanes SET lease_owner = 'w6', epoch = epoch + 1,
         lease_expires_at = now() + interval '1 minute' WHERE lane = $1 AND lease_owner IS NULL`,
      [other.lane],
    );
    await store.transaction((tx) =>
      store.publish(tx, [
        { type: 't', key: recorded.keys[1]!, payload: { n: 2 }, handlers },
        { type: 't', key: other.keys[0]!, payload: { n: 3 }, handlers },
        { type: 't', key: other.keys[1]!, payload: { n: 4 }, handlers },
      ]),
    );
    assert.deepEqual((await claimLight('w6', [])).map(payloadOf), [2], 'the recorded lane, without a wake-up');
    const named = await claimLight('w6', [other.lane]);
    assert.deepEqual(named.map(payloadOf).sort(), [3, 4], 'a held lane a wake-up named');
    await complete([...first, ...named]);
    await store.transaction((tx) =>
      store.publish(tx, [{ type: 't', key: other.keys[0]!, payload: { n: 5 }, handlers }]),
    );
    // The named claim recorded the other lane, so the owner knows it now: it hands it back only once it ran nothing.
    assert.deepEqual((await claimLight('w6', [])).map(payloadOf), [5], 'recorded by the named claim');
    await owners.relinquish(store, 'w6');
  });

  it('leaves a held lane no claim recorded and no wake-up named to claim-held-lanes', async () => {
    const { lane, keys } = keysInOneLane('light-hidden', 1);
    await pool.query(
      `UPDATE "${schema}".relaybus_lanes SET lease_owner = 'w7', epoch = epoch + 1,
         lease_expires_at = now() + interval '1 minute' WHERE lane = $1 AND lease_owner IS NULL`,
      [lane],
    );
    await store.transaction((tx) => store.publish(tx, [{ type: 't', key: keys[0]!, payload: { n: 1 }, handlers }]));
    assert.deepEqual(await claimLight('w7', []), [], 'claim-light does not scan the lanes for the owner');
    assert.equal((await ownerOf(lane)).lease_owner, 'w7', 'nor hands the lane back');
    // (It may take free lanes too: earlier tests left work in theirs.)
    const full = await owners.claim(store, { owner: 'w7', handlers: ['h'], limit: 50, leaseDurationMs: 60_000 });
    const inLane = full.filter((d) => d.lane === lane);
    assert.deepEqual(inLane.map(payloadOf), [1], 'the full claim finds the held lane by owner');
    await complete(full);
    await owners.relinquish(store, 'w7');
  });
});

describe('claim-light in a running dispatcher on real Postgres', { skip: 'skip' in found ? found.skip : false }, () => {
  let store: PostgresStore<PgClientLike>;
  usePgStore('claim_light_bus', 6, (opened) => ({ store } = opened));
  const Step = defineEvent('claim-light.step', Type.Object({ n: Type.Integer() }));

  it("a head behind more rows than claim-light reads runs within a poll or two: the poll's claim walks the lane", {
    timeout: 30_000,
  }, async () => {
    // Key order in the lane: 300 rows of `blocked` (its head not due for a minute), then `other`. A wake-up's light
    // claim reads the first 256 rows of the lane and finds no head it may run; the claim that looks at free lanes once
    // per poll interval is claim-held-lanes, whose walk goes past the blocked key.
    const { keys } = keysInOneLane('light-bus', 2);
    const [blocked, other] = [...keys].sort();
    const ran: number[] = [];
    const bus = createRelayBus({
      store,
      events: [Step],
      setupStore: false,
      dispatcher: { pollIntervalMs: 300, concurrency: 8, batchSize: 8 },
    });
    bus.on(Step, 'h', ({ n }) => {
      ran.push(n);
    });
    await bus.start();
    try {
      await store.transaction(async (tx) => {
        await bus.publish(tx, Step, { n: 0 }, { key: blocked!, availableAt: new Date(Date.now() + 60_000) });
        await bus.publishMany(
          tx,
          Array.from({ length: 300 }, (_, i) => ({ event: Step, payload: { n: i + 1 }, options: { key: blocked! } })),
        );
      });
      await pause(400);
      const publishedAt = Date.now();
      await store.transaction((tx) => bus.publish(tx, Step, { n: 1000 }, { key: other! }));
      await waitFor(() => ran.includes(1000), 'the other key of the lane ran', 5_000);
      const tookMs = Date.now() - publishedAt;
      assert.ok(tookMs < 2_000, `within a few polls of 300 ms: ${tookMs} ms`);
      assert.deepEqual(ran, [1000], 'nothing of the blocked key ran: its head is not due');
    } finally {
      await bus.stop();
    }
  });
});
