/**
 * A worker's live start lag reaches the replays that yield, on real Postgres: while a replay runs, a bus's worker
 * measures how long each live delivery had been due when its handler started (on the store's clock) and reports it
 * with a NOTIFY, which another store on the schema (a replay's process) hears. Before a replay, and once none runs,
 * it reports nothing, and its log says when it starts and stops.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import pg from 'pg';
import { createRelayBus, defineEvent, runReplay, Type, type Logger } from '../../src/index.js';
import { fromPg, postgresStore, type PgClientLike, type PostgresStore } from '../../src/postgres/index.js';
import type { LiveWait } from '../../src/store/contract.js';
import { findPostgres } from '../support/databases.js';
import { usePgStore } from '../support/pg-store.js';
import { pause, waitFor } from '../support/wait.js';

const found = await findPostgres();
const Live = defineEvent('lag.live', Type.Object({ n: Type.Integer() }));
const History = defineEvent('lag.history', Type.Object({ n: Type.Integer() }));
/** How long each live event's transaction stays open after its publish: its delivery is due from the publish on. */
const HOLD_MS = 80;

describe("a worker's live start lag while a replay runs, on real Postgres", {
  skip: 'skip' in found ? found.skip : undefined,
}, () => {
  let store: PostgresStore<PgClientLike>;
  const schema = usePgStore('live_lag', 8, (opened) => ({ store } = opened));

  it('reports how long live deliveries waited to start while a replay runs, and nothing before or after', {
    timeout: 30_000,
  }, async () => {
    const replayPool = new pg.Pool({ connectionString: 'url' in found ? found.url : '', max: 2 });
    const replayStore = postgresStore({ driver: fromPg(replayPool), schema });
    const heard: LiveWait[][] = [];
    const unlisten = await replayStore.subscribeLiveLag((waits) => heard.push([...waits]));
    const infos: string[] = [];
    const logger: Logger = {
      debug() {},
      info: (message) => infos.push(message),
      warn() {},
      error() {},
    };
    const bus = createRelayBus({ store, events: [Live, History], logger, dispatcher: { pollIntervalMs: 50 } });
    const started: number[] = [];
    bus.on(Live, 'live-handler', (payload) => {
      started.push(payload.n);
    });
    bus.on(History, 'indexer', () => {});
    const publishHeld = (n: number) =>
      store.transaction(async (tx) => {
        await bus.publish(tx, Live, { n });
        await pause(HOLD_MS);
      });
    await bus.start();
    try {
      await publishHeld(0);
      await waitFor(() => started.length === 1, 'the first live delivery to start');
      await pause(300);
      assert.equal(heard.length, 0, 'no replay runs: nothing reported');

      const replay = await replayStore.startReplay({ mode: 'backfill', handlers: ['indexer'] });
      await publishHeld(1);
      await waitFor(() => heard.some((waits) => waits.some((w) => w.handler === 'live-handler')), 'a report');
      const reported = heard.flat().filter((w) => w.handler === 'live-handler');
      assert.ok(
        reported.every((w) => w.ms >= HOLD_MS && w.ms < HOLD_MS + 2_000),
        `waited from its publish to its start: ${JSON.stringify(reported)}`,
      );
      assert.ok(infos.some((message) => message.startsWith('a replay is running: this worker reports')));

      await replayStore.cancelReplay(replay.id);
      await waitFor(
        () => infos.some((message) => message.startsWith('no replay is running any more')),
        'the stop',
        5_000,
      );
      const reports = heard.length;
      await publishHeld(2);
      await waitFor(() => started.length === 3, 'the third live delivery to start');
      await pause(300);
      assert.equal(heard.length, reports, 'no replay runs any more: nothing reported');
    } finally {
      await bus.stop();
      await unlisten();
      await replayPool.end();
    }
  });

  it('a store on a pool of one connection does not listen: a replay and a worker keep it for their statements', {
    timeout: 30_000,
  }, async () => {
    const onePool = new pg.Pool({ connectionString: 'url' in found ? found.url : '', max: 1 });
    const oneStore = postgresStore({ driver: fromPg(onePool), schema });
    const bus = createRelayBus({ store: oneStore, events: [Live], dispatcher: { pollIntervalMs: 20 } });
    const started: number[] = [];
    bus.on(Live, 'one-pool-handler', (payload) => {
      started.push(payload.n);
    });
    try {
      assert.equal(oneStore.capabilities.wakeups, 'poll');
      await oneStore.subscribe([{ eventType: 'lag.history', handler: 'one-pool-indexer', maxAttempts: 3 }]);
      const replay = await oneStore.startReplay({ mode: 'backfill', handlers: ['one-pool-indexer'] });
      const done = await runReplay(oneStore, replay.id, { pollMs: 5 });
      assert.equal(done.state, 'finished');
      await bus.start();
      await oneStore.transaction((tx) => bus.publish(tx, Live, { n: 7 }));
      await waitFor(() => started.includes(7), 'the worker on the pool of one to run the event');
    } finally {
      await bus.stop();
      await onePool.end();
    }
  });
});
