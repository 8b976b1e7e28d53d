/**
 * The RabbitMQ relay handler against the local RabbitMQ and Postgres: each event is published with
 * message id = event id, type, key and headers, in per-key order, and its delivery completes only
 * after the publisher confirm; a broker that is down (a proxy the test takes down and brings back)
 * makes the handler fail and retry until it is back, and nothing is lost; unroutable messages, a
 * missing exchange and an oversized message are typed failures, never completions.
 */
import assert from 'node:assert/strict';
import { after, afterEach, before, describe, it } from 'node:test';
import { createRelayBus, defineEvent, Type, type FailedEvent } from '../../src/index.js';
import { amqpTarget, HEADERS, relayTo, type RelayTarget, type AmqpRoute } from '../../src/amqp/index.js';
import type { PgClientLike } from '../../src/postgres/index.js';
import type { Store } from '../../src/store/contract.js';
import {
  AMQP_URL,
  openSchema,
  RabbitAdmin,
  rabbitSkip,
  TcpProxy,
  uniqueName,
  until,
  type TestSchema,
} from './support.js';

const skip = await rabbitSkip();
const ItemCreated = defineEvent('item.created', Type.Object({ n: Type.Integer(), pad: Type.Optional(Type.String()) }));

describe('amqp relay', { skip }, () => {
  let db: TestSchema;
  let admin: RabbitAdmin;
  const cleanups: (() => Promise<void>)[] = [];

  before(async () => {
    db = await openSchema('amqp_relay');
    admin = await RabbitAdmin.open();
  });
  after(async () => {
    for (const cleanup of cleanups.reverse()) await cleanup().catch(() => {});
    await admin?.close();
    await db?.drop();
  });

  // A started bus subscribes its handler: retire it after its test, or the next tests' publishes fan out to it too.
  const retire: string[] = [];
  afterEach(async () => {
    for (const handler of retire.splice(0))
      await db.store.unsubscribe({ handler, buryPending: 'the test that ran it is over' });
  });

  let buses = 0;
  /** A bus with one relay handler, named apart from the other tests' (they share the schema). */
  function relayBus(store: Store<PgClientLike>, target: RelayTarget<AmqpRoute>, route: AmqpRoute, maxAttempts = 10) {
    buses += 1;
    const bus = createRelayBus({
      store,
      events: [ItemCreated],
      backoff: { initialDelayMs: 50, maxDelayMs: 400, jitter: 0 },
      dispatcher: { pollIntervalMs: 20, concurrency: 16, batchSize: 32, leaseDurationMs: 5_000 },
    });
    const handler = `relay-${buses}`;
    bus.on(ItemCreated, handler, { maxAttempts }, relayTo(target, route));
    retire.push(handler);
    return bus;
  }

  async function publish(bus: ReturnType<typeof relayBus>, count: number, prefix: string, pad = '') {
    const ids: string[] = [];
    for (let from = 0; from < count; from += 100) {
      const items = Array.from({ length: Math.min(100, count - from) }, (_, i) => {
        const n = from + i;
        return {
          event: ItemCreated,
          payload: pad === '' ? { n } : { n, pad },
          options: { id: `${prefix}-${n}`, key: `k-${n % 5}`, headers: { tenant: 't-1' } },
        };
      });
      const results = await db.store.transaction((tx) => bus.publishMany(tx, items));
      ids.push(...results.map((r) => r.eventId));
    }
    return ids;
  }

  it('publishes each event with message id = event id, its type, key and headers, in per-key order, completing after the confirm', {
    timeout: 30_000,
  }, async () => {
    const exchange = uniqueName('relay-x');
    const queue = uniqueName('relay-q');
    await admin.exchange(exchange);
    await admin.queue(queue);
    await admin.bind(queue, exchange, 'item.#');
    const target = amqpTarget({ url: AMQP_URL });
    cleanups.push(() => target.close());
    const bus = relayBus(db.store, target, { exchange, routingKey: (m) => m.type });
    const ids = await publish(bus, 300, 'a');
    await bus.start();
    cleanups.push(() => bus.stop());
    await until(
      async () => {
        const stats = await bus.store.statistics();
        return stats.pending + stats.inFlight === 0 ? true : undefined;
      },
      'every relay delivery completed',
      20_000,
    );
    await bus.stop();
    const messages = await admin.drain(queue);
    assert.equal(messages.length, 300);
    assert.deepEqual(messages.map((m) => m.properties.messageId).sort(), [...ids].sort());
    const first = messages.find((m) => m.properties.messageId === 'a-7')!;
    assert.equal(first.properties.type, ItemCreated.type);
    assert.equal(first.properties.contentType, 'application/json');
    assert.equal(first.properties.deliveryMode, 2, 'persistent');
    assert.equal(first.fields.routingKey, ItemCreated.type);
    assert.equal(String(first.properties.headers?.[HEADERS.key]), 'k-2');
    assert.equal(String(first.properties.headers?.tenant), 't-1');
    assert.deepEqual(JSON.parse(first.content.toString()), { n: 7 });
    // Per key, queue order is publish order: keyed deliveries of one handler run one at a time.
    const lastOfKey = new Map<string, number>();
    const violations: string[] = [];
    for (const m of messages) {
      const key = String(m.properties.headers?.[HEADERS.key]);
      const n = (JSON.parse(m.content.toString()) as { n: number }).n;
      if ((lastOfKey.get(key) ?? -1) > n) violations.push(`${key}: ${n} after ${lastOfKey.get(key)}`);
      lastOfKey.set(key, n);
    }
    assert.deepEqual(violations, []);
  });

  it('fails and retries while the broker is down, completes once it is back: nothing lost', {
    timeout: 30_000,
  }, async () => {
    const exchange = uniqueName('relay-down-x');
    const queue = uniqueName('relay-down-q');
    await admin.exchange(exchange);
    await admin.queue(queue);
    await admin.bind(queue, exchange, '#');
    const proxy = await TcpProxy.start({
      host: new URL(AMQP_URL).hostname,
      port: Number(new URL(AMQP_URL).port || 5672),
    });
    cleanups.push(() => proxy.down());
    const target = amqpTarget({ url: proxy.url(AMQP_URL), confirmTimeoutMs: 2_000, connectTimeoutMs: 1_000 });
    cleanups.push(() => target.close());
    const bus = relayBus(db.store, target, { exchange, routingKey: 'x' }, 1_000);
    const failures: FailedEvent[] = [];
    bus.lifecycle.on('failed', (event) => failures.push(event));
    await publish(bus, 100, 'b');
    await bus.start();
    cleanups.push(() => bus.stop());
    await until(
      async () => ((await admin.depth(queue)).messageCount >= 20 ? true : undefined),
      'some relayed',
      10_000,
      5,
    );
    await proxy.down(); // the broker "restarts": connections cut, connects refused
    await until(
      async () => (failures.length >= 5 ? true : undefined),
      'handlers failing while the broker is down',
      10_000,
    );
    const pendingWhileDown = (await bus.store.statistics()).pending + (await bus.store.statistics()).inFlight;
    assert.ok(pendingWhileDown > 0, 'deliveries wait while the broker is down');
    assert.match(String(failures.at(-1)?.error), /RabbitMQ at amqp:\/\/guest:\*\*\*@127\.0\.0\.1:\d+/);
    await proxy.up();
    await until(
      async () => {
        const stats = await bus.store.statistics();
        return stats.pending + stats.inFlight + stats.dead === 0 ? true : undefined;
      },
      'every delivery completed after the broker came back',
      20_000,
    );
    await bus.stop();
    const messages = await admin.drain(queue);
    const ids = new Set(messages.map((m) => String(m.properties.messageId)));
    assert.equal(
      ids.size,
      100,
      'every event reached the queue (a re-send after a lost confirm is a duplicate message, same id)',
    );
  });

  it('an unroutable message, a missing exchange and an oversized message fail with typed errors and never complete', {
    timeout: 30_000,
  }, async () => {
    const exchange = uniqueName('relay-unbound-x');
    await admin.exchange(exchange); // no queue bound
    const target = amqpTarget({ url: AMQP_URL, maxMessageBytes: 1_000 });
    cleanups.push(() => target.close());
    const bus = createRelayBus({
      store: db.store,
      events: [ItemCreated],
      backoff: { initialDelayMs: 50, maxDelayMs: 50, jitter: 0 },
      dispatcher: { pollIntervalMs: 20 },
    });
    bus.on(ItemCreated, 'to-unbound', { maxAttempts: 2 }, relayTo(target, { exchange, routingKey: 'nowhere' }));
    bus.on(
      ItemCreated,
      'to-missing',
      { maxAttempts: 2 },
      relayTo(target, { exchange: uniqueName('no-such-exchange'), routingKey: 'x' }),
    );
    const dead: { handler: string; eventId: string; error: string }[] = [];
    bus.lifecycle.on('dead', ({ delivery, error }) =>
      dead.push({ handler: delivery.handler, eventId: delivery.eventId, error: String(error) }),
    );
    await db.store.transaction((tx) =>
      bus.publishMany(tx, [{ event: ItemCreated, payload: { n: 1 }, options: { id: 'c-1' } }]),
    );
    await db.store.transaction((tx) =>
      bus.publishMany(tx, [{ event: ItemCreated, payload: { n: 2, pad: 'x'.repeat(2_000) }, options: { id: 'c-2' } }]),
    );
    await bus.start();
    cleanups.push(() => bus.stop());
    await until(async () => (dead.length === 4 ? true : undefined), 'four dead deliveries', 15_000);
    await bus.stop();
    const of = (handler: string, id: string) =>
      dead.find((d) => d.handler === handler && d.eventId === id)?.error ?? '';
    assert.match(of('to-unbound', 'c-1'), /BrokerRejectedError.*no queue is bound/);
    assert.match(of('to-missing', 'c-1'), /BrokerNotFoundError.*does not exist/);
    assert.match(of('to-unbound', 'c-2'), /MessageTooLargeError/);
    assert.match(of('to-missing', 'c-2'), /MessageTooLargeError/);
    const { rows } = await db.pool.query(
      `SELECT count(*)::int AS n FROM "${db.schema}".relaybus_deliveries WHERE event_id IN ('c-1','c-2') AND status = 'dead'`,
    );
    assert.equal((rows[0] as { n: number }).n, 4, 'kept as dead letters in A (requeue when fixed): nothing lost');
  });
});
