/**
 * What the operator views say about replays (memory store): the running ones as `relaybus stats` lists them, with the
 * warning for one nobody drives, and the per-replay gauges of a worker's metrics.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { createRelayBus, defineEvent, memoryStore, Type } from '../../src/index.js';
import { isUndriven, runningReplays, runningReplaysNote, UNDRIVEN_AFTER_MS } from '../../src/cli/replay-views.js';
import { observeBus } from '../../src/telemetry/metrics.js';
import { PrometheusRegistry } from '../../src/telemetry/prometheus.js';
import { parseSamples, sampleValue } from '../telemetry/prom-text.js';

const Placed = defineEvent('order.placed', Type.Object({ n: Type.Number() }));

/** A store with 4 kept events of one key published for h1, then h2 subscribed and a backfill of it started. */
async function started() {
  const store = memoryStore();
  await store.subscribe([{ eventType: 'order.placed', handler: 'h1', maxAttempts: 3 }]);
  await store.transaction((tx) =>
    store.publish(
      tx,
      [1, 2, 3, 4].map((n) => ({
        id: `e${n}`,
        type: 'order.placed',
        key: 'k1',
        payload: { n },
        handlers: [{ name: 'h1', maxAttempts: 3 }],
      })),
    ),
  );
  await store.subscribe([{ eventType: 'order.placed', handler: 'h2', maxAttempts: 3 }]);
  const replay = await store.startReplay({ mode: 'backfill', handlers: ['h2'], now: new Date(1_000_000) });
  await store.replayStep({ replayId: replay.id, limit: 1, now: new Date(1_000_000) });
  return { store, replay };
}

describe('replay views', () => {
  it('stats lists a running replay with its progress, and warns once nobody has moved it for a minute', async () => {
    const { store, replay } = await started();
    const running = await runningReplays(store);
    assert.equal(running?.length, 1);
    const view = running![0]!;
    const moved = view.updatedAt.getTime();
    assert.deepEqual(runningReplaysNote(running, moved + 1_000), [
      `replay ${replay.id} (backfill of h2) running: 1/4 created`,
    ]);
    assert.equal(isUndriven(view, moved + UNDRIVEN_AFTER_MS), false);
    assert.equal(isUndriven(view, moved + UNDRIVEN_AFTER_MS + 1), true);
    const late = runningReplaysNote(running, moved + UNDRIVEN_AFTER_MS + 1);
    assert.equal(late.length, 2);
    assert.match(
      late[1]!,
      new RegExp(`^WARNING: replay ${replay.id} has not moved .* relaybus replay resume ${replay.id}`),
    );
    await store.cancelReplay(replay.id);
    assert.deepEqual(runningReplaysNote(await runningReplays(store), moved), []);
  });

  it("a worker's metrics carry each running replay's created and total deliveries", async () => {
    const { store, replay } = await started();
    const bus = createRelayBus({ store, events: [Placed] });
    const registry = new PrometheusRegistry();
    const observation = observeBus(bus, registry, { statisticsIntervalMs: 0 });
    await observation.sample();
    const labels = { replay: replay.id, mode: 'backfill', handlers: 'h2' };
    let samples = parseSamples(await registry.render());
    assert.equal(sampleValue(samples, 'relaybus_replay_created', labels), 1);
    assert.equal(sampleValue(samples, 'relaybus_replay_total', labels), 4);
    await store.cancelReplay(replay.id);
    await observation.sample();
    samples = parseSamples(await registry.render());
    assert.equal(
      samples.filter((sample) => sample.name === 'relaybus_replay_created').length,
      0,
      'a replay that ended is no longer reported',
    );
    observation.stop();
  });
});
