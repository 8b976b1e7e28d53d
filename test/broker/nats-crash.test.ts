/**
 * The NATS JetStream inbox SIGKILLed between commit and ack, again and again, with real processes
 * (`relaybus inbox`, RB_BROKER=nats in fixtures/bridge.config.ts) on a stream of its own on the
 * shared nats-server. JetStream redelivers what the dead process held after the ack wait, while the
 * next process already receives newer messages: its start-up gate holds those back until the old
 * ones came back. At the end: each message is one event, B's two handlers (run here) ran exactly
 * once per event, per key in stream order, and the redelivered batches were duplicates.
 */
import assert from 'node:assert/strict';
import { fileURLToPath } from 'node:url';
import { after, before, describe, it } from 'node:test';
import { connect, headers, type NatsConnection } from '@nats-io/transport-node';
import { AckPolicy, jetstream, jetstreamManager } from '@nats-io/jetstream';
import { createRelayBus } from '../../src/index.js';
import { HEADERS } from '../../src/nats/index.js';
import { bridgeRunsSql, ItemCreated, recordRun } from './fixtures/bridge-shared.js';
import { killAll, startCli, type CliProcess } from './processes.js';
import { NATS_URL, natsSkip, openSchema, uniqueName, until, type TestSchema } from './support.js';

const skip = await natsSkip();
const CONFIG = fileURLToPath(new URL('./fixtures/bridge.config.ts', import.meta.url));
const TOTAL = 2_000;
const KEYS = 40;
const KILLS = 4;

describe('nats inbox: SIGKILL between commit and ack, repeatedly', { skip }, () => {
  let db: TestSchema;
  let nc: NatsConnection;
  let stream = '';
  const processes: CliProcess[] = [];
  let stopBus: (() => Promise<void>) | undefined;

  before(async () => {
    // A connection for each of B's 16 handler slots (b-tx holds one for its transaction, b-plain one per insert) and a few
    // for the claim, renewal and statistics: with 6, handlers and claims queued for connections under CI's load.
    db = await openSchema('nats_crash', { poolMax: 20 });
    await db.pool.query(bridgeRunsSql(db.schema));
    nc = await connect({ servers: NATS_URL });
  });
  after(async () => {
    await killAll(processes);
    await stopBus?.();
    if (stream !== '') await (await jetstreamManager(nc)).streams.delete(stream).catch(() => {});
    await nc?.close();
    await db?.drop();
  });

  it('ends with each message once as an event, every (event, handler) run exactly once, in per-key order', {
    // Five inbox processes started one after another, each waited for up to 30 s: 60 s ran out on a loaded machine
    // (the AMQP twin of this test took 73 s there). The waits inside fail first, with what they waited for.
    timeout: 150_000,
  }, async (t) => {
    stream = uniqueName('natscrash').replace(/\./g, '_');
    const subject = `${stream}.items`;
    const jsm = await jetstreamManager(nc);
    await jsm.streams.add({ name: stream, subjects: [subject] });
    await jsm.consumers.add(stream, {
      durable_name: 'b',
      ack_policy: AckPolicy.Explicit,
      ack_wait: 2e9,
      max_ack_pending: 300,
    });
    const js = jetstream(nc);
    for (let n = 0; n < TOTAL; n += 1) {
      const h = headers();
      h.set(HEADERS.type, ItemCreated.type);
      h.set(HEADERS.key, `k-${n % KEYS}`);
      await js.publish(subject, JSON.stringify({ n }), { msgID: `nc-${n}`, headers: h });
    }
    const env = {
      RB_ROLE: 'b',
      RB_BROKER: 'nats',
      DATABASE_URL: db.url,
      RB_SCHEMA_B: db.schema,
      NATS_URL,
      RB_STREAM: stream,
      RB_CONSUMER: 'b',
    };

    const bus = createRelayBus({
      store: db.store,
      events: [ItemCreated],
      dispatcher: { pollIntervalMs: 20, concurrency: 16, batchSize: 32 },
    });
    bus.on(ItemCreated, 'b-plain', (payload, ctx) => recordRun(db.pool, db.schema, 'b-plain', payload, ctx.delivery));
    bus.on(ItemCreated, 'b-tx', { transactional: true }, (payload, ctx) =>
      recordRun(ctx.transaction, db.schema, 'b-tx', payload, ctx.delivery),
    );
    await bus.start();
    stopBus = () => bus.stop();

    let duplicates = 0;
    let held = 0;
    for (let run = 1; run <= KILLS + 1; run += 1) {
      const last = run === KILLS + 1;
      const inbox = startCli(`inbox#${run}`, ['inbox', CONFIG, '--verbose'], {
        ...env,
        ...(last ? {} : { RB_KILL_AFTER_COMMITS: String(2 + (run % 3)) }),
      });
      processes.push(inbox);
      if (!last) {
        const exit = await inbox.waitForExit(30_000);
        assert.equal(exit.signal, 'SIGKILL', `run ${run} killed itself after a commit.\nstderr:\n${inbox.stderr}`);
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
      if (/are unacknowledged; newer (ones|messages) wait/.test(inbox.stdout)) held += 1;
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

    assert.equal(await db.count('relaybus_events'), TOTAL);
    assert.equal((await jsm.consumers.info(stream, 'b')).num_ack_pending, 0, 'every message acknowledged in the end');
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
    assert.equal((order[0] as { violations: number }).violations, 0, 'per (handler, key), runs in stream order');
    assert.ok(duplicates > 0, `redelivered batches were committed as duplicates (${duplicates})`);
    assert.ok(held >= KILLS, `every restarted inbox held newer messages back until the dead one's came back (${held})`);
    t.diagnostic(
      `${KILLS} SIGKILLs between commit and ack; ${duplicates} redelivered messages committed as duplicates; ${held} starts held newer messages back`,
    );
  });
});
