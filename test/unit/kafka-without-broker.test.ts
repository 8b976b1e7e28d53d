/**
 * relaybus/kafka without a broker: the pieces that decide what is committed and what is sent, and which send errors
 * are permanent. The broker tests (test/broker/kafka-with-broker.test.ts) need KAFKA_BROKERS and say they skipped
 * without it.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { KafkaMessage } from 'kafkajs';
import { InvalidOptionsError } from '../../src/core/errors.js';
import { isPermanentFailure } from '../../src/core/permanent-failure.js';
import { BrokerRejectedError, MessageTooLargeError } from '../../src/broker/broker-errors.js';
import { kafkaSendError } from '../../src/kafka/kafka-connection.js';
import { defineEvent, Type } from '../../src/index.js';
import { HEADERS, type OutboundMessage } from '../../src/broker/broker-message.js';
import { kafkaInbox, kafkaTarget } from '../../src/kafka/index.js';
import { inboundOf, recordOf } from '../../src/kafka/kafka-message.js';
import { InOrderOffsets } from '../../src/kafka/kafka-offsets.js';

const Placed = defineEvent('order.placed', Type.Object({ n: Type.Integer() }));

/** A consumed record as kafkajs hands it (headers as Buffers). */
function consumed(record: ReturnType<typeof recordOf>, offset: string): KafkaMessage {
  const headers: Record<string, Buffer> = {};
  for (const [name, value] of Object.entries(record.headers ?? {})) headers[name] = Buffer.from(String(value));
  return {
    key: record.key === null || record.key === undefined ? null : Buffer.from(String(record.key)),
    value: record.value as Buffer,
    timestamp: String(record.timestamp),
    attributes: 0,
    offset,
    headers,
  };
}

describe('kafka: offsets are released in order, whatever order records settle in', () => {
  it('releases an offset only when every earlier offset of the batch is settled', () => {
    const offsets = new InOrderOffsets(['10', '11', '12', '13']);
    assert.deepEqual(offsets.settle(2), [], '12 waits for 10 and 11');
    assert.deepEqual(offsets.settle(0), ['10']);
    assert.deepEqual(offsets.settle(1), ['11', '12']);
    assert.equal(offsets.done, false);
    assert.deepEqual(offsets.settle(1), [], 'settling twice releases nothing more');
    assert.deepEqual(offsets.settle(3), ['13']);
    assert.equal(offsets.done, true);
  });

  it('releases nothing after a record is given back (the partition is read again from it)', () => {
    const offsets = new InOrderOffsets(['5', '6', '7']);
    assert.deepEqual(offsets.settle(0), ['5']);
    offsets.giveBack(1);
    assert.deepEqual(offsets.settle(2), [], '7 was committed as an event, but 6 was not: 6 and 7 are read again');
    assert.equal(offsets.done, true);
  });
});

describe('kafka: records', () => {
  const outbound = (key: string | null): OutboundMessage => ({
    id: 'evt-1',
    type: 'order.placed',
    key,
    headers: { traceparent: '00-abc-def-01', 'relaybus-forged': 'dropped' },
    body: Buffer.from(JSON.stringify({ n: 1 })),
    createdAt: new Date('2030-01-02T03:04:05.000Z'),
  });

  it('a relayed record reads back as the message the relay sent (id, type, key, headers, body)', () => {
    const record = recordOf(outbound('customer-7'));
    assert.equal(record.key, 'customer-7', 'the record key is the ordering key: one key, one partition');
    const inbound = inboundOf(consumed(record, '42'), 'orders', 3);
    assert.equal(inbound.id, 'evt-1');
    assert.equal(inbound.type, 'order.placed');
    assert.equal(inbound.key, 'customer-7');
    assert.deepEqual(
      inbound.headers,
      { traceparent: '00-abc-def-01' },
      'relaybus-* headers are not application headers',
    );
    assert.deepEqual(JSON.parse(Buffer.from(inbound.body).toString('utf8')), { n: 1 });
    assert.equal(inbound.source, 'topic orders partition 3 offset 42');
  });

  it('an unkeyed event has no record key; a foreign record is keyed by its record key, and has no id without the header', () => {
    const unkeyed = recordOf(outbound(null));
    assert.equal(unkeyed.key, null);
    assert.equal(inboundOf(consumed(unkeyed, '1'), 't', 0).key, null);
    const foreign: KafkaMessage = {
      key: Buffer.from('tenant-9'),
      value: Buffer.from('{}'),
      timestamp: '0',
      attributes: 0,
      offset: '7',
      headers: { [HEADERS.type]: Buffer.from('order.placed'), 'x-trace': [Buffer.from('a'), Buffer.from('b')] },
    };
    const inbound = inboundOf(foreign, 't', 0);
    assert.equal(inbound.key, 'tenant-9');
    assert.equal(inbound.id, undefined, 'no relaybus-id header: the inbox dead-letters it as missing-id');
    assert.deepEqual(inbound.headers, { 'x-trace': 'a' });
  });
});

describe('kafka: options are checked before anything connects', () => {
  // Never called: the options are refused (or the inbox built) before anything connects.
  const bus = {
    store: { transaction: () => Promise.reject(new Error('unused')), setup: async () => {} },
    publishMany: async () => [],
  };
  const good = { bus, brokers: 'localhost:9092', topics: 'orders', groupId: 'orders-b', events: [Placed] };

  it('refuses bad brokers, topics, group ids, numbers and a missing mapping with InvalidOptionsError naming the option', () => {
    const bad: [Record<string, unknown>, RegExp][] = [
      [{ brokers: '' }, /`brokers` is required/],
      [{ brokers: 'kafka://localhost:9092' }, /host:port/],
      [{ topics: [] }, /`topics` is required/],
      [{ topics: 'has space' }, /`topics` must be a Kafka topic name/],
      [{ groupId: '' }, /`groupId` is required/],
      [{ deadLetter: { topic: '..' } }, /`deadLetter.topic` must be a Kafka topic name/],
      [{ batchSize: 0 }, /`batchSize` must be an integer from 1/],
      [{ events: [] }, /give `events`/],
    ];
    for (const [change, message] of bad) {
      assert.throws(
        () => kafkaInbox({ ...good, ...change } as unknown as Parameters<typeof kafkaInbox>[0]),
        (error: unknown) => error instanceof InvalidOptionsError && message.test(error.message),
        JSON.stringify(change),
      );
    }
    assert.equal(kafkaInbox(good).name, 'kafka orders (group orders-b)');
    assert.equal(kafkaInbox({ ...good, brokers: 'a:9092, b:9093' }).health().ready, false, 'not started: not ready');
  });

  it('kafkaTarget checks its brokers, and a route topic when it sends', async () => {
    assert.throws(() => kafkaTarget({ brokers: [] }), InvalidOptionsError);
    assert.throws(() => kafkaTarget({ brokers: 'localhost:9092', timeoutMs: 0 }), /timeoutMs/);
    const target = kafkaTarget({ brokers: 'localhost:9092' });
    await assert.rejects(
      target.send(
        { id: 'e', type: 't', key: null, headers: {}, body: Buffer.from('{}'), createdAt: new Date() },
        { topic: 'no spaces allowed' },
        new AbortController().signal,
      ),
      /route\.topic/,
    );
    await target.close();
  });
});

describe('kafka: permanent relay failures, classified without a broker', () => {
  const brokers = ['localhost:9092'];
  it('a record Kafka refuses as too large or invalid is permanent; a broker that is away or refuses the login is not', () => {
    const tooLarge = kafkaSendError(
      Object.assign(new Error('The request included a message larger than the max message size'), {
        type: 'MESSAGE_TOO_LARGE',
      }),
      'sending event e-1 to topic "orders"',
      brokers,
      2_000_000,
    );
    assert.ok(tooLarge instanceof MessageTooLargeError && isPermanentFailure(tooLarge));
    assert.equal(tooLarge.size, 2_000_000);
    // kafkajs wraps what it gave up on: the record's error is found inside.
    const wrapped = Object.assign(new Error('Number of retries exceeded'), {
      cause: Object.assign(new Error('invalid record'), { type: 'INVALID_RECORD' }),
    });
    const invalid = kafkaSendError(wrapped, 'sending', brokers, 10);
    assert.ok(invalid instanceof BrokerRejectedError && isPermanentFailure(invalid));
    for (const transient of [
      new Error('Connection error: connect ECONNREFUSED 127.0.0.1:9092'),
      Object.assign(new Error('SASL PLAIN authentication failed'), { type: 'SASL_AUTHENTICATION_FAILED' }),
      Object.assign(new Error('not leader'), { type: 'NOT_LEADER_FOR_PARTITION' }),
    ])
      assert.equal(isPermanentFailure(kafkaSendError(transient, 'sending', brokers, 10)), false, transient.message);
  });
});
