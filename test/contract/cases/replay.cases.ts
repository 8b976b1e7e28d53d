/**
 * Replay, what it selects and in which order: plans (counts per handler, filters, types), backfill and re-drive
 * creating exactly their deliveries, each key's history before its live events (the hold). Event ids are lowercase
 * letters and digits of one length, so every store orders them alike.
 */
import assert from 'node:assert/strict';
import type { ReplayParams } from '../../../src/store/contract.js';
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
import { backfill, OTHER, redrive, remaining, runOne, start, step, stepToEnd, subscribe, TYPE } from './replay-kit.js';

export const replayCases: CaseGroup = {
  area: 'replay: plans, order and the hold',
  cases: [
    {
      name: 'a plan counts per handler what a backfill and a re-drive would create, and writes nothing',
      async run({ harness }) {
        await publish(harness, [
          event({ id: 'ev01', key: 'k1' }),
          event({ id: 'ev02', key: 'k1' }),
          event({ id: 'ev03', key: 'k2' }),
          event({ id: 'ev04' }),
        ]);
        await subscribe(harness, H1);
        await subscribe(harness, H2);
        await runOne(harness, H1, 'ev01');
        const before = await remaining(harness);
        const replays = (await harness.store.listReplays()).length;

        const plan = await harness.store.planReplay(backfill({ handlers: [H1, H2] }));
        assert.deepEqual(plan, { mode: 'backfill', events: 4, deliveries: { [H1]: 0, [H2]: 4 } });
        const again = await harness.store.planReplay(redrive({ handlers: [H1, H2] }));
        assert.deepEqual(
          again,
          { mode: 'redrive', events: 4, deliveries: { [H1]: 1, [H2]: 0 } },
          'a re-drive counts only the events the handler had and has no delivery of now',
        );
        assert.deepEqual(await remaining(harness), before, 'a plan creates no delivery');
        assert.equal((await harness.store.listReplays()).length, replays, 'a plan records no replay');
      },
    },
    {
      name: 'a plan selects by event types, time window (since inclusive, until exclusive), id range and key',
      async run({ harness }) {
        const t0 = harness.clock.now();
        await publish(harness, [event({ id: 'ev01', key: 'k1' })]);
        const t1 = harness.clock.advance(1_000);
        await publish(harness, [event({ id: 'ev02', key: 'k2', type: OTHER })]);
        harness.clock.advance(1_000);
        await publish(harness, [event({ id: 'ev03', key: 'k1' })]);
        const t3 = harness.clock.advance(1_000);
        await publish(harness, [event({ id: 'ev04' })]);
        await subscribe(harness, H2, 4, TYPE);
        await subscribe(harness, H2, 4, OTHER);
        const count = async (filter: Partial<ReplayParams>) => {
          const plan = await harness.store.planReplay(backfill(filter));
          assert.equal(plan.events, plan.deliveries[H2], 'one handler: one delivery per selected event');
          return plan.deliveries[H2];
        };
        assert.equal(await count({}), 4);
        assert.equal(await count({ eventTypes: [OTHER] }), 1);
        assert.equal(await count({ eventTypes: [TYPE, OTHER] }), 4);
        assert.equal(await count({ since: t1, until: t3 }), 2);
        assert.equal(await count({ since: t0 }), 4);
        assert.equal(await count({ until: t1 }), 1);
        assert.equal(await count({ fromEventId: 'ev02', toEventId: 'ev03' }), 2);
        assert.equal(await count({ fromEventId: 'ev03' }), 2);
        assert.equal(await count({ toEventId: 'ev01' }), 1);
        assert.equal(await count({ key: 'k1' }), 2);
        assert.equal(await count({ key: 'nokey' }), 0);
        assert.equal(await count({ eventTypes: [TYPE], key: 'k1', since: t1 }), 1);
      },
    },
    {
      name: 'by default a handler is replayed only the types it subscribes to; a named type it does not is refused',
      async run({ harness }) {
        await publish(harness, [event({ id: 'ev01' }), event({ id: 'ev02', type: OTHER })]);
        await subscribe(harness, H2, 4, TYPE);
        const plan = await harness.store.planReplay(backfill());
        assert.deepEqual(plan.deliveries, { [H2]: 1 });
        const replays = (await harness.store.listReplays()).length;
        await rejectsWithCode(harness.store.planReplay(backfill({ eventTypes: [OTHER] })), 'RELAYBUS_INVALID_STATE');
        await rejectsWithCode(start(harness, backfill({ eventTypes: [TYPE, OTHER] })), 'RELAYBUS_INVALID_STATE');
        await rejectsWithCode(start(harness, redrive({ eventTypes: [TYPE] })), 'RELAYBUS_INVALID_STATE');
        assert.equal((await harness.store.listReplays()).length, replays, 'a refused start records nothing');
        assert.deepEqual(await remaining(harness), ['ev01/h1:pending', 'ev02/h1:pending']);
      },
    },
    {
      name: "a backfill creates exactly the handler's missing deliveries, with its subscription's attempts, once",
      async run({ harness }) {
        await publish(harness, [
          event({ id: 'ev01', key: 'k1' }),
          event({ id: 'ev02', key: 'k1', handlers: handlers(H1, H2) }),
          event({ id: 'ev03' }),
        ]);
        await subscribe(harness, H2, 4);
        const replay = await start(harness, backfill({ requestedBy: 'ops@host' }));
        assert.equal(replay.state, 'running');
        assert.equal(replay.total, 2);
        assert.equal(replay.created, 0);
        assert.deepEqual(
          await remaining(harness),
          ['ev01/h1:pending', 'ev02/h1:pending', 'ev02/h2:pending', 'ev03/h1:pending'],
          'start creates no delivery',
        );
        const result = await step(harness, replay.id, 10);
        assert.equal(result.created, 2);
        assert.equal(result.replay.created, 2);
        assert.equal(result.replay.skipped, 0);
        assert.deepEqual(await remaining(harness), [
          'ev01/h1:pending',
          'ev01/h2:pending',
          'ev02/h1:pending',
          'ev02/h2:pending',
          'ev03/h1:pending',
          'ev03/h2:pending',
        ]);
        const replayed = (await allDeliveries(harness)).filter((d) => d.handler === H2 && d.eventId !== 'ev02');
        assert.deepEqual(
          replayed.map((d) => d.maxAttempts),
          [4, 4],
        );
        const [again] = await publish(harness, [event({ id: 'ev01', key: 'k1', handlers: handlers(H1, H2) })]);
        assert.equal(again!.duplicate, true);
        assert.deepEqual(again!.addedHandlers, [], 'the backfilled handler is on the event: a republish adds nothing');
        assert.deepEqual((await harness.store.planReplay(backfill())).deliveries, { [H2]: 0 });
        assert.equal((await step(harness, replay.id, 10)).created, 0, 'nothing is created twice');
      },
    },
    {
      name: 'a planned item the handler got meanwhile is skipped when its turn comes',
      async run({ harness }) {
        await publish(harness, [event({ id: 'ev01' }), event({ id: 'ev02' })]);
        await subscribe(harness, H2);
        const replay = await start(harness, backfill());
        assert.equal(replay.total, 2);
        await publish(harness, [event({ id: 'ev01', handlers: handlers(H1, H2) })]);
        const result = await step(harness, replay.id, 10);
        assert.equal(result.created, 1);
        assert.equal(result.replay.skipped, 1);
        assert.deepEqual(await remaining(harness), [
          'ev01/h1:pending',
          'ev01/h2:pending',
          'ev02/h1:pending',
          'ev02/h2:pending',
        ]);
      },
    },
    {
      name: 'a re-drive runs again only the events the handler had and has no pending or dead delivery of',
      async run({ harness }) {
        await publish(harness, [
          event({ id: 'ev01', key: 'k1' }),
          event({ id: 'ev02', key: 'k1' }),
          event({ id: 'ev03', key: 'k2' }),
          event({ id: 'ev04', key: 'k3' }),
          event({ id: 'ev05', key: 'k2', handlers: handlers(H2) }),
        ]);
        await subscribe(harness, H1, 3);
        await runOne(harness, H1, 'ev01');
        await runOne(harness, H1, 'ev02');
        const [dead] = await claimExpecting(harness, 'w1', ['ev03'], { handlers: [H1], limit: 1 });
        assert.equal(await harness.store.bury(leaseOf(dead!), { error: 'broken', now: harness.clock.now() }), true);
        const replay = await start(harness, redrive());
        assert.equal(replay.total, 2, 'ev01 and ev02: ev03 is dead, ev04 pending, ev05 never had h1');
        assert.equal((await step(harness, replay.id, 10)).created, 2);
        assert.deepEqual(await remaining(harness), [
          'ev01/h1:pending',
          'ev02/h1:pending',
          'ev03/h1:dead',
          'ev04/h1:pending',
          'ev05/h2:pending',
        ]);
        // ev02 waits behind ev01; ev04 (pending since before the start, no history in k3) may run now or after.
        const firsts = (await claim(harness, 'w1', { handlers: [H1] })).filter((c) => c.eventId !== 'ev04');
        assert.deepEqual(
          firsts.map((c) => c.eventId),
          ['ev01'],
        );
        assert.deepEqual(await harness.store.completeMany(firsts.map(leaseOf), harness.clock.now()), [true]);
        await runOne(harness, H1, 'ev02');
      },
    },
    {
      name: "replayed history runs in each key's publish order before the key's live events; unkeyed live ones are not held",
      async run({ harness }) {
        await publish(harness, [event({ id: 'ev01', key: 'k1' }), event({ id: 'ev02', key: 'k2' })]);
        await publish(harness, [event({ id: 'ev03', key: 'k1' })]);
        await publish(harness, [event({ id: 'ev04', key: 'k1' }), event({ id: 'ev05', key: 'k2' })]);
        await subscribe(harness, H1);
        await subscribe(harness, H2);
        const originals = new Map((await allDeliveries(harness)).map((d) => [d.eventId, d.sequence] as const));
        const replay = await start(harness, backfill());
        assert.equal(replay.total, 5);
        // Live events after the start: the subscription gives them to h2 too.
        await publish(harness, [event({ id: 'ev06', key: 'k1' }), event({ id: 'ev07' })]);
        const [unkeyed] = await claimExpecting(harness, 'w1', ['ev07'], { handlers: [H2] });
        assert.deepEqual(await claim(harness, 'w1', { handlers: [H2] }), [], "h2's live keyed event waits");
        assert.equal((await step(harness, replay.id, 2)).created, 2, 'two events, one handler');
        const heads = await claim(harness, 'w1', { handlers: [H2] });
        assert.deepEqual(heads.map((c) => c.eventId).sort(), ['ev01', 'ev02'], 'the first two events of the plan');
        const first = heads.find((c) => c.eventId === 'ev01');
        assert.equal(first!.sequence, originals.get('ev01'), "a replayed delivery takes its event's key-order value");
        assert.equal((await step(harness, replay.id, 10)).created, 3);
        await harness.store.completeMany([...heads, unkeyed!].map(leaseOf), harness.clock.now());
        const order: string[] = [];
        for (;;) {
          const claimed = await claim(harness, 'w1', { handlers: [H2], limit: 1 });
          if (claimed.length === 0) break;
          order.push(claimed[0]!.eventId);
          await harness.store.completeMany(claimed.map(leaseOf), harness.clock.now());
        }
        assert.deepEqual(
          [...order].sort(),
          ['ev03', 'ev04', 'ev05'],
          'the rest of the history; the live ev06 still waits',
        );
        assert.ok(order.indexOf('ev03') < order.indexOf('ev04'), 'k1 in publish order');
        const finished = await stepToEnd(harness, replay.id);
        assert.equal(finished.replay.state, 'finished');
        const live = await claim(harness, 'w1', { handlers: [H2] });
        assert.deepEqual(
          live.map((c) => c.eventId),
          ['ev06'],
          'after the replay the live event runs, after its key history',
        );
        assert.ok(BigInt(live[0]!.sequence!) > BigInt(first!.sequence!));
      },
    },
    {
      name: 'a delivery pending before the start is not held behind history after it in its key; live ones still are',
      async run({ harness }) {
        // h2 takes TYPE: ev01 gives it a pending delivery. ev02 (OTHER, same key, later) it never got.
        await subscribe(harness, H2);
        await publish(harness, [event({ id: 'ev01', key: 'k1' })]);
        await publish(harness, [event({ id: 'ev02', key: 'k1', type: OTHER })]);
        await subscribe(harness, H2, 4, OTHER);
        const replay = await start(harness, backfill({ eventTypes: [OTHER] }));
        assert.equal(replay.total, 1);
        await publish(harness, [event({ id: 'ev03', key: 'k1' })]);
        assert.equal((await step(harness, replay.id, 10)).created, 1);
        // Publish order in k1: ev01 (pending since before the start), ev02 (replayed), ev03 (live, held).
        await runOne(harness, H2, 'ev01');
        await runOne(harness, H2, 'ev02');
        assert.deepEqual(await claim(harness, 'w1', { handlers: [H2] }), [], 'the live ev03 waits for the replay');
        assert.equal((await stepToEnd(harness, replay.id)).replay.state, 'finished');
        await runOne(harness, H2, 'ev03');
      },
    },
    {
      name: "a replay holds only its handlers' live keyed deliveries: another handler's run meanwhile",
      async run({ harness }) {
        await publish(harness, [event({ id: 'ev01', key: 'k1' })]);
        await subscribe(harness, H1);
        await subscribe(harness, H2);
        const replay = await start(harness, backfill());
        await publish(harness, [event({ id: 'ev02', key: 'k1' })]);
        await runOne(harness, H1, 'ev01');
        await runOne(harness, H1, 'ev02');
        assert.deepEqual(await claim(harness, 'w1', { handlers: [H2] }), []);
        assert.equal((await harness.store.getReplay(replay.id))?.state, 'running');
      },
    },
  ],
};
