/**
 * LISTEN/NOTIFY wake-ups: a publishing transaction NOTIFYs at commit and an idle dispatcher claims at
 * once instead of at its next poll. The poll interval here is 20 s, so only a wake-up can explain a
 * delivery within a second. A listener whose connection is terminated reconnects (and looks for
 * work); `notify: false` turns it all off.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { PGlite } from '@electric-sql/pglite';
import pg from 'pg';
import postgres from 'postgres';
import { laneOf } from '../../src/core/lanes.js';
import { createRelayBus, defineEvent, Type } from '../../src/index.js';
import { fromPg, fromPglite, fromPostgresJs, postgresStore, type PostgresDriver } from '../../src/postgres/index.js';
import { findPostgres, uniqueSchemaName } from '../support/databases.js';
import { waitFor } from '../support/wait.js';
import * as owners from '../support/claims.js';

const found = await findPostgres();
const url = 'url' in found ? found.url : '';
const Ping = defineEvent('wakeups.ping', Type.Object({ n: Type.Integer() }));
/** Its own event type: its deliveries go to no other case's handler (the stored subscriptions fan out too). */
const Unannounced = defineEvent('wakeups.unannounced', Type.Object({ n: Type.Integer() }));
const LaneProbe = defineEvent('wakeups.lanes', Type.Object({ n: Type.Integer() }));
const POLL_MS = 20_000;
/** Far below the poll interval: only a wake-up delivers this fast. */
const WAKE_BOUND_MS = 2_000;

interface Target {
  readonly name: string;
  readonly server: boolean;
  open(applicationName: string): Promise<{ driver: PostgresDriver<unknown>; end(): Promise<void> }>;
}

const TARGETS: readonly Target[] = [
  {
    name: 'pg',
    server: true,
    async open(applicationName) {
      const pool = new pg.Pool({ connectionString: url, max: 6, application_name: applicationName });
      return { driver: fromPg(pool) as unknown as PostgresDriver<unknown>, end: () => pool.end() };
    },
  },
  {
    name: 'postgres.js',
    server: true,
    async open(applicationName) {
      const sql = postgres(url, { max: 6, onnotice: () => {}, connection: { application_name: applicationName } });
      return { driver: fromPostgresJs(sql) as unknown as PostgresDriver<unknown>, end: () => sql.end({ timeout: 1 }) };
    },
  },
  {
    name: 'PGlite',
    server: false,
    async open() {
      const db = new PGlite();
      return { driver: fromPglite(db) as unknown as PostgresDriver<unknown>, end: () => db.close() };
    },
  },
];

for (const target of TARGETS) {
  const skip = target.server && 'skip' in found ? found.skip : undefined;
  describe(`wake-ups over ${target.name}`, { skip }, () => {
    const schema = uniqueSchemaName(`wakeups_${target.name.replace(/\W/g, '')}`);
    const applicationName = `relaybus-wakeups-${process.pid}-${target.name.replace(/\W/g, '')}`;
    let connection: Awaited<ReturnType<Target['open']>>;

    before(async () => {
      connection = await target.open(applicationName);
    });
    after(async () => {
      await connection.driver.executor.exec(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`).catch(() => {});
      await connection.end();
    });

    async function deliveredAfterPublish(
      bus: ReturnType<typeof createRelayBus>,
      store: ReturnType<typeof postgresStore>,
      seen: number[],
      n: number,
    ): Promise<number> {
      const started = performance.now();
      await store.transaction((tx) => bus.publish(tx as never, Ping, { n }));
      await waitFor(() => seen.includes(n), `event ${n} delivered`, POLL_MS / 2);
      return performance.now() - started;
    }

    it('an idle dispatcher claims a published event at once, also after its listening connection was terminated', async () => {
      const store = postgresStore({ driver: connection.driver, schema });
      assert.equal(store.capabilities.wakeups, 'listen-notify');
      const bus = createRelayBus({ store, events: [Ping], dispatcher: { pollIntervalMs: POLL_MS } });
      const seen: number[] = [];
      bus.on(Ping, 'ping', (payload) => {
        seen.push(payload.n);
      });
      await bus.start();
      try {
        await new Promise((resolve) => setTimeout(resolve, 300)); // the first claim found nothing: the dispatcher idles
        const first = await deliveredAfterPublish(bus, store, seen, 1);
        assert.ok(first < WAKE_BOUND_MS, `delivered ${first.toFixed(0)} ms after the publish (poll ${POLL_MS} ms)`);
        if (target.server) {
          const admin = new pg.Client({ connectionString: url });
          await admin.connect();
          try {
            const killed = await admin.query(
              `SELECT pg_terminate_backend(pid) FROM pg_stat_activity
              WHERE application_name = $1 AND query ILIKE 'LISTEN%'`,
              [applicationName],
            );
            assert.ok(
              killed.rowCount !== null && killed.rowCount >= 1,
              'the listening connection was found and terminated',
            );
          } finally {
            await admin.end();
          }
          await waitFor(
            async () => {
              const probe = new pg.Client({ connectionString: url });
              await probe.connect();
              try {
                const { rows } = await probe.query(
                  `SELECT count(*)::int AS n FROM pg_stat_activity WHERE application_name = $1 AND query ILIKE 'LISTEN%'`,
                  [applicationName],
                );
                return rows[0].n >= 1;
              } finally {
                await probe.end();
              }
            },
            'the listener reconnected',
            10_000,
          );
          const again = await deliveredAfterPublish(bus, store, seen, 2);
          assert.ok(again < WAKE_BOUND_MS, `after the reconnect: delivered ${again.toFixed(0)} ms after the publish`);
        }
      } finally {
        await bus.stop();
      }
    });

    it('a wake-up names the lanes the publish wrote (one event, and a batch), for the next claim to take first', async () => {
      const store = postgresStore({ driver: connection.driver, schema });
      await store.setup();
      const woken: (readonly number[] | undefined)[] = [];
      const unsubscribe = await store.subscribeWakeups!((lanes) => woken.push(lanes));
      try {
        const bus = createRelayBus({ store, events: [LaneProbe], setupStore: false });
        bus.on(LaneProbe, 'lanes', () => {});
        await waitFor(() => woken.length >= 1, 'the listener is up (it wakes once on connect)', 5_000);
        woken.length = 0;
        await store.transaction((tx) => bus.publish(tx as never, LaneProbe, { n: 1 }, { key: 'lane-a' }));
        await waitFor(() => woken.some((lanes) => lanes !== undefined), 'a wake-up with lanes', 5_000);
        assert.deepEqual(
          woken.find((lanes) => lanes !== undefined),
          [laneOf('lane-a', '')],
        );
        woken.length = 0;
        await store.transaction((tx) =>
          bus.publishMany(
            tx as never,
            ['lane-b', 'lane-c', 'lane-b'].map((key, n) => ({ event: LaneProbe, payload: { n }, options: { key } })),
          ),
        );
        await waitFor(() => woken.some((lanes) => lanes !== undefined), 'a wake-up with the batch lanes', 5_000);
        assert.deepEqual(
          [...woken.find((lanes) => lanes !== undefined)!].sort((a, b) => a - b),
          [...new Set([laneOf('lane-b', ''), laneOf('lane-c', '')])].sort((a, b) => a - b),
        );
      } finally {
        await unsubscribe();
      }
    });

    it('freeLanes skip: a claim leaves a free lane it does not name alone; without it, it takes the lane', async () => {
      const store = postgresStore({ driver: connection.driver, schema });
      await store.setup();
      const handlers = [{ name: 'skip-free', maxAttempts: 3 }];
      await store.transaction((tx) =>
        store.publish(tx, [{ type: 'wakeups.skip-free', key: 'skip-free', payload: { n: 1 }, handlers }]),
      );
      const owner = `skip-free-${target.name}`;
      const claim = (extra: { freeLanes?: 'skip'; preferLanes?: number[] }) =>
        owners.claim(store, { owner, handlers: ['skip-free'], limit: 5, leaseDurationMs: 10_000, ...extra });
      try {
        assert.deepEqual(await claim({ freeLanes: 'skip' }), [], 'not named: left alone');
        const named = await claim({ freeLanes: 'skip', preferLanes: [laneOf('skip-free', '')] });
        assert.equal(named.length, 1, 'a named free lane is taken all the same');
        await store.release(named.map((d) => ({ deliveryId: d.id, leaseToken: d.leaseToken })));
        await owners.relinquish(store, owner);
        const taken = await claim({});
        assert.equal(taken.length, 1, 'without freeLanes skip a short claim takes the free lane');
        // Released, or its lane stays held for the lease (relinquish hands back only lanes that run nothing) and a later
        // case's event whose id hashes to this lane waits that long.
        await store.release(taken.map((d) => ({ deliveryId: d.id, leaseToken: d.leaseToken })));
      } finally {
        await owners.relinquish(store, owner);
      }
      await assert.rejects(
        owners.claim(store, {
          owner,
          handlers: ['skip-free'],
          limit: 1,
          leaseDurationMs: 1_000,
          freeLanes: 1 as never,
        }),
        /freeLanes must be 'skip', 'first' or 'when-due'/,
      );
    });

    it('a listening dispatcher still finds work published without NOTIFY, with the claim of its poll', async () => {
      const store = postgresStore({ driver: connection.driver, schema });
      const quiet = postgresStore({ driver: connection.driver, schema, notify: false });
      await store.setup();
      const pollMs = 500;
      const bus = createRelayBus({
        store,
        events: [Unannounced],
        setupStore: false,
        dispatcher: { pollIntervalMs: pollMs },
      });
      const seen: number[] = [];
      bus.on(Unannounced, 'unannounced', (payload) => {
        seen.push(payload.n);
      });
      await bus.start();
      try {
        await new Promise((resolve) => setTimeout(resolve, 300));
        const started = performance.now();
        // Through a bus on the notify: false store (no handler: the fan-out is the subscription the dispatcher's bus
        // recorded): no NOTIFY is sent.
        const publisher = createRelayBus({ store: quiet, events: [Unannounced], setupStore: false });
        await quiet.transaction((tx) => publisher.publish(tx as never, Unannounced, { n: 7 }));
        await waitFor(() => seen.includes(7), 'the unannounced event was delivered', 10_000);
        const took = performance.now() - started;
        assert.ok(took < 3 * pollMs, `delivered ${took.toFixed(0)} ms after the publish (poll ${pollMs} ms)`);
      } finally {
        await bus.stop();
      }
    });

    it('notify: false publishes no NOTIFY and the dispatcher only polls', async () => {
      const store = postgresStore({ driver: connection.driver, schema, notify: false });
      assert.equal(store.capabilities.wakeups, 'poll');
      const bus = createRelayBus({ store, events: [Ping], dispatcher: { pollIntervalMs: POLL_MS } });
      const seen: number[] = [];
      bus.on(Ping, 'ping', (payload) => {
        seen.push(payload.n);
      });
      await bus.start();
      try {
        await new Promise((resolve) => setTimeout(resolve, 300));
        await store.transaction((tx) => bus.publish(tx as never, Ping, { n: 3 }));
        await new Promise((resolve) => setTimeout(resolve, 1_000));
        assert.deepEqual(seen, [], 'without wake-ups the event waits for the next poll');
      } finally {
        await bus.stop();
      }
    });
  });
}

describe('the pg listener gives its connection back clean', { skip: 'skip' in found ? found.skip : undefined }, () => {
  it('twelve buses started and stopped one after another on one pool leave no listener behind', async () => {
    const schema = uniqueSchemaName('wakeups_reuse');
    const pool = new pg.Pool({ connectionString: url, max: 2 });
    const warnings: string[] = [];
    const onWarning = (warning: Error): void => {
      warnings.push(`${warning.name}: ${warning.message}`);
    };
    process.on('warning', onWarning);
    try {
      const store = postgresStore({ driver: fromPg(pool), schema });
      await store.setup();
      for (let round = 0; round < 12; round += 1) {
        const bus = createRelayBus({ store, events: [Ping], dispatcher: { pollIntervalMs: POLL_MS } });
        bus.on(Ping, 'ping', () => {});
        await bus.start();
        await bus.stop();
      }
      await new Promise((resolve) => setImmediate(resolve));
      assert.deepEqual(
        warnings.filter((w) => w.includes('MaxListenersExceeded')),
        [],
      );
    } finally {
      process.off('warning', onWarning);
      await pool.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
      await pool.end();
    }
  });
});
