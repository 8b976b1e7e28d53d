/**
 * Events published inline: an event without an id of the caller's, with a small payload, on a store that keeps no
 * completion history, is written without an events row; its deliveries carry its type, payload and headers. Every
 * reader must see it as it sees an event with a row: the claim (payload, headers, type), the admin views, the
 * subscriptions' pending counts, unsubscribe by type, and a completion history turned on later.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type pg from 'pg';
import { fromPg, postgresStore, type PgClientLike, type PostgresStore } from '../../src/postgres/index.js';
import type { ClaimedDelivery, PublishParams, PublishResult } from '../../src/store/contract.js';
import { findPostgres } from '../support/databases.js';
import { usePgStore } from '../support/pg-store.js';
import * as owners from '../support/claims.js';

const found = await findPostgres();

const handlers = [
  { name: 'a', maxAttempts: 1 },
  { name: 'b', maxAttempts: 3 },
];

describe('events published inline on real Postgres', { skip: 'skip' in found ? found.skip : undefined }, () => {
  let pool: pg.Pool;
  let store: PostgresStore<PgClientLike>;
  const schema = usePgStore('inline_events', 4, (opened) => ({ pool, store } = opened));

  const eventRows = async () =>
    (await pool.query<{ id: string }>(`SELECT id FROM "${schema}".relaybus_events ORDER BY id`)).rows.map((r) => r.id);
  /** Claim and complete until nothing is left (a key's next delivery comes once the one before completed). */
  const drain = async (owner = 'w') => {
    const claimed: ClaimedDelivery[] = [];
    for (let batch = await claim(owner); batch.length > 0; batch = await claim(owner)) {
      claimed.push(...batch);
      const done = await store.completeMany(batch.map((d) => ({ deliveryId: d.id, leaseToken: d.leaseToken })));
      assert.ok(done.every(Boolean));
    }
    return claimed;
  };
  /** The events rows written by `publish` (rows of earlier tests stay until their retention ends). */
  const newEventRows = async (publish: () => Promise<unknown>) => {
    const before = new Set(await eventRows());
    await publish();
    return (await eventRows()).filter((id) => !before.has(id));
  };
  const claim = (owner: string) =>
    owners.claim(store, { owner, handlers: ['a', 'b'], limit: 50, leaseDurationMs: 60_000 });

  it('writes no events row for a small event without a caller id, and its deliveries read back whole', async () => {
    const large = { text: 'x'.repeat(2_000) };
    const published: PublishParams[] = [
      { type: 'order.placed', key: 'k1', payload: { n: 1, note: '<é>' }, headers: { traceparent: 't1' }, handlers },
      { id: 'caller-1', type: 'order.placed', key: 'k1', payload: { n: 2 }, handlers },
      { type: 'order.shipped', payload: large, handlers },
      { type: 'order.placed', key: 'k1', payload: { n: 3 }, handlers },
    ];
    let results: PublishResult[] = [];
    const rows = await newEventRows(async () => {
      results = await store.transaction((tx) => store.publish(tx, published));
    });
    const [inline1, caller, big, inline2] = results.map((r) => r.eventId);
    assert.deepEqual(rows.sort(), [big, caller].sort(), 'events rows: the caller id and the large one');

    const claimed = await drain();
    assert.equal(claimed.length, 8);
    for (const [index, event] of published.entries()) {
      const mine = claimed.filter((d) => d.eventId === results[index]!.eventId);
      assert.deepEqual(mine.map((d) => d.handler).sort(), ['a', 'b'], `event ${index}: one delivery per handler`);
      for (const d of mine) {
        assert.equal(d.eventType, event.type);
        assert.deepEqual(d.payload, event.payload);
        assert.deepEqual(d.headers, event.headers ?? {});
        assert.equal(d.key, event.key ?? null);
      }
    }
    // Per-key order holds across inline events and events with a row (k1: inline1, caller, inline2).
    for (const handler of ['a', 'b']) {
      const keyed = claimed.filter((d) => d.handler === handler && d.key === 'k1');
      assert.deepEqual(
        keyed.map((d) => d.eventId),
        [inline1, caller, inline2],
      );
      assert.ok(Number(keyed[0]!.sequence) < Number(keyed[1]!.sequence));
      assert.ok(Number(keyed[1]!.sequence) < Number(keyed[2]!.sequence));
    }
    assert.equal((await store.listDeliveries()).items.length, 0);
  });

  it('shows inline events in the admin views, the subscriptions and unsubscribe by type', async () => {
    await store.subscribe([
      { eventType: 'user.joined', handler: 'a', maxAttempts: 1 },
      { eventType: 'user.left', handler: 'a', maxAttempts: 1 },
    ]);
    let joined: PublishResult | undefined;
    const rows = await newEventRows(async () => {
      [joined] = await store.transaction((tx) =>
        store.publish(tx, [
          { type: 'user.joined', payload: { u: 1 }, handlers: [] },
          { type: 'user.left', payload: { u: 2 }, handlers: [] },
        ]),
      );
    });
    assert.deepEqual(rows, [], 'both inline');
    const pending = new Map((await store.listSubscriptions()).map((s) => [s.eventType, s.pending]));
    assert.equal(pending.get('user.joined'), 1);
    assert.equal(pending.get('user.left'), 1);

    const [view] = (await store.listDeliveries({ eventId: joined!.eventId })).items;
    assert.equal(view?.eventType, 'user.joined');
    assert.equal(view?.status, 'pending');

    const result = await store.unsubscribe({ handler: 'a', eventType: 'user.left', buryPending: 'gone' });
    assert.equal(result.buried, 1, 'only the user.left delivery, found by the type its delivery carries');
    const dead = (await store.listDeliveries({ status: 'dead' })).items;
    assert.deepEqual(
      dead.map((d) => d.eventType),
      ['user.left'],
    );
    assert.equal(await store.requeue({ all: true }), 1);
    const claimed = await drain();
    assert.deepEqual(claimed.map((d) => [d.eventType, d.payload]).sort(), [
      ['user.joined', { u: 1 }],
      ['user.left', { u: 2 }],
    ]);
    await store.unsubscribe({ handler: 'a' });
  });

  it('a store that keeps completion history writes events rows, and records inline events published before', async () => {
    const withHistory = postgresStore({ driver: fromPg(pool), schema, completionHistory: true });
    let before: PublishResult | undefined;
    let after: PublishResult | undefined;
    const rows = await newEventRows(async () => {
      [before] = await store.transaction((tx) =>
        store.publish(tx, [{ type: 'audit.logged', payload: { n: 1 }, handlers: [handlers[0]!] }]),
      );
      [after] = await withHistory.transaction((tx) =>
        withHistory.publish(tx, [{ type: 'audit.logged', payload: { n: 2 }, handlers: [handlers[0]!] }]),
      );
    });
    assert.deepEqual(rows, [after!.eventId], 'only the event published with history on has a row');
    const claimed = await owners.claim(withHistory, {
      owner: 'h',
      handlers: ['a'],
      limit: 10,
      leaseDurationMs: 60_000,
    });
    assert.equal(claimed.length, 2);
    // One completion through completeMany, one riding on the next claim: both statements write history.
    const [first, second] = claimed;
    await withHistory.completeMany([{ deliveryId: first!.id, leaseToken: first!.leaseToken }]);
    await owners.completeAndClaim(withHistory, [{ deliveryId: second!.id, leaseToken: second!.leaseToken }], {
      owner: 'h',
      handlers: ['a'],
      limit: 10,
      leaseDurationMs: 60_000,
    });
    const completed = (await withHistory.listDeliveries({ status: 'completed' })).items;
    assert.deepEqual(
      completed.map((d) => [d.eventId, d.eventType]).sort(),
      [
        [before!.eventId, 'audit.logged'],
        [after!.eventId, 'audit.logged'],
      ].sort(),
    );
  });
  it('a store with keepEvents writes an events row for every event, kept after its deliveries complete', async () => {
    const keeping = postgresStore({ driver: fromPg(pool), schema, keepEvents: true });
    let results: PublishResult[] = [];
    const rows = await newEventRows(async () => {
      results = await keeping.transaction((tx) =>
        keeping.publish(tx, [
          { type: 'order.placed', key: 'kept', payload: { n: 1 }, handlers },
          { type: 'order.placed', payload: { n: 2 }, handlers },
        ]),
      );
    });
    assert.deepEqual(
      rows,
      results.map((r) => r.eventId).sort(),
      'both events have their row, though neither has an id',
    );
    await drain('keep');
    assert.deepEqual(
      (await eventRows()).filter((id) => rows.includes(id)),
      rows,
      'the rows stay after every delivery completed (until retention)',
    );
    assert.throws(
      () => postgresStore({ driver: fromPg(pool), schema, keepEvents: 'yes' as unknown as boolean }),
      /keepEvents/,
    );
  });
});
