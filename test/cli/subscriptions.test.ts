/**
 * The command-line side of subscriptions, through the built bin against real Postgres:
 * `subscriptions list` (table, --json, stale marks), `subscriptions remove` (refused while deliveries
 * are pending or in flight with nothing changed, --bury-pending, an unknown handler), `setup
 * --subscriptions <config>` recording the handlers of a config module, and `stats` naming the
 * handlers no live worker runs (and staying quiet on a schema without the subscriptions table).
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import pg from 'pg';
import { fromPg, postgresStore, type PgClientLike, type PostgresStore } from '../../src/postgres/index.js';
import { findPostgres, uniqueSchemaName } from '../support/databases.js';
import { IMPORTS, lines, runCli, tempDir, useBuiltCli, writeModule } from './support.js';
import * as owners from '../support/claims.js';

const found = await findPostgres();
useBuiltCli();

const MINUTE = 60_000;
const BACKOFF = { initialDelayMs: 500, maxDelayMs: 10_000, multiplier: 2, jitter: 0 };

/** A config module: `order.placed` handled by email (3 attempts) and ledger (the bus's 7), `order.paid` by ledger too. */
function configSource(handlers = true): string {
  return `
import pg from '${IMPORTS.pg}';
import { createRelayBus, defineEvent, Type } from '${IMPORTS.relaybus}';
import { fromPg, postgresStore } from '${IMPORTS.postgres}';

const pool = new pg.Pool({ connectionString: process.env.DATABASE_URL, max: 1 });
const store = postgresStore({ driver: fromPg(pool, { closeWithStore: true }), schema: process.env.TEST_SCHEMA });
const OrderPlaced = defineEvent('order.placed', Type.Object({ n: Type.Integer() }));
const OrderPaid = defineEvent('order.paid', Type.Object({ n: Type.Integer() }));
const bus = createRelayBus({ store, events: [OrderPlaced, OrderPaid], maxAttempts: 7, backoff: ${JSON.stringify(BACKOFF)} });
if (${handlers}) {
  bus.on(OrderPlaced, 'email', { maxAttempts: 3 }, async () => {});
  bus.on(OrderPlaced, 'ledger', async () => {});
  bus.on(OrderPaid, 'ledger-paid', async () => {});
}
export default bus;
`;
}

interface ListedJson {
  eventType: string;
  handler: string;
  maxAttempts: number;
  retry: unknown;
  pending: number;
  createdAt: string;
  updatedAt: string;
  seenAt: string | null;
  stale: boolean;
}

describe('relaybus subscriptions, setup --subscriptions, stats noLiveWorker (real Postgres, built bin)', {
  skip: 'skip' in found ? found.skip : undefined,
}, () => {
  const url = 'url' in found ? found.url : '';
  const schema = uniqueSchemaName('cli_subs');
  const setupSchema = uniqueSchemaName('cli_subs_setup');
  const oldSchema = uniqueSchemaName('cli_subs_old');
  const flags = ['--database-url', url, '--schema', schema];
  let pool: pg.Pool;
  let store: PostgresStore<PgClientLike>;

  before(async () => {
    pool = new pg.Pool({ connectionString: url, max: 3 });
    store = postgresStore({ driver: fromPg(pool), schema });
    await store.setup();
    const now = new Date();
    // Two handlers a worker runs now, one whose worker was last seen 10 minutes ago, one with no pending delivery.
    await store.subscribe(
      [
        { eventType: 'order.placed', handler: 'email', maxAttempts: 5, retry: { backoff: BACKOFF } },
        { eventType: 'order.placed', handler: 'ledger', maxAttempts: 3 },
        { eventType: 'order.shipped', handler: 'audit', maxAttempts: 2 },
      ],
      { now },
    );
    await store.subscribe([{ eventType: 'order.paid', handler: 'fax', maxAttempts: 1 }], {
      now: new Date(now.getTime() - 10 * MINUTE),
    });
    // A publisher that registers no handler: the subscriptions decide the deliveries.
    await publish('order.placed', 2);
    await publish('order.paid', 3);
  });
  after(async () => {
    for (const name of [schema, setupSchema, oldSchema]) await pool?.query(`DROP SCHEMA IF EXISTS "${name}" CASCADE`);
    await pool?.end();
  });

  async function publish(type: string, count: number, handlers: readonly string[] = []): Promise<void> {
    await store.transaction((tx) =>
      store.publish(
        tx,
        Array.from({ length: count }, (_, n) => ({
          type,
          payload: { n },
          handlers: handlers.map((name) => ({ name, maxAttempts: 2 })),
        })),
      ),
    );
  }

  async function deliveries(handler: string): Promise<{ status: string; last_error: string | null }[]> {
    const { rows } = await pool.query<{ status: string; last_error: string | null }>(
      `SELECT status, last_error FROM "${schema}".relaybus_deliveries WHERE handler = $1 ORDER BY id`,
      [handler],
    );
    return rows;
  }

  const subscribed = async () => (await store.listSubscriptions()).map((s) => `${s.eventType}/${s.handler}`);

  it('list prints what the workers subscribed, with pending counts and stale marks', { timeout: 30_000 }, async () => {
    const result = await runCli(['subscriptions', 'list', ...flags]);
    assert.equal(result.code, 0, result.stderr);
    const out = lines(result.stdout);
    assert.match(out[0]!, /^EVENT TYPE\s+HANDLER\s+MAX ATTEMPTS\s+PENDING\s+LAST SEEN$/);
    assert.match(out[1]!, /^order\.paid\s+fax\s+1\s+3\s+10m(0\ds)? ago\s+stale$/);
    assert.match(out[2]!, /^order\.placed\s+email\s+5\s+2\s+\S+ ago$/);
    assert.match(out[3]!, /^order\.placed\s+ledger\s+3\s+2\s+\S+ ago$/);
    assert.match(out[4]!, /^order\.shipped\s+audit\s+2\s+0\s+\S+ ago$/);
    assert.equal(out[5], '');
    assert.match(out[6]!, /^4 subscriptions, 1 stale: no worker said it runs the handler in the last 3m/);
    assert.equal(out.length, 7);
  });

  it('list --json has one object per subscription, stale when not seen for 3 refreshes', {
    timeout: 30_000,
  }, async () => {
    const result = await runCli(['subscriptions', 'list', '--json', ...flags]);
    assert.equal(result.code, 0, result.stderr);
    const listed = JSON.parse(result.stdout) as ListedJson[];
    assert.deepEqual(
      listed.map(({ createdAt, updatedAt, seenAt, ...rest }) => rest),
      [
        { eventType: 'order.paid', handler: 'fax', maxAttempts: 1, retry: null, pending: 3, stale: true },
        {
          eventType: 'order.placed',
          handler: 'email',
          maxAttempts: 5,
          retry: { backoff: BACKOFF },
          pending: 2,
          stale: false,
        },
        { eventType: 'order.placed', handler: 'ledger', maxAttempts: 3, retry: null, pending: 2, stale: false },
        { eventType: 'order.shipped', handler: 'audit', maxAttempts: 2, retry: null, pending: 0, stale: false },
      ],
    );
    const fax = listed[0]!;
    assert.ok(
      Date.now() - Date.parse(fax.seenAt!) >= 10 * MINUTE - 5_000,
      'seenAt is when the worker said so, as ISO text',
    );
    for (const entry of listed)
      assert.ok(!Number.isNaN(Date.parse(entry.createdAt)) && !Number.isNaN(Date.parse(entry.updatedAt)));
  });

  it('stats names the handlers with pending deliveries and no live worker (stale or missing subscription)', {
    timeout: 30_000,
  }, async () => {
    await publish('order.placed', 1, ['legacy']); // a handler that was never subscribed: its deliveries wait for nobody too
    const json = await runCli(['stats', '--json', ...flags]);
    assert.equal(json.code, 0, json.stderr);
    const stats = JSON.parse(json.stdout) as { noLiveWorker?: string[]; handlers: Record<string, { pending: number }> };
    assert.deepEqual(stats.noLiveWorker, ['fax', 'legacy']);
    assert.equal(stats.handlers.email!.pending, 3, 'the rest of the JSON is unchanged');

    const table = await runCli(['stats', ...flags]);
    assert.equal(table.code, 0, table.stderr);
    const out = lines(table.stdout);
    assert.match(out.find((line) => line.startsWith('fax '))!, /\s+3\s+3\s+0\s+0\s+0\s+\S+ \*$/);
    assert.match(out.find((line) => line.startsWith('legacy '))!, / \*$/);
    for (const handler of ['email', 'ledger', 'total'])
      assert.doesNotMatch(out.find((line) => line.startsWith(`${handler} `))!, /\*$/, handler);
    assert.match(table.stdout, /\n\n\* no live worker runs fax, legacy: their deliveries wait/);
    await pool.query(`DELETE FROM "${schema}".relaybus_deliveries WHERE handler = 'legacy'`);
  });

  it('remove is refused while deliveries are pending, and changes nothing', { timeout: 30_000 }, async () => {
    const result = await runCli(['subscriptions', 'remove', 'fax', ...flags]);
    assert.equal(result.code, 1, result.stderr);
    assert.equal(result.stdout, '');
    assert.equal(lines(result.stderr).length, 1, result.stderr);
    assert.match(
      result.stderr,
      /^relaybus: Cannot unsubscribe handler "fax": 3 of its deliveries are pending.+--bury-pending.+nothing was changed\.\n$/,
    );
    assert.ok((await subscribed()).includes('order.paid/fax'));
    assert.deepEqual(
      (await deliveries('fax')).map((d) => d.status),
      ['pending', 'pending', 'pending'],
    );
  });

  it('remove is refused while a worker runs a delivery, even with --bury-pending', { timeout: 30_000 }, async () => {
    const before = await deliveries('email');
    const claimed = await owners.claim(store, {
      owner: 'cli-subs-test',
      handlers: ['email'],
      limit: 1,
      leaseDurationMs: 60_000,
    });
    assert.equal(claimed.length, 1);
    try {
      const result = await runCli(['subscriptions', 'remove', 'email', '--bury-pending', 'retired', ...flags]);
      assert.equal(result.code, 1, result.stderr);
      assert.match(result.stderr, /^relaybus: Cannot unsubscribe handler "email": 1 of its deliveries are running/);
      assert.ok((await subscribed()).includes('order.placed/email'));
      assert.ok(before.length >= 2);
      assert.deepEqual(await deliveries('email'), before, 'nothing was buried');
    } finally {
      await owners.relinquish(store, 'cli-subs-test');
    }
  });

  it('remove --bury-pending moves the pending deliveries to the dead letters and removes the subscription', {
    timeout: 30_000,
  }, async () => {
    const result = await runCli(['subscriptions', 'remove', 'fax', '--bury-pending', 'fax retired', ...flags]);
    assert.equal(result.code, 0, result.stderr);
    assert.equal(
      result.stdout,
      'removed 1 subscription of handler "fax" (order.paid); buried 3 pending deliveries with the reason "fax retired" ' +
        '(relaybus dead list --handler fax shows them)\n',
      'a stale subscription: no note about a worker subscribing it again',
    );
    assert.ok(!(await subscribed()).includes('order.paid/fax'));
    assert.deepEqual(
      await deliveries('fax'),
      Array.from({ length: 3 }, () => ({ status: 'dead', last_error: 'fax retired' })),
    );
  });

  it('remove --event-type --json of a live subscription without pending deliveries, with a note in text', {
    timeout: 30_000,
  }, async () => {
    await store.subscribe([{ eventType: 'order.paid', handler: 'audit', maxAttempts: 2 }]);
    const json = await runCli([
      'subscriptions',
      'remove',
      'audit',
      '--event-type',
      'order.shipped',
      '--json',
      ...flags,
    ]);
    assert.equal(json.code, 0, json.stderr);
    assert.deepEqual(JSON.parse(json.stdout), {
      handler: 'audit',
      eventType: 'order.shipped',
      removed: 1,
      buried: 0,
      eventTypes: ['order.shipped'],
    });
    assert.ok((await subscribed()).includes('order.paid/audit'), 'only the named type was removed');

    const text = await runCli(['subscriptions', 'remove', 'audit', ...flags]);
    assert.equal(text.code, 0, text.stderr);
    const out = lines(text.stdout);
    assert.equal(out[0], 'removed 1 subscription of handler "audit" (order.paid)');
    assert.match(
      out[1]!,
      /^note: a worker ran this handler within the last 3m; if it still does, it subscribes it again/,
    );
  });

  it('remove of a handler with no subscription says nothing was subscribed and exits 1', {
    timeout: 30_000,
  }, async () => {
    const before = await subscribed();
    const result = await runCli(['subscriptions', 'remove', 'nobody', ...flags]);
    assert.equal(result.code, 1);
    assert.equal(result.stdout, '');
    assert.match(
      result.stderr,
      /^relaybus: nothing was subscribed: handler "nobody" has no subscription in schema "[^"]+"; nothing changed/,
    );
    const typed = await runCli(['subscriptions', 'remove', 'email', '--event-type', 'order.paid', ...flags]);
    assert.equal(typed.code, 1);
    assert.match(
      typed.stderr,
      /nothing was subscribed: handler "email" for event type "order.paid" has no subscription/,
    );
    assert.deepEqual(await subscribed(), before);
  });

  it('usage: a subcommand and a handler are required, flags belong to their subcommand, --help documents both', {
    timeout: 30_000,
  }, async () => {
    const cases: [string[], RegExp][] = [
      [['subscriptions'], /needs a subcommand: list or remove/],
      [['subscriptions', 'drop'], /unknown command "subscriptions drop"/],
      [['subscriptions', 'remove'], /needs the handler name/],
      [['subscriptions', 'remove', 'a', 'b'], /unexpected argument "b"/],
      [
        ['subscriptions', 'list', '--bury-pending', 'x'],
        /unknown option '--bury-pending' \(see relaybus subscriptions list --help\)/,
      ],
      [['subscriptions', 'remove', 'fax', '--bury-pending', ' '], /--bury-pending needs a reason/],
    ];
    for (const [args, pattern] of cases) {
      const result = await runCli([...args, ...flags]);
      assert.equal(result.code, 2, `${args.join(' ')}: ${result.stderr}`);
      assert.equal(lines(result.stderr).length, 1, result.stderr);
      assert.match(result.stderr, pattern);
    }
    const help = await runCli(['subscriptions', 'remove', '--help']);
    assert.equal(help.code, 0);
    const out = lines(help.stdout);
    assert.match(out[0]!, /^Usage: relaybus subscriptions list/);
    assert.match(out[1]!, /^ {7}relaybus subscriptions remove <handler>/);
    assert.ok(out.includes('Exit codes:'));
    assert.ok(out.some((line) => /^ {2}1 {2}remove refused/.test(line)));
    assert.ok(
      out.some((line) => /nothing was subscribed/.test(line)),
      'the exit code of an unknown handler is documented',
    );
    for (const line of out) assert.ok(line.length <= 100, line);
    assert.match((await runCli(['--help'])).stdout, /^ {2}subscriptions\s+\S/m);
  });

  it('setup --subscriptions sets up the schema and records the handlers of the config module', {
    timeout: 60_000,
  }, async () => {
    const dir = tempDir('subs');
    const config = writeModule(dir, 'bus.mjs', configSource());
    const env = { DATABASE_URL: url, TEST_SCHEMA: setupSchema };
    const result = await runCli(['setup', '--schema', setupSchema, '--subscriptions', 'bus.mjs'], { cwd: dir, env });
    assert.equal(result.code, 0, result.stderr);
    const out = lines(result.stdout);
    assert.match(out[0]!, new RegExp(`^relaybus: schema "${setupSchema}" on .+ is set up`));
    assert.equal(
      out[1],
      'relaybus: recorded 3 subscriptions of the handlers of bus.mjs (order.placed: email, ledger; order.paid: ledger-paid)',
    );
    const setupStore = postgresStore({ driver: fromPg(pool), schema: setupSchema });
    const recorded = await setupStore.listSubscriptions();
    assert.deepEqual(
      recorded.map(({ eventType, handler, maxAttempts, retry }) => ({ eventType, handler, maxAttempts, retry })),
      [
        { eventType: 'order.paid', handler: 'ledger-paid', maxAttempts: 7, retry: { backoff: BACKOFF } },
        { eventType: 'order.placed', handler: 'email', maxAttempts: 3, retry: { backoff: BACKOFF } },
        { eventType: 'order.placed', handler: 'ledger', maxAttempts: 7, retry: { backoff: BACKOFF } },
      ],
    );
    // A publisher with no handler of its own now fans out to them.
    const [published] = await setupStore.transaction((tx) =>
      setupStore.publish(tx, [{ type: 'order.placed', payload: { n: 1 }, handlers: [] }]),
    );
    assert.deepEqual([...published!.addedHandlers].sort(), ['email', 'ledger']);

    // A module without handlers, or on another schema, is refused before anything changes.
    writeModule(dir, 'empty.mjs', configSource(false));
    const empty = await runCli(['setup', '--schema', oldSchema, '--subscriptions', 'empty.mjs'], {
      cwd: dir,
      env: { ...env, TEST_SCHEMA: oldSchema },
    });
    assert.equal(empty.code, 1);
    assert.match(empty.stderr, /^relaybus: empty\.mjs registers no handler \(bus\.on\)/);
    const other = await runCli(['setup', '--schema', oldSchema, '--subscriptions', config], { cwd: dir, env });
    assert.equal(other.code, 2);
    assert.match(
      other.stderr,
      new RegExp(
        `the bus of bus\\.mjs uses schema "${setupSchema}", and this setup works on "${oldSchema}": pass --schema ${setupSchema}`,
      ),
    );
    const missing = await runCli(['setup', '--schema', oldSchema, '--subscriptions', 'nope.mjs'], { cwd: dir, env });
    assert.equal(missing.code, 2);
    assert.match(missing.stderr, /config module not found: nope\.mjs/);
    const { rows } = await pool.query('SELECT 1 FROM information_schema.schemata WHERE schema_name = $1', [oldSchema]);
    assert.equal(rows.length, 0, 'the refused runs created nothing');
  });

  it('stats works without the mark on a schema that has no subscriptions table (older schema)', {
    timeout: 30_000,
  }, async () => {
    const old = postgresStore({ driver: fromPg(pool), schema: oldSchema });
    await old.setup();
    await old.transaction((tx) =>
      old.publish(tx, [{ type: 'order.placed', payload: { n: 1 }, handlers: [{ name: 'email', maxAttempts: 1 }] }]),
    );
    await pool.query(`DROP TABLE "${oldSchema}".relaybus_subscriptions`);
    const oldFlags = ['--database-url', url, '--schema', oldSchema];
    const json = await runCli(['stats', '--json', ...oldFlags]);
    assert.equal(json.code, 0, json.stderr);
    const stats = JSON.parse(json.stdout) as Record<string, unknown>;
    assert.equal(stats.pending, 1);
    assert.ok(!('noLiveWorker' in stats), 'liveness is unknown: no field');
    const table = await runCli(['stats', ...oldFlags]);
    assert.equal(table.code, 0, table.stderr);
    assert.doesNotMatch(table.stdout, /\*/);
    assert.match(table.stdout, /^email\s+1\s+1\s+0\s+0\s+0\s+\S+$/m);
  });

  it('stats shows no mark while no subscription is recorded at all (liveness unknown)', {
    timeout: 30_000,
  }, async () => {
    await pool.query(`DELETE FROM "${schema}".relaybus_subscriptions`);
    const json = await runCli(['stats', '--json', ...flags]);
    assert.equal(json.code, 0, json.stderr);
    const stats = JSON.parse(json.stdout) as { pending: number } & Record<string, unknown>;
    assert.ok(stats.pending > 0);
    assert.ok(!('noLiveWorker' in stats));
  });
});
