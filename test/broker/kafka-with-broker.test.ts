/**
 * Kafka on both sides, against the brokers of KAFKA_BROKERS (topics of its own): the relay produces each event with
 * the event id in `relaybus-id` and the ordering key as the record key, and completes on Kafka's acknowledgement; the
 * inbox turns records into events once (a record produced twice, as after a relay crash, runs no handler twice),
 * keeps each key's order, dead-letters poison with its reason, and commits offsets only after the events.
 * Skipped, with the reason, without KAFKA_BROKERS (this project's machines have no Kafka broker).
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import type { Admin, Consumer, Producer } from 'kafkajs';
import { createRelayBus, defineEvent, Type } from '../../src/index.js';
import { HEADERS, kafkaInbox, kafkaTarget, relayTo, type Inbox } from '../../src/kafka/index.js';
import type { PgClientLike } from '../../src/postgres/index.js';
import type { Store } from '../../src/store/contract.js';
import {
  handlerDrained,
  KAFKA_BROKERS,
  kafkaSkip,
  keyOrderViolations,
  openSchema,
  uniqueName,
  until,
  type TestSchema,
} from './support.js';

const skip = await kafkaSkip();
const ItemCreated = defineEvent('item.created', Type.Object({ n: Type.Integer() }, { additionalProperties: false }));
const brokers = (KAFKA_BROKERS ?? '').split(',');
const topicName = (label: string) => uniqueName(label).replace(/[^a-zA-Z0-9._-]/g, '_');

describe('kafka relay and inbox', { skip }, () => {
  let db: TestSchema;
  let admin: Admin;
  let producer: Producer;
  const topics: string[] = [];
  const cleanups: (() => Promise<void>)[] = [];

  before(async () => {
    db = await openSchema('kafka');
    const { Kafka, logLevel } = await import('kafkajs');
    const kafka = new Kafka({ brokers, logLevel: logLevel.NOTHING });
    admin = kafka.admin();
    await admin.connect();
    producer = kafka.producer();
    await producer.connect();
  });
  after(async () => {
    for (const cleanup of cleanups.reverse()) await cleanup().catch(() => {});
    await admin?.deleteTopics({ topics }).catch(() => {});
    await producer?.disconnect();
    await admin?.disconnect();
    await db?.drop();
  });

  async function topic(label: string, partitions = 3): Promise<string> {
    const name = topicName(label);
    topics.push(name);
    await admin.createTopics({ waitForLeaders: true, topics: [{ topic: name, numPartitions: partitions }] });
    return name;
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

  it('relays each event once with its id and key; the inbox publishes each once in key order, and a record produced twice runs no handler twice', {
    timeout: 60_000,
  }, async () => {
    const items = await topic('items');
    const target = kafkaTarget({ brokers });
    cleanups.push(() => target.close());
    const a = bus(db.store);
    a.bus.on(ItemCreated, a.handler, relayTo(target, { topic: items }));
    await db.store.transaction((tx) =>
      a.bus.publishMany(
        tx,
        Array.from({ length: 200 }, (_, n) => ({
          event: ItemCreated,
          payload: { n },
          options: { id: `ka-${n}`, key: `k-${n % 5}` },
        })),
      ),
    );
    await a.bus.start();
    cleanups.push(() => a.bus.stop());
    await handlerDrained(a.bus.store, a.handler, 30_000);
    await a.bus.stop();
    // The relay crashed after Kafka's ack and sent event ka-3 again: a second record with the same id.
    await producer.send({
      topic: items,
      messages: [
        {
          key: 'k-3',
          value: JSON.stringify({ n: 3 }),
          headers: { [HEADERS.id]: 'ka-3', [HEADERS.type]: ItemCreated.type, [HEADERS.key]: 'k-3' },
        },
      ],
    });

    const b = bus(db.store);
    const runs = new Map<string, number>();
    b.bus.on(ItemCreated, b.handler, async (_payload, ctx) => {
      runs.set(ctx.delivery.eventId, (runs.get(ctx.delivery.eventId) ?? 0) + 1);
    });
    const order = bus(db.store); // a handler B never runs: its pending deliveries keep B's publish order
    order.bus.on(ItemCreated, order.handler, () => {});
    await b.bus.store.subscribe([{ eventType: ItemCreated.type, handler: order.handler, maxAttempts: 3 }]);
    await b.bus.start();
    cleanups.push(() => b.bus.stop());
    const inbox: Inbox = kafkaInbox({
      bus: b.bus,
      brokers,
      topics: items,
      groupId: topicName('g'),
      events: [ItemCreated],
    });
    cleanups.push(() => inbox.stop());
    let duplicates = 0;
    inbox.lifecycle.on('committed', ({ messages }) => {
      duplicates += messages.filter((m) => m.duplicate).length;
    });
    await inbox.start();
    await until(async () => (runs.size === 200 ? true : undefined), 'B ran its handler for 200 events', 30_000);
    await until(async () => (duplicates >= 1 ? true : undefined), 'the second record of ka-3 was read', 30_000);
    await new Promise((resolve) => setTimeout(resolve, 500));
    assert.deepEqual(
      [...runs.values()].filter((count) => count !== 1),
      [],
      'every handler ran once per event',
    );
    const { rows, violations } = await keyOrderViolations(db, 'ka-', order.handler);
    assert.equal(rows, 200);
    assert.deepEqual(violations, [], 'per key, B published in the order A committed');
    await inbox.stop();
    assert.equal(inbox.health().ready, false);
  });

  it('dead-letters a record without an id and one whose payload breaks its schema, with the reason, and goes on', {
    timeout: 60_000,
  }, async () => {
    const items = await topic('poison', 1);
    const dead = await topic('poison-dead', 1);
    const b = bus(db.store);
    b.bus.on(ItemCreated, b.handler, () => {});
    const inbox = kafkaInbox({
      bus: b.bus,
      brokers,
      topics: items,
      groupId: topicName('gp'),
      events: [ItemCreated],
      deadLetter: { topic: dead },
    });
    cleanups.push(() => inbox.stop());
    const reasons: string[] = [];
    inbox.lifecycle.on('dead-lettered', ({ reason }) => reasons.push(reason));
    await inbox.start();
    await producer.send({
      topic: items,
      messages: [
        { value: JSON.stringify({ n: 1 }), headers: { [HEADERS.type]: ItemCreated.type } },
        { value: JSON.stringify({ n: 'two' }), headers: { [HEADERS.id]: 'kp-2', [HEADERS.type]: ItemCreated.type } },
        { value: JSON.stringify({ n: 3 }), headers: { [HEADERS.id]: 'kp-3', [HEADERS.type]: ItemCreated.type } },
      ],
    });
    await until(
      async () => ((await db.count('relaybus_events', "id = 'kp-3'")) === 1 ? true : undefined),
      'kp-3 published',
      30_000,
    );
    assert.deepEqual(reasons.sort(), ['invalid-payload', 'missing-id']);
    const { Kafka, logLevel } = await import('kafkajs');
    const reader: Consumer = new Kafka({ brokers, logLevel: logLevel.NOTHING }).consumer({ groupId: topicName('dl') });
    await reader.connect();
    await reader.subscribe({ topics: [dead], fromBeginning: true });
    const seen: string[] = [];
    await reader.run({
      eachMessage: async ({ message }) => {
        seen.push(String(message.headers?.[HEADERS.deadReason]));
      },
    });
    await until(
      async () => (seen.length === 2 ? true : undefined),
      'both poison records on the dead-letter topic',
      30_000,
    );
    await reader.disconnect();
    assert.deepEqual(seen.sort(), ['invalid-payload', 'missing-id']);
    assert.equal(await db.count('relaybus_events', "id = 'kp-2'"), 0, 'nothing published for the poison record');
  });
});
