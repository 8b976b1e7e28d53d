/**
 * Broker failures that no retry can fix end the relay's delivery at once. A message larger than the broker accepts
 * (RabbitMQ's `maxMessageBytes`, NATS's `max_payload`) is dead after one attempt, with a `maxAttempts` of 1,000 and
 * the `MessageTooLargeError` as its last error, and the next event of the same key goes out behind it. The other
 * failures keep their classes: a route function's name the broker cannot take and a header NATS cannot carry are
 * permanent, a fixed route (configuration, fixed on the broker's side or by a deploy) and a missing stream are not:
 * the relay retries them. Kafka's record errors are classified without a broker, in
 * test/unit/kafka-without-broker.test.ts.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { createRelayBus, defineEvent, isPermanentFailure, Type, type DeadEvent } from '../../src/index.js';
import { amqpTarget, type AmqpRoute } from '../../src/amqp/index.js';
import { BrokerNotFoundError, BrokerRejectedError, MessageTooLargeError, relayTo } from '../../src/broker/index.js';
import { natsTarget, type NatsRoute } from '../../src/nats/index.js';
import type { RelayTarget } from '../../src/broker/relay.js';
import { jetstreamManager } from '@nats-io/jetstream';
import { connect } from '@nats-io/transport-node';
import {
  AMQP_URL,
  NATS_URL,
  natsSkip,
  openSchema,
  RabbitAdmin,
  rabbitSkip,
  uniqueName,
  until,
  type TestSchema,
} from './support.js';

const ItemCreated = defineEvent('item.created', Type.Object({ n: Type.Integer(), pad: Type.Optional(Type.String()) }));

/** A delivery as the relay handler sees it, for calling `relayTo(...)` directly. */
const context = (eventId: string) => ({
  delivery: {
    id: `d-${eventId}`,
    eventId,
    eventType: ItemCreated.type,
    handler: 'h',
    key: null,
    sequence: null,
    attempt: 1,
    maxAttempts: 1,
    headers: {},
    createdAt: new Date(),
  },
  signal: new AbortController().signal,
});

/**
 * Relay a too-large event and a small one of the same key through `target` (maxAttempts 1,000): the large one is
 * dead after one attempt, the small one is sent behind it. Returns what the dead event and its row say.
 */
async function relayTooLargeThenNext<TRoute>(
  db: TestSchema,
  target: RelayTarget<TRoute>,
  route: TRoute,
  handler: string,
  bigPad: string,
): Promise<{ dead: DeadEvent[]; row: { status: string; attempts: number; last_error: string } }> {
  const bus = createRelayBus({
    store: db.store,
    events: [ItemCreated],
    backoff: { initialDelayMs: 60_000, maxDelayMs: 60_000, jitter: 0 },
    dispatcher: { pollIntervalMs: 20 },
  });
  bus.on(ItemCreated, handler, { maxAttempts: 1_000 }, relayTo(target, route));
  const dead: DeadEvent[] = [];
  bus.lifecycle.on('dead', (event) => dead.push(event));
  await db.store.transaction((tx) =>
    bus.publishMany(tx, [
      { event: ItemCreated, payload: { n: 1, pad: bigPad }, options: { id: `${handler}-big`, key: 'k-1' } },
      { event: ItemCreated, payload: { n: 2 }, options: { id: `${handler}-next`, key: 'k-1' } },
    ]),
  );
  await bus.start();
  try {
    await until(
      async () => {
        const stats = await bus.store.statistics();
        return stats.pending + stats.inFlight === 0 ? true : undefined;
      },
      'the big one buried and the next one sent',
      15_000,
    );
  } finally {
    await bus.stop();
    await db.store.unsubscribe({ handler, buryPending: 'the test is over' });
  }
  const { rows } = await db.pool.query(
    `SELECT status, attempts, last_error FROM "${db.schema}".relaybus_deliveries WHERE event_id = $1`,
    [`${handler}-big`],
  );
  return { dead, row: rows[0] as { status: string; attempts: number; last_error: string } };
}

describe('permanent relay failures on RabbitMQ', { skip: await rabbitSkip() }, () => {
  let db: TestSchema;
  let admin: RabbitAdmin;
  const targets: RelayTarget<AmqpRoute>[] = [];
  before(async () => {
    db = await openSchema('permanent_amqp');
    admin = await RabbitAdmin.open();
  });
  after(async () => {
    for (const target of targets) await target.close().catch(() => {});
    await admin?.close();
    await db?.drop();
  });

  it('a message over maxMessageBytes is dead after 1 attempt (maxAttempts 1,000) and the next of its key is delivered', {
    timeout: 30_000,
  }, async () => {
    const exchange = uniqueName('perm-x');
    const queue = uniqueName('perm-q');
    await admin.exchange(exchange);
    await admin.queue(queue);
    await admin.bind(queue, exchange, '#');
    const target = amqpTarget({ url: AMQP_URL, maxMessageBytes: 1_000 });
    targets.push(target);
    const { dead, row } = await relayTooLargeThenNext(
      db,
      target,
      { exchange, routingKey: 'item' },
      'relay-amqp-big',
      'x'.repeat(2_000),
    );
    assert.deepEqual([row.status, row.attempts], ['dead', 1]);
    assert.match(row.last_error, /^MessageTooLargeError: event relay-amqp-big-big .* more than the 1000 bytes/);
    assert.equal(dead.length, 1);
    assert.equal(dead[0]!.delivery.attempt, 1);
    assert.ok(dead[0]!.error instanceof MessageTooLargeError && dead[0]!.error.permanent);
    const messages = await admin.drain(queue);
    assert.deepEqual(
      messages.map((m) => m.properties.messageId),
      ['relay-amqp-big-next'],
    );
  });

  it('a routing key over 255 bytes: permanent from a route function, retried from a fixed route (configuration)', async () => {
    const target = amqpTarget({ url: AMQP_URL });
    targets.push(target);
    const long = 'r'.repeat(300);
    const fromFunction = relayTo(target, { exchange: 'amq.topic', routingKey: () => long });
    await assert.rejects(fromFunction({ n: 1 }, context('e-fn')), (error: unknown) => {
      assert.ok(error instanceof BrokerRejectedError, String(error));
      assert.equal(isPermanentFailure(error), true);
      assert.match(error.message, /route function gave routingKey .* 300 bytes/);
      return true;
    });
    const fixed = relayTo(target, { exchange: 'amq.topic', routingKey: long });
    await assert.rejects(
      fixed({ n: 1 }, context('e-fixed')),
      (error: unknown) => error instanceof BrokerRejectedError && !isPermanentFailure(error),
    );
  });

  it('an exchange that does not exist yet: BrokerNotFoundError saying the inbox declares it (retried, not permanent)', async () => {
    const target = amqpTarget({ url: AMQP_URL });
    targets.push(target);
    await assert.rejects(
      relayTo(target, { exchange: uniqueName('not-yet'), routingKey: 'x' })({ n: 1 }, context('e-nx')),
      (error: unknown) => {
        assert.ok(error instanceof BrokerNotFoundError, String(error));
        assert.equal(isPermanentFailure(error), false);
        assert.match(
          error.message,
          /does not exist.*Start the inbox first: amqpInbox\(\{ declare: \{ bindings \} \}\)/s,
        );
        return true;
      },
    );
  });
});

describe('permanent relay failures on NATS JetStream', { skip: await natsSkip() }, () => {
  let db: TestSchema;
  const streams: string[] = [];
  const targets: RelayTarget<NatsRoute>[] = [];
  const name = (label: string) => uniqueName(label).replace(/\./g, '_');
  before(async () => {
    db = await openSchema('permanent_nats');
  });
  after(async () => {
    for (const target of targets) await target.close().catch(() => {});
    const nc = await connect({ servers: NATS_URL });
    const jsm = await jetstreamManager(nc);
    for (const stream of streams) await jsm.streams.delete(stream).catch(() => {});
    await nc.close();
    await db?.drop();
  });

  async function stream(label: string): Promise<{ name: string; subject: string }> {
    const nc = await connect({ servers: NATS_URL });
    try {
      const jsm = await jetstreamManager(nc);
      const streamName = name(label);
      await jsm.streams.add({ name: streamName, subjects: [`${streamName}.>`] });
      streams.push(streamName);
      return { name: streamName, subject: `${streamName}.items` };
    } finally {
      await nc.close();
    }
  }

  it('a message over max_payload is dead after 1 attempt (maxAttempts 1,000) and the next of its key is delivered', {
    timeout: 30_000,
  }, async () => {
    const s = await stream('perm');
    const target = natsTarget({ servers: NATS_URL });
    targets.push(target);
    const { dead, row } = await relayTooLargeThenNext(
      db,
      target,
      { subject: s.subject },
      'relay-nats-big',
      'x'.repeat(1_100_000),
    );
    assert.deepEqual([row.status, row.attempts], ['dead', 1]);
    assert.match(row.last_error, /^MessageTooLargeError: event relay-nats-big-big .* \(max_payload\); it was not sent/);
    assert.equal(dead.length, 1);
    const nc = await connect({ servers: NATS_URL });
    try {
      const jsm = await jetstreamManager(nc);
      const info = await jsm.streams.info(s.name);
      assert.equal(info.state.messages, 1, 'only the next event reached the stream');
      const message = await jsm.streams.getMessage(s.name, { seq: info.state.first_seq });
      assert.equal(message?.header.get('Nats-Msg-Id'), 'relay-nats-big-next');
    } finally {
      await nc.close();
    }
  });

  it('a header NATS cannot carry and a route function subject it refuses are permanent; a fixed bad subject is retried', async () => {
    const s = await stream('perm-hdr');
    const target = natsTarget({ servers: NATS_URL, timeoutMs: 2_000 });
    targets.push(target);
    const withHeader = { ...context('e-hdr') };
    const headers = { delivery: { ...withHeader.delivery, headers: { 'bad name': 'x' } }, signal: withHeader.signal };
    await assert.rejects(relayTo(target, { subject: s.subject })({ n: 1 }, headers), (error: unknown) => {
      assert.ok(error instanceof BrokerRejectedError, String(error));
      assert.ok(isPermanentFailure(error));
      assert.match(error.message, /has a header NATS cannot carry/);
      return true;
    });
    await assert.rejects(
      relayTo(target, { subject: () => 'with space' })({ n: 1 }, context('e-subj')),
      (error: unknown) => error instanceof BrokerRejectedError && isPermanentFailure(error),
    );
    await assert.rejects(
      relayTo(target, { subject: 'with space' })({ n: 1 }, context('e-subj2')),
      (error: unknown) => error instanceof BrokerRejectedError && !isPermanentFailure(error),
    );
  });

  it('a subject no stream captures: BrokerNotFoundError saying the stream does not exist and what declares it (retried)', async () => {
    const target = natsTarget({ servers: NATS_URL, timeoutMs: 2_000 });
    targets.push(target);
    await assert.rejects(
      relayTo(target, { subject: `${name('nostream')}.items` })({ n: 1 }, context('e-none')),
      (error: unknown) => {
        assert.ok(error instanceof BrokerNotFoundError, String(error));
        assert.equal(isPermanentFailure(error), false);
        assert.match(error.message, /no stream captures subject ".*\.items" \(the stream does not exist yet\)/);
        assert.match(error.message, /Start the inbox first: natsInbox\(\{ declare: \{ subjects \} \}\)/);
        assert.doesNotMatch(error.message, /jetstream is not enabled/i);
        return true;
      },
    );
  });
});
