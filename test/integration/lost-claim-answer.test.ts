/**
 * A claim statement that commits but whose answer never arrives (the connection dropped on the way back) has recorded
 * deliveries in flight that no one runs: every later claim skips them, and their lane stays held while the owner
 * renews it. After a failed claim the worker has the store forget what it does not hold (`forgetInFlight`). On real
 * Postgres, with the failure injected at the driver (the statement runs, then its answer is dropped):
 * - a failure inside a claim of several statements is hidden from that claim (it hands over what it got) and rejects
 *   the owner's next claim, so the worker forgets before claiming again;
 * - a claim cut off on the client while it still runs on the server may take a free lane it named after the forget
 *   took its snapshot: the forget waits for that lane's lock and forgets what the claim recorded there too.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import pg from 'pg';
import { createRelayBus, defineEvent, Type } from '../../src/index.js';
import type { Logger } from '../../src/core/logger.js';
import { fromPg, type PgClientLike, postgresStore, type PostgresStore } from '../../src/postgres/index.js';
import type { SqlExecutor } from '../../src/postgres/sql-client.js';
import type { OwnerClaimParams as ClaimParams } from '../support/claims.js';
import { findPostgres, uniqueSchemaName } from '../support/databases.js';
import { waitFor } from '../support/wait.js';
import * as owners from '../support/claims.js';

const found = await findPostgres();
const url = 'url' in found ? found.url : '';
const handlers = [{ name: 'h', maxAttempts: 3 }];

/**
 * What the injected fault does to the next matching statement (after `skip` of them): fails it before it runs, drops
 * its answer, or drops its answer if it claimed something.
 */
type Fault = {
  readonly statement: string;
  readonly skip: number;
  readonly when: 'before' | 'after' | 'after-claiming';
};

/** A connection failure as `pg` reports one (SQLSTATE class 08: retryable). */
const cut = () => Object.assign(new Error('Connection terminated unexpectedly'), { code: '08006' });

describe('a claim whose answer was lost, on real Postgres', { skip: 'skip' in found ? found.skip : undefined }, () => {
  const schema = uniqueSchemaName('lost_claim');
  let pool: pg.Pool;
  let store: PostgresStore<PgClientLike>;
  let fault: Fault | undefined;
  let skipped = 0;

  before(async () => {
    pool = new pg.Pool({ connectionString: url, max: 6 });
    const driver = fromPg(pool);
    /** `executor` with the fault injected into its next matching statement. */
    const faulty = <E extends SqlExecutor>(executor: E): E => ({
      ...executor,
      async run(statement, params) {
        const hit = fault !== undefined && statement.name.startsWith(`relaybus_${fault.statement}_`);
        if (hit && skipped < fault!.skip) skipped += 1;
        else if (hit) {
          const { when } = fault!;
          if (when === 'before') {
            fault = undefined;
            throw cut();
          }
          const rows = await executor.run<{ claimed?: string | null }>(statement, params);
          if (when === 'after-claiming' && rows[0]?.claimed == null) return rows as never;
          fault = undefined;
          throw cut();
        }
        return executor.run(statement, params);
      },
    });
    const executor = faulty(driver.executor);
    // A worker's claims run on the connection its claim loop holds (holdClaimConnections): the fault reaches them there.
    const session = async () => faulty(await driver.session!());
    store = postgresStore({ driver: { ...driver, executor, session }, schema });
    await store.setup();
  });
  after(async () => {
    await pool.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
    await pool.end();
  });

  const inject = (next: Fault) => {
    fault = next;
    skipped = 0;
  };
  const publishKeys = (prefix: string, count: number) =>
    store.transaction((tx) =>
      store.publish(
        tx,
        Array.from({ length: count }, (_, n) => ({ type: 't', key: `${prefix}-${n}`, payload: { n }, handlers })),
      ),
    );
  const inFlightOf = async (lane: number) =>
    (
      await pool.query<{ ids: string[] }>(
        `SELECT in_flight::text[] AS ids FROM "${schema}".relaybus_lanes WHERE lane = $1`,
        [lane],
      )
    ).rows[0]!.ids;

  it('a claim hides a failure after what it got: its next claim rejects with it; after the forget all is claimed', async () => {
    // 200 keys over most lanes: a new owner claims from its held lanes (none), takes 4 lanes and claims them, takes 8
    // more and claims those (the statement whose answer is dropped here).
    await publishKeys('hidden', 200);
    const params: ClaimParams = { owner: 'hider', handlers: ['h'], limit: 1_000, leaseDurationMs: 30_000 };
    inject({ statement: 'claim_held_lanes', skip: 2, when: 'after' });
    const first = await owners.claim(store, params);
    assert.ok(first.length > 0, 'the rounds before the failure are handed over');
    assert.equal(fault, undefined, 'the second claim statement ran and its answer was dropped');
    await assert.rejects(
      owners.claim(store, params),
      /Connection terminated unexpectedly/,
      'the next claim rejects first',
    );
    const forgotten = await owners.forgetInFlight(store, { owner: params.owner, holding: first.map((d) => d.id) });
    assert.ok(forgotten > 0, 'what the dropped statement recorded is forgotten');
    const rest = await owners.claim(store, params);
    const ids = new Set([...first, ...rest].map((d) => d.id));
    assert.equal(ids.size, 200, 'every delivery is claimed once the forgotten ones are claimable again');
    assert.equal(first.length + rest.length, 200);
    await store.completeMany([...first, ...rest].map((d) => ({ deliveryId: d.id, leaseToken: d.leaseToken })));
  });

  it('forget waits for a claim still running on a free lane it named, and forgets what that claim recorded there', async () => {
    const [published] = await publishKeys('lingering', 1);
    const [delivery] = (await store.listDeliveries({ eventId: published!.eventId })).items;
    const lane = delivery!.lane;
    const params: ClaimParams = {
      owner: 'lingerer',
      handlers: ['h'],
      limit: 10,
      leaseDurationMs: 30_000,
      preferLanes: [lane],
    };
    // The claim that names the free lane fails on the client at once...
    inject({ statement: 'claim_held_lanes', skip: 0, when: 'before' });
    await assert.rejects(owners.claim(store, params), /Connection terminated/);
    // ...while on the server it goes on: it takes the lane and records the delivery, and has not committed yet.
    const lingering = await pool.connect();
    try {
      await lingering.query('BEGIN');
      await lingering.query(
        `UPDATE "${schema}".relaybus_lanes SET lease_owner = $1, epoch = epoch + 1, in_flight = ARRAY[$2::bigint],
           lease_expires_at = now() + interval '30 seconds' WHERE lane = $3 AND lease_owner IS NULL`,
        [params.owner, delivery!.id, lane],
      );
      const forget = owners.forgetInFlight(store, { owner: params.owner, holding: [] });
      await waitFor(async () => {
        const { rows } = await pool.query(
          `SELECT 1 FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE '%relaybus_lanes%'`,
        );
        return rows.length > 0;
      }, 'the forget waits for the lane');
      await lingering.query('COMMIT');
      assert.equal(await forget, 1, 'the delivery that claim recorded is forgotten');
    } finally {
      lingering.release();
    }
    assert.deepEqual(await inFlightOf(lane), []);
    const [again] = await owners.claim(store, { ...params, preferLanes: [] });
    assert.equal(again?.id, delivery!.id, 'claimable again');
  });

  it('a worker whose claim answer was lost delivers every event of the key that claim blocked, in order', async () => {
    const Step = defineEvent('lost-claim.step', Type.Object({ n: Type.Integer() }));
    const infos: { message: string; fields?: Record<string, unknown> }[] = [];
    const logger: Logger = {
      debug: () => {},
      info: (message, fields) => infos.push({ message, fields }),
      warn: () => {},
      error: () => {},
    };
    const bus = createRelayBus({ store, events: [Step], logger, dispatcher: { pollIntervalMs: 20 } });
    const seen: number[] = [];
    bus.on(Step, 'steps', (payload) => {
      seen.push(payload.n);
    });
    await store.transaction(async (tx) => {
      for (let n = 0; n < 3; n += 1) await bus.publish(tx, Step, { n }, { key: 'one-key' });
    });
    // Its first claim records the key's head and loses the answer: without the forget the key stays blocked for as
    // long as the worker runs (the lane is renewed, the head never runs).
    inject({ statement: 'claim', skip: 0, when: 'after-claiming' });
    await bus.start();
    try {
      await waitFor(() => seen.length === 3, 'all three delivered', 10_000);
    } finally {
      await bus.stop();
    }
    assert.deepEqual(seen, [0, 1, 2]);
    assert.ok(
      infos.some((entry) => entry.message.includes('claimable again') && Number(entry.fields?.forgotten) >= 1),
      'the log says what was forgotten',
    );
  });
});
