/**
 * NATS JetStream on both sides, against the shared nats-server (streams of its own) and, for the
 * restart, a private nats-server this test owns and kills: the relay publishes with Nats-Msg-Id =
 * event id and completes on the PubAck (a re-send is a duplicate the stream drops); the inbox turns
 * messages into events once, dead-letters poison with the reason, holds new messages back while older
 * ones left unacknowledged by a dead consumer wait for their redelivery (per-key order), reconnects
 * after the server restarts; bad input gives typed errors. Skipped, with the reason, without NATS.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { connect, headers, type NatsConnection } from '@nats-io/transport-node';
import { AckPolicy, jetstream, jetstreamManager, type JetStreamManager } from '@nats-io/jetstream';
import { createRelayBus, defineEvent, InvalidOptionsError, Type } from '../../src/index.js';
import {
  BrokerNotFoundError,
  BrokerUnavailableError,
  HEADERS,
  MessageTooLargeError,
  natsInbox,
  natsTarget,
  relayTo,
  type CommittedMessage,
  type Inbox,
} from '../../src/nats/index.js';
import type { PgClientLike } from '../../src/postgres/index.js';
import type { Store } from '../../src/store/contract.js';
import {
  handlerDrained,
  keyOrderViolations,
  NATS_URL,
  natsSkip,
  openSchema,
  PrivateNats,
  uniqueName,
  until,
  type TestSchema,
} from './support.js';

const skip = await natsSkip();
const ItemCreated = defineEvent(
  'item.created',
  Type.Object({ n: Type.Integer(), pad: Type.Optional(Type.String()) }, { additionalProperties: false }),
);

/** A JetStream name (no dots). */
const jsName = (label: string) => uniqueName(label).replace(/\./g, '_');

describe('nats jetstream relay and inbox', { skip }, () => {
  let db: TestSchema;
  let nc: NatsConnection;
  let jsm: JetStreamManager;
  const streams: string[] = [];
  const cleanups: (() => Promise<void>)[] = [];

  before(async () => {
    db = await openSchema('nats');
    nc = await connect({ servers: NATS_URL });
    jsm = await jetstreamManager(nc);
  });
  after(async () => {
    for (const cleanup of cleanups.reverse()) await cleanup().catch(() => {});
    for (const stream of streams) await jsm.streams.delete(stream).catch(() => {});
    await nc?.close();
    await db?.drop();
  });

  async function stream(label: string, options: { duplicateWindowMs?: number } = {}) {
    const name = jsName(label);
    const subject = `${name}.items`;
    const dead = `${name}.dead`;
    streams.push(name);
    await jsm.streams.add({
      name,
      subjects: [subject, dead],
      ...(options.duplicateWindowMs ? { duplicate_window: options.duplicateWindowMs * 1e6 } : {}),
    });
    return { name, subject, dead };
  }

  let handlers = 0;
  function bus(store: Store<PgClientLike>) {
    handlers += 1;
    const created = createRelayBus({
      store,
      events: [ItemCreated],
      backoff: { initialDelayMs: 50, maxDelayMs: 500, jitter: 0 },
      dispatcher: { pollIntervalMs: 20, concurrency: 16, batchSize: 32 },
    });
    return { bus: created, handler: `h-${handlers}` };
  }

  function committedLog(inbox: Inbox): CommittedMessage[] {
    const seen: CommittedMessage[] = [];
    inbox.lifecycle.on('committed', ({ messages }) => seen.push(...messages));
    return seen;
  }

  it('relays with Nats-Msg-Id = event id (a re-send is a duplicate the stream drops); the inbox publishes each once and a redelivery runs no handler twice', {
    timeout: 30_000,
  }, async () => {
    // Long enough that the re-send below lands in it under CI's load (1.5 s did not: the relay of 200 events and the
    // bus's stop took longer); the late copy waits until it is over.
    const windowMs = 5_000;
    const s = await stream('relay', { duplicateWindowMs: windowMs });
    const target = natsTarget({ servers: NATS_URL });
    cleanups.push(() => target.close());
    const a = bus(db.store);
    a.bus.on(ItemCreated, a.handler, relayTo(target, { subject: s.subject }));
    const items = Array.from({ length: 200 }, (_, n) => ({
      event: ItemCreated,
      payload: { n },
      options: { id: `na-${n}`, key: `k-${n % 5}` },
    }));
    await db.store.transaction((tx) => a.bus.publishMany(tx, items));
    await a.bus.start();
    cleanups.push(() => a.bus.stop());
    await handlerDrained(a.bus.store, a.handler, 20_000);
    // Every original is in the stream by now: the window of each ends before windowMs from here.
    const relayedBy = Date.now();
    await a.bus.stop();
    // A re-send within the duplicate window (the relay crashed after the PubAck): dropped by the stream.
    const js = jetstream(nc);
    const h = headers();
    h.set(HEADERS.type, ItemCreated.type);
    const again = await js.publish(s.subject, JSON.stringify({ n: 3 }), { msgID: 'na-3', headers: h });
    assert.equal(again.duplicate, true);
    assert.equal((await jsm.streams.info(s.name)).state.messages, 200);

    const b = bus(db.store);
    const runs = new Map<string, number>();
    b.bus.on(ItemCreated, b.handler, async (_payload, ctx) => {
      runs.set(ctx.delivery.eventId, (runs.get(ctx.delivery.eventId) ?? 0) + 1);
    });
    await b.bus.start();
    cleanups.push(() => b.bus.stop());
    const consumer = jsName('c');
    const inbox = natsInbox({
      bus: b.bus,
      servers: NATS_URL,
      stream: s.name,
      consumer,
      events: [ItemCreated],
      declare: { filterSubject: s.subject },
      ackWaitMs: 5_000,
      batchSize: 20,
    });
    cleanups.push(() => inbox.stop());
    const committed = committedLog(inbox);
    await inbox.start();
    await until(async () => (runs.size === 200 ? true : undefined), 'B ran its handler for 200 events', 20_000);
    // Past the duplicate window, the same id is a new stream message: the inbox's own dedup must catch it.
    await new Promise((resolve) => setTimeout(resolve, Math.max(0, relayedBy + windowMs + 200 - Date.now())));
    const late = await js.publish(s.subject, JSON.stringify({ n: 3 }), {
      msgID: 'na-3',
      headers: (() => {
        const x = headers();
        x.set(HEADERS.type, ItemCreated.type);
        x.set(HEADERS.key, 'k-3');
        return x;
      })(),
    });
    assert.equal(late.duplicate, false);
    await until(
      async () => (committed.some((m) => m.id === 'na-3' && m.duplicate) ? true : undefined),
      'the late copy committed as a duplicate',
      10_000,
    );
    await new Promise((resolve) => setTimeout(resolve, 200));
    assert.equal(runs.get('na-3'), 1);
    assert.deepEqual(
      [...runs.values()].filter((count) => count !== 1),
      [],
    );
    const info = await jsm.consumers.info(s.name, consumer);
    assert.equal(info.num_ack_pending, 0, 'every message acknowledged');
  });

  it('dead-letters poison messages to the dead-letter subject with the reason and terminates them', {
    timeout: 30_000,
  }, async () => {
    const s = await stream('poison');
    const b = bus(db.store);
    b.bus.on(ItemCreated, b.handler, async () => {});
    const consumer = jsName('c');
    const inbox = natsInbox({
      bus: b.bus,
      servers: NATS_URL,
      stream: s.name,
      consumer,
      events: [ItemCreated],
      deadLetter: { subject: s.dead },
      declare: { filterSubject: s.subject },
      ackWaitMs: 2_000,
    });
    cleanups.push(() => inbox.stop());
    const dead: string[] = [];
    inbox.lifecycle.on('dead-lettered', ({ reason }) => dead.push(reason));
    await inbox.start();
    const js = jetstream(nc);
    const send = (body: string, id?: string, type: string = ItemCreated.type) => {
      const h = headers();
      h.set(HEADERS.type, type);
      return js.publish(s.subject, body, { ...(id ? { msgID: id } : {}), headers: h });
    };
    await send(JSON.stringify({ n: 1 }), 'np-1');
    await send(JSON.stringify({ n: 2 }));
    await send('{nope', 'np-3');
    await send(JSON.stringify({ n: 'x' }), 'np-4');
    await send(JSON.stringify({ n: 5 }), 'np-5', 'other.type');
    await until(
      async () => (dead.length === 4 && (await db.count('relaybus_events', `id = 'np-1'`)) === 1 ? true : undefined),
      'four dead letters',
      10_000,
    );
    const letters = await jsm.streams.getMessage(s.name, { last_by_subj: s.dead }).then(
      () => true,
      () => false,
    );
    assert.ok(letters);
    const reasons: string[] = [];
    const deadConsumer = jsName('dead');
    await jsm.consumers.add(s.name, { durable_name: deadConsumer, ack_policy: AckPolicy.None, filter_subject: s.dead });
    const reader = await js.consumers.get(s.name, deadConsumer);
    const batch = await reader.fetch({ max_messages: 4, expires: 2_000 });
    for await (const m of batch)
      reasons.push(`${m.headers?.get(HEADERS.deadReason)}:${m.headers?.get(HEADERS.deadDetail).slice(0, 40)}`);
    assert.deepEqual(reasons.map((r) => r.split(':')[0]).sort(), [
      'invalid-payload',
      'malformed',
      'missing-id',
      'unknown-type',
    ]);
    await new Promise((resolve) => setTimeout(resolve, 2_500)); // past the ack wait: a terminated message is not redelivered
    assert.equal(dead.length, 4, 'no poison message came back');
    assert.equal((await jsm.consumers.info(s.name, consumer)).num_ack_pending, 0);
  });

  it('holds new messages back until the ones a dead consumer left unacknowledged are redelivered: per-key order', {
    timeout: 30_000,
  }, async () => {
    const s = await stream('gate');
    const consumer = jsName('c');
    await jsm.consumers.add(s.name, {
      durable_name: consumer,
      ack_policy: AckPolicy.Explicit,
      ack_wait: 2e9,
      filter_subject: s.subject,
      max_ack_pending: 500,
    });
    const js = jetstream(nc);
    const publish = async (from: number, to: number) => {
      for (let n = from; n < to; n += 1) {
        const h = headers();
        h.set(HEADERS.type, ItemCreated.type);
        h.set(HEADERS.key, `g-${n % 4}`);
        await js.publish(s.subject, JSON.stringify({ n }), { msgID: `ng-${n}`, headers: h });
      }
    };
    await publish(0, 40);
    // A "dead" inbox: pulls 40 messages and never acknowledges them.
    const dead = await (await js.consumers.get(s.name, consumer)).fetch({ max_messages: 40, expires: 2_000 });
    let taken = 0;
    for await (const _m of dead) {
      taken += 1;
      if (taken === 40) break;
    }
    assert.equal(taken, 40);
    await publish(40, 120);
    const b = bus(db.store);
    b.bus.on(ItemCreated, b.handler, async () => {}); // not started: the deliveries' sequences show B's order
    const inbox = natsInbox({
      bus: b.bus,
      servers: NATS_URL,
      stream: s.name,
      consumer,
      events: [ItemCreated],
      batchSize: 10,
    });
    cleanups.push(() => inbox.stop());
    await inbox.start();
    await until(
      async () => ((await db.count('relaybus_events', `id LIKE 'ng-%'`)) === 120 ? true : undefined),
      '120 events in B',
      20_000,
    );
    const order = await keyOrderViolations(db, 'ng-', b.handler);
    assert.equal(order.rows, 120);
    assert.deepEqual(
      order.violations,
      [],
      'per key, B published in stream order although 40 older messages came back 2 s later',
    );
  });

  it('relay and inbox reconnect after the (private) server is killed and restarted, and finish: each event once, per-key order', {
    timeout: 45_000,
  }, async (t) => {
    const reason = await PrivateNats.unavailable();
    if (reason) return t.skip(reason);
    const server = await PrivateNats.start();
    cleanups.push(() => server.destroy());
    const admin = await connect({ servers: server.url, maxReconnectAttempts: -1, reconnectTimeWait: 100 });
    cleanups.push(() => admin.close());
    const name = jsName('restart');
    await (await jetstreamManager(admin)).streams.add({ name, subjects: [`${name}.items`] });
    const target = natsTarget({ servers: server.url, timeoutMs: 1_000 });
    cleanups.push(() => target.close());
    const a = bus(db.store);
    a.bus.on(ItemCreated, a.handler, { maxAttempts: 1_000 }, relayTo(target, { subject: `${name}.items` }));
    const total = 600;
    await db.store.transaction((tx) =>
      a.bus.publishMany(
        tx,
        Array.from({ length: total }, (_, n) => ({
          event: ItemCreated,
          payload: { n },
          options: { id: `nr-${n}`, key: `r-${n % 6}` },
        })),
      ),
    );
    const b = bus(db.store);
    b.bus.on(ItemCreated, b.handler, async () => {}); // not started
    const inbox = natsInbox({
      bus: b.bus,
      servers: server.url,
      stream: name,
      consumer: 'b',
      events: [ItemCreated],
      declare: {},
      ackWaitMs: 2_000,
      batchSize: 10,
      concurrency: 2,
    });
    cleanups.push(() => inbox.stop());
    let reconnects = 0;
    inbox.lifecycle.on('connected', ({ reconnect }) => (reconnects += reconnect ? 1 : 0));
    await inbox.start();
    await a.bus.start();
    cleanups.push(() => a.bus.stop());
    await until(
      async () =>
        (await db.count('relaybus_events', `id LIKE 'nr-%' AND handlers @> ARRAY['${b.handler}']`)) >= total / 3
          ? true
          : undefined,
      'a third in B',
      20_000,
      10,
    );
    await server.kill();
    await new Promise((resolve) => setTimeout(resolve, 1_000));
    await server.up();
    await until(
      async () =>
        (await db.count('relaybus_deliveries', `event_id LIKE 'nr-%' AND handler = '${b.handler}'`)) === total
          ? true
          : undefined,
      `${total} events in B`,
      30_000,
    );
    await until(
      async () =>
        (await db.count('relaybus_deliveries', `event_id LIKE 'nr-%' AND handler = '${a.handler}'`)) === 0
          ? true
          : undefined,
      'the relay finished',
      10_000,
    );
    const order = await keyOrderViolations(db, 'nr-', b.handler);
    assert.deepEqual(order.violations, []);
    assert.ok(reconnects >= 1, 'the inbox reconnected');
    t.diagnostic(`inbox reconnects: ${reconnects}`);
  });

  it('bad input: servers that are not NATS URLs, a server that is down, a missing consumer, a subject no stream captures, an oversized message', {
    timeout: 30_000,
  }, async () => {
    const b = bus(db.store);
    b.bus.on(ItemCreated, b.handler, async () => {});
    assert.throws(
      () => natsInbox({ bus: b.bus, servers: 'http://x:1', stream: 'S', consumer: 'c', events: [ItemCreated] }),
      InvalidOptionsError,
    );
    assert.throws(
      () => natsInbox({ bus: b.bus, servers: NATS_URL, stream: 'a.b', consumer: 'c', events: [ItemCreated] }),
      InvalidOptionsError,
    );
    assert.throws(() => natsTarget({ servers: [] }), InvalidOptionsError);
    const down = natsInbox({
      bus: b.bus,
      servers: 'nats://127.0.0.1:1',
      stream: 'S',
      consumer: 'c',
      events: [ItemCreated],
      setupStore: false,
      connectTimeoutMs: 1_000,
    });
    await assert.rejects(
      down.start(),
      (error: unknown) =>
        error instanceof BrokerUnavailableError && error.retryable && /127\.0\.0\.1:1/.test(error.message),
    );
    const s = await stream('bad');
    const missing = natsInbox({
      bus: b.bus,
      servers: NATS_URL,
      stream: s.name,
      consumer: 'nobody',
      events: [ItemCreated],
      setupStore: false,
    });
    await assert.rejects(
      missing.start(),
      (error: unknown) => error instanceof BrokerNotFoundError && /nobody/.test(error.message),
    );
    const noStream = natsInbox({
      bus: b.bus,
      servers: NATS_URL,
      stream: jsName('none'),
      consumer: 'c',
      events: [ItemCreated],
      setupStore: false,
    });
    await assert.rejects(noStream.start(), BrokerNotFoundError);

    const target = natsTarget({ servers: NATS_URL, timeoutMs: 2_000 });
    cleanups.push(() => target.close());
    const delivery = {
      id: 'd',
      eventId: 'e-1',
      eventType: ItemCreated.type,
      handler: 'h',
      key: null,
      sequence: null,
      attempt: 1,
      maxAttempts: 1,
      headers: {},
      createdAt: new Date(),
    };
    const relay = relayTo(target, { subject: `${jsName('nowhere')}.x` });
    await assert.rejects(relay({ n: 1 }, { delivery, signal: new AbortController().signal }), BrokerNotFoundError);
    const big = relayTo(target, { subject: s.subject });
    await assert.rejects(
      big({ n: 1, pad: 'x'.repeat(1_100_000) }, { delivery, signal: new AbortController().signal }),
      MessageTooLargeError,
    );
    const downTarget = natsTarget({ servers: 'nats://127.0.0.1:1', connectTimeoutMs: 500 });
    await assert.rejects(
      relayTo(downTarget, { subject: 'x' })({ n: 1 }, { delivery, signal: new AbortController().signal }),
      BrokerUnavailableError,
    );
  });
});
