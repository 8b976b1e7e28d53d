/**
 * End to end across two databases (two schemas), with real processes and SIGKILLs: service A
 * publishes 10,000 keyed events in its own transactions; A's relay (`relaybus worker`, the relay
 * handler of fixtures/bridge.config.ts) sends them to RabbitMQ with publisher confirms; B's inbox
 * (`relaybus inbox`) turns them into B's events; B's handlers (one plain, one transactional) run in
 * this process. The relay worker and the inbox are SIGKILLed mid-run, several times, and restarted.
 * At the end B saw every event, each B handler ran once per event, per-key order held in B, and
 * nothing is pending in A or B.
 */
import assert from 'node:assert/strict';
import { fileURLToPath } from 'node:url';
import { after, before, describe, it } from 'node:test';
import { createRelayBus } from '../../src/index.js';
import { bridgeRunsSql, ItemCreated, recordRun } from './fixtures/bridge-shared.js';
import { killAll, startCli, type CliProcess } from './processes.js';
import { AMQP_URL, openSchema, RabbitAdmin, rabbitSkip, uniqueName, until, type TestSchema } from './support.js';

const skip = await rabbitSkip();
const CONFIG = fileURLToPath(new URL('./fixtures/bridge.config.ts', import.meta.url));
const TOTAL = 10_000;
const KEYS = 100;
const ROUNDS = 3;

describe('end to end: A -> relay -> RabbitMQ -> inbox -> B, with SIGKILLs of the relay worker and the inbox', {
  skip,
}, () => {
  let a: TestSchema;
  let b: TestSchema;
  let admin: RabbitAdmin;
  const processes: CliProcess[] = [];
  let stopB: (() => Promise<void>) | undefined;

  before(async () => {
    a = await openSchema('e2e_a');
    // A connection for each of B's handler slots (b-tx holds one for its transaction, b-plain one per insert) and a few
    // for the claim, renewal and statistics: a claim never queues behind the handlers for a connection.
    b = await openSchema('e2e_b', { poolMax: 20 });
    await b.pool.query(bridgeRunsSql(b.schema));
    admin = await RabbitAdmin.open();
  });
  after(async () => {
    await killAll(processes);
    await stopB?.();
    await admin?.close();
    await a?.drop();
    await b?.drop();
  });

  it('B sees every event once per handler, in per-key order; nothing left pending in A or B', {
    // As its twins (amqp-crash, nats-crash): under CI's load every phase runs about twice as long as alone.
    timeout: 150_000,
  }, async (t) => {
    const exchange = uniqueName('e2e-x');
    const queue = uniqueName('e2e-q');
    admin.track('exchange', exchange);
    admin.track('exchange', `${queue}.dlx`);
    admin.track('queue', queue);
    admin.track('queue', `${queue}.dead`);
    await admin.exchange(exchange);
    await admin.exchange(`${queue}.dlx`, 'direct');
    await admin.queue(`${queue}.dead`);
    await admin.bind(`${queue}.dead`, `${queue}.dlx`, queue);
    await admin.queue(queue, {
      'x-single-active-consumer': true,
      'x-dead-letter-exchange': `${queue}.dlx`,
      'x-dead-letter-routing-key': queue,
    });
    await admin.bind(queue, exchange, '#');
    const env = {
      DATABASE_URL: a.url,
      AMQP_URL,
      RB_EXCHANGE: exchange,
      RB_QUEUE: queue,
      RB_SCHEMA_A: a.schema,
      RB_SCHEMA_B: b.schema,
      RB_LEASE_MS: '1500',
      RB_CONCURRENCY: '64',
    };
    const relayEnv = { ...env, RB_ROLE: 'a' };
    const inboxEnv = { ...env, RB_ROLE: 'b' };

    // A's bus, only to publish (the relay handler is registered so the deliveries exist).
    const publisher = createRelayBus({ store: a.store, events: [ItemCreated] });
    publisher.on(ItemCreated, 'relay', { maxAttempts: 1_000 }, async () => {});
    // B's handlers, in this process.
    const busB = createRelayBus({
      store: b.store,
      events: [ItemCreated],
      dispatcher: { pollIntervalMs: 20, concurrency: 16, batchSize: 32 },
    });
    busB.on(ItemCreated, 'b-plain', (payload, ctx) => recordRun(b.pool, b.schema, 'b-plain', payload, ctx.delivery));
    busB.on(ItemCreated, 'b-tx', { transactional: true }, (payload, ctx) =>
      recordRun(ctx.transaction, b.schema, 'b-tx', payload, ctx.delivery),
    );
    await busB.start();
    stopB = () => busB.stop();

    const began = Date.now();
    let relay = startCli('relay#0', ['worker', CONFIG], relayEnv);
    let inbox = startCli('inbox#0', ['inbox', CONFIG, '--verbose'], inboxEnv);
    processes.push(relay, inbox);
    const duplicatesOf = (p: CliProcess) =>
      [...p.stdout.matchAll(/committed \d+ events? \((\d+) duplicate\)/g)].reduce((n, m) => n + Number(m[1]), 0);
    let duplicates = 0;

    // A publishes in its own transactions, 100 events each, while the relay runs.
    const publishing = (async () => {
      for (let from = 0; from < TOTAL; from += 100) {
        const items = Array.from({ length: 100 }, (_, i) => ({
          event: ItemCreated,
          payload: { n: from + i },
          options: { id: `e-${from + i}`, key: `k-${(from + i) % KEYS}` },
        }));
        await a.store.transaction((tx) => publisher.publishMany(tx, items));
      }
    })();

    const inB = () => b.count('relaybus_events');
    for (let round = 1; round <= ROUNDS; round += 1) {
      await until(
        async () => ((await inB()) >= (TOTAL * round) / (ROUNDS + 1) ? true : undefined),
        `${round}/${ROUNDS + 1} of the events in B`,
        40_000,
        20,
      );
      relay.signal('SIGKILL');
      inbox.signal('SIGKILL');
      await relay.waitForExit(10_000);
      await inbox.waitForExit(10_000);
      duplicates += duplicatesOf(inbox);
      t.diagnostic(
        `round ${round}: killed the relay worker and the inbox at ${Date.now() - began} ms with ${await inB()} events in B`,
      );
      relay = startCli(`relay#${round}`, ['worker', CONFIG], relayEnv);
      inbox = startCli(`inbox#${round}`, ['inbox', CONFIG, '--verbose'], inboxEnv);
      processes.push(relay, inbox);
    }
    await publishing;
    await until(async () => ((await inB()) === TOTAL ? true : undefined), `all ${TOTAL} events in B`, 45_000, 50);
    const allInB = Date.now() - began;
    const done = async (store: TestSchema['store']) => {
      const stats = await store.statistics();
      return stats.pending + stats.inFlight + stats.dead === 0;
    };
    await until(
      async () => ((await done(a.store)) && (await done(b.store)) ? true : undefined),
      'nothing pending in A or B',
      // B drains its 20,000 deliveries at its handlers' pace (a write each; 550-600/s alone here), the last of them
      // after every event has arrived.
      60_000,
      50,
    ).catch(async (error: unknown) => {
      // Say what is stuck: the deliveries left and the lanes that hold them, and what the relay worker logged last.
      for (const side of [a, b]) t.diagnostic(`${side.schema}: ${JSON.stringify(await side.leftovers())}`);
      t.diagnostic(`relay worker, last output:\n${relay.stdout.slice(-1_500)}`);
      throw error;
    });
    for (const p of [relay, inbox]) p.signal('SIGTERM');
    for (const p of [relay, inbox])
      assert.equal(
        (await p.waitForExit(15_000)).code,
        0,
        `${p.label} stops gracefully.\nstderr:\n${p.stderr.slice(-2_000)}`,
      );
    duplicates += duplicatesOf(inbox);
    await busB.stop();
    stopB = undefined;

    assert.equal(await b.count('relaybus_events'), TOTAL, 'B saw every event');
    assert.equal(
      await b.count('relaybus_events', `id NOT IN (SELECT id FROM "${a.schema}".relaybus_events)`),
      0,
      "with A's event ids",
    );
    const { rows: counts } = await b.pool.query(
      `SELECT handler, count(*)::int AS runs, count(DISTINCT event_id)::int AS events FROM "${b.schema}".bridge_runs GROUP BY handler ORDER BY handler`,
    );
    assert.deepEqual(
      counts,
      [
        { handler: 'b-plain', runs: TOTAL, events: TOTAL },
        { handler: 'b-tx', runs: TOTAL, events: TOTAL },
      ],
      'each B handler ran once per event',
    );
    const { rows: order } = await b.pool.query(
      `SELECT count(*)::int AS violations FROM (SELECT n, lag(n) OVER (PARTITION BY handler, key ORDER BY id) AS previous FROM "${b.schema}".bridge_runs) r WHERE n < previous`,
    );
    assert.equal(
      (order[0] as { violations: number }).violations,
      0,
      "per (handler, key), B ran the events in A's order",
    );
    assert.equal(await a.count('relaybus_deliveries'), 0, 'nothing pending in A');
    assert.equal(await b.count('relaybus_deliveries'), 0, 'nothing pending in B');
    assert.equal((await admin.depth(queue)).messageCount, 0);
    assert.equal((await admin.depth(`${queue}.dead`)).messageCount, 0, 'nothing dead-lettered');
    t.diagnostic(
      `${TOTAL} events: all in B after ${allInB} ms with ${ROUNDS} SIGKILLs each of the relay worker and the inbox; ${duplicates} messages arrived twice (relay re-sends after a kill, inbox redeliveries) and added nothing`,
    );
  });
});
