/**
 * The upgrade of a relaybus 0.1 schema (the row-lease layout) by setup(), on real Postgres. The
 * 0.1 layout is written here from the design reference ("The problem": status and lease columns
 * on every delivery, eight secondary indexes; "Upgrading from 0.1.0"), with thousands of pending,
 * processing, completed and dead deliveries, keyed and unkeyed. After the upgrade the catalog is a
 * fresh install's (column order aside), a second run changes nothing, and a real dispatcher drains
 * everything: each pending and processing delivery once, in key order, its attempts carried over,
 * nothing completed again. Also: the SQL lane function against src/core/lanes.ts, an upgrade cut
 * off halfway (its connection terminated in a batch, then in the final step), three replicas at
 * once, the refusal while 0.1 workers hold leases, the one-script form, and retention afterwards.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import pg from 'pg';
import { SchemaMismatchError } from '../../src/core/errors.js';
import { laneOf } from '../../src/core/lanes.js';
import { createRelayBus, defineEvent, Type } from '../../src/index.js';
import { createPostgresSchemaSql, fromPg, postgresStore } from '../../src/postgres/index.js';
import { loadMigrations } from '../../src/postgres/schema-sql.js';
import { setupPostgres, type SetupProgress, type SetupResult } from '../../src/postgres/setup.js';
import { loadStatements } from '../../src/postgres/statements.js';
import { planPostgresSetup } from '../../src/postgres/upgrade/plan.js';
import { findPostgres, uniqueSchemaName } from '../support/databases.js';
import {
  catalog,
  HANDLERS,
  KEYS,
  rowLeaseLayout,
  seedRowLease,
  snapshotRowLease,
  withoutPositions,
} from '../support/upgrades.js';
import { waitFor } from '../support/wait.js';

const found = await findPostgres();
const url = 'url' in found ? found.url : '';
const versions = loadMigrations().map((m) => m.name);
const OrderPlaced = defineEvent('order.placed', Type.Object({ n: Type.Integer() }));

interface OldRow {
  id: string;
  event_id: string;
  handler: string;
  key: string | null;
  sequence: string | null;
  status: string;
  attempts: number;
  max_attempts: number;
}

async function oldRows(admin: pg.Pool, schema: string): Promise<OldRow[]> {
  return (
    await admin.query<OldRow>(`SELECT d.id::text AS id, event_id, handler, key, sequence::text, status, attempts, max_attempts
    FROM "${schema}".relaybus_deliveries d ORDER BY d.id`)
  ).rows;
}

/** Everything a second run could change: the catalog and every row (timestamps included). */
async function snapshot(admin: pg.Pool, schema: string) {
  const rows = async (table: string, order: string) =>
    (await admin.query(`SELECT * FROM "${schema}".${table} ORDER BY ${order}`)).rows;
  return {
    catalog: await catalog(admin, schema),
    deliveries: await rows('relaybus_deliveries', 'id'),
    events: await rows('relaybus_events', 'id'),
    history: await rows('relaybus_completed_deliveries', 'delivery_id'),
    keyOrder: (await admin.query(`SELECT last_value::text FROM "${schema}".relaybus_key_order`)).rows,
    lanes: await rows('relaybus_lanes', 'lane'),
    migrations: await rows('relaybus_migrations', 'name'),
  };
}

/** A processing delivery on its last attempt becomes dead; every other processing one pending. */
const releasedStatus = (row: OldRow): string =>
  row.status !== 'processing' ? row.status : row.attempts >= row.max_attempts ? 'dead' : 'pending';

/** The upgraded schema holds exactly what the 0.1 rows said, in the new layout, with the catalog of a fresh install. */
async function assertUpgraded(admin: pg.Pool, schema: string, before: readonly OldRow[], fresh: string): Promise<void> {
  assert.deepEqual(
    withoutPositions(await catalog(admin, schema)),
    withoutPositions(await catalog(admin, fresh)),
    'the catalog of a fresh install (columns may sit in another order)',
  );
  const applied = await admin.query<{ name: string }>(`SELECT name FROM "${schema}".relaybus_migrations ORDER BY name`);
  assert.deepEqual(
    applied.rows.map((r) => r.name),
    versions,
  );
  const live = new Map(
    (
      await admin.query<
        OldRow & { lane: number; claims: number }
      >(`SELECT id::text, event_id, handler, key, sequence::text, status,
      attempts, max_attempts, lane, claims FROM "${schema}".relaybus_deliveries`)
    ).rows.map((r) => [r.id, r]),
  );
  const history = new Map(
    (
      await admin.query<
        OldRow & { lane: number; event_type: string }
      >(`SELECT delivery_id::text AS id, event_id, event_type,
      handler, key, sequence::text, attempts, max_attempts, lane FROM "${schema}".relaybus_completed_deliveries`)
    ).rows.map((r) => [r.id, r]),
  );
  assert.equal(live.size + history.size, before.length, 'no delivery lost or added');
  for (const row of before) {
    const lane = laneOf(row.key, row.event_id);
    const { status: _status, ...identity } = row;
    if (row.status === 'completed') {
      const moved = history.get(row.id);
      assert.ok(moved, `completed delivery ${row.id} is in the completion history`);
      assert.deepEqual(
        { ...moved, lane: undefined, event_type: undefined },
        { ...identity, lane: undefined, event_type: undefined },
      );
      assert.equal(moved.lane, lane);
      assert.equal(moved.event_type, 'order.placed');
      continue;
    }
    const now = live.get(row.id);
    assert.ok(now, `delivery ${row.id} (${row.status}) is still there`);
    assert.deepEqual(now, { ...row, status: releasedStatus(row), lane, claims: 0 }, `delivery ${row.id}`);
  }
  const handlers = await admin.query<{ id: string; handlers: string[] }>(
    `SELECT id, handlers FROM "${schema}".relaybus_events ORDER BY id`,
  );
  const expected = new Map<string, Set<string>>();
  for (const row of before) expected.set(row.event_id, (expected.get(row.event_id) ?? new Set()).add(row.handler));
  for (const event of handlers.rows) {
    assert.deepEqual(
      [...event.handlers].sort(),
      [...(expected.get(event.id) ?? [])].sort(),
      `handlers of ${event.id}, completed ones included`,
    );
  }
  // Keyed order goes on from the upgraded sequences: the key-order sequence starts past every one of them.
  const {
    rows: [order],
  } = await admin.query<{ last_value: string }>(`SELECT last_value::text FROM "${schema}".relaybus_key_order`);
  for (const row of before) {
    if (row.key !== null)
      assert.ok(
        BigInt(order!.last_value) >= BigInt(row.sequence!),
        `the key order is past ${row.key}'s ${row.sequence}`,
      );
  }
}

describe('setup() upgrades a relaybus 0.1 schema (row leases) in place', {
  skip: 'skip' in found ? found.skip : undefined,
}, () => {
  const admin = new pg.Pool({ connectionString: url, max: 4 });
  const schemas: string[] = [];
  let fresh = '';
  before(async () => {
    fresh = uniqueSchemaName('upgrade_fresh');
    schemas.push(fresh);
    const pool = new pg.Pool({ connectionString: url, max: 1 });
    await postgresStore({ driver: fromPg(pool), schema: fresh }).setup();
    await pool.end();
  });
  after(async () => {
    for (const schema of schemas) await admin.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
    await admin.end();
  });

  async function rowLeaseSchema(label: string, events: number): Promise<{ schema: string; before: OldRow[] }> {
    const schema = uniqueSchemaName(label);
    schemas.push(schema);
    await admin.query(rowLeaseLayout(schema));
    await seedRowLease(admin, schema, events);
    return { schema, before: await oldRows(admin, schema) };
  }

  it('relaybus_lane() in SQL is the lane of src/core/lanes.ts, for ascii, unicode, empty and long keys', async () => {
    const schema = uniqueSchemaName('upgrade_lane_fn');
    schemas.push(schema);
    await admin.query(`CREATE SCHEMA "${schema}"`);
    await admin.query(loadStatements(schema)['upgrade-lane-function'].text);
    const samples = [
      '',
      'a',
      'customer-7',
      'kunde-ü-12',
      '顧客-3',
      '🎉-party',
      'Ζεύς',
      'e\u0301',
      'x'.repeat(300),
      '\u{10FFFF}',
      'a b\tc\nd',
      ...KEYS,
      ...Array.from(
        { length: 3000 },
        (_, i) => `${i}-${String.fromCodePoint(32 + ((i * 7919) % 55000))}-${(i * 2654435761) % 4294967296}`,
      ),
    ].filter((key) => !/[\uD800-\uDFFF]/.test(key));
    const { rows } = await admin.query<{ lane: number }>(
      `SELECT "${schema}".relaybus_lane(k) AS lane FROM unnest($1::text[]) WITH ORDINALITY AS x(k, i) ORDER BY i`,
      [samples],
    );
    assert.deepEqual(
      rows.map((r) => r.lane),
      samples.map((key) => laneOf(key, 'unused')),
    );
  });

  describe('thousands of deliveries: upgrade, upgrade again, drain with a dispatcher', () => {
    let schema = '';
    let old: OldRow[] = [];
    let pool: pg.Pool;

    before(async () => {
      ({ schema, before: old } = await rowLeaseSchema('upgrade_big', 3_000));
      pool = new pg.Pool({ connectionString: url, max: 8 });
    });
    after(async () => pool?.end());

    it('the dry run plans it from the counts and changes nothing', async () => {
      const beforePlan = await snapshotRowLease(admin, schema);
      const plan = await planPostgresSetup(fromPg(pool), schema, loadStatements(schema), { batchSize: 1_000 });
      const count = (status: string) => old.filter((r) => r.status === status).length;
      assert.equal(plan.layout, 'row-lease');
      assert.deepEqual(plan.migrations, versions);
      assert.equal(plan.refusal, undefined);
      assert.deepEqual(
        { ...plan.rowLease, leaseOwners: undefined },
        {
          deliveries: old.length,
          pending: count('pending'),
          processing: count('processing'),
          lastAttempt: 1,
          completed: count('completed'),
          dead: count('dead'),
          toConvert: old.length,
          events: 3_000,
          unfit: 0,
          leased: 0,
          leaseOwners: undefined,
          leasedUntil: null,
        },
      );
      assert.ok(old.length >= 6_000 && count('processing') > 100 && count('completed') > 1_000 && count('dead') > 100);
      // What the final step will do to the deliveries in flight, counted by the rule it applies (one was on its last attempt).
      assert.ok(
        plan.steps.some((step) =>
          step.includes(
            `of the ${count('processing')} deliveries in flight, ${count('processing') - 1} go back to pending (attempts kept) ` +
              'and 1 on their last attempt become dead letters',
          ),
        ),
        plan.steps.join('\n'),
      );
      assert.deepEqual(await snapshotRowLease(admin, schema), beforePlan);
    });

    it('upgrades in batches, with progress, to the catalog of a fresh install; every row accounted for', async () => {
      const progress: SetupProgress[] = [];
      const result = await setupPostgres(fromPg(pool), schema, loadStatements(schema), {
        batchSize: 1_000,
        onProgress: (p) => {
          progress.push(p);
        },
      });
      assert.equal(result.from, 'row-lease');
      assert.deepEqual(result.applied, versions);
      const processing = old.filter((r) => r.status === 'processing');
      assert.deepEqual(result.rowLease?.released, { pending: processing.length - 1, dead: 1 });
      assert.deepEqual(
        result.rowLease?.released,
        {
          pending: result.rowLease!.counts.processing - result.rowLease!.counts.lastAttempt,
          dead: result.rowLease!.counts.lastAttempt,
        },
        'the upgrade did what its plan counted',
      );
      const converts = progress.filter((p) => p.step === 'convert');
      assert.ok(converts.length >= 6, `one progress report per batch (${converts.length})`);
      assert.deepEqual(converts[converts.length - 1], { step: 'convert', done: old.length, total: old.length });
      assert.deepEqual(progress[progress.length - 1], { step: 'finish' });
      await assertUpgraded(admin, schema, old, fresh);
    });

    it('a second setup() changes nothing', async () => {
      const first = await snapshot(admin, schema);
      const result: SetupResult = await postgresStore({ driver: fromPg(pool), schema })
        .setup()
        .then(() => setupPostgres(fromPg(pool), schema, loadStatements(schema)));
      assert.deepEqual(result, { from: 'relaybus', applied: [] });
      assert.deepEqual(await snapshot(admin, schema), first);
    });

    it('completed 0.1 deliveries are listed and counted as completed', async () => {
      const store = postgresStore({ driver: fromPg(pool), schema });
      const completed = old.filter((r) => r.status === 'completed');
      const stats = await store.statistics();
      assert.equal(stats.completed, completed.length);
      const page = await store.listDeliveries({ status: 'completed', limit: 1_000 });
      assert.equal(page.items.length, Math.min(1_000, completed.length));
      assert.deepEqual(
        page.items.slice(0, 5).map((d) => [d.id, d.status]),
        completed.slice(0, 5).map((r) => [r.id, 'completed']),
      );
      const dead = await store.listDeliveries({ status: 'dead', limit: 1_000 });
      assert.equal(dead.items.length, old.filter((r) => releasedStatus(r) === 'dead').length);
    });

    it('a dispatcher runs every pending and processing delivery once, in key order, attempts carried over; nothing completed runs again', {
      timeout: 120_000,
    }, async () => {
      const store = postgresStore({ driver: fromPg(pool), schema });
      const bus = createRelayBus({
        store,
        events: [OrderPlaced],
        dispatcher: { pollIntervalMs: 20, concurrency: 50, batchSize: 100 },
      });
      const runs: {
        eventId: string;
        handler: string;
        key: string | null;
        sequence: string | null;
        attempt: number;
        n: number;
      }[] = [];
      for (const handler of HANDLERS) {
        bus.on(OrderPlaced, handler, { maxAttempts: 3 }, (payload, ctx) => {
          runs.push({
            eventId: ctx.delivery.eventId,
            handler,
            key: ctx.delivery.key,
            sequence: ctx.delivery.sequence,
            attempt: ctx.delivery.attempt,
            n: payload.n,
          });
        });
      }
      const due = old.filter((r) => releasedStatus(r) === 'pending');
      // After the upgrade, publish to a key that still has 0.1 deliveries pending: it must run after them.
      const lateKey = KEYS[1]!;
      await store.transaction((tx) =>
        bus.publish(tx, OrderPlaced, { n: 999_999 }, { key: lateKey, id: 'after-upgrade' }),
      );
      // A broker redelivering an event whose handlers all completed under 0.1 adds nothing.
      const allDone = [...new Set(old.map((r) => r.event_id))].find((id) =>
        old.filter((r) => r.event_id === id).every((r) => r.status === 'completed'),
      )!;
      const n = Number(allDone.slice(4));
      const again = await store.transaction((tx) =>
        bus.publish(
          tx,
          OrderPlaced,
          { n },
          { key: old.find((r) => r.event_id === allDone)!.key ?? undefined, id: allDone },
        ),
      );
      assert.deepEqual({ duplicate: again.duplicate, added: again.addedHandlers }, { duplicate: true, added: [] });

      await bus.start();
      try {
        await waitFor(() => runs.length >= due.length + 2, `drained (${runs.length}/${due.length + 2})`, 90_000);
        await new Promise((resolve) => setTimeout(resolve, 300)); // anything extra would show up now
      } finally {
        await bus.stop();
      }
      assert.equal(runs.length, due.length + 2, 'nothing ran twice, nothing completed ran again');
      const ran = new Map(runs.map((r) => [`${r.eventId}/${r.handler}`, r]));
      assert.equal(ran.size, runs.length, 'each (event, handler) once');
      for (const row of due) {
        const run = ran.get(`${row.event_id}/${row.handler}`);
        assert.ok(run, `${row.event_id}/${row.handler} (${row.status} under 0.1) ran`);
        assert.equal(run.attempt, row.attempts + 1, `${row.event_id}/${row.handler}: its attempts carried over`);
      }
      for (const handler of HANDLERS) {
        for (const key of KEYS) {
          const order = runs.filter((r) => r.handler === handler && r.key === key).map((r) => BigInt(r.sequence!));
          assert.deepEqual(
            order,
            [...order].sort((a, b) => (a < b ? -1 : a > b ? 1 : 0)),
            `${handler}/${key} ran in sequence order`,
          );
        }
        const late = runs.filter((r) => r.handler === handler && r.key === lateKey);
        assert.equal(
          late[late.length - 1]!.eventId,
          'after-upgrade',
          "an event published after the upgrade runs after its key's older ones",
        );
      }
      const left = await admin.query(
        `SELECT count(*)::int AS n FROM "${schema}".relaybus_deliveries WHERE status = 'pending'`,
      );
      assert.equal(left.rows[0].n, 0);
    });

    it('retention purges the completed 0.1 deliveries and their events', async () => {
      const store = postgresStore({ driver: fromPg(pool), schema });
      const result = await store.purgeExpired({ completedRetentionMs: 60_000, deadRetentionMs: 365 * 86_400_000 });
      assert.equal(result.history, old.filter((r) => r.status === 'completed').length);
      const left = await admin.query<{ n: number }>(
        `SELECT count(*)::int AS n FROM "${schema}".relaybus_completed_deliveries`,
      );
      assert.equal(left.rows[0]!.n, 0);
      const withDead = new Set(old.filter((r) => releasedStatus(r) === 'dead').map((r) => r.event_id));
      const events = await admin.query<{ id: string }>(
        `SELECT id FROM "${schema}".relaybus_events WHERE id <> 'after-upgrade' ORDER BY id`,
      );
      assert.deepEqual(
        events.rows.map((r) => r.id),
        [...withDead].sort(),
        'only events that still have a dead delivery are left',
      );
    });
  });

  it('an upgrade whose connection is terminated in a batch, and then in its final step, is finished by the next setup()', {
    timeout: 60_000,
  }, async () => {
    const { schema, before: old } = await rowLeaseSchema('upgrade_cut', 1_000);
    const application = `relaybus_upgrade_cut_${process.pid}`;
    const pool = new pg.Pool({ connectionString: url, max: 2, application_name: application });
    const blocker = await admin.connect();
    /** Terminate the upgrading connection once it waits on the blocker's lock. */
    const terminateWhenBlocked = async () => {
      await waitFor(
        async () =>
          (
            await admin.query(
              `SELECT 1 FROM pg_stat_activity WHERE application_name = $1 AND wait_event_type = 'Lock'`,
              [application],
            )
          ).rowCount! > 0,
        'the upgrade waits on the lock',
        20_000,
      );
      await admin.query('SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1', [
        application,
      ]);
    };
    try {
      // 1. In a batch: once the first batch is done, a row further on is locked, so a later batch waits and is terminated.
      const locked = old[Math.floor(old.length / 2)]!.id;
      let lockedYet = false;
      const cut = setupPostgres(fromPg(pool), schema, loadStatements(schema), {
        batchSize: 300,
        onProgress: async () => {
          if (lockedYet) return;
          lockedYet = true;
          await blocker.query('BEGIN');
          await blocker.query(`SELECT 1 FROM "${schema}".relaybus_deliveries WHERE id = $1 FOR UPDATE`, [locked]);
        },
      });
      // Rejected while the test still waits for the lock: handled here, asserted below.
      cut.catch(() => {});
      await terminateWhenBlocked();
      await assert.rejects(cut, /terminat/i);
      await blocker.query('ROLLBACK');
      const halfway = await admin.query<{ laned: number; marker: number }>(`SELECT count(lane)::int AS laned,
        (SELECT count(*)::int FROM pg_attribute WHERE attrelid = '"${schema}".relaybus_deliveries'::regclass AND attname = 'lease_token' AND NOT attisdropped) AS marker
        FROM "${schema}".relaybus_deliveries`);
      assert.ok(
        halfway.rows[0]!.laned > 0 && halfway.rows[0]!.marker === 1,
        'cut off halfway: some lanes set, still the 0.1 layout',
      );

      // 2. In the final step: the blocker holds a share lock on events from the moment the batches are done.
      const finalCut = setupPostgres(fromPg(pool), schema, loadStatements(schema), {
        batchSize: 300,
        onProgress: async (progress) => {
          if (progress.step !== 'finish') return;
          await blocker.query('BEGIN');
          await blocker.query(`LOCK TABLE "${schema}".relaybus_events IN ACCESS SHARE MODE`);
        },
      });
      finalCut.catch(() => {});
      await terminateWhenBlocked();
      await assert.rejects(finalCut, /terminat/i);
      await blocker.query('ROLLBACK');
      const stillOld = await admin.query(
        `SELECT 1 FROM pg_attribute WHERE attrelid = '"${schema}".relaybus_deliveries'::regclass AND attname = 'lease_token' AND NOT attisdropped`,
      );
      assert.equal(stillOld.rowCount, 1, 'the final step rolled back as a whole');

      // A fresh pool: the terminations above may also have hit an idle connection of \`pool\` that it has not noticed yet.
      const next = new pg.Pool({ connectionString: url, max: 1 });
      try {
        const result = await setupPostgres(fromPg(next), schema, loadStatements(schema), { batchSize: 300 });
        assert.deepEqual(result.applied, versions);
      } finally {
        await next.end();
      }
      await assertUpgraded(admin, schema, old, fresh);
    } finally {
      blocker.release();
      await pool.end();
    }
  });

  it('three replicas starting at once upgrade it once, and agree', { timeout: 60_000 }, async () => {
    const { schema, before: old } = await rowLeaseSchema('upgrade_race', 1_000);
    const pools = [0, 1, 2].map(() => new pg.Pool({ connectionString: url, max: 1 }));
    try {
      const results = await Promise.all(
        pools.map((pool) => setupPostgres(fromPg(pool), schema, loadStatements(schema), { batchSize: 250 })),
      );
      assert.equal(results.filter((r) => r.rowLease !== undefined).length, 1, 'one replica finished the upgrade');
      assert.deepEqual(
        results.map((r) => r.from),
        ['row-lease', 'row-lease', 'row-lease'],
      );
      await assertUpgraded(admin, schema, old, fresh);
    } finally {
      await Promise.all(pools.map((pool) => pool.end()));
    }
  });

  it('is refused while 0.1 workers hold leases, saying to stop them, and changes nothing', async () => {
    const { schema } = await rowLeaseSchema('upgrade_leased', 200);
    await admin.query(`UPDATE "${schema}".relaybus_deliveries SET lease_expires_at = now() + interval '30 seconds'
      WHERE id IN (SELECT id FROM "${schema}".relaybus_deliveries WHERE status = 'processing' ORDER BY id LIMIT 3)`);
    const beforeRefusal = await snapshotRowLease(admin, schema);
    const pool = new pg.Pool({ connectionString: url, max: 1 });
    try {
      const refused = (error: unknown) => {
        assert.ok(error instanceof SchemaMismatchError, String(error));
        assert.equal(error.retryable, false);
        assert.match(error.message, /workers hold leases on 3 deliveries \(owners worker-0\.1-/);
        assert.match(error.message, /stop every relaybus 0\.1 worker first/);
        return true;
      };
      await assert.rejects(postgresStore({ driver: fromPg(pool), schema }).setup(), refused);
      const plan = await planPostgresSetup(fromPg(pool), schema, loadStatements(schema), { batchSize: 1_000 });
      assert.match(plan.refusal ?? '', /stop every relaybus 0\.1 worker first/);
      await assert.rejects(pool.query(createPostgresSchemaSql({ schema })), /stop every relaybus 0\.1 worker first/);
      assert.deepEqual(await snapshotRowLease(admin, schema), beforeRefusal);
    } finally {
      await pool.end();
    }
  });

  it('createPostgresSchemaSql() upgrades a 0.1 schema in one script to what setup() makes of it', async () => {
    const { schema, before: old } = await rowLeaseSchema('upgrade_script', 500);
    await admin.query(createPostgresSchemaSql({ schema }));
    await assertUpgraded(admin, schema, old, fresh);
    const twice = await snapshot(admin, schema);
    await admin.query(createPostgresSchemaSql({ schema }));
    assert.deepEqual(await snapshot(admin, schema), twice, 'running the script again changes nothing');
  });
});
