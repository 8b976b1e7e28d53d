/**
 * A light load's look for unannounced work on real Postgres (`freeLanes: 'when-due'`): when no lane the owner could
 * claim from has due work nobody announced, look-due alone runs, handing back the owner's lanes with nothing left in
 * flight and keeping the others; when one has (a delayed delivery come due in a free lane or in a held one, a crashed
 * worker's expired lane), the full claim runs after it and claims that work. Another worker's live lane is its own.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type pg from 'pg';
import { laneOf } from '../../src/core/lanes.js';
import type { PgClientLike, PostgresStore } from '../../src/postgres/index.js';
import { loadStatements } from '../../src/postgres/statements.js';
import type { ClaimedDelivery, CompleteAndClaimResult } from '../../src/store/contract.js';
import { findPostgres } from '../support/databases.js';
import { keysInLane } from '../support/lanes.js';
import { usePgStore } from '../support/pg-store.js';
import * as owners from '../support/claims.js';

const found = await findPostgres();
const handlers = [{ name: 'h', maxAttempts: 3 }];

describe("a light load's look for unannounced work on real Postgres", {
  skip: 'skip' in found ? found.skip : false,
}, () => {
  let pool: pg.Pool;
  let store: PostgresStore<PgClientLike>;
  // One connection: the test reads that backend's prepared statements to see which statements ran.
  const schema = usePgStore('look_due', 1, (opened) => ({ pool, store } = opened));

  type Ran = { look: number; light: number; full: number };

  /** How often look-due, claim-light and the full claim's statements ran on the connection so far. */
  async function runs(): Promise<Ran> {
    const names = loadStatements(schema);
    const wanted = {
      look: names['look-due'].name,
      light: names['claim-light'].name,
      claim: names['claim-held-lanes'].name,
      acquire: names['acquire-lanes'].name,
    };
    const { rows } = await pool.query<{ name: string; n: string }>(
      'SELECT name, (generic_plans + custom_plans)::text AS n FROM pg_prepared_statements WHERE name = ANY ($1)',
      [Object.values(wanted)],
    );
    const of = (name: string) => Number(rows.find((row) => row.name === name)?.n ?? 0);
    return { look: of(wanted.look), light: of(wanted.light), full: of(wanted.claim) + of(wanted.acquire) };
  }

  /** `owner`'s look, as the dispatcher's claim policy makes it under a light load; which statements ran. */
  async function look(
    owner: string,
    now?: Date,
    preferLanes?: readonly number[],
  ): Promise<CompleteAndClaimResult & { ran: Ran }> {
    const before = await runs();
    const result = await owners.completeAndClaim(store, [], {
      owner,
      handlers: ['h'],
      limit: 50,
      leaseDurationMs: 60_000,
      freeLanes: 'when-due',
      ...(now === undefined ? {} : { now }),
      ...(preferLanes === undefined ? {} : { preferLanes }),
    });
    const after = await runs();
    const ran = { look: after.look - before.look, light: after.light - before.light, full: after.full - before.full };
    return { ...result, ran };
  }

  const publish = (key: string, n: number, availableAt?: Date) =>
    store.transaction((tx) =>
      store.publish(tx, [
        { type: 't', key, payload: { n }, handlers, ...(availableAt === undefined ? {} : { availableAt }) },
      ]),
    );
  const claimAll = (owner: string, leaseDurationMs = 60_000) =>
    owners.claim(store, { owner, handlers: ['h'], limit: 50, leaseDurationMs });
  const payloads = (claimed: readonly ClaimedDelivery[]) => claimed.map((d) => (d.payload as { n: number }).n).sort();
  const complete = async (claimed: readonly ClaimedDelivery[]) =>
    assert.deepEqual(
      await store.completeMany(claimed.map((d) => ({ deliveryId: d.id, leaseToken: d.leaseToken }))),
      claimed.map(() => true),
    );
  const ownerOf = async (lane: number) =>
    (
      await pool.query<{ lease_owner: string | null }>(
        `SELECT lease_owner FROM "${schema}".relaybus_lanes WHERE lane = $1`,
        [lane],
      )
    ).rows[0]?.lease_owner;

  it('nothing due unannounced: look-due alone; a held lane left idle is handed back, one running a delivery kept', async () => {
    const idleKey = 'idle-0';
    let busyKey = 'busy-0';
    for (let i = 1; laneOf(busyKey, '') === laneOf(idleKey, ''); i += 1) busyKey = `busy-${i}`;
    await publish(idleKey, 1);
    await publish(busyKey, 2);
    const claimed = await claimAll('w1');
    assert.deepEqual(payloads(claimed), [1, 2]);
    await complete(claimed.filter((d) => d.key === idleKey));

    const result = await look('w1');
    assert.deepEqual(result.claimed, []);
    assert.deepEqual(result.ran, { look: 1, light: 0, full: 0 }, 'the full claim did not run');
    assert.equal(result.peerLanes, 0);
    assert.equal(await ownerOf(laneOf(idleKey, '')), null, 'the lane left idle was handed back');
    assert.equal(await ownerOf(laneOf(busyKey, '')), 'w1', 'the lane running a delivery is kept');
    await complete(claimed.filter((d) => d.key === busyKey));
    await owners.relinquish(store, 'w1');
  });

  it('a delayed delivery come due in a free lane: the full claim follows the look and claims it', async () => {
    const later = new Date(Date.now() + 30_000);
    await publish('late-free', 3, later);
    const early = await look('w2');
    assert.deepEqual(early.ran, { look: 1, light: 0, full: 0 }, 'not due yet: nothing to look for');
    const due = await look('w2', new Date(later.getTime() + 1_000));
    assert.deepEqual(payloads(due.claimed), [3]);
    assert.equal(due.ran.look, 1);
    assert.ok(due.ran.full >= 1, 'the full claim ran');
    await complete(due.claimed);
    await owners.relinquish(store, 'w2');
  });

  it('a delayed delivery come due in a lane the owner holds, beside one it runs: claimed, the lane kept', async () => {
    const [running, late] = keysInLane(laneOf('held-0', ''), 'held', 2);
    await publish(running!, 4);
    const later = new Date(Date.now() + 30_000);
    await publish(late!, 5, later);
    const first = await claimAll('w3');
    assert.deepEqual(payloads(first), [4]);
    const due = await look('w3', new Date(later.getTime() + 1_000));
    assert.deepEqual(payloads(due.claimed), [5]);
    assert.ok(due.ran.full >= 1, 'the full claim ran');
    assert.equal(await ownerOf(laneOf(running!, '')), 'w3');
    await complete([...first, ...due.claimed]);
    await owners.relinquish(store, 'w3');
  });

  it('a publish whose wake-up named its lane is not unannounced work: a light claim of the lane follows the look', async () => {
    await publish('woken', 9);
    const {
      rows: [row],
    } = await pool.query<{ at: Date }>(
      `SELECT available_at AS at FROM "${schema}".relaybus_deliveries WHERE key = 'woken'`,
    );
    // Due for less than the grace: the wake-up is on its way (as it is here), so the look leaves it to the light claim.
    const result = await look('w6', new Date(row!.at.getTime() + 5), [laneOf('woken', '')]);
    assert.deepEqual(payloads(result.claimed), [9]);
    assert.deepEqual(result.ran, { look: 1, light: 1, full: 0 });
    assert.equal(result.peerLanes, 0);
    await complete(result.claimed);
    // Due for longer, with no wake-up: the full claim finds it.
    await publish('unheard', 10);
    const late = await look('w6', new Date(Date.now() + 1_000));
    assert.deepEqual(payloads(late.claimed), [10]);
    assert.equal(late.ran.light, 0);
    assert.ok(late.ran.full >= 1, 'the full claim ran');
    await complete(late.claimed);
    await owners.relinquish(store, 'w6');
  });

  it("a crashed worker's expired lane is taken over by the full claim; another worker's live lane is left to it", async () => {
    await publish('crashed', 6);
    const lost = await claimAll('crashed-worker', 1_000);
    assert.deepEqual(payloads(lost), [6]);
    await publish('alive', 7);
    const alive = await claimAll('live-worker');
    assert.deepEqual(payloads(alive), [7]);
    // Due in the live worker's lane and not in flight there: its own claims take it, not this owner's look.
    const [sameLane] = keysInLane(laneOf('alive', ''), 'alive-next', 1);
    await publish(sameLane!, 8);

    const now = new Date(Date.now() + 5_000);
    const result = await look('w4', now);
    assert.deepEqual(payloads(result.claimed), [6], 'the expired lane taken over: its delivery runs again');
    assert.equal(result.claimed[0]!.attempts, 1, 'the takeover charged the attempt the crashed worker had');
    assert.equal(await ownerOf(laneOf('alive', '')), 'live-worker');

    const quiet = await look('w5', now);
    assert.deepEqual(
      quiet.ran,
      { look: 1, light: 0, full: 0 },
      "another worker's due work is not this owner's to look for",
    );
    assert.equal(quiet.peerLanes, 2, "the live worker's lane and the one w4 took over");
    await complete([...result.claimed, ...alive]);
    for (const owner of ['w4', 'w5', 'live-worker', 'crashed-worker']) await owners.relinquish(store, owner);
  });
  it('planned on a large heap, reads the deliveries through the due indexes only, whatever its statistics say', async () => {
    // Its generic plan, as a claim session's held connection makes it (plan_cache_mode, random_page_cost 1.1): a scan
    // of the heap would read every pending row (a backlog of delayed deliveries, another service's handlers) at every
    // poll interval. (On a heap of a page or two a scan is the cheapest read; the session plans again once the heap
    // has outgrown its plans: sql/hot-path/discard-plans.sql.)
    const relations = async (): Promise<string[]> => {
      const client = await pool.connect();
      try {
        await client.query("SET plan_cache_mode = 'force_generic_plan'; SET random_page_cost = 1.1");
        await client.query(`PREPARE look_due_plan AS ${loadStatements(schema)['look-due'].text}`);
        const {
          rows: [row],
        } = await client.query<{ 'QUERY PLAN': unknown }>(
          "EXPLAIN (FORMAT JSON) EXECUTE look_due_plan('planner', '{h}', 20, '{}', NULL)",
        );
        await client.query('DEALLOCATE look_due_plan; RESET plan_cache_mode; RESET random_page_cost');
        const scans: string[] = [];
        const walk = (node: Record<string, unknown>) => {
          if (node['Relation Name'] === 'relaybus_deliveries')
            scans.push(`${String(node['Node Type'])} ${String(node['Index Name'] ?? '')}`.trim());
          for (const child of (node.Plans as Record<string, unknown>[] | undefined) ?? []) walk(child);
        };
        walk((row!['QUERY PLAN'] as [{ Plan: Record<string, unknown> }])[0].Plan);
        return scans;
      } finally {
        client.release();
      }
    };
    const onlyIndexes = (scans: readonly string[], what: string) => {
      assert.ok(scans.length > 0, `${what}: the plan reads deliveries`);
      assert.ok(
        scans.every((scan) =>
          /^Index (Only )?Scan relaybus_deliveries_(unkeyed_due_idx|keyed_due_idx|pkey)$/.test(scan),
        ),
        `${what}: ${scans.join(', ')}`,
      );
    };
    await pool.query(`ANALYZE "${schema}".relaybus_deliveries`);
    const later = new Date(Date.now() + 86_400_000);
    for (let from = 0; from < 6_000; from += 2_000)
      await store.transaction((tx) =>
        store.publish(
          tx,
          Array.from({ length: 2_000 }, (_, k) => ({
            type: 't',
            key: k % 2 === 0 ? `planned-${from + k}` : null,
            payload: { k },
            handlers,
            availableAt: later,
          })),
        ),
      );
    onlyIndexes(await relations(), '6,000 delayed deliveries, the statistics of a nearly empty heap');
    await pool.query(`ANALYZE "${schema}".relaybus_deliveries`);
    onlyIndexes(await relations(), 'analyzed with 6,000 delayed deliveries');
  });
});
