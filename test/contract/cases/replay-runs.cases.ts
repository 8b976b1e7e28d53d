/**
 * Replay, how it runs: steps and their limit, outstanding deliveries, draining and the late look, cancel, one running
 * replay per handler, waiting for deliveries in flight at the start, the audit record, input checks.
 */
import assert from 'node:assert/strict';
import type { LiveWait, ReplayParams } from '../../../src/store/contract.js';
import { sessionOf } from '../../support/claims.js';
import { waitFor } from '../../support/wait.js';
import {
  claim,
  claimExpecting,
  deferred,
  event,
  H1,
  H2,
  handlers,
  LEASE_MS,
  leaseOf,
  pause,
  publish,
  rejectsWithCode,
  type CaseGroup,
} from './kit.js';
import { backfill, OTHER, redrive, remaining, runOne, start, step, stepToEnd, subscribe } from './replay-kit.js';

export const replayRunCases: CaseGroup = {
  area: 'replay: steps, cancel and audit',
  cases: [
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
      name: "a step reports how long other handlers' live deliveries have been due without starting, per handler: not the replay's own, paused, in flight or scheduled ones",
      async run({ harness }) {
        await subscribe(harness, H1);
        await publish(harness, [event({ id: 'ev01', key: 'k1' })]);
        await subscribe(harness, H2);
        const replay = await start(harness, backfill());
        assert.deepEqual((await step(harness, replay.id, 0)).liveWaits, [{ handler: H1, ms: 0 }]);
        harness.clock.advance(500);
        await publish(harness, [
          event({ id: 'live1', type: OTHER, key: 'k2', handlers: handlers(H2, 'h3', 'h4', 'h5') }),
          event({ id: 'live2', type: OTHER, key: 'k3', handlers: handlers('h3') }),
          event({
            id: 'later',
            type: OTHER,
            handlers: handlers('h6'),
            availableAt: new Date(harness.clock.now().getTime() + 60_000),
          }),
        ]);
        await harness.store.pauseHandler({ handler: 'h4', now: harness.clock.now() });
        await claimExpecting(harness, 'w1', ['live1'], { handlers: ['h5'] });
        harness.clock.advance(1_000);
        const stepped = await step(harness, replay.id, 1);
        assert.equal(stepped.created, 1, 'the replayed delivery (H2 of ev01) is not live traffic');
        assert.deepEqual(stepped.liveWaits, [
          { handler: H1, ms: 1_500 },
          { handler: 'h3', ms: 1_000 },
        ]);
        const running = await claim(harness, 'w1', { handlers: [H1, 'h3'] });
        assert.deepEqual(running.map((d) => d.eventId).sort(), ['ev01', 'live1', 'live2']);
        assert.deepEqual((await step(harness, replay.id, 0)).liveWaits, [], 'none waits once they started');
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
    {
      name: "a claim gives the store's clock while a replay runs (none before or after); a worker's live lag report reaches the replays that listen",
      async run({ harness }) {
        const { store } = harness;
        await subscribe(harness, H1);
        await publish(harness, [event({ id: 'ev01', key: 'k1' })]);
        await subscribe(harness, H2);
        const session = sessionOf(store, 'w-clock');
        const claimAt = () =>
          session.claim({ handlers: ['h9'], limit: 1, leaseDurationMs: LEASE_MS, now: harness.clock.now() });
        // Read through a function: the compiler would keep the property narrowed to undefined after the first check.
        const clockNow = () => session.replayClock;
        await claimAt();
        assert.equal(clockNow(), undefined, 'no replay runs');
        const replay = await start(harness, backfill());
        harness.clock.advance(1_234);
        const sentAfter = performance.now();
        await claimAt();
        const clock = clockNow();
        assert.ok(clock !== undefined, 'a replay runs, of a handler this claim does not ask for');
        assert.ok(Math.abs(clock.storeMs - harness.clock.now().getTime()) < 0.01, `store time ${clock.storeMs}`);
        assert.ok(clock.sentAt >= sentAfter && clock.sentAt <= performance.now(), 'sent during the claim');
        await store.cancelReplay(replay.id, harness.clock.now());
        await claimAt();
        assert.equal(clockNow(), undefined, 'the replay was cancelled');

        assert.ok(store.reportLiveLag !== undefined && store.subscribeLiveLag !== undefined);
        const heard: (readonly LiveWait[])[] = [];
        const unsubscribe = await store.subscribeLiveLag((waits) => heard.push(waits));
        const report = [
          { handler: H1, ms: 42.5 },
          { handler: 'h3', ms: 3 },
        ];
        await store.reportLiveLag(report);
        // The memory store's workers are in process; the Postgres store's report is a NOTIFY, heard where it listens.
        const hears = store.kind === 'memory' || store.capabilities.wakeups === 'listen-notify';
        if (hears) await waitFor(() => heard.length > 0, 'the report');
        else await pause(50);
        assert.deepEqual(heard, hears ? [report] : []);
        await unsubscribe();
        await store.reportLiveLag(report);
        await pause(50);
        assert.equal(heard.length, hears ? 1 : 0, 'nothing heard after unsubscribing');
        for (const bad of [
          null,
          [{ handler: H1, ms: -1 }],
          [{ handler: H1, ms: Number.NaN }],
          [{ handler: '', ms: 1 }],
          [{ handler: H1 }],
          Array.from({ length: 17 }, (_, index) => ({ handler: `h${index}`, ms: 1 })),
        ])
          await rejectsWithCode(store.reportLiveLag(bad as unknown as LiveWait[]), 'RELAYBUS_INVALID_INPUT');
      },
    },
  ],
};
