/**
 * Replay: backfill a handler from the kept events, or re-drive what a handler already ran, in each key's original
 * order, with the handlers' live keyed deliveries held until the history is through. Event ids are lowercase letters
 * and digits of one length, so every store orders them alike.
 */
import assert from 'node:assert/strict';
import type { ReplayParams, ReplayStepResult, ReplayView } from '../../../src/store/contract.js';
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
  pause,
  publish,
  rejectsWithCode,
  deferred,
  type CaseGroup,
} from './kit.js';

const TYPE = 'test.event';
const OTHER = 'other.event';

async function subscribe<TTx>(harness: Harness<TTx>, handler: string, maxAttempts = 4, eventType = TYPE) {
  await harness.store.subscribe([{ eventType, handler, maxAttempts }], { now: harness.clock.now() });
}

async function remaining<TTx>(harness: Harness<TTx>): Promise<string[]> {
  return (await allDeliveries(harness)).map((d) => `${d.eventId}/${d.handler}:${d.status}`).sort();
}

function backfill(overrides: Partial<ReplayParams> = {}): ReplayParams {
  return { mode: 'backfill', handlers: [H2], ...overrides };
}

function redrive(overrides: Partial<ReplayParams> = {}): ReplayParams {
  return { mode: 'redrive', handlers: [H1], ...overrides };
}

async function start<TTx>(harness: Harness<TTx>, params: ReplayParams): Promise<ReplayView> {
  return harness.store.startReplay({ now: harness.clock.now(), ...params });
}

async function step<TTx>(harness: Harness<TTx>, replayId: string, limit?: number): Promise<ReplayStepResult> {
  return harness.store.replayStep({ replayId, now: harness.clock.now(), ...(limit === undefined ? {} : { limit }) });
}

/**
 * Step until the replay is no longer running. A store may drain for a while after its deliveries are done (it waits
 * for transactions that were open at the start, other sessions' included), so waiting steps are retried briefly.
 */
async function stepToEnd<TTx>(harness: Harness<TTx>, replayId: string): Promise<ReplayStepResult> {
  for (let attempt = 0; attempt < 400; attempt += 1) {
    const result = await step(harness, replayId, 100);
    if (result.replay.state !== 'running') return result;
    if (result.waiting !== undefined) await pause(25);
  }
  assert.fail(`replay ${replayId} did not finish`);
}

/** Claim one delivery of `handler`, expect `eventId`, complete it. */
async function runOne<TTx>(harness: Harness<TTx>, handler: string, eventId: string): Promise<void> {
  const [claimed] = await claimExpecting(harness, 'w1', [eventId], { handlers: [handler], limit: 1 });
  assert.deepEqual(await harness.store.completeMany([leaseOf(claimed!)], harness.clock.now()), [true]);
}

export const replayCases: CaseGroup = {
  area: 'replay',
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
        await runOne(harness, H1, 'ev01');
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
    {
      name: 'cancel ends the hold at once and keeps what the replay created; a step then changes nothing',
      async run({ harness }) {
        await publish(harness, [event({ id: 'ev01', key: 'k1' }), event({ id: 'ev02', key: 'k1' })]);
        await subscribe(harness, H1);
        await subscribe(harness, H2);
        const replay = await start(harness, backfill());
        await publish(harness, [event({ id: 'ev03', key: 'k1' })]);
        assert.equal((await step(harness, replay.id, 1)).created, 1);
        harness.clock.advance(1_000);
        const cancelled = await harness.store.cancelReplay(replay.id, harness.clock.now());
        assert.equal(cancelled?.state, 'cancelled');
        assert.equal(cancelled?.updatedAt.getTime(), harness.clock.now().getTime());
        const after = await step(harness, replay.id, 10);
        assert.equal(after.created, 0);
        assert.equal(after.replay.state, 'cancelled');
        assert.equal(after.outstanding, 1);
        assert.deepEqual(
          (await harness.store.getReplay(replay.id))?.created,
          1,
          'the created delivery stays, the rest is not created',
        );
        await runOne(harness, H2, 'ev01');
        await runOne(harness, H2, 'ev03');
        assert.deepEqual(await claim(harness, 'w1', { handlers: [H2] }), []);
        assert.equal(await harness.store.cancelReplay('987654321'), null);
      },
    },
    {
      name: 'steps take at most limit events (every handler of each), limit 0 reports, outstanding falls as they complete',
      async run({ harness }) {
        await publish(harness, [
          event({ id: 'ev01', handlers: handlers('h0') }),
          event({ id: 'ev02', handlers: handlers('h0') }),
          event({ id: 'ev03', handlers: handlers('h0') }),
        ]);
        await subscribe(harness, H1);
        await subscribe(harness, H2);
        const replay = await start(harness, backfill({ handlers: [H1, H2] }));
        assert.equal(replay.total, 6);
        const report = await step(harness, replay.id, 0);
        assert.equal(report.created, 0);
        assert.equal(report.outstanding, 0);
        assert.equal(report.replay.created, 0);
        assert.equal(report.replay.state, 'running');
        const first = await step(harness, replay.id, 1);
        assert.equal(first.created, 2, 'one event, both handlers');
        assert.equal(first.outstanding, 2);
        assert.equal(first.waiting, undefined);
        const second = await step(harness, replay.id, 1);
        assert.equal(second.created, 2);
        assert.equal(second.outstanding, 4);
        assert.equal(second.replay.created, 4);
        const claimed = await claim(harness, 'w1', { handlers: [H1, H2], limit: 3 });
        assert.equal(claimed.length, 3);
        assert.equal((await step(harness, replay.id, 0)).outstanding, 4, 'running deliveries are outstanding');
        await harness.store.completeMany(claimed.map(leaseOf), harness.clock.now());
        assert.equal((await step(harness, replay.id, 0)).outstanding, 1);
      },
    },
    {
      name: 'when its items are done a replay drains until its deliveries are done, then finishes',
      async run({ harness }) {
        await publish(harness, [event({ id: 'ev01', key: 'k1' })]);
        await subscribe(harness, H2);
        const replay = await start(harness, backfill());
        assert.equal((await step(harness, replay.id, 10)).created, 1);
        const draining = await step(harness, replay.id, 10);
        assert.equal(draining.created, 0);
        assert.equal(draining.waiting, 'draining');
        assert.equal(draining.outstanding, 1);
        assert.equal(draining.replay.state, 'running');
        await runOne(harness, H2, 'ev01');
        harness.clock.advance(1_000);
        const done = await stepToEnd(harness, replay.id);
        assert.equal(done.replay.state, 'finished');
        assert.equal(done.outstanding, 0);
        assert.ok(done.replay.finishedAt !== null);
        assert.equal(done.replay.finishedAt.getTime(), harness.clock.now().getTime());
        assert.equal((await step(harness, replay.id, 10)).replay.state, 'finished', 'a finished replay stays so');
      },
    },
    {
      name: 'a handler has one running replay at a time; the refusal names it, and its end allows the next',
      async run({ harness }) {
        await publish(harness, [event({ id: 'ev01' })]);
        await subscribe(harness, H1);
        await subscribe(harness, H2);
        const first = await start(harness, backfill());
        await assert.rejects(start(harness, redrive({ handlers: [H1, H2] })), (error: Error & { code?: string }) => {
          assert.equal(error.code, 'RELAYBUS_INVALID_STATE');
          assert.match(error.message, new RegExp(`\\b${first.id}\\b`));
          return true;
        });
        const other = await start(harness, redrive());
        assert.equal(other.state, 'running', 'another handler may replay meanwhile');
        await harness.store.cancelReplay(first.id);
        const next = await start(harness, backfill());
        assert.notEqual(next.id, first.id);
      },
    },
    {
      name: 'two starts at once for one handler: one wins',
      async run({ harness }) {
        await publish(harness, [event({ id: 'ev01' })]);
        await subscribe(harness, H2);
        const results = await Promise.allSettled([start(harness, backfill()), start(harness, backfill())]);
        assert.equal(results.filter((r) => r.status === 'fulfilled').length, 1);
        const lost = results.find((r): r is PromiseRejectedResult => r.status === 'rejected');
        assert.equal((lost!.reason as { code?: string }).code, 'RELAYBUS_INVALID_STATE');
      },
    },
    {
      name: 'history waits for keyed deliveries of its handlers that were in flight at the start',
      async run({ harness }) {
        await publish(harness, [event({ id: 'ev01', key: 'k1' })]);
        await subscribe(harness, H1);
        await subscribe(harness, H2);
        await publish(harness, [event({ id: 'ev02', key: 'k1' }), event({ id: 'ev03' })]);
        const inFlight = await claim(harness, 'w1', { handlers: [H2] });
        assert.deepEqual(inFlight.map((c) => c.eventId).sort(), ['ev02', 'ev03']);
        const running = inFlight.find((c) => c.eventId === 'ev02');
        const unkeyed = inFlight.find((c) => c.eventId === 'ev03');
        const replay = await start(harness, backfill());
        const waiting = await step(harness, replay.id, 10);
        assert.equal(waiting.waiting, 'in-flight');
        assert.equal(waiting.created, 0);
        assert.equal(waiting.replay.created, 0);
        await harness.store.completeMany([leaseOf(running!)], harness.clock.now());
        const created = await step(harness, replay.id, 10);
        assert.equal(created.created, 1, 'an unkeyed delivery in flight does not hold the history');
        await harness.store.completeMany([leaseOf(unkeyed!)], harness.clock.now());
      },
    },
    {
      name: 'a publish that committed after the start is backfilled before the replay finishes',
      needs: ['transactions', 'concurrentConnections'],
      async run({ harness }) {
        const { store } = harness;
        await publish(harness, [event({ id: 'ev01' })]);
        const published = deferred();
        const commit = deferred();
        // Published before h2 subscribed, so without h2, and committed after the replay started.
        const late = harness.inTransaction(async (tx) => {
          await store.publish(tx, [event({ id: 'ev02' })], harness.clock.now());
          published.resolve();
          await commit.promise;
        });
        await published.promise;
        await subscribe(harness, H2);
        const replay = await start(harness, backfill());
        assert.equal(replay.total, 1);
        assert.equal((await step(harness, replay.id, 10)).created, 1);
        await runOne(harness, H2, 'ev01');
        const waiting = await step(harness, replay.id, 10);
        assert.equal(waiting.waiting, 'draining', 'a transaction open at the start may still commit');
        commit.resolve();
        await late;
        let result = await step(harness, replay.id, 10);
        for (let i = 0; i < 400 && result.replay.created < 2 && result.replay.state === 'running'; i += 1) {
          await pause(25);
          result = await step(harness, replay.id, 10);
        }
        assert.equal(result.replay.total, 2, 'the late event joins the plan');
        assert.equal(result.replay.created, 2);
        await runOne(harness, H2, 'ev02');
        assert.equal((await stepToEnd(harness, replay.id)).replay.state, 'finished');
      },
    },
    {
      name: 'the audit record keeps who, why, the filter, counts and state; the list is newest first',
      async run({ harness }) {
        const since = new Date(harness.clock.now().getTime() - 60_000);
        await publish(harness, [event({ id: 'ev01', key: 'k1' }), event({ id: 'ev02', key: 'k2' })]);
        await subscribe(harness, H1);
        await subscribe(harness, H2);
        const createdAt = harness.clock.now();
        const first = await start(
          harness,
          backfill({ key: 'k1', since, requestedBy: 'ops@host', reason: 'new handler h2' }),
        );
        assert.equal(first.mode, 'backfill');
        assert.deepEqual(first.handlers, [H2]);
        assert.equal(first.requestedBy, 'ops@host');
        assert.equal(first.reason, 'new handler h2');
        assert.equal(first.createdAt.getTime(), createdAt.getTime());
        assert.equal(first.finishedAt, null);
        assert.deepEqual(
          { key: first.filter.key, since: first.filter.since?.getTime() },
          { key: 'k1', since: since.getTime() },
        );
        assert.equal(first.filter.until, undefined);
        assert.match(first.id, /^[1-9]\d*$/);
        harness.clock.advance(1_000);
        assert.equal((await step(harness, first.id, 10)).created, 1);
        const second = await start(harness, redrive());
        assert.equal(second.requestedBy, null);
        assert.equal(second.reason, null);
        assert.ok(BigInt(second.id) > BigInt(first.id));
        const got = await harness.store.getReplay(first.id);
        assert.equal(got?.created, 1);
        assert.equal(got?.total, 1);
        assert.equal(got?.skipped, 0);
        assert.equal(got?.updatedAt.getTime(), harness.clock.now().getTime());
        const listed = await harness.store.listReplays();
        assert.deepEqual(
          listed.slice(0, 2).map((r) => r.id),
          [second.id, first.id],
        );
        assert.deepEqual(
          (await harness.store.listReplays({ limit: 1 })).map((r) => r.id),
          [second.id],
        );
        await harness.store.cancelReplay(second.id);
        const cancelled = await harness.store.listReplays({ state: 'cancelled' });
        assert.ok(cancelled.some((r) => r.id === second.id));
        assert.ok(!cancelled.some((r) => r.id === first.id));
        assert.ok((await harness.store.listReplays({ state: 'running' })).some((r) => r.id === first.id));
        assert.equal(await harness.store.getReplay('987654321'), null);
      },
    },
    {
      name: 'replay refuses bad input with a typed error and writes nothing',
      async run({ harness }) {
        await publish(harness, [event({ id: 'ev01' })]);
        await subscribe(harness, H2);
        const replays = (await harness.store.listReplays()).length;
        const bad: unknown[] = [
          null,
          backfill({ mode: 'again' as ReplayParams['mode'] }),
          backfill({ handlers: [] }),
          backfill({ handlers: [H2, H2] }),
          backfill({ handlers: [''] }),
          backfill({ eventTypes: 'test.event' as unknown as string[] }),
          backfill({ eventTypes: ['x\u0000'] }),
          backfill({ since: new Date(Number.NaN) }),
          backfill({ until: 'yesterday' as unknown as Date }),
          backfill({ since: harness.clock.now(), until: harness.clock.now() }),
          backfill({ fromEventId: '' }),
          backfill({ toEventId: 'x\u0000' }),
          backfill({ fromEventId: 'ev02', toEventId: 'ev01' }),
          backfill({ key: '' }),
          backfill({ requestedBy: 'x'.repeat(201) }),
          backfill({ requestedBy: 7 as unknown as string }),
          backfill({ reason: 'x'.repeat(1_001) }),
          backfill({ reason: 'a\u0000b' }),
          backfill({ now: new Date(Number.NaN) }),
        ];
        for (const params of bad) {
          await rejectsWithCode(harness.store.planReplay(params as ReplayParams), 'RELAYBUS_INVALID_INPUT');
          await rejectsWithCode(harness.store.startReplay(params as ReplayParams), 'RELAYBUS_INVALID_INPUT');
        }
        const replay = await start(harness, backfill());
        for (const params of [
          null,
          { replayId: '0' },
          { replayId: 'abc' },
          { replayId: 12 },
          { replayId: replay.id, limit: -1 },
          { replayId: replay.id, limit: 10_001 },
          { replayId: replay.id, limit: 1.5 },
          { replayId: replay.id, now: new Date(Number.NaN) },
        ])
          await rejectsWithCode(
            harness.store.replayStep(params as unknown as { replayId: string }),
            'RELAYBUS_INVALID_INPUT',
          );
        await rejectsWithCode(harness.store.replayStep({ replayId: '987654321' }), 'RELAYBUS_INVALID_INPUT');
        await rejectsWithCode(harness.store.cancelReplay('-1'), 'RELAYBUS_INVALID_INPUT');
        await rejectsWithCode(harness.store.getReplay('1.5'), 'RELAYBUS_INVALID_INPUT');
        await rejectsWithCode(
          harness.store.listReplays({ state: 'done' as unknown as 'running' }),
          'RELAYBUS_INVALID_INPUT',
        );
        await rejectsWithCode(harness.store.listReplays({ limit: 0 }), 'RELAYBUS_INVALID_INPUT');
        await rejectsWithCode(harness.store.listReplays({ limit: 1_001 }), 'RELAYBUS_INVALID_INPUT');
        assert.equal((await harness.store.listReplays()).length, replays + 1, 'only the valid start recorded');
        const view = await harness.store.getReplay(replay.id);
        assert.equal(view?.created, 0, 'no refused step created anything');
        assert.deepEqual(await remaining(harness), ['ev01/h1:pending']);
      },
    },
  ],
};
