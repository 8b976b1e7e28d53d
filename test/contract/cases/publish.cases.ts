/** Publish: atomic with the caller's transaction, one delivery per handler, inbox dedup, input checks. */
import assert from 'node:assert/strict';
import { EventConflictError, RelayBusError, type RelayBusErrorCode } from '../../../src/core/errors.js';
import { laneOf } from '../../../src/core/lanes.js';
import type { PublishParams } from '../../../src/store/contract.js';
import type { Harness } from '../../support/harness.js';
import {
  allDeliveries,
  claim,
  claimExpecting,
  event,
  H1,
  H2,
  handlers,
  leaseOf,
  publish,
  rejectsWithCode,
  type CaseGroup,
} from './kit.js';

/**
 * Publish `refused` in a transaction and expect it to be refused with `code`; then publish `after` in the
 * same transaction and commit. The later publish only succeeds if the refusal ran no failing statement
 * (a failed statement aborts a Postgres transaction). Returns the refusal.
 */
async function refusedThenUsable<TTx>(
  harness: Harness<TTx>,
  refused: readonly PublishParams[],
  code: RelayBusErrorCode,
  after: PublishParams,
): Promise<RelayBusError> {
  const now = harness.clock.now();
  let caught: unknown;
  await harness.inTransaction(async (tx) => {
    caught = await harness.store.publish(tx, refused, now).then(
      () => undefined,
      (error: unknown) => error,
    );
    const [later] = await harness.store.publish(tx, [after], now);
    assert.equal(later?.duplicate, false, 'the publish after the refused one writes in the same transaction');
  });
  assert.ok(caught instanceof RelayBusError, `expected a RelayBusError, got ${String(caught)}`);
  assert.equal(caught.code, code, caught.message);
  assert.ok((await harness.store.listDeliveries({ eventId: after.id! })).items.length > 0, 'the transaction committed');
  return caught;
}

const NUL = '\u0000';
/** Half of a UTF-16 surrogate pair on its own: what cutting a string inside an emoji leaves. */
const LONE_SURROGATE = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/;

export const publishCases: CaseGroup = {
  area: 'publish',
  cases: [
    {
      name: 'a committed publish creates one pending delivery per handler',
      async run({ harness }) {
        const [result] = await publish(harness, [event({ id: 'e1', key: 'k1', handlers: handlers(H1, H2) })]);
        assert.deepEqual(result, { eventId: 'e1', addedHandlers: [H1, H2], duplicate: false });
        const deliveries = await allDeliveries(harness);
        assert.deepEqual(deliveries.map((d) => d.handler).sort(), [H1, H2]);
        for (const d of deliveries) {
          assert.equal(d.eventId, 'e1');
          assert.equal(d.eventType, 'test.event');
          assert.equal(d.status, 'pending');
          assert.equal(d.attempts, 0);
          assert.equal(d.maxAttempts, 5);
          assert.equal(d.key, 'k1');
          assert.equal(d.lane, laneOf('k1', 'e1'));
          assert.equal(d.lastError, null);
          assert.equal(d.availableAt.getTime(), harness.clock.now().getTime());
          assert.equal(d.createdAt.getTime(), harness.clock.now().getTime());
        }
      },
    },
    {
      name: 'a rolled-back publish leaves nothing',
      needs: ['transactions'],
      async run({ harness }) {
        const now = harness.clock.now();
        const results = await harness.inTransaction(
          (tx) => harness.store.publish(tx, [event({ id: 'e1', key: 'k1' })], now),
          { rollback: true },
        );
        assert.equal(results.length, 1);
        assert.deepEqual((await harness.store.listDeliveries()).items, []);
        assert.deepEqual(await claim(harness, 'w1'), []);
        const stats = await harness.store.statistics(now);
        assert.equal(stats.pending + stats.inFlight + stats.dead, 0);
        // The event itself is gone too: publishing its id again is not a duplicate.
        const [again] = await publish(harness, [event({ id: 'e1', key: 'k1' })]);
        assert.equal(again?.duplicate, false);
      },
    },
    {
      name: 'a publish whose transaction throws leaves nothing',
      needs: ['transactions'],
      async run({ harness }) {
        const now = harness.clock.now();
        await assert.rejects(
          harness.inTransaction(async (tx) => {
            await harness.store.publish(tx, [event({ id: 'e1', handlers: handlers(H1, H2) })], now);
            throw new Error('business change failed');
          }),
          /business change failed/,
        );
        assert.deepEqual((await harness.store.listDeliveries()).items, []);
        assert.deepEqual(await claim(harness, 'w1'), []);
      },
    },
    {
      name: 'results come back in input order and an id is generated when absent',
      async run({ harness }) {
        const results = await publish(harness, [event({ id: 'b' }), event(), event({ id: 'a' }), event()]);
        assert.deepEqual(
          results.map((r) => r.eventId).filter((_, i) => i % 2 === 0),
          ['b', 'a'],
        );
        const generated = [results[1]!.eventId, results[3]!.eventId];
        for (const id of generated) assert.ok(typeof id === 'string' && id.length > 0);
        assert.notEqual(generated[0], generated[1]);
        assert.equal((await allDeliveries(harness)).length, 4);
      },
    },
    {
      name: 'a claimed delivery carries the published type, key, payload and headers',
      async run({ harness }) {
        const payload = { orderId: 'o-1', lines: [{ sku: 'x', qty: 2 }], note: null, ok: true };
        await publish(harness, [
          event({ id: 'e1', type: 'order.placed', key: 'customer-7', payload, headers: { traceparent: 't-1' } }),
        ]);
        const [claimed] = await claimExpecting(harness, 'w1', ['e1']);
        assert.equal(claimed!.eventType, 'order.placed');
        assert.equal(claimed!.handler, H1);
        assert.equal(claimed!.key, 'customer-7');
        assert.equal(claimed!.lane, laneOf('customer-7', 'e1'));
        assert.deepEqual(claimed!.payload, payload);
        assert.deepEqual(claimed!.headers, { traceparent: 't-1' });
        assert.equal(claimed!.attempts, 0);
        assert.equal(claimed!.maxAttempts, 5);
        assert.equal(claimed!.availableAt.getTime(), harness.clock.now().getTime());
        assert.equal(claimed!.createdAt.getTime(), harness.clock.now().getTime());
      },
    },
    {
      name: 'republishing an event id adds deliveries only for handlers it never had',
      async run({ harness }) {
        await publish(harness, [event({ id: 'e1', handlers: handlers(H1, H2) })]);
        const [again] = await publish(harness, [event({ id: 'e1', handlers: handlers(H2, 'h3') })]);
        assert.deepEqual(again, { eventId: 'e1', addedHandlers: ['h3'], duplicate: true });
        const [same] = await publish(harness, [event({ id: 'e1', handlers: handlers(H1) })]);
        assert.deepEqual(same, { eventId: 'e1', addedHandlers: [], duplicate: true });
        assert.deepEqual((await allDeliveries(harness)).map((d) => d.handler).sort(), [H1, H2, 'h3']);
      },
    },
    {
      name: 'a completed handler is not re-added when the event is published again',
      async run({ harness }) {
        await publish(harness, [event({ id: 'e1', handlers: handlers(H1) })]);
        const [claimed] = await claimExpecting(harness, 'w1', ['e1']);
        assert.deepEqual(await harness.store.completeMany([leaseOf(claimed!)], harness.clock.now()), [true]);
        const [again] = await publish(harness, [event({ id: 'e1', handlers: handlers(H1, H2) })]);
        assert.deepEqual(again, { eventId: 'e1', addedHandlers: [H2], duplicate: true });
        const remaining = await harness.store.listDeliveries({ eventId: 'e1', status: 'pending' });
        assert.deepEqual(
          remaining.items.map((d) => d.handler),
          [H2],
        );
        const next = await claim(harness, 'w1');
        assert.deepEqual(
          next.map((c) => c.handler),
          [H2],
        );
      },
    },
    {
      name: 'a dead-lettered handler is not re-added when the event is published again',
      async run({ harness }) {
        await publish(harness, [event({ id: 'e1', handlers: handlers(H1) })]);
        const [claimed] = await claimExpecting(harness, 'w1', ['e1']);
        assert.equal(await harness.store.bury(leaseOf(claimed!), { error: 'bad', now: harness.clock.now() }), true);
        const [again] = await publish(harness, [event({ id: 'e1', handlers: handlers(H1) })]);
        assert.deepEqual(again, { eventId: 'e1', addedHandlers: [], duplicate: true });
        const deliveries = await allDeliveries(harness);
        assert.deepEqual(
          deliveries.map((d) => [d.handler, d.status]),
          [[H1, 'dead']],
        );
      },
    },
    {
      name: 'a publish with an invalid event throws RELAYBUS_INVALID_INPUT and writes none of the batch',
      async run({ harness }) {
        const now = harness.clock.now();
        const bad = [
          event({ handlers: [] }),
          event({ handlers: [{ name: H1, maxAttempts: 0 }] }),
          event({ payload: { amount: BigInt(10) } }),
          event({ handlers: handlers(H1, H1) }),
          event({ type: '' }),
          event({ availableAt: new Date(Number.NaN) }),
        ];
        for (const invalid of bad) {
          // The transaction commits (the error is caught inside it): only validation-before-write keeps e-good out.
          await harness.inTransaction(async (tx) => {
            await rejectsWithCode(
              harness.store.publish(tx, [event({ id: 'e-good' }), invalid], now),
              'RELAYBUS_INVALID_INPUT',
            );
          });
        }
        await harness.inTransaction(async (tx) => {
          await rejectsWithCode(
            harness.store.publish(tx, [event({ id: 'twice' }), event({ id: 'twice' })], now),
            'RELAYBUS_INVALID_INPUT',
          );
        });
        assert.deepEqual((await harness.store.listDeliveries()).items, []);
        const [later] = await publish(harness, [event({ id: 'e-good' })]);
        assert.equal(later?.duplicate, false);
      },
    },
    {
      name: 'republishing an id with a different type, key or payload is a conflict naming what differs; nothing is written and the transaction goes on',
      async run({ harness }) {
        await publish(harness, [event({ id: 'e1', key: 'k1', payload: { n: 1, tags: ['a'] } })]);
        const variants: [Partial<PublishParams>, string[]][] = [
          [{ type: 'other.event' }, ['type']],
          [{ key: 'k2' }, ['key']],
          [{ key: null }, ['key']],
          [{ payload: { n: 2, tags: ['a'] } }, ['payload']],
          [{ payload: { n: 1, tags: ['a'], extra: true } }, ['payload']],
          [{ type: 'other.event', key: 'k2', payload: 'text' }, ['type', 'key', 'payload']],
        ];
        for (const [index, [change, differences]] of variants.entries()) {
          const conflicting = event({
            id: 'e1',
            key: 'k1',
            payload: { n: 1, tags: ['a'] },
            handlers: handlers(H1, H2),
            ...change,
          });
          const error = await refusedThenUsable(
            harness,
            [conflicting],
            'RELAYBUS_CONFLICT',
            event({ id: `after-${index}` }),
          );
          assert.ok(error instanceof EventConflictError);
          assert.equal(error.eventId, 'e1');
          assert.deepEqual(error.differences, differences, error.message);
          assert.match(error.message, /"e1"/);
          for (const field of differences) assert.match(error.message, new RegExp(field));
        }
        // Nothing of the conflicting publishes was written: e1 has its one delivery, its stored event is unchanged.
        assert.deepEqual(
          (await harness.store.listDeliveries({ eventId: 'e1' })).items.map((d) => d.handler),
          [H1],
        );
        const [claimed] = (await claim(harness, 'w1', { limit: 100 })).filter((c) => c.eventId === 'e1');
        assert.deepEqual(
          [claimed!.eventType, claimed!.key, claimed!.payload],
          ['test.event', 'k1', { n: 1, tags: ['a'] }],
        );
      },
    },
    {
      name: 'an identical redelivery is a duplicate, payloads compare as JSON (key order does not matter), headers may differ',
      async run({ harness }) {
        await publish(harness, [
          event({ id: 'e1', key: 'k1', payload: { a: 1, b: { c: [1, 2] } }, headers: { trace: 't1' } }),
        ]);
        const [again] = await publish(harness, [
          event({
            id: 'e1',
            key: 'k1',
            payload: { b: { c: [1, 2] }, a: 1 },
            headers: { trace: 't2' },
            handlers: handlers(H1, H2),
          }),
        ]);
        assert.deepEqual(again, { eventId: 'e1', addedHandlers: [H2], duplicate: true });
      },
    },
    {
      name: 'a conflict anywhere in a batch writes none of it, also against an event staged by the same transaction',
      async run({ harness }) {
        await publish(harness, [event({ id: 'e1' })]);
        await refusedThenUsable(
          harness,
          [event({ id: 'new-1' }), event({ id: 'e1', type: 'other' }), event({ id: 'new-2' })],
          'RELAYBUS_CONFLICT',
          event({ id: 'after' }),
        );
        const now = harness.clock.now();
        await harness.inTransaction(async (tx) => {
          await harness.store.publish(tx, [event({ id: 'mine', key: 'k' })], now);
          await assert.rejects(
            harness.store.publish(tx, [event({ id: 'mine', key: 'other-key' })], now),
            EventConflictError,
          );
          await harness.store.publish(tx, [event({ id: 'mine', key: 'k', handlers: handlers(H1, H2) })], now);
        });
        const ids = (await allDeliveries(harness)).map((d) => `${d.eventId}:${d.handler}`).sort();
        assert.deepEqual(ids, ['after:h1', 'e1:h1', 'mine:h1', 'mine:h2']);
      },
    },
    {
      name: 'a NUL character in an id, type, key, handler, payload (any depth, object keys) or header is refused before anything is written',
      async run({ harness }) {
        const cases: [Partial<PublishParams>, RelayBusErrorCode, RegExp][] = [
          [{ id: `e${NUL}1` }, 'RELAYBUS_INVALID_INPUT', /events\[1\]\.id/],
          [{ type: `t${NUL}` }, 'RELAYBUS_INVALID_INPUT', /events\[1\]\.type/],
          [{ key: `k${NUL}` }, 'RELAYBUS_INVALID_INPUT', /events\[1\]\.key/],
          [{ handlers: handlers(H1, `h${NUL}2`) }, 'RELAYBUS_INVALID_INPUT', /events\[1\]\.handlers\[1\]\.name/],
          [{ payload: `top${NUL}` }, 'RELAYBUS_INVALID_PAYLOAD', /events\[1\]\.payload/],
          [{ payload: { a: [{ b: `deep${NUL}` }] } }, 'RELAYBUS_INVALID_PAYLOAD', /\/a\/0\/b/],
          [{ payload: { [`k${NUL}ey`]: 1 } }, 'RELAYBUS_INVALID_PAYLOAD', /events\[1\]\.payload at \/k/],
          [{ headers: { trace: `t${NUL}` } }, 'RELAYBUS_INVALID_INPUT', /events\[1\]\.headers\.trace/],
          [{ headers: { [`tr${NUL}ace`]: 't' } }, 'RELAYBUS_INVALID_INPUT', /events\[1\]\.headers name/],
        ];
        for (const [index, [change, code, where]] of cases.entries()) {
          const error = await refusedThenUsable(
            harness,
            [event({ id: `good-${index}` }), event(change)],
            code,
            event({ id: `after-${index}` }),
          );
          assert.match(error.message, where);
          assert.match(error.message, /NUL/);
          assert.deepEqual(
            (await harness.store.listDeliveries({ eventId: `good-${index}` })).items,
            [],
            'nothing of the batch was written',
          );
        }
        assert.equal((await allDeliveries(harness)).length, cases.length, 'only the publishes after the refusals');
      },
    },
    {
      name: 'an over-long key is refused with its length, not echoed whole',
      async run({ harness }) {
        const key = 'k'.repeat(5_000);
        const error = await refusedThenUsable(
          harness,
          [event({ key })],
          'RELAYBUS_INVALID_INPUT',
          event({ id: 'after' }),
        );
        assert.match(error.message, /5000 characters/);
        assert.ok(error.message.length < 400, `message of ${error.message.length} characters`);
      },
    },
    {
      name: 'names are counted in code points: a key or id of 200 emoji is accepted, 201 refused, the message never cut in a pair',
      async run({ harness }) {
        const emoji = '\u{1f389}';
        for (const [index, name] of [emoji.repeat(200), `${'a'.repeat(199)}${emoji}`].entries()) {
          const [result] = await publish(harness, [event({ id: name, key: name, type: `t-${index}` })]);
          assert.equal(result?.eventId, name);
          const [stored] = (await harness.store.listDeliveries({ eventId: name })).items;
          assert.equal(stored?.key, name, 'the key stored whole');
        }
        for (const [index, change] of [
          { key: emoji.repeat(201) },
          { id: emoji.repeat(201) },
          { type: `${'a'.repeat(200)}${emoji}` },
        ].entries()) {
          const error = await refusedThenUsable(
            harness,
            [event({ id: `e-${index}`, ...change })],
            'RELAYBUS_INVALID_INPUT',
            event({ id: `after-${index}` }),
          );
          assert.match(error.message, /at most 200 characters, got a string of 201 characters/);
          assert.doesNotMatch(error.message, LONE_SURROGATE, 'no half of an emoji in the message');
        }
      },
    },
    {
      name: 'a lone surrogate in an id, type, key, handler, payload or header is refused before anything is written',
      async run({ harness }) {
        const half = '\ud83c';
        const cases: [Partial<PublishParams>, RelayBusErrorCode, RegExp][] = [
          [{ id: `e${half}` }, 'RELAYBUS_INVALID_INPUT', /events\[1\]\.id/],
          [{ type: `t${half}` }, 'RELAYBUS_INVALID_INPUT', /events\[1\]\.type/],
          [{ key: `${half}k` }, 'RELAYBUS_INVALID_INPUT', /events\[1\]\.key/],
          [{ handlers: handlers(H1, `h${half}`) }, 'RELAYBUS_INVALID_INPUT', /events\[1\]\.handlers\[1\]\.name/],
          [{ payload: { a: [`x${half}`] } }, 'RELAYBUS_INVALID_PAYLOAD', /events\[1\]\.payload at \/a\/0/],
          [{ payload: { [`k${half}`]: 1 } }, 'RELAYBUS_INVALID_PAYLOAD', /events\[1\]\.payload at \/k\\ud83c/],
          [{ headers: { trace: `t${half}` } }, 'RELAYBUS_INVALID_INPUT', /events\[1\]\.headers\.trace/],
        ];
        for (const [index, [change, code, where]] of cases.entries()) {
          const error = await refusedThenUsable(
            harness,
            [event({ id: `good-${index}` }), event(change)],
            code,
            event({ id: `after-${index}` }),
          );
          assert.match(error.message, where);
          assert.match(error.message, /lone surrogate/);
          assert.doesNotMatch(error.message, LONE_SURROGATE, 'the message itself is valid text');
        }
        assert.equal((await allDeliveries(harness)).length, cases.length, 'only the publishes after the refusals');
      },
    },
    {
      name: 'a date outside the years 1 to 9999 is refused before anything is written',
      async run({ harness }) {
        for (const [index, availableAt] of [
          new Date('+010000-01-01T00:00:00Z'),
          new Date('-000001-06-01T00:00:00Z'),
        ].entries()) {
          const error = await refusedThenUsable(
            harness,
            [event({ id: `e-${index}`, availableAt })],
            'RELAYBUS_INVALID_INPUT',
            event({ id: `after-${index}` }),
          );
          assert.match(error.message, /availableAt must be between the years 1 and 9999/);
        }
        await rejectsWithCode(harness.store.statistics(new Date('+010000-01-01T00:00:00Z')), 'RELAYBUS_INVALID_INPUT');
      },
    },
  ],
};
