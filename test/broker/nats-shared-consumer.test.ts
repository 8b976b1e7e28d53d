/**
 * The README's account of inboxes sharing one JetStream durable consumer: an inbox that starts (or reconnects) while
 * another holds messages unacknowledged counts them as outstanding, reports `held-back`, and holds its new messages
 * back until its wait ends, twice the ack wait plus 1 s (the other's messages are acknowledged, never redelivered to
 * it). With a durable consumer of its own (the README's way around it) nothing is held back.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { connect, headers, type NatsConnection } from '@nats-io/transport-node';
import { AckPolicy, jetstream, jetstreamManager, type JetStreamManager } from '@nats-io/jetstream';
import { createRelayBus, defineEvent, type Logger, Type } from '../../src/index.js';
import { HEADERS, type InboxBus, natsInbox } from '../../src/nats/index.js';
import type { PgClientLike } from '../../src/postgres/index.js';
import { NATS_URL, natsSkip, openSchema, type TestSchema, uniqueName, until } from './support.js';

const ItemCreated = defineEvent('item.created', Type.Object({ n: Type.Integer() }));
const ACK_WAIT_MS = 1_000;

describe('inboxes sharing one JetStream durable consumer', { skip: await natsSkip() }, () => {
  let db: TestSchema;
  let nc: NatsConnection;
  let jsm: JetStreamManager;
  const streams: string[] = [];
  const stops: (() => Promise<void>)[] = [];

  before(async () => {
    db = await openSchema('nats_shared');
    nc = await connect({ servers: NATS_URL });
    jsm = await jetstreamManager(nc);
  });
  after(async () => {
    for (const stop of stops.reverse()) await stop().catch(() => {});
    for (const stream of streams) await jsm.streams.delete(stream).catch(() => {});
    await nc?.close();
    await db?.drop();
  });

  /** A stream with one subject per consumer label, and a durable consumer per label (ack wait 1 s). */
  async function topology(label: string, consumers: readonly string[]) {
    const name = uniqueName(label).replace(/\./g, '_');
    streams.push(name);
    await jsm.streams.add({ name, subjects: [`${name}.>`] });
    for (const consumer of consumers)
      await jsm.consumers.add(name, {
        durable_name: consumer,
        ack_policy: AckPolicy.Explicit,
        ack_wait: ACK_WAIT_MS * 1e6,
        filter_subject: `${name}.${consumer}`,
      });
    return name;
  }

  async function publish(subject: string, prefix: string, count: number) {
    const js = jetstream(nc);
    for (let n = 0; n < count; n += 1) {
      const h = headers();
      h.set(HEADERS.type, ItemCreated.type);
      await js.publish(subject, JSON.stringify({ n }), { msgID: `${prefix}-${n}`, headers: h });
    }
  }

  /** A bus for the inboxes (no handler runs: the events are only counted), and one whose commits wait for `release`. */
  function buses() {
    const bus = createRelayBus({ store: db.store, events: [ItemCreated] });
    bus.on(ItemCreated, uniqueName('h'), async () => {});
    let release: () => void = () => {};
    const released = new Promise<void>((resolve) => (release = resolve));
    let waiting = 0;
    const blocked: InboxBus<PgClientLike> = {
      store: bus.store,
      publishMany: async (tx, items) => {
        waiting += 1;
        await released;
        return (bus as InboxBus<PgClientLike>).publishMany(tx, items);
      },
    };
    return { bus, blocked, release, waiting: () => waiting };
  }

  /** Start B beside A (which holds 5 messages unacknowledged), then let A commit: when does B handle its messages? */
  async function startBesideBusyInbox(stream: string, consumerA: string, consumerB: string) {
    const { bus, blocked, release, waiting } = buses();
    const prefix = uniqueName('m');
    const a = natsInbox({ bus: blocked, servers: NATS_URL, stream, consumer: consumerA, events: [ItemCreated] });
    stops.push(() => a.stop());
    await a.start();
    await publish(`${stream}.${consumerA}`, `${prefix}-a`, 5);
    await until(async () => (waiting() > 0 ? true : undefined), 'A holds its messages', 10_000);
    const warnings: string[] = [];
    const logger: Logger = { debug() {}, info() {}, warn: (message) => warnings.push(message), error() {} };
    const b = natsInbox({ bus, servers: NATS_URL, stream, consumer: consumerB, events: [ItemCreated], logger });
    const heldBack: number[] = [];
    b.lifecycle.on('held-back', ({ outstanding }) => heldBack.push(outstanding));
    stops.push(() => b.stop());
    const started = Date.now();
    await b.start();
    release();
    await publish(`${stream}.${consumerB}`, `${prefix}-b`, 5);
    await until(
      async () => ((await db.count('relaybus_events', `id LIKE '${prefix}-%'`)) === 10 ? true : undefined),
      'all 10 events in B',
      15_000,
      20,
    );
    return { heldBack, warnings, tookMs: Date.now() - started };
  }

  it('one shared consumer: the inbox that starts holds its messages back for twice the ack wait (plus 1 s)', {
    timeout: 30_000,
  }, async () => {
    const stream = await topology('shared', ['c']);
    // Both inboxes on consumer "c" (whose filter is <stream>.c): the second waits for the first's 5 messages.
    const { heldBack, warnings, tookMs } = await startBesideBusyInbox(stream, 'c', 'c');
    assert.deepEqual(heldBack, [5], "B counted A's 5 unacknowledged messages as outstanding");
    assert.ok(
      warnings.some((w) => /releasing \d+ held-back messages: 5 of 5 outstanding messages did not come back/.test(w)),
      warnings.join('\n'),
    );
    assert.ok(tookMs >= 2 * ACK_WAIT_MS + 1_000 - 100, `B's messages waited ${tookMs} ms`);
  });

  it('a durable consumer each: nothing is held back', { timeout: 30_000 }, async () => {
    const stream = await topology('own', ['a', 'b']);
    const { heldBack, warnings, tookMs } = await startBesideBusyInbox(stream, 'a', 'b');
    assert.deepEqual(heldBack, []);
    assert.deepEqual(warnings, []);
    assert.ok(tookMs < 2 * ACK_WAIT_MS, `B's messages were handled in ${tookMs} ms`);
  });
});
