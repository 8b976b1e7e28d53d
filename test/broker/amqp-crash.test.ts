/**
 * Redelivery after a crash between commit and ack, with real processes: `relaybus inbox` (the real
 * CLI, from source) consumes 3,000 keyed messages and SIGKILLs itself right after a batch committed,
 * before its acks, again and again (RB_KILL_AFTER_COMMITS in fixtures/bridge.config.ts); RabbitMQ
 * redelivers what it held. B's two handlers (one plain, one transactional) run in this process. At
 * the end: each message is one event, every (event, handler) ran exactly once, per key in queue
 * order, and the redelivered batches were committed as duplicates that added nothing.
 */
import assert from 'node:assert/strict';
import { fileURLToPath } from 'node:url';
import { after, before, describe, it } from 'node:test';
import { createRelayBus } from '../../src/index.js';
import { bridgeRunsSql, ItemCreated, recordRun } from './fixtures/bridge-shared.js';
import { killAll, startCli, type CliProcess } from './processes.js';
import { AMQP_URL, openSchema, RabbitAdmin, rabbitSkip, uniqueName, until, type TestSchema } from './support.js';
import { HEADERS } from '../../src/amqp/index.js';

const skip = await rabbitSkip();
const CONFIG = fileURLToPath(new URL('./fixtures/bridge.config.ts', import.meta.url));
const TOTAL = 3_000;
const KEYS = 50;
const KILLS = 5;

describe('amqp inbox: SIGKILL between commit and ack, repeatedly', { skip }, () => {
  let db: TestSchema;
  let admin: RabbitAdmin;
  const processes: CliProcess[] = [];
  let stopBus: (() => Promise<void>) | undefined;

  before(async () => {
    // A connection for each of B's 16 handler slots (b-tx holds one for its transaction, b-plain one per insert) and a few
    // for the claim, renewal and statistics: with 6, handlers and claims queued for connections under CI's load.
    db = await openSchema('amqp_crash', { poolMax: 20 });
    await db.pool.query(bridgeRunsSql(db.schema));
    admin = await RabbitAdmin.open();
  });
  after(async () => {
    await killAll(processes);
    await stopBus?.();
    await admin?.close();
    await db?.drop();
  });

  it('ends with each message once as an event, every (event, handler) run exactly once, in per-key order', {
    timeout: 150_000,
  } /* 20 s alone; it shares 2 cores with the end-to-end crash test in the suite */, async (t) => {
    const queue = uniqueName('crash');
    for (const name of [queue, `${queue}.dead`]) admin.track('queue', name);
    admin.track('exchange', `${queue}.dlx`);
    const env = { RB_ROLE: 'b', DATABASE_URL: db.url, RB_SCHEMA_B: db.schema, AMQP_URL, RB_QUEUE: queue };

    // B's handlers run here, as the inbox feeds them.
    const bus = createRelayBus({
      store: db.store,
      events: [ItemCreated],
      dispatcher: { pollIntervalMs: 20, concurrency: 16, batchSize: 32 },
    });
    const { pool, schema } = db;
    bus.on(ItemCreated, 'b-plain', async (payload, ctx) => {
      await recordRun(pool, schema, 'b-plain', payload, ctx.delivery);
    });
    bus.on(ItemCreated, 'b-tx', { transactional: true }, async (payload, ctx) => {
      await recordRun(ctx.transaction, schema, 'b-tx', payload, ctx.delivery);
    });

    // The queue as the inbox declares it (single active consumer, dead-letter route); then the messages go in.
    await admin.exchange(`${queue}.dlx`, 'direct');
    await admin.queue(`${queue}.dead`);
    await admin.bind(`${queue}.dead`, `${queue}.dlx`, queue);
    await admin.queue(queue, {
      'x-single-active-consumer': true,
      'x-dead-letter-exchange': `${queue}.dlx`,
      'x-dead-letter-routing-key': queue,
    });
    let inbox: CliProcess;
    const messages = Array.from({ length: TOTAL }, (_, n) => ({
      body: JSON.stringify({ n }),
      messageId: `c-${n}`,
      type: ItemCreated.type,
      headers: { [HEADERS.key]: `k-${n % KEYS}` },
    }));
    for (let from = 0; from < TOTAL; from += 500) await admin.publish(queue, messages.slice(from, from + 500));
    await bus.start();
    stopBus = () => bus.stop();

    let kills = 0;
    let duplicates = 0;
    for (let run = 1; run <= KILLS + 1; run += 1) {
      const last = run === KILLS + 1;
      inbox = startCli(`inbox#${run}`, ['inbox', CONFIG, '--verbose'], {
        ...env,
        ...(last ? {} : { RB_KILL_AFTER_COMMITS: String(2 + (run % 4)) }),
      });
      processes.push(inbox);
      if (!last) {
        const exit = await inbox.waitForExit(30_000);
        assert.equal(exit.signal, 'SIGKILL', `run ${run} killed itself after a commit.\nstderr:\n${inbox.stderr}`);
        kills += 1;
      } else {
        await until(
          async () => ((await db.count('relaybus_events')) === TOTAL ? true : undefined),
          `${TOTAL} events in B`,
          30_000,
        );
        inbox.signal('SIGTERM');
        assert.equal(
          (await inbox.waitForExit(15_000)).code,
          0,
          `the last inbox stops gracefully.\nstderr:\n${inbox.stderr}`,
        );
      }
      for (const match of inbox.stdout.matchAll(/committed \d+ messages?: \d+ new events?, (\d+) already seen/g))
        duplicates += Number(match[1]);
    }
    const drainFrom = Date.now();
    await until(
      async () => {
        const stats = await bus.store.statistics();
        return stats.pending + stats.inFlight + stats.dead === 0 ? true : undefined;
      },
      "B's handlers done",
      // B drains at its handlers' pace (a write each), the last of it after every message has arrived.
      60_000,
    );
    t.diagnostic(`B's handlers done ${Date.now() - drainFrom} ms after the last event arrived`);
    await bus.stop();
    stopBus = undefined;

    assert.equal(await db.count('relaybus_events'), TOTAL, 'each message is one event');
    assert.equal((await admin.depth(queue)).messageCount, 0, 'every message acknowledged in the end');
    assert.equal((await admin.depth(`${queue}.dead`)).messageCount, 0, 'nothing dead-lettered');
    const { rows: counts } = await db.pool.query(
      `SELECT handler, count(*)::int AS runs, count(DISTINCT event_id)::int AS events FROM "${db.schema}".bridge_runs GROUP BY handler ORDER BY handler`,
    );
    assert.deepEqual(
      counts,
      [
        { handler: 'b-plain', runs: TOTAL, events: TOTAL },
        { handler: 'b-tx', runs: TOTAL, events: TOTAL },
      ],
      'every (event, handler) ran exactly once',
    );
    const { rows: order } = await db.pool.query(
      `SELECT count(*)::int AS violations FROM (SELECT n, lag(n) OVER (PARTITION BY handler, key ORDER BY id) AS previous FROM "${db.schema}".bridge_runs) r WHERE n < previous`,
    );
    assert.equal((order[0] as { violations: number }).violations, 0, 'per (handler, key), runs in queue order');
    assert.equal(kills, KILLS);
    assert.ok(duplicates > 0, `redelivered batches were committed as duplicates (${duplicates})`);
    t.diagnostic(
      `${kills} SIGKILLs between commit and ack; ${duplicates} redelivered messages committed as duplicates, adding no delivery`,
    );
  });
});
