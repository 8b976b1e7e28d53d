/** Pause and resume: a paused handler's deliveries are published and wait, unclaimed by any owner, until it is resumed. */
import assert from 'node:assert/strict';
import type { PauseHandlerParams } from '../../../src/store/contract.js';
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

async function remaining<TTx>(harness: Harness<TTx>): Promise<string[]> {
  return (await allDeliveries(harness)).map((d) => `${d.eventId}/${d.handler}:${d.status}`).sort();
}

/** The claim's deliveries as `eventId/handler`, in the store's order. */
async function claimed<TTx>(harness: Harness<TTx>, owner: string, limit = 10): Promise<string[]> {
  return (await claim(harness, owner, { limit })).map((c) => `${c.eventId}/${c.handler}`);
}

/** The lanes `owner` holds. */
async function lanesOf<TTx>(harness: Harness<TTx>, owner: string): Promise<number[]> {
  return (await harness.store.listLanes()).filter((lane) => lane.owner === owner).map((lane) => lane.lane);
}

export const pauseCases: CaseGroup = {
  area: 'pause',
  cases: [
    {
      name: "a paused handler's deliveries are not claimed, by any owner, while another handler's of the same event are; publish still creates them",
      async run({ harness }) {
        await publish(harness, [event({ id: 'e1', handlers: handlers(H1, H2) })]);
        assert.equal(await harness.store.pauseHandler({ handler: H2, now: harness.clock.now() }), true);
        assert.deepEqual(await claimed(harness, 'w1'), ['e1/h1']);
        await publish(harness, [event({ id: 'e2', handlers: handlers(H1, H2) })]);
        assert.deepEqual(
          await remaining(harness),
          ['e1/h1:processing', 'e1/h2:pending', 'e2/h1:pending', 'e2/h2:pending'],
          'the paused handler still gets its deliveries at publish',
        );
        assert.deepEqual(await claimed(harness, 'w2'), ['e2/h1']);
        assert.deepEqual(await claimed(harness, 'w1'), [], "nothing of the paused handler's, for either owner");
        assert.deepEqual(await claimed(harness, 'w2'), []);
        assert.equal(await harness.store.resumeHandler({ handler: H2 }), true);
        const after = [...(await claimed(harness, 'w1')), ...(await claimed(harness, 'w2'))].sort();
        assert.deepEqual(after, ['e1/h2', 'e2/h2'], 'after resume both of its deliveries are claimed');
      },
    },
    {
      name: "after resume a paused handler's keyed deliveries are claimed in key order",
      async run({ harness }) {
        await harness.store.pauseHandler({ handler: H2 });
        await publish(harness, [
          event({ id: 'a', key: 'k', handlers: handlers(H1, H2) }),
          event({ id: 'b', key: 'k', handlers: handlers(H1, H2) }),
          event({ id: 'c', key: 'k', handlers: handlers(H1, H2) }),
        ]);
        for (const id of ['a', 'b', 'c']) {
          const [next] = await claimExpecting(harness, 'w1', [id]);
          assert.equal(next!.handler, H1);
          assert.deepEqual(await harness.store.completeMany([leaseOf(next!)], harness.clock.now()), [true]);
        }
        assert.deepEqual(await claim(harness, 'w1'), []);
        assert.deepEqual(await remaining(harness), ['a/h2:pending', 'b/h2:pending', 'c/h2:pending']);
        assert.equal(await harness.store.resumeHandler({ handler: H2 }), true);
        for (const id of ['a', 'b', 'c']) {
          const [next] = await claimExpecting(harness, 'w2', [id]);
          assert.equal(next!.handler, H2);
          assert.deepEqual(await harness.store.completeMany([leaseOf(next!)], harness.clock.now()), [true]);
        }
        assert.deepEqual(await remaining(harness), []);
      },
    },
    {
      name: 'a lane whose only due work is paused is not taken, and a held lane left with only paused work is handed back',
      async run({ harness }) {
        await publish(harness, [event({ id: 'only-h2', handlers: handlers(H2) })]);
        await harness.store.pauseHandler({ handler: H2 });
        assert.deepEqual(await claim(harness, 'w1'), []);
        assert.deepEqual(await lanesOf(harness, 'w1'), [], 'the lane is not taken');

        await publish(harness, [event({ id: 'both', handlers: handlers(H1, H2) })]);
        const [first] = await claimExpecting(harness, 'w2', ['both']);
        assert.equal(first!.handler, H1);
        assert.deepEqual(await lanesOf(harness, 'w2'), [first!.lane]);
        assert.deepEqual(await harness.store.completeMany([leaseOf(first!)], harness.clock.now()), [true]);
        assert.deepEqual(await claim(harness, 'w2'), []);
        assert.deepEqual(await lanesOf(harness, 'w2'), [], 'the lane holds only paused work: handed back');

        await harness.store.resumeHandler({ handler: H2 });
        const resumed = (await claim(harness, 'w1')).map((c) => `${c.eventId}/${c.handler}`).sort();
        assert.deepEqual(resumed, ['both/h2', 'only-h2/h2']);
      },
    },
    {
      name: 'pause and resume say whether they changed anything; listPausedHandlers lists the paused ones by name',
      async run({ harness }) {
        const at = harness.clock.now();
        assert.deepEqual(await harness.store.listPausedHandlers(), []);
        assert.equal(await harness.store.pauseHandler({ handler: H2, reason: 'downstream outage', now: at }), true);
        assert.equal(
          await harness.store.pauseHandler({
            handler: H2,
            reason: 'another reason',
            now: new Date(at.getTime() + 1000),
          }),
          false,
          'already paused: the first pause is kept',
        );
        assert.equal(await harness.store.pauseHandler({ handler: H1, now: at }), true);
        assert.deepEqual(await harness.store.listPausedHandlers(), [
          { handler: H1, pausedAt: at, reason: null },
          { handler: H2, pausedAt: at, reason: 'downstream outage' },
        ]);
        assert.equal(await harness.store.resumeHandler({ handler: H1 }), true);
        assert.equal(await harness.store.resumeHandler({ handler: H1 }), false, 'not paused any more');
        assert.equal(await harness.store.resumeHandler({ handler: 'never-paused' }), false);
        assert.deepEqual(
          (await harness.store.listPausedHandlers()).map((p) => p.handler),
          [H2],
        );
      },
    },
    {
      name: 'pause and resume refuse bad input with a typed error and change nothing',
      async run({ harness }) {
        await harness.store.pauseHandler({ handler: H2, reason: 'kept' });
        const bad: unknown[] = [
          null,
          {},
          { handler: '' },
          { handler: 'x\u0000' },
          { handler: 42 },
          { handler: H1, reason: 7 },
          { handler: H1, reason: 'r'.repeat(1001) },
          { handler: H1, reason: 'nul\u0000' },
          { handler: H1, now: new Date(Number.NaN) },
        ];
        for (const params of bad)
          await rejectsWithCode(harness.store.pauseHandler(params as PauseHandlerParams), 'RELAYBUS_INVALID_INPUT');
        for (const params of [null, {}, { handler: '' }, { handler: 'x\u0000' }])
          await rejectsWithCode(harness.store.resumeHandler(params as { handler: string }), 'RELAYBUS_INVALID_INPUT');
        assert.deepEqual(
          (await harness.store.listPausedHandlers()).map((p) => `${p.handler}:${p.reason}`),
          [`${H2}:kept`],
        );
      },
    },
  ],
};
