/**
 * Dead letter and requeue with real processes: a handler that always throws (its behaviour is a row
 * of `test_settings` it reads on every run) is retried with backoff and ends dead after
 * `maxAttempts`, with its last error recorded, and is never claimed again. `store.requeue` brings the
 * deliveries back with a fresh attempt budget, and once the handler is fixed (the row flipped) a
 * worker delivers them.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { findPostgres } from '../support/databases.js';
import { FLAKY_BACKOFF, FLAKY_MAX_ATTEMPTS, FLAKY_SETTING } from './fixtures/app.js';
import { openTestDatabase, type TestDatabase } from './fixtures/database.js';
import { killAll, pollUntil, spawnWorker, type WorkerProcess, type WorkerSettings } from './fixtures/processes.js';

const found = await findPostgres();

// Several deliveries that fail together: their reschedules and the worker's next claims overlap, which is where a
// claim that reads deliveries older than the lanes it locked would hand a just-failed delivery out again.
const EVENTS = 8;

describe('dead letter: a handler that always throws ends dead after maxAttempts; requeue brings it back', {
  skip: 'skip' in found ? found.skip : undefined,
}, () => {
  let db: TestDatabase | undefined;
  const workers: WorkerProcess[] = [];

  before(async () => {
    db = await openTestDatabase('url' in found ? found.url : '', 'dead_letter', 'dead-letter');
  });
  after(async () => {
    await killAll(workers);
    await db?.drop();
  });

  it('retries with backoff, buries with the last error, and delivers again after requeue once fixed', {
    timeout: 60_000,
  }, async (t) => {
    const { store, pool, schema, url } = db!;
    const setFlaky = (value: 'fail' | 'ok') =>
      pool.query(
        `INSERT INTO "${schema}".test_settings (name, value) VALUES ($1, $2) ON CONFLICT (name) DO UPDATE SET value = excluded.value`,
        [FLAKY_SETTING, value],
      );
    await setFlaky('fail');
    const eventIds = await db!.publish(EVENTS, (n) => (n === 0 ? 'k-0' : null));
    const settings: WorkerSettings = {
      url,
      schema,
      scenario: 'dead-letter',
      leaseMs: 5_000,
      pollMs: 50,
      concurrency: 4,
    };

    const first = spawnWorker('first', settings);
    workers.push(first);
    await first.ready();
    let progress = '';
    const deadStats = await pollUntil(
      async () => {
        if (!first.alive) throw new Error(`worker ${first.label} exited early.\nstderr:\n${first.stderr}`);
        const stats = await store.statistics();
        const runs = await db!.runs();
        const views = (await store.listDeliveries({ handler: 'flaky' })).items;
        progress =
          `statistics ${JSON.stringify({ pending: stats.pending, inFlight: stats.inFlight, dead: stats.dead })}; ` +
          `deliveries ${JSON.stringify(views.map((d) => `${d.id}:${d.status}/${d.attempts}`))}; ` +
          `runs (delivery:attempt) ${JSON.stringify(runs.map((r) => `${r.deliveryId}:${r.attempt}`))}; ` +
          `worker events ${JSON.stringify(first.messages.filter((m) => m.type !== 'ready').map((m) => `${m.type}:${String(m.deliveryId)}`))}`;
        return stats.dead === EVENTS ? stats : undefined;
      },
      `all ${EVENTS} deliveries dead after ${FLAKY_MAX_ATTEMPTS} attempts`,
      15_000,
      { intervalMs: 50, detail: () => progress },
    );
    assert.equal(deadStats.pending + deadStats.inFlight, 0, 'nothing else pending');

    const dead = (await store.listDeliveries({ status: 'dead', handler: 'flaky' })).items;
    const failedRuns = await db!.runs();
    t.diagnostic(
      `dead: ${dead.length} deliveries, attempts ${JSON.stringify(dead.map((d) => d.attempts))}, last error ${JSON.stringify(dead[0]?.lastError)}`,
    );
    const gaps = eventIds.map((id) => {
      const starts = failedRuns.filter((r) => r.eventId === id).map((r) => r.startedAt);
      return starts.slice(1).map((at, i) => at - starts[i]!);
    });
    t.diagnostic(
      `failed runs: ${failedRuns.length}, attempts per delivery ${JSON.stringify(eventIds.map((id) => failedRuns.filter((r) => r.eventId === id).map((r) => r.attempt)))}, ms between attempts ${JSON.stringify(gaps)} (backoff ${FLAKY_BACKOFF.initialDelayMs} ms x${FLAKY_BACKOFF.multiplier}, no jitter)`,
    );
    assert.equal(dead.length, EVENTS, 'every delivery is listed dead');
    for (const delivery of dead) {
      assert.equal(delivery.status, 'dead');
      assert.equal(delivery.attempts, FLAKY_MAX_ATTEMPTS, 'dead after maxAttempts attempts');
      assert.equal(delivery.maxAttempts, FLAKY_MAX_ATTEMPTS);
      assert.match(
        delivery.lastError ?? '',
        new RegExp(`flaky handler failed on purpose \\(attempt ${FLAKY_MAX_ATTEMPTS} of ${FLAKY_MAX_ATTEMPTS}\\)`),
        "the last attempt's error is recorded",
      );
    }
    assert.deepEqual(
      eventIds.map((id) => failedRuns.filter((r) => r.eventId === id).map((r) => `${r.attempt}:${r.outcome}`)),
      eventIds.map(() => Array.from({ length: FLAKY_MAX_ATTEMPTS }, (_, i) => `${i + 1}:error`)),
      'attempts 1..maxAttempts ran, each failed, in order',
    );
    for (const list of gaps) {
      list.forEach((gap, i) =>
        assert.ok(
          gap >= FLAKY_BACKOFF.initialDelayMs * FLAKY_BACKOFF.multiplier ** i - 20,
          `attempt ${i + 2} waited for its backoff (${gap} ms)`,
        ),
      );
    }
    assert.deepEqual(
      first.messages.filter((m) => m.type === 'dead').map((m) => m.attempt),
      eventIds.map(() => FLAKY_MAX_ATTEMPTS),
      'the worker reported a "dead" event per delivery on its last attempt',
    );

    // Dead is final: the worker keeps polling but never claims them again.
    await new Promise((resolve) => setTimeout(resolve, 4 * FLAKY_BACKOFF.maxDelayMs));
    assert.equal(await db!.countRuns(), EVENTS * FLAKY_MAX_ATTEMPTS, 'a dead delivery is never claimed again');

    first.signal('SIGTERM');
    assert.equal(
      (await first.waitForExit(15_000, 'its exit after SIGTERM')).code,
      0,
      `the first worker exits 0.\nstderr:\n${first.stderr}`,
    );

    const requeued = await store.requeue({ handler: 'flaky' });
    const back = (await store.listDeliveries({ handler: 'flaky' })).items;
    t.diagnostic(
      `requeue returned ${requeued}; after it: ${JSON.stringify(back.map((d) => ({ status: d.status, attempts: d.attempts, sequence: d.sequence, key: d.key })))}`,
    );
    assert.equal(requeued, EVENTS, 'requeue moved every dead delivery back');
    assert.deepEqual(
      back.map((d) => `${d.status}/${d.attempts}`),
      eventIds.map(() => 'pending/0'),
      'pending again with attempts 0',
    );
    assert.equal((await store.statistics()).dead, 0);

    await setFlaky('ok');
    const second = spawnWorker('second', settings);
    workers.push(second);
    await second.ready();
    const fixed = await pollUntil(
      async () => {
        if (!second.alive) throw new Error(`worker ${second.label} exited early.\nstderr:\n${second.stderr}`);
        const runs = (await db!.runs()).filter((r) => r.pid === second.pid);
        return runs.filter((r) => r.outcome === 'ok').length === EVENTS ? runs : undefined;
      },
      `the fixed handler to deliver all ${EVENTS} requeued deliveries`,
      20_000,
      { intervalMs: 50 },
    );
    await pollUntil(
      async () => {
        const stats = await store.statistics();
        return stats.pending + stats.inFlight + stats.dead === 0 ? stats : undefined;
      },
      'nothing pending or dead after the requeued deliveries ran',
      10_000,
    );
    t.diagnostic(
      `after requeue and the fix: ${fixed.length} runs, attempts ${JSON.stringify(fixed.map((r) => r.attempt))}, outcomes ${JSON.stringify(fixed.map((r) => r.outcome))}`,
    );
    assert.deepEqual(
      fixed.map((r) => `${r.attempt}:${r.outcome}`),
      eventIds.map(() => '1:ok'),
      'each requeued delivery ran once, as attempt 1, and succeeded',
    );

    second.signal('SIGTERM');
    assert.equal(
      (await second.waitForExit(15_000, 'its exit after SIGTERM')).code,
      0,
      `the second worker exits 0.\nstderr:\n${second.stderr}`,
    );
  });
});
