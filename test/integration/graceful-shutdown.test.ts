/**
 * Graceful shutdown with real processes: SIGTERM on a worker whose handlers (one plain, one
 * transactional) are in the middle of 20-second runs that honour `ctx.signal`. The worker maps the
 * signal onto `bus.stop()`: after the grace period the handlers are aborted, their deliveries
 * released (no attempt charged) and the lanes relinquished, and the process exits 0. A second
 * worker started right after picks the deliveries up at once, although the lease is 30 s.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { findPostgres } from '../support/databases.js';
import { HANDLER_NAMES } from './fixtures/app.js';
import { openTestDatabase, type TestDatabase } from './fixtures/database.js';
import { killAll, pollUntil, spawnWorker, type WorkerProcess, type WorkerSettings } from './fixtures/processes.js';

const found = await findPostgres();

const EVENTS = 6;
const LEASE_MS = 30_000;
const GRACE_MS = 500;
const PICKUP_LIMIT_MS = 5_000;

describe('graceful shutdown: SIGTERM releases running deliveries and relinquishes lanes', {
  skip: 'skip' in found ? found.skip : undefined,
}, () => {
  let db: TestDatabase | undefined;
  const workers: WorkerProcess[] = [];

  before(async () => {
    db = await openTestDatabase('url' in found ? found.url : '', 'graceful_shutdown', 'slow');
  });
  after(async () => {
    await killAll(workers);
    await db?.drop();
  });

  it('exits 0, charges no attempt, and a second worker takes the work well before the 30 s lease', {
    timeout: 60_000,
  }, async (t) => {
    const { store, schema, url } = db!;
    const handlers = HANDLER_NAMES.slow;
    const total = EVENTS * handlers.length;
    await db!.publish(EVENTS, (n) => (n < EVENTS / 2 ? `k-${n}` : null));
    const base: WorkerSettings = {
      url,
      schema,
      scenario: 'slow',
      leaseMs: LEASE_MS,
      pollMs: 50,
      concurrency: 16,
      graceMs: GRACE_MS,
    };

    const first = spawnWorker('first', { ...base, minMs: 20_000, maxMs: 20_000 });
    workers.push(first);
    await first.ready();
    await pollUntil(
      async () => {
        if (!first.alive) throw new Error(`worker ${first.label} exited early.\nstderr:\n${first.stderr}`);
        return (await db!.countRuns(`pid = ${first.pid}`)) === total ? true : undefined;
      },
      `all ${total} slow handlers running in the first worker`,
      20_000,
    );

    // The second worker is loaded and connected, and waits for "go" to start its bus (no Node start-up in the figure).
    const second = spawnWorker('second', { ...base, minMs: 1, maxMs: 5, waitForGo: true });
    workers.push(second);
    await second.waitForMessage((m) => m.type === 'waiting', 'its "waiting" message', 20_000);
    const before = await store.statistics();
    assert.equal(before.inFlight, total, 'every delivery in flight in the first worker before the SIGTERM');

    const termAt = await db!.now();
    const termWall = Date.now();
    first.signal('SIGTERM');
    const exit = await first.waitForExit(15_000, `its exit after SIGTERM (grace ${GRACE_MS} ms)`);
    const exitMs = exit.at - termWall;
    assert.deepEqual(
      { code: exit.code, signal: exit.signal },
      { code: 0, signal: null },
      `the first worker exits 0 after SIGTERM.\nstderr:\n${first.stderr}`,
    );
    const stopped = first.messages.find((m) => m.type === 'stopped');

    const stats = await store.statistics();
    const released = [];
    for (const handler of handlers) released.push(...(await store.listDeliveries({ handler, limit: 100 })).items);
    const firstRuns = (await db!.runs()).filter((r) => r.pid === first.pid);
    t.diagnostic(
      `first worker: ${firstRuns.length} runs started, outcomes ${JSON.stringify(count(firstRuns.map((r) => r.outcome)))}; SIGTERM to exit ${exitMs} ms (bus.stop() took ${stopped?.stopMs} ms, grace ${GRACE_MS} ms; handler bodies still recording their abort when stop() resolved: ${stopped?.runningAtStop}, after waiting: ${stopped?.unsettled})`,
    );
    t.diagnostic(
      `after the exit: pending ${stats.pending}, in flight ${stats.inFlight}, dead ${stats.dead}, lanes leased ${stats.lanesLeased}; released deliveries by status/attempts: ${JSON.stringify(count(released.map((d) => `${d.status}/${d.attempts}`)))}`,
    );
    assert.deepEqual(
      count(firstRuns.map((r) => r.outcome)),
      { aborted: total },
      'every running handler saw its signal abort',
    );
    assert.equal(released.length, total, 'every delivery is still there');
    assert.deepEqual(
      count(released.map((d) => `${d.status}/${d.attempts}`)),
      { 'pending/0': total },
      'released: pending, not in flight, no attempt charged',
    );
    assert.deepEqual(
      {
        pending: stats.pending,
        due: stats.due,
        inFlight: stats.inFlight,
        dead: stats.dead,
        lanesLeased: stats.lanesLeased,
      },
      { pending: total, due: total, inFlight: 0, dead: 0, lanesLeased: 0 },
      'the deliveries are due at once and every lane was relinquished',
    );

    const goAt = await db!.now();
    second.go();
    await second.ready();
    const secondRuns = await pollUntil(
      async () => {
        if (!second.alive) throw new Error(`worker ${second.label} exited early.\nstderr:\n${second.stderr}`);
        const runs = (await db!.runs()).filter((r) => r.pid === second.pid && r.outcome === 'ok');
        return runs.length === total ? runs : undefined;
      },
      `the second worker to run all ${total} released deliveries`,
      20_000,
    );
    const firstPickup = Math.min(...secondRuns.map((r) => r.startedAt));
    const lastPickup = Math.max(...secondRuns.map((r) => r.startedAt));
    t.diagnostic(
      `second worker: first pick-up ${firstPickup - goAt} ms after its bus started (last ${lastPickup - goAt} ms), ${firstPickup - termAt} ms after the SIGTERM of the first; lease ${LEASE_MS} ms; attempts seen by its handlers ${JSON.stringify(count(secondRuns.map((r) => r.attempt)))}`,
    );
    assert.ok(
      lastPickup - goAt < PICKUP_LIMIT_MS,
      `the second worker picked every delivery up within ${PICKUP_LIMIT_MS} ms (took ${lastPickup - goAt} ms), not after the ${LEASE_MS} ms lease`,
    );
    assert.ok(
      lastPickup - termAt < LEASE_MS / 2,
      `well before the first worker's lease would have expired (${lastPickup - termAt} ms after the SIGTERM)`,
    );
    assert.deepEqual(
      count(secondRuns.map((r) => r.attempt)),
      { 1: total },
      'the re-runs are attempt 1: the release charged nothing',
    );

    await pollUntil(
      async () => {
        const s = await store.statistics();
        return s.pending + s.inFlight + s.dead === 0 ? true : undefined;
      },
      'nothing left after the second worker ran everything',
      10_000,
    );
    second.signal('SIGTERM');
    assert.equal(
      (await second.waitForExit(15_000, 'its exit after SIGTERM')).code,
      0,
      `the second worker exits 0.\nstderr:\n${second.stderr}`,
    );
  });
});

function count(values: readonly unknown[]): Record<string, number> {
  const out: Record<string, number> = {};
  for (const value of values) out[String(value)] = (out[String(value)] ?? 0) + 1;
  return out;
}
