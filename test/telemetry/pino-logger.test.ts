/**
 * A pino logger passed as `logger` (to createRelayBus or to bus.start) is used as it is: its lines
 * keep relaybus's structured fields (pino takes the object first, so unadapted it would log the
 * message alone), and every line about a delivery carries its id, handler, attempt and lane, and
 * the error where there is one.
 */
import assert from 'node:assert/strict';
import { Writable } from 'node:stream';
import { describe, it } from 'node:test';
import pino from 'pino';
import { adaptLogger, createRelayBus, defineEvent, memoryStore, Type } from '../../src/index.js';
import { isObjectFirstLogger } from '../../src/core/logger.js';
import { waitFor } from '../support/wait.js';

interface Line {
  readonly level: number;
  readonly msg: string;
  readonly [field: string]: unknown;
}

function capture(): { logger: pino.Logger; lines: Line[] } {
  const lines: Line[] = [];
  const sink = new Writable({
    write(chunk: Buffer, _encoding, done) {
      for (const text of chunk.toString('utf8').split('\n'))
        if (text.trim() !== '') lines.push(JSON.parse(text) as Line);
      done();
    },
  });
  return { logger: pino({ level: 'debug' }, sink), lines };
}

const Order = defineEvent('order.placed', Type.Object({ n: Type.Integer() }));

async function runWith(where: 'createRelayBus' | 'start'): Promise<Line[]> {
  const { logger, lines } = capture();
  const store = memoryStore();
  const bus = createRelayBus({
    store,
    events: [Order],
    maxAttempts: 2,
    backoff: { initialDelayMs: 1, maxDelayMs: 1, jitter: 0 },
    dispatcher: { pollIntervalMs: 5 },
    ...(where === 'createRelayBus' ? { logger } : {}),
  });
  bus.on(Order, 'ok', () => {});
  bus.on(Order, 'broken', () => {
    throw new TypeError('card declined');
  });
  await store.transaction((tx) => bus.publish(tx, Order, { n: 1 }, { key: 'customer-7' }));
  await bus.start(where === 'start' ? { logger } : {});
  await waitFor(
    async () => (await store.statistics()).pending === 0 && (await store.statistics()).inFlight === 0,
    'drained',
  );
  await bus.stop();
  logger.flush();
  return lines;
}

describe('a pino logger', () => {
  it('is recognised as object-first; other loggers are left alone', () => {
    assert.equal(isObjectFirstLogger(pino()), true);
    assert.equal(isObjectFirstLogger(console), false);
    const plain = { debug() {}, info() {}, warn() {}, error() {} };
    assert.equal(adaptLogger(plain), plain);
  });

  for (const where of ['createRelayBus', 'start'] as const) {
    it(`passed to ${where}: lines keep their fields; every delivery line has delivery id, handler, attempt, lane (and the error)`, async () => {
      const lines = await runWith(where);
      const about = lines.filter((line) => line.deliveryId !== undefined);
      assert.ok(about.length >= 3, `lines about deliveries: ${JSON.stringify(lines)}`);
      for (const line of about) {
        for (const field of ['handler', 'attempt', 'lane'])
          assert.notEqual(line[field], undefined, `${field} in ${JSON.stringify(line)}`);
        assert.ok(Number.isInteger(line.lane) && (line.lane as number) >= 0 && (line.lane as number) < 256);
      }
      const dead = lines.find((line) => line.msg.startsWith('handler failed on its last attempt'));
      assert.ok(dead, `the dead-letter line: ${JSON.stringify(lines)}`);
      assert.equal(dead.level, 50, 'at error');
      assert.equal(dead.handler, 'broken');
      assert.equal(dead.attempt, 2);
      assert.equal(dead.error, 'TypeError: card declined');
      assert.equal(typeof dead.deliveryId, 'string');
      const retry = lines.find((line) => line.msg === 'handler failed; retrying later');
      assert.equal(retry?.attempt, 1);
      assert.equal(retry?.error, 'TypeError: card declined');
      const delivered = lines.filter((line) => line.msg === 'delivered');
      assert.deepEqual(
        delivered.map((line) => line.handler),
        ['ok'],
      );
      assert.equal(delivered[0]!.attempt, 1);
      const started = lines.find((line) => line.msg === 'dispatcher started');
      assert.equal(typeof started?.owner, 'string', 'lines that are not about a delivery keep their fields too');
    });
  }
});
