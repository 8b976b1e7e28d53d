/**
 * The RabbitMQ inbox against the local RabbitMQ and Postgres (each in a schema / queues of its own):
 * message id = event id and acks after the commit; a redelivery adds deliveries only for handlers the
 * event never had; poison messages land in the dead-letter queue with their reason; a store failure
 * is retried in place and keeps each key in queue order; a force-closed connection is reconnected;
 * stop is graceful; bad input gives typed errors. Skipped, with the reason, without RabbitMQ or Postgres.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { createRelayBus, defineEvent, StoreUnavailableError, Type, InvalidOptionsError } from '../../src/index.js';
import {
  amqpInbox,
  BrokerNotFoundError,
  BrokerUnavailableError,
  HEADERS,
  type CommittedMessage,
  type Inbox,
} from '../../src/amqp/index.js';
import type { PgClientLike } from '../../src/postgres/index.js';
import type { Store } from '../../src/store/contract.js';
import { spyStore } from '../support/wait.js';
import {
  AMQP_URL,
  closeRabbitConnections,
  keyOrderViolations,
  openSchema,
  RabbitAdmin,
  rabbitSkip,
  uniqueName,
  until,
  type RawMessage,
  type TestSchema,
} from './support.js';

const skip = await rabbitSkip();
const ItemCreated = defineEvent('item.created', Type.Object({ n: Type.Integer() }, { additionalProperties: false }));

function message(n: number, key: string | null = `k-${n % 10}`, id = `m-${n}`): RawMessage {
  return {
    body: JSON.stringify({ n }),
    messageId: id,
    type: ItemCreated.type,
    ...(key === null ? {} : { headers: { [HEADERS.key]: key } }),
  };
}

describe('amqp inbox', { skip }, () => {
  let db: TestSchema;
  let admin: RabbitAdmin;
  const inboxes: Inbox[] = [];
  const stops: (() => Promise<void>)[] = [];

  before(async () => {
    db = await openSchema('amqp_inbox');
    admin = await RabbitAdmin.open();
  });
  after(async () => {
    for (const inbox of inboxes) await inbox.stop({ graceMs: 0 }).catch(() => {});
    for (const stop of stops) await stop().catch(() => {});
    await admin?.close();
    await db?.drop();
  });

  function busOf(store: Store<PgClientLike>) {
    return createRelayBus({
      store,
      events: [ItemCreated],
      dispatcher: { pollIntervalMs: 20, concurrency: 8, batchSize: 20 },
    });
  }

  function topology(label: string) {
    const queue = uniqueName(label);
    const dead = { exchange: `${queue}.dlx` };
    admin.track('queue', queue);
    admin.track('queue', `${queue}.dead`);
    admin.track('exchange', dead.exchange);
    return { queue, dead };
  }

  function committedLog(inbox: Inbox): CommittedMessage[] {
    const seen: CommittedMessage[] = [];
    inbox.lifecycle.on('committed', ({ messages }) => seen.push(...messages));
    return seen;
  }

  it('publishes each message as the event with its id, acks after the commit, and a redelivery runs no completed handler again', {
    timeout: 30_000,
  }, async () => {
    const { queue, dead } = topology('dedup');
    const bus = busOf(db.store);
    const runs = new Map<string, number>();
    bus.on(ItemCreated, 'count', async (_payload, ctx) => {
      runs.set(ctx.delivery.eventId, (runs.get(ctx.delivery.eventId) ?? 0) + 1);
    });
    await bus.start();
    stops.push(() => bus.stop());
    const inbox = amqpInbox({
      bus,
      url: AMQP_URL,
      queue,
      events: [ItemCreated],
      deadLetter: dead,
      declare: {},
      prefetch: 50,
      batchSize: 10,
    });
    inboxes.push(inbox);
    const committed = committedLog(inbox);
    await inbox.start();
    assert.equal(inbox.health().ready, true);

    await admin.publish(
      queue,
      Array.from({ length: 200 }, (_, n) => message(n)),
    );
    await until(
      async () => (runs.size === 200 && (await bus.store.statistics()).pending === 0 ? true : undefined),
      '200 events handled',
      20_000,
    );
    assert.equal(await db.count('relaybus_events', `id LIKE 'm-%'`), 200);
    assert.equal(committed.filter((m) => m.duplicate).length, 0);

    // The relay sends some again (a crash between its confirm and its completion): duplicates, no new delivery.
    await admin.publish(
      queue,
      Array.from({ length: 50 }, (_, n) => message(n)),
    );
    await until(
      async () => (committed.filter((m) => m.duplicate).length === 50 ? true : undefined),
      '50 duplicates committed',
      10_000,
    );
    await new Promise((resolve) => setTimeout(resolve, 300));
    assert.deepEqual(
      [...runs.values()].filter((count) => count !== 1),
      [],
      'every handler ran exactly once per event',
    );
    assert.equal(runs.size, 200);
    assert.ok(committed.filter((m) => m.duplicate).every((m) => m.addedHandlers.length === 0));
    assert.equal(await db.count('relaybus_deliveries'), 0, 'nothing pending');
    await inbox.stop();
    assert.equal((await admin.depth(queue)).messageCount, 0, 'every message was acked');
    await bus.stop();

    // A later version of B with one more handler: a redelivery adds a delivery for that handler only.
    const bus2 = busOf(db.store);
    bus2.on(ItemCreated, 'count', async () => {});
    bus2.on(ItemCreated, 'audit', async () => {});
    const inbox2 = amqpInbox({ bus: bus2, url: AMQP_URL, queue, events: [ItemCreated], deadLetter: dead, declare: {} });
    inboxes.push(inbox2);
    const committed2 = committedLog(inbox2);
    await inbox2.start();
    await admin.publish(queue, [message(7)]);
    await until(async () => (committed2.length === 1 ? true : undefined), 'the redelivery committed', 10_000);
    assert.deepEqual(
      committed2.map((m) => ({ id: m.id, duplicate: m.duplicate, added: m.addedHandlers })),
      [{ id: 'm-7', duplicate: true, added: ['audit'] }],
    );
    assert.equal(await db.count('relaybus_deliveries', `event_id = 'm-7'`), 1);
    assert.equal(await db.count('relaybus_deliveries', `event_id = 'm-7' AND handler = 'audit'`), 1);
    await inbox2.stop();
  });

  it('dead-letters poison messages with the reason (no id, not JSON, unknown type, schema, an id taken by another event) and passes the rest', {
    timeout: 30_000,
  }, async () => {
    const { queue, dead } = topology('poison');
    const bus = busOf(db.store);
    bus.on(ItemCreated, 'count', async () => {});
    const inbox = amqpInbox({ bus, url: AMQP_URL, queue, events: [ItemCreated], deadLetter: dead, declare: {} });
    inboxes.push(inbox);
    const deadLettered: string[] = [];
    inbox.lifecycle.on('dead-lettered', ({ reason }) => deadLettered.push(reason));
    await inbox.start();
    await admin.publish(queue, [
      message(1, 'k', 'p-1'),
      { body: JSON.stringify({ n: 2 }), type: ItemCreated.type },
      { body: '{not json', messageId: 'p-3', type: ItemCreated.type },
      { body: JSON.stringify({ n: 4 }), messageId: 'p-4', type: 'order.unknown' },
      { body: JSON.stringify({ n: 'five' }), messageId: 'p-5', type: ItemCreated.type },
      message(6, 'k', 'p-1'), // the id of the first message with another payload
      message(7, 'k', 'p-7'),
    ]);
    await until(
      async () =>
        deadLettered.length === 5 && (await db.count('relaybus_events', `id LIKE 'p-%'`)) === 2 ? true : undefined,
      'five dead letters and two events',
      10_000,
    );
    await inbox.stop();
    const letters = await admin.drain(`${queue}.dead`);
    const byReason = Object.fromEntries(
      letters.map((m) => [
        String(m.properties.headers?.[HEADERS.deadReason]),
        {
          id: m.properties.messageId as string | undefined,
          detail: String(m.properties.headers?.[HEADERS.deadDetail]),
          body: m.content.toString(),
        },
      ]),
    );
    assert.deepEqual(Object.keys(byReason).sort(), [
      'conflict',
      'invalid-payload',
      'malformed',
      'missing-id',
      'unknown-type',
    ]);
    assert.match(byReason.conflict!.detail, /p-1/);
    assert.equal(byReason.conflict!.body, JSON.stringify({ n: 6 }), 'the dead letter carries the original body');
    assert.match(byReason['invalid-payload']!.detail, /\/n/);
    assert.match(byReason['unknown-type']!.detail, /order\.unknown/);
    assert.equal(
      (await admin.depth(queue)).messageCount,
      0,
      'nothing left in the queue: every message acked or dead-lettered',
    );
  });

  it('retries a batch the store failed in place (never acked, never requeued) and keeps each key in queue order', {
    timeout: 30_000,
  }, async () => {
    const { queue, dead } = topology('order');
    let calls = 0;
    const spied = spyStore<PgClientLike>(db.store, {
      transaction(fn) {
        calls += 1;
        // Every third transaction fails as a lost connection would.
        if (calls % 3 === 0)
          return Promise.reject(new StoreUnavailableError('injected: connection lost', { retryable: true }));
        return db.store.transaction(fn);
      },
    });
    const bus = busOf(spied.store);
    bus.on(ItemCreated, 'count', async () => {});
    const inbox = amqpInbox({
      bus,
      url: AMQP_URL,
      queue,
      events: [ItemCreated],
      deadLetter: dead,
      declare: {},
      prefetch: 100,
      batchSize: 4,
      concurrency: 4,
    });
    inboxes.push(inbox);
    let retries = 0;
    inbox.lifecycle.on('retrying', () => (retries += 1));
    await inbox.start();
    const total = 400;
    await admin.publish(
      queue,
      Array.from({ length: total }, (_, n) => message(n, `o-${n % 7}`, `o-${n}`)),
    );
    await until(
      async () => ((await db.count('relaybus_events', `id LIKE 'o-%'`)) === total ? true : undefined),
      `${total} events`,
      20_000,
    );
    await inbox.stop();
    const { rows } = await db.pool.query(
      `SELECT d.key, d.sequence::int AS sequence, (e.payload->>'n')::int AS n FROM "${db.schema}".relaybus_deliveries d
       JOIN "${db.schema}".relaybus_events e ON e.id = d.event_id WHERE d.event_id LIKE 'o-%' ORDER BY d.key, d.sequence`,
    );
    const violations: string[] = [];
    let previous: { key: string; n: number } | undefined;
    for (const row of rows as { key: string; sequence: number; n: number }[]) {
      if (previous?.key === row.key && row.n < previous.n)
        violations.push(`${row.key}: n=${row.n} after n=${previous.n}`);
      previous = row;
    }
    assert.equal(rows.length, total);
    assert.deepEqual(violations, [], 'per key, the events were published in queue order');
    assert.ok(retries > 10, `the store failures were retried (${retries} retries)`);
    assert.equal((await admin.depth(queue)).messageCount, 0);
  });

  it('reconnects after RabbitMQ closes its connection and finishes: every message once', {
    timeout: 45_000,
  }, async (t) => {
    const { queue, dead } = topology('reconnect');
    const bus = busOf(db.store);
    bus.on(ItemCreated, 'count', async () => {});
    const name = `relaybus-test-inbox-${process.pid}-${Date.now()}`;
    const inbox = amqpInbox({
      bus,
      url: AMQP_URL,
      queue,
      events: [ItemCreated],
      deadLetter: dead,
      declare: {},
      connectionName: name,
      batchSize: 5,
      concurrency: 2,
    });
    inboxes.push(inbox);
    const committed = committedLog(inbox);
    let reconnects = 0;
    inbox.lifecycle.on('connected', ({ reconnect }) => (reconnects += reconnect ? 1 : 0));
    await inbox.start();
    const total = 1_500;
    await admin.publish(
      queue,
      Array.from({ length: total }, (_, n) => message(n, `r-${n % 10}`, `r-${n}`)),
    );
    for (let round = 1; round <= 2; round += 1) {
      await until(
        async () => (committed.length >= (total * round) / 4 ? true : undefined),
        `a ${round}/4 of the messages committed`,
        20_000,
        5,
      );
      const closed = await closeRabbitConnections(name);
      assert.equal(closed, 1, 'our inbox connection was found and closed');
      await until(async () => (reconnects >= round ? true : undefined), `reconnect #${round}`, 15_000);
    }
    await until(
      async () => ((await db.count('relaybus_events', `id LIKE 'r-%'`)) === total ? true : undefined),
      `${total} events`,
      20_000,
    );
    await inbox.stop();
    assert.equal(
      await db.count('relaybus_deliveries', `event_id LIKE 'r-%'`),
      total,
      'one delivery per event: redeliveries added nothing',
    );
    assert.equal((await admin.depth(queue)).messageCount, 0);
    t.diagnostic(
      `reconnects: ${reconnects}; commits: ${committed.length} for ${total} messages (${committed.filter((m) => m.duplicate).length} duplicates from redeliveries)`,
    );
  });

  it('with two inboxes on a single-active-consumer queue, the standby takes over when the active one loses its connection, and per-key order holds', {
    timeout: 30_000,
  }, async () => {
    const { queue, dead } = topology('standby');
    const slow = spyStore<PgClientLike>(db.store, {
      async transaction(fn) {
        await new Promise((resolve) => setTimeout(resolve, 40)); // long enough a run for the forced close to land mid-way
        return db.store.transaction(fn);
      },
    });
    const bus = busOf(slow.store);
    bus.on(ItemCreated, 'count', async () => {}); // not started: the deliveries' key sequences show B's order
    const names = [
      `relaybus-test-sac-a-${process.pid}-${Date.now()}`,
      `relaybus-test-sac-b-${process.pid}-${Date.now()}`,
    ];
    const [first, second] = names.map((connectionName) =>
      amqpInbox({
        bus,
        url: AMQP_URL,
        queue,
        events: [ItemCreated],
        deadLetter: dead,
        declare: {},
        connectionName,
        batchSize: 5,
        concurrency: 2,
      }),
    );
    inboxes.push(first!, second!);
    const firstLog = committedLog(first!);
    const secondLog = committedLog(second!);
    await first!.start();
    await second!.start();
    const total = 1_000;
    await admin.publish(
      queue,
      Array.from({ length: total }, (_, n) => message(n, `s-${n % 8}`, `sac-${n}`)),
    );
    await until(
      async () => (firstLog.length + secondLog.length >= total / 3 ? true : undefined),
      'a third committed',
      15_000,
      5,
    );
    const active = firstLog.length > 0 ? names[0]! : names[1]!;
    assert.equal(firstLog.length === 0 || secondLog.length === 0, true, 'one consumer active at a time');
    assert.equal(await closeRabbitConnections(active), 1);
    await until(
      async () => ((await db.count('relaybus_events', `id LIKE 'sac-%'`)) === total ? true : undefined),
      `${total} events`,
      20_000,
    );
    assert.ok(
      firstLog.length > 0 && secondLog.length > 0,
      `the standby took over (${firstLog.length} / ${secondLog.length} commits)`,
    );
    const order = await keyOrderViolations(db, 'sac-', 'count');
    assert.equal(order.rows, total);
    assert.deepEqual(order.violations, [], 'per key, queue order across the takeover');
  });

  it('stops gracefully: held messages finish or go back to the queue, and the next inbox takes them', {
    timeout: 30_000,
  }, async () => {
    const { queue, dead } = topology('stop');
    const slow = spyStore<PgClientLike>(db.store, {
      async transaction(fn) {
        await new Promise((resolve) => setTimeout(resolve, 30));
        return db.store.transaction(fn);
      },
    });
    const bus = busOf(slow.store);
    bus.on(ItemCreated, 'count', async () => {});
    const first = amqpInbox({
      bus,
      url: AMQP_URL,
      queue,
      events: [ItemCreated],
      deadLetter: dead,
      declare: {},
      prefetch: 100,
      batchSize: 2,
      concurrency: 1,
    });
    inboxes.push(first);
    const committed = committedLog(first);
    await first.start();
    await admin.publish(
      queue,
      Array.from({ length: 300 }, (_, n) => message(n, null, `s-${n}`)),
    );
    await until(async () => (committed.length >= 4 ? true : undefined), 'a few commits', 10_000, 5);
    await first.stop({ graceMs: 50 });
    assert.equal(first.health().ready, false);
    const done = await db.count('relaybus_events', `id LIKE 's-%'`);
    assert.ok(done < 300, `stopped before the end (${done} committed)`);
    assert.equal(
      (await admin.depth(queue)).messageCount,
      300 - done,
      'the messages it held and did not commit are back in the queue',
    );
    const bus2 = busOf(db.store);
    bus2.on(ItemCreated, 'count', async () => {});
    const second = amqpInbox({ bus: bus2, url: AMQP_URL, queue, events: [ItemCreated], deadLetter: dead, declare: {} });
    inboxes.push(second);
    await second.start();
    await until(
      async () => ((await db.count('relaybus_events', `id LIKE 's-%'`)) === 300 ? true : undefined),
      'every event',
      15_000,
    );
    await second.stop();
  });

  it('bad input: a URL that is not amqp, a broker that is down, a bad login, a queue that does not exist: typed errors naming them', {
    timeout: 30_000,
  }, async () => {
    const bus = busOf(db.store);
    bus.on(ItemCreated, 'count', async () => {});
    assert.throws(
      () => amqpInbox({ bus, url: 'http://127.0.0.1:5672', queue: 'q', events: [ItemCreated] }),
      InvalidOptionsError,
    );
    assert.throws(() => amqpInbox({ bus, url: AMQP_URL, queue: '', events: [ItemCreated] }), InvalidOptionsError);
    assert.throws(() => amqpInbox({ bus, url: AMQP_URL, queue: 'q' }), /events/);
    assert.throws(
      () => amqpInbox({ bus, url: AMQP_URL, queue: 'q', events: [ItemCreated], prefetch: 0 }),
      InvalidOptionsError,
    );

    const down = amqpInbox({
      bus,
      url: 'amqp://guest:secret@127.0.0.1:1',
      queue: 'q',
      events: [ItemCreated],
      setupStore: false,
    });
    await assert.rejects(down.start(), (error: unknown) => {
      assert.ok(error instanceof BrokerUnavailableError);
      assert.equal(error.retryable, true);
      assert.match(error.message, /127\.0\.0\.1:1/);
      assert.doesNotMatch(error.message, /secret/);
      return true;
    });
    const badLogin = amqpInbox({
      bus,
      url: AMQP_URL.replace(/\/\/[^@]*@/, '//guest:wrong@'),
      queue: 'q',
      events: [ItemCreated],
      setupStore: false,
    });
    await assert.rejects(
      badLogin.start(),
      (error: unknown) => error instanceof BrokerUnavailableError && !error.retryable && /login/.test(error.message),
    );
    const missing = uniqueName('missing');
    const noQueue = amqpInbox({ bus, url: AMQP_URL, queue: missing, events: [ItemCreated], setupStore: false });
    await assert.rejects(
      noQueue.start(),
      (error: unknown) => error instanceof BrokerNotFoundError && error.message.includes(missing) && !error.retryable,
    );
    assert.equal(noQueue.health().ready, false);
  });
});
