/**
 * The relay cell: events/s from A's commit, through a real broker, into B's handler, with the
 * end-to-end latency (A's commit returned -> B's handler started) p50/p99, and exactness validated
 * like every other cell: every event handled by B exactly once, per-key order violations 0, nothing
 * pending in A or B, no dead letters. Standalone (not part of bench/run.ts):
 *
 *   node --import tsx bench/relay.ts [--broker amqp|nats] [--events 10000] [--keys 100] [--rate 0]
 *                                     [--relay-concurrency 64] [--b-concurrency 32] [--json]
 *
 * A (schema of its own) publishes N keyed events in transactions of 100 (at --rate events/s, 0 =
 * as fast as it can); its dispatcher runs the relay handler (`relayTo`, publisher confirms or
 * PubAck); B's inbox (one process: this one) commits them into B's schema; B's dispatcher runs a
 * handler that records when it saw each event. Everything runs in this one process, on the
 * machine's broker (AMQP_URL, NATS_URL) and Postgres (DATABASE_URL); it cleans up after itself.
 */
import { randomUUID } from 'node:crypto';
import { parseArgs } from 'node:util';
import pg from 'pg';
import { createRelayBus, defineEvent, Type } from '../src/index.js';
import { fromPg, postgresStore } from '../src/postgres/index.js';
import { amqpInbox, amqpTarget, relayTo, type Inbox } from '../src/amqp/index.js';
import { natsInbox, natsTarget } from '../src/nats/index.js';

const { values } = parseArgs({
  options: {
    broker: { type: 'string', default: 'amqp' },
    events: { type: 'string', default: '10000' },
    keys: { type: 'string', default: '100' },
    rate: { type: 'string', default: '0' },
    'relay-concurrency': { type: 'string', default: '64' },
    'b-concurrency': { type: 'string', default: '32' },
    json: { type: 'boolean', default: false },
  },
});
const broker = values.broker === 'nats' ? 'nats' : 'amqp';
const N = Number(values.events);
const KEYS = Number(values.keys);
const RATE = Number(values.rate);
const relayConcurrency = Number(values['relay-concurrency']);
const bConcurrency = Number(values['b-concurrency']);
const DATABASE_URL = process.env.DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/test';
const AMQP_URL = process.env.AMQP_URL ?? 'amqp://guest:guest@127.0.0.1:5672';
const NATS_URL = process.env.NATS_URL ?? 'nats://127.0.0.1:4222';

const ItemCreated = defineEvent('bench.item', Type.Object({ n: Type.Integer() }));
const tag = `relaybench_${process.pid}_${randomUUID().slice(0, 8)}`;
const percentile = (sorted: Float64Array, p: number) =>
  sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1))] ?? NaN;

async function main(): Promise<number> {
  const pool = new pg.Pool({ connectionString: DATABASE_URL, max: Math.max(relayConcurrency, bConcurrency) + 12 });
  pool.on('error', () => {});
  const storeA = postgresStore({ driver: fromPg(pool), schema: `${tag}_a` });
  const storeB = postgresStore({ driver: fromPg(pool), schema: `${tag}_b` });
  await storeA.setup();
  await storeB.setup();
  const cleanups: (() => Promise<unknown>)[] = [
    () => pool.query(`DROP SCHEMA IF EXISTS "${tag}_a" CASCADE`),
    () => pool.query(`DROP SCHEMA IF EXISTS "${tag}_b" CASCADE`),
  ];
  try {
    // A: the relay handler.
    const busA = createRelayBus({
      store: storeA,
      events: [ItemCreated],
      setupStore: false,
      backoff: { initialDelayMs: 100, maxDelayMs: 1_000 },
      dispatcher: { concurrency: relayConcurrency, batchSize: relayConcurrency, pollIntervalMs: 10 },
    });
    // B: the handler that records.
    const busB = createRelayBus({
      store: storeB,
      events: [ItemCreated],
      setupStore: false,
      dispatcher: { concurrency: bConcurrency, batchSize: bConcurrency * 2, pollIntervalMs: 10 },
    });
    const committedAt = new Float64Array(N).fill(NaN);
    const handledAt = new Float64Array(N).fill(NaN);
    const handledCount = new Uint32Array(N);
    const lastOfKey = new Map<string, number>();
    let orderViolations = 0;
    busB.on(ItemCreated, 'sink', async (payload, ctx) => {
      handledAt[payload.n] = performance.now();
      handledCount[payload.n] = (handledCount[payload.n] ?? 0) + 1;
      const key = ctx.delivery.key ?? '';
      if ((lastOfKey.get(key) ?? -1) > payload.n) orderViolations += 1;
      lastOfKey.set(key, payload.n);
    });

    let inbox: Inbox;
    let closeTarget: () => Promise<void>;
    if (broker === 'amqp') {
      const target = amqpTarget({ url: AMQP_URL });
      closeTarget = () => target.close();
      busA.on(ItemCreated, 'relay', { maxAttempts: 100 }, relayTo(target, { exchange: tag, routingKey: 'item' }));
      inbox = amqpInbox({
        bus: busB,
        url: AMQP_URL,
        queue: tag,
        events: [ItemCreated],
        setupStore: false,
        declare: { bindings: [{ exchange: tag, routingKey: '#' }] },
        deadLetter: { exchange: `${tag}.dlx` },
      });
      cleanups.push(async () => {
        const amqp = (await import('amqplib')).default;
        const connection = await amqp.connect(AMQP_URL);
        const channel = await connection.createChannel();
        for (const queue of [tag, `${tag}.dead`]) await channel.deleteQueue(queue).catch(() => {});
        for (const exchange of [tag, `${tag}.dlx`]) await channel.deleteExchange(exchange).catch(() => {});
        await connection.close();
      });
    } else {
      const target = natsTarget({ servers: NATS_URL });
      closeTarget = () => target.close();
      busA.on(ItemCreated, 'relay', { maxAttempts: 100 }, relayTo(target, { subject: `${tag}.items` }));
      inbox = natsInbox({
        bus: busB,
        servers: NATS_URL,
        stream: tag,
        consumer: 'b',
        events: [ItemCreated],
        setupStore: false,
        declare: { subjects: [`${tag}.items`] },
      });
      cleanups.push(async () => {
        const { connect } = await import('@nats-io/transport-node');
        const { jetstreamManager } = await import('@nats-io/jetstream');
        const nc = await connect({ servers: NATS_URL });
        await (await jetstreamManager(nc)).streams.delete(tag).catch(() => {});
        await nc.close();
      });
    }
    let inboxCommitted = 0;
    let inboxDoneAt = NaN;
    inbox.lifecycle.on('committed', ({ messages }) => {
      inboxCommitted += messages.length;
      if (inboxCommitted >= N && Number.isNaN(inboxDoneAt)) inboxDoneAt = performance.now();
    });
    let relayed = 0;
    let relayDoneAt = NaN;
    busA.lifecycle.on('delivered', () => {
      relayed += 1;
      if (relayed >= N && Number.isNaN(relayDoneAt)) relayDoneAt = performance.now();
    });
    await inbox.start();
    cleanups.push(() => inbox.stop());
    await busB.start();
    cleanups.push(() => busB.stop());
    await busA.start();
    cleanups.push(() => busA.stop());
    cleanups.push(() => closeTarget());

    // A publishes: 100 events per transaction, keyed, at the offered rate.
    const t0 = performance.now();
    for (let from = 0; from < N; from += 100) {
      if (RATE > 0) {
        const due = t0 + (from / RATE) * 1000;
        const wait = due - performance.now();
        if (wait > 0) await new Promise((resolve) => setTimeout(resolve, wait));
      }
      const count = Math.min(100, N - from);
      const items = Array.from({ length: count }, (_, i) => ({
        event: ItemCreated,
        payload: { n: from + i },
        options: { key: `k-${(from + i) % KEYS}` },
      }));
      await storeA.transaction((tx) => busA.publishMany(tx, items));
      const at = performance.now();
      for (let i = 0; i < count; i += 1) committedAt[from + i] = at;
    }
    const published = performance.now();
    const deadline = Date.now() + Math.max(60_000, N * 20);
    while (handledCount.reduce((n, c) => n + (c > 0 ? 1 : 0), 0) < N) {
      if (Date.now() > deadline) break;
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
    const finished = performance.now();
    await new Promise((resolve) => setTimeout(resolve, 500)); // late duplicates would show up here
    const statsA = await storeA.statistics();
    const statsB = await storeB.statistics();

    const lost = handledCount.reduce((n, c) => n + (c === 0 ? 1 : 0), 0);
    const duplicates = handledCount.reduce((n, c) => n + (c > 1 ? c - 1 : 0), 0);
    const latencies = Float64Array.from({ length: N }, (_, i) => handledAt[i]! - committedAt[i]!)
      .filter(Number.isFinite)
      .sort();
    const seconds = (finished - t0) / 1000;
    const result = {
      cell: `relay ${broker} N=${N} keys=${KEYS}${RATE > 0 ? ` rate=${RATE}/s` : ''}`,
      eventsPerSecond: Math.round(N / seconds),
      publishSeconds: Number(((published - t0) / 1000).toFixed(2)),
      /** When the last relay delivery completed in A, and the inbox's last commit in B. */
      relayedSeconds: Number(((relayDoneAt - t0) / 1000).toFixed(2)),
      inboxSeconds: Number(((inboxDoneAt - t0) / 1000).toFixed(2)),
      totalSeconds: Number(seconds.toFixed(2)),
      latencyMs: {
        p50: Number(percentile(latencies, 50).toFixed(1)),
        p99: Number(percentile(latencies, 99).toFixed(1)),
        max: Number(percentile(latencies, 100).toFixed(1)),
      },
      exactness: {
        lost,
        duplicates,
        orderViolations,
        pendingA: statsA.pending + statsA.inFlight,
        pendingB: statsB.pending + statsB.inFlight,
        deadA: statsA.dead,
        deadB: statsB.dead,
      },
    };
    const valid =
      lost === 0 &&
      duplicates === 0 &&
      orderViolations === 0 &&
      result.exactness.pendingA === 0 &&
      result.exactness.pendingB === 0 &&
      statsA.dead === 0 &&
      statsB.dead === 0;
    if (values.json) {
      process.stdout.write(`${JSON.stringify({ ...result, valid })}\n`);
    } else {
      process.stdout.write(
        [
          `stages: A published in ${result.publishSeconds} s, relayed by ${result.relayedSeconds} s, in B's events by ${result.inboxSeconds} s, handled by ${result.totalSeconds} s`,
          '',
          '| cell | events/s (A commit -> B handler) | e2e latency p50 / p99 ms | lost | duplicates | order violations | pending A/B | dead A/B | valid |',
          '| --- | --- | --- | --- | --- | --- | --- | --- | --- |',
          `| ${result.cell} | **${result.eventsPerSecond.toLocaleString('en-US')}** | ${result.latencyMs.p50} / ${result.latencyMs.p99} | ${lost} | ${duplicates} | ${orderViolations} | ${result.exactness.pendingA}/${result.exactness.pendingB} | ${statsA.dead}/${statsB.dead} | ${valid ? 'VALID' : 'INVALID'} |`,
          '',
        ].join('\n'),
      );
    }
    return valid ? 0 : 1;
  } finally {
    for (const cleanup of cleanups.reverse()) await cleanup().catch(() => {});
    await pool.end();
  }
}

process.exitCode = await main();
