/** Admin: listing with filters and paging, statistics, retention purge, input checks. */
import assert from 'node:assert/strict';
import { parseLeaseToken } from '../../../src/core/lease-token.js';
import type { HandlerStatistics } from '../../../src/store/contract.js';
import type { Harness } from '../../support/harness.js';
import {
  claim,
  claimExpecting,
  event,
  H1,
  H2,
  handlers,
  LEASE_MS,
  leaseOf,
  PAST_LEASE_MS,
  publish,
  rejectsWithCode,
  type CaseGroup,
} from './kit.js';

/** e1 (key k1, h1+h2), e2 (key k2, h1), e3 (no key, h2). e1/h1 processing, e2/h1 dead, the rest pending. */
async function mixedDeliveries<TTx>(harness: Harness<TTx>): Promise<void> {
  await publish(harness, [
    event({ id: 'e1', key: 'k1', handlers: handlers(H1, H2) }),
    event({ id: 'e2', key: 'k2', handlers: handlers(H1) }),
    event({ id: 'e3', handlers: handlers(H2) }),
  ]);
  const claimed = await claim(harness, 'w1', { handlers: [H1] });
  assert.equal(claimed.length, 2);
  const e2 = claimed.find((c) => c.eventId === 'e2')!;
  assert.equal(await harness.store.bury(leaseOf(e2), { error: 'broken', now: harness.clock.now() }), true);
}

async function listed<TTx>(
  harness: Harness<TTx>,
  params: Parameters<Harness<TTx>['store']['listDeliveries']>[0],
): Promise<string[]> {
  return (await harness.store.listDeliveries(params)).items.map((d) => `${d.eventId}/${d.handler}:${d.status}`).sort();
}

export const adminCases: CaseGroup = {
  area: 'admin',
  cases: [
    {
      name: 'listLanes names each held lane: owner, epoch, lease expiry and the deliveries still in flight',
      async run({ harness }) {
        assert.deepEqual(await harness.store.listLanes(), [], 'nothing held yet');
        await publish(harness, [event({ id: 'a', key: 'k' }), event({ id: 'b', key: 'k', handlers: handlers(H2) })]);
        const claimed = await claim(harness, 'w1');
        assert.equal(claimed.length, 2);
        const [lane] = await harness.store.listLanes();
        assert.deepEqual(await harness.store.listLanes(), [
          {
            lane: claimed[0]!.lane,
            owner: 'w1',
            epoch: parseLeaseToken(claimed[0]!.leaseToken).epoch,
            leaseExpiresAt: new Date(harness.clock.now().getTime() + LEASE_MS),
            inFlight: 2,
          },
        ]);
        assert.deepEqual(await harness.store.completeMany([leaseOf(claimed[0]!)], harness.clock.now()), [true]);
        assert.equal((await harness.store.listLanes())[0]?.inFlight, 1, 'a completed delivery no longer counts');
        harness.clock.advance(PAST_LEASE_MS);
        assert.deepEqual(
          (await harness.store.listLanes()).map((l) => [l.lane, l.owner, l.leaseExpiresAt < harness.clock.now()]),
          [[lane!.lane, 'w1', true]],
          'an expired lease is listed until another worker takes the lane over',
        );
        await claim(harness, 'w2');
        assert.deepEqual(
          (await harness.store.listLanes()).map((l) => l.owner),
          ['w2'],
        );
      },
    },
    {
      name: 'listDeliveries filters by status, handler, event and key',
      async run({ harness }) {
        await mixedDeliveries(harness);
        assert.deepEqual(await listed(harness, {}), [
          'e1/h1:processing',
          'e1/h2:pending',
          'e2/h1:dead',
          'e3/h2:pending',
        ]);
        assert.deepEqual(await listed(harness, { status: 'processing' }), ['e1/h1:processing']);
        assert.deepEqual(await listed(harness, { status: 'pending' }), ['e1/h2:pending', 'e3/h2:pending']);
        assert.deepEqual(await listed(harness, { status: 'dead' }), ['e2/h1:dead']);
        assert.deepEqual(await listed(harness, { handler: H1 }), ['e1/h1:processing', 'e2/h1:dead']);
        assert.deepEqual(await listed(harness, { eventId: 'e1' }), ['e1/h1:processing', 'e1/h2:pending']);
        assert.deepEqual(await listed(harness, { key: 'k2' }), ['e2/h1:dead']);
        assert.deepEqual(await listed(harness, { key: 'k1', handler: H2, status: 'pending' }), ['e1/h2:pending']);
        assert.deepEqual(await listed(harness, { key: 'k1', status: 'dead' }), []);
        const dead = (await harness.store.listDeliveries({ status: 'dead' })).items[0]!;
        assert.deepEqual([dead.attempts, dead.lastError, dead.key, dead.eventType], [1, 'broken', 'k2', 'test.event']);
      },
    },
    {
      name: 'listDeliveries withPayload gives each delivery its event payload and headers, an inline event too; none without it',
      async run({ harness }) {
        // Without an id, a small event may be published inline (no events row): its deliveries carry the payload.
        await publish(harness, [
          event({
            id: 'kept',
            payload: { note: '<script>x</script>' },
            headers: { trace: 't-1' },
            handlers: handlers(H1, H2),
          }),
          event({ payload: { n: 2, nested: [null, true] }, headers: { origin: 'inline' } }),
          event({ id: 'bare', payload: null }),
        ]);
        const [dying] = await claim(harness, 'w1', { handlers: [H2] });
        assert.equal(await harness.store.bury(leaseOf(dying!), { error: 'no', now: harness.clock.now() }), true);

        const listed = (await harness.store.listDeliveries({ withPayload: true })).items;
        const shown = listed.map((d) => [d.handler, d.status, d.payload, d.headers]);
        assert.deepEqual(shown, [
          [H1, 'pending', { note: '<script>x</script>' }, { trace: 't-1' }],
          [H2, 'dead', { note: '<script>x</script>' }, { trace: 't-1' }],
          [H1, 'pending', { n: 2, nested: [null, true] }, { origin: 'inline' }],
          [H1, 'pending', null, {}],
        ]);
        const dead = (await harness.store.listDeliveries({ status: 'dead', withPayload: true })).items;
        assert.deepEqual(
          dead.map((d) => d.payload),
          [{ note: '<script>x</script>' }],
        );
        for (const item of (await harness.store.listDeliveries({})).items) {
          assert.equal('payload' in item, false, 'no payload unless asked for');
          assert.equal('headers' in item, false, 'no headers unless asked for');
        }
      },
    },
    {
      name: 'listDeliveries pages in id order with a cursor and ends with a null cursor',
      async run({ harness }) {
        await publish(
          harness,
          Array.from({ length: 5 }, (_, i) => event({ id: `e${i}` })),
        );
        const pages: string[][] = [];
        let cursor: string | undefined;
        do {
          const page = await harness.store.listDeliveries({ limit: 2, ...(cursor === undefined ? {} : { cursor }) });
          pages.push(page.items.map((d) => d.id));
          if (page.nextCursor !== null) assert.equal(page.nextCursor, page.items.at(-1)?.id);
          cursor = page.nextCursor ?? undefined;
        } while (cursor !== undefined && pages.length < 10);
        assert.deepEqual(
          pages.map((p) => p.length),
          [2, 2, 1],
        );
        const ids = pages.flat();
        assert.deepEqual(
          ids,
          [...ids].sort((a, b) => (BigInt(a) < BigInt(b) ? -1 : 1)),
          'ascending ids',
        );
        assert.equal(new Set(ids).size, 5);
        const firstTwo = await harness.store.listDeliveries({ limit: 2, cursor: ids[1]! });
        assert.deepEqual(
          firstTwo.items.map((d) => d.id),
          ids.slice(2, 4),
        );
        const lastFull = await harness.store.listDeliveries({ limit: 2, cursor: ids[2]! });
        assert.deepEqual(
          lastFull.items.map((d) => d.id),
          ids.slice(3, 5),
        );
        assert.equal(lastFull.nextCursor, null, 'a full last page has no next cursor');
      },
    },
    {
      name: 'listDeliveries with invalid parameters throws RELAYBUS_INVALID_INPUT',
      async run({ harness }) {
        await rejectsWithCode(harness.store.listDeliveries({ limit: 0 }), 'RELAYBUS_INVALID_INPUT');
        await rejectsWithCode(harness.store.listDeliveries({ limit: 1001 }), 'RELAYBUS_INVALID_INPUT');
        await rejectsWithCode(harness.store.listDeliveries({ cursor: 'abc' }), 'RELAYBUS_INVALID_INPUT');
        await rejectsWithCode(harness.store.listDeliveries({ status: 'running' as never }), 'RELAYBUS_INVALID_INPUT');
        await rejectsWithCode(harness.store.listDeliveries({ withPayload: 'yes' as never }), 'RELAYBUS_INVALID_INPUT');
      },
    },
    {
      name: 'statistics count due, scheduled, in-flight and dead deliveries per handler',
      async run({ harness }) {
        const t0 = harness.clock.now().getTime();
        await publish(harness, [event({ id: 'running', handlers: handlers(H1) })]);
        await claimExpecting(harness, 'w1', ['running'], { handlers: [H1] });
        await publish(harness, [
          event({ id: 'due-1', handlers: handlers(H1) }),
          event({ id: 'later', handlers: handlers(H1), availableAt: new Date(t0 + 60_000) }),
          event({ id: 'broken', handlers: handlers(H2) }),
        ]);
        const [broken] = await claimExpecting(harness, 'w2', ['broken'], { handlers: [H2] });
        await harness.store.bury(leaseOf(broken!), { error: 'x', now: harness.clock.now() });
        harness.clock.advance(500);
        await publish(harness, [event({ id: 'due-2', handlers: handlers(H2) })]);
        harness.clock.advance(1_000);

        const stats = await harness.store.statistics(harness.clock.now());
        const expectedH1: HandlerStatistics = {
          pending: 2,
          due: 1,
          scheduled: 1,
          inFlight: 1,
          dead: 0,
          completed: 0,
          oldestDueAgeMs: 1_500,
        };
        const expectedH2: HandlerStatistics = {
          pending: 1,
          due: 1,
          scheduled: 0,
          inFlight: 0,
          dead: 1,
          completed: 0,
          oldestDueAgeMs: 1_000,
        };
        assert.deepEqual({ ...stats.handlers[H1] }, expectedH1);
        assert.deepEqual({ ...stats.handlers[H2] }, expectedH2);
        assert.deepEqual(Object.keys(stats.handlers).sort(), [H1, H2]);
        assert.deepEqual(
          [
            stats.pending,
            stats.due,
            stats.scheduled,
            stats.inFlight,
            stats.dead,
            stats.completed,
            stats.oldestDueAgeMs,
          ],
          [3, 2, 1, 1, 1, 0, 1_500],
        );

        harness.clock.advance(60_000);
        const later = await harness.store.statistics(harness.clock.now());
        assert.deepEqual(
          [later.handlers[H1]?.due, later.handlers[H1]?.scheduled, later.handlers[H1]?.oldestDueAgeMs],
          [2, 0, 61_500],
        );
      },
    },
    {
      name: 'statistics on an empty store are zero and oldestDueAgeMs is null',
      async run({ harness }) {
        const stats = await harness.store.statistics(harness.clock.now());
        assert.deepEqual(
          { ...stats, handlers: { ...stats.handlers } },
          {
            pending: 0,
            due: 0,
            scheduled: 0,
            inFlight: 0,
            dead: 0,
            completed: 0,
            oldestDueAgeMs: null,
            handlers: {},
            lanesLeased: 0,
          },
        );
      },
    },
    {
      name: 'statistics count lanes under a live lease',
      async run({ harness }) {
        await publish(harness, [event({ id: 'e1', key: 'a' })]);
        await claimExpecting(harness, 'w1', ['e1']);
        assert.equal((await harness.store.statistics(harness.clock.now())).lanesLeased, 1);
        harness.clock.advance(PAST_LEASE_MS);
        assert.equal(
          (await harness.store.statistics(harness.clock.now())).lanesLeased,
          0,
          'an expired lease is not counted',
        );
      },
    },
    {
      name: 'purgeExpired deletes dead deliveries and drained events only past their retention',
      async run({ harness }) {
        await publish(harness, [
          event({ id: 'done' }),
          event({ id: 'dead' }),
          event({ id: 'waiting', availableAt: new Date(harness.clock.now().getTime() + 3_600_000) }),
        ]);
        const claimed = await claim(harness, 'w1');
        assert.equal(claimed.length, 2);
        const byEvent = new Map(claimed.map((c) => [c.eventId, c]));
        await harness.store.completeMany([leaseOf(byEvent.get('done')!)], harness.clock.now());
        await harness.store.bury(leaseOf(byEvent.get('dead')!), { error: 'x', now: harness.clock.now() });
        const purge = (completedRetentionMs: number, deadRetentionMs: number) =>
          harness.store.purgeExpired({ completedRetentionMs, deadRetentionMs, now: harness.clock.now() });
        const day = 86_400_000;

        harness.clock.advance(10_000);
        assert.deepEqual(
          await purge(20_000, 20_000),
          { events: 0, deadDeliveries: 0, history: 0 },
          'nothing is old enough',
        );
        harness.clock.advance(15_000);
        assert.deepEqual(
          await purge(20_000, day),
          { events: 1, deadDeliveries: 0, history: 0 },
          'only the drained event',
        );
        assert.equal((await harness.store.listDeliveries({ status: 'dead' })).items.length, 1);
        assert.deepEqual(await purge(day, 20_000), { events: 0, deadDeliveries: 1, history: 0 }, 'the dead delivery');
        assert.deepEqual((await harness.store.listDeliveries({ status: 'dead' })).items, []);
        assert.deepEqual(
          await purge(20_000, day),
          { events: 1, deadDeliveries: 0, history: 0 },
          'its event, drained now',
        );
        assert.equal(
          (await harness.store.listDeliveries({ status: 'pending' })).items.length,
          1,
          'pending work is never purged',
        );

        // A purged event is forgotten; one with deliveries is not.
        const results = await publish(harness, [event({ id: 'done' }), event({ id: 'waiting' })]);
        assert.deepEqual(
          results.map((r) => r.duplicate),
          [false, true],
        );
      },
    },
    {
      name: 'purgeExpired with a negative retention throws RELAYBUS_INVALID_INPUT and purges nothing',
      async run({ harness }) {
        await publish(harness, [event({ id: 'e1' })]);
        const [claimed] = await claimExpecting(harness, 'w1', ['e1']);
        await harness.store.bury(leaseOf(claimed!), { error: 'x', now: harness.clock.now() });
        harness.clock.advance(1_000);
        await rejectsWithCode(
          harness.store.purgeExpired({ completedRetentionMs: 0, deadRetentionMs: -1, now: harness.clock.now() }),
          'RELAYBUS_INVALID_INPUT',
        );
        await rejectsWithCode(
          harness.store.purgeExpired({ completedRetentionMs: 1.5, deadRetentionMs: 0, now: harness.clock.now() }),
          'RELAYBUS_INVALID_INPUT',
        );
        assert.equal((await harness.store.listDeliveries({ status: 'dead' })).items.length, 1);
      },
    },
  ],
};
