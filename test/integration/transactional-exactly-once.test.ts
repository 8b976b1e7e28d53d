/**
 * Effectively-once for transactional handlers, with real processes: a `{ transactional: true }`
 * handler increments a per-event counter through `ctx.transaction` (a pg client in the transaction
 * that also writes the completion) and then keeps working inside that transaction, so kills land
 * between the uncommitted increment and the commit. Workers are SIGKILLed twice and replaced. At
 * the end every event counted exactly once, whatever ran twice, and nothing is pending or dead.
 *
 * A second case: a transactional handler that ignores its signal outlives its timeout and then
 * writes through `ctx.transaction`. relaybus has rolled that transaction back and retries the
 * delivery, so the late write must not commit: every event still counts exactly once.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { findPostgres } from '../support/databases.js';
import { LATE_FIRST_ATTEMPT_MS, LATE_TIMEOUT_MS } from './fixtures/app.js';
import { openTestDatabase, type TestDatabase } from './fixtures/database.js';
import {
  killAll,
  pollUntil,
  spawnWorker,
  unexpectedExit,
  type WorkerProcess,
  type WorkerSettings,
} from './fixtures/processes.js';

const found = await findPostgres();

const EVENTS = 1_200;
const KEYS = 60;
const LEASE_MS = 1_500;

describe('transactional handler: exactly one committed increment per event across SIGKILLs', {
  skip: 'skip' in found ? found.skip : undefined,
}, () => {
  let db: TestDatabase | undefined;
  const workers: WorkerProcess[] = [];

  before(async () => {
    db = await openTestDatabase('url' in found ? found.url : '', 'tx_exactly_once', 'exactly-once');
  });
  after(async () => {
    await killAll(workers);
    await db?.drop();
  });

  it('every event counts exactly once after two workers are killed mid-transaction and replaced', {
    timeout: 90_000,
  }, async (t) => {
    const { store, pool, schema, url } = db!;
    const eventIds = await db!.publish(EVENTS, (n) => `k-${n % KEYS}`);
    const settings: WorkerSettings = {
      url,
      schema,
      scenario: 'exactly-once',
      leaseMs: LEASE_MS,
      pollMs: 50,
      concurrency: 8,
      minMs: 2,
      maxMs: 8,
    };
    let spawned = 0;
    const spawn = (): WorkerProcess => {
      const worker = spawnWorker(`w${spawned++}`, settings);
      workers.push(worker);
      return worker;
    };
    const began = Date.now();
    const live = [spawn(), spawn()];
    await Promise.all(live.map((w) => w.ready()));

    const killed: WorkerProcess[] = [];
    const kills: { pid: number; afterMs: number; committed: number; running: number }[] = [];
    for (const fraction of [0.25, 0.6]) {
      const victim = live.shift()!;
      const at = await pollUntil(
        async () => {
          const exit = unexpectedExit(workers, new Set(killed));
          if (exit) throw exit;
          const { rows } = await pool.query(
            `SELECT (SELECT count(*)::int FROM "${schema}".test_counters) AS committed,
                  (SELECT count(*)::int FROM "${schema}".test_runs WHERE pid = $1 AND finished_at IS NULL) AS running`,
            [victim.pid],
          );
          const row = rows[0] as { committed: number; running: number };
          return row.committed >= EVENTS * fraction && row.running > 0 ? row : undefined;
        },
        `${fraction * 100}% of the events counted while worker ${victim.label} runs a handler`,
        40_000,
        { intervalMs: 20 },
      );
      victim.signal('SIGKILL');
      const exit = await victim.waitForExit(10_000, 'its death by SIGKILL');
      assert.equal(exit.signal, 'SIGKILL');
      killed.push(victim);
      kills.push({ pid: victim.pid, afterMs: Date.now() - began, committed: at.committed, running: at.running });
      const replacement = spawn();
      live.push(replacement);
      await replacement.ready();
    }

    await pollUntil(
      async () => {
        const exit = unexpectedExit(workers, new Set(killed));
        if (exit) throw exit;
        const stats = await store.statistics();
        return stats.pending + stats.inFlight + stats.dead === 0 ? stats : undefined;
      },
      'every delivery completed (pending + in flight + dead = 0)',
      45_000,
      { intervalMs: 200 },
    );
    const drainedMs = Date.now() - began;
    for (const worker of live) worker.signal('SIGTERM');
    for (const worker of live)
      assert.equal(
        (await worker.waitForExit(20_000, 'a clean exit after SIGTERM')).code,
        0,
        `worker ${worker.label} exits 0.\nstderr:\n${worker.stderr}`,
      );

    const { rows: counters } = await pool.query(`SELECT event_id, n FROM "${schema}".test_counters`);
    const counts = new Map(counters.map((row: { event_id: string; n: number }) => [row.event_id, row.n]));
    const runs = await db!.runs();
    const killedPids = new Set(killed.map((w) => w.pid));
    const runsPerDelivery = new Map<string, number>();
    for (const run of runs) runsPerDelivery.set(run.deliveryId, (runsPerDelivery.get(run.deliveryId) ?? 0) + 1);
    const rolledBack = runs.filter((r) => killedPids.has(r.pid) && r.finishedAt === null);
    const firstRuns = new Map<string, number>();
    for (const run of runs) if (!firstRuns.has(run.deliveryId)) firstRuns.set(run.deliveryId, run.attempt);
    const chargedBeforeStart = [...firstRuns.values()].filter((attempt) => attempt > 1).length;
    const attempts: Record<string, number> = {};
    for (const run of runs) attempts[run.attempt] = (attempts[run.attempt] ?? 0) + 1;
    const stats = await store.statistics();

    for (const kill of kills)
      t.diagnostic(
        `SIGKILL pid ${kill.pid} after ${kill.afterMs} ms with ${kill.committed} of ${EVENTS} events counted and ${kill.running} of its handlers running`,
      );
    t.diagnostic(
      `runs: ${runs.length} for ${EVENTS} deliveries; ${[...runsPerDelivery.values()].filter((n) => n > 1).length} deliveries ran more than once; killed mid-transaction (increment rolled back): ${rolledBack.length}; claimed by a killed worker before its handler started (first run is attempt 2): ${chargedBeforeStart}; runs by attempt: ${JSON.stringify(attempts)}`,
    );
    t.diagnostic(
      `counters: ${counts.size} events counted, histogram of counts: ${JSON.stringify(histogram([...counts.values()]))}; drained in ${drainedMs} ms`,
    );

    const wrong = eventIds.filter((id) => counts.get(id) !== 1).map((id) => `${id}=${counts.get(id) ?? 0}`);
    assert.deepEqual(wrong.slice(0, 20), [], `every event counted exactly once (${wrong.length} wrong)`);
    assert.equal(counts.size, EVENTS, 'no counter for an unknown event');
    assert.ok(
      rolledBack.length > 0,
      'at least one kill landed inside a transaction, so the rollback path was exercised',
    );
    // Each takeover charges one attempt: a delivery whose next holder was killed too before running it is charged twice.
    for (const run of rolledBack) {
      assert.ok(
        runs.some(
          (r) =>
            r.deliveryId === run.deliveryId &&
            r.pid !== run.pid &&
            r.attempt > run.attempt &&
            r.attempt <= run.attempt + kills.length &&
            r.outcome === 'ok',
        ),
        `delivery ${run.deliveryId} killed in attempt ${run.attempt} ran again, charged one attempt per takeover`,
      );
    }
    const committedTwice = runs
      .filter((r) => r.outcome === 'ok')
      .map((r) => r.deliveryId)
      .filter((id, i, all) => all.indexOf(id) !== i);
    assert.deepEqual(committedTwice, [], 'no delivery committed twice');
    assert.deepEqual(
      { pending: stats.pending, inFlight: stats.inFlight, dead: stats.dead, lanesLeased: stats.lanesLeased },
      { pending: 0, inFlight: 0, dead: 0, lanesLeased: 0 },
      'nothing pending, in flight or dead; no lane leased',
    );
  });
});

describe('transactional handler: a write after the attempt timed out never commits', {
  skip: 'skip' in found ? found.skip : undefined,
}, () => {
  let db: TestDatabase | undefined;
  const workers: WorkerProcess[] = [];

  before(async () => {
    db = await openTestDatabase('url' in found ? found.url : '', 'tx_late_writer', 'late-writer');
  });
  after(async () => {
    await killAll(workers);
    await db?.drop();
  });

  it('counts each event once when the first attempt writes through ctx.transaction after its timeout', {
    timeout: 60_000,
  }, async (t) => {
    const { store, pool, schema, url } = db!;
    const events = 5;
    const eventIds = await db!.publish(events, () => null);
    const worker = spawnWorker('late', {
      url,
      schema,
      scenario: 'late-writer',
      leaseMs: 5_000,
      pollMs: 50,
      concurrency: 8,
    });
    workers.push(worker);
    await worker.ready();
    let progress = '';
    await pollUntil(
      async () => {
        if (!worker.alive) throw new Error(`worker exited early.\nstderr:\n${worker.stderr}`);
        const stats = await store.statistics();
        const views = (await store.listDeliveries({})).items;
        progress = `deliveries ${JSON.stringify(views.map((d) => `${d.id}:${d.status}/${d.attempts}`))}; worker events ${JSON.stringify(worker.messages.filter((m) => m.type !== 'ready').map((m) => `${m.type}:${String(m.deliveryId)}`))}`;
        return stats.pending + stats.inFlight + stats.dead === 0 ? stats : undefined;
      },
      'every delivery completed by its retry',
      15_000,
      { detail: () => progress },
    );
    // The first attempts are still sleeping past their timeout; let their late writes happen (or fail) before counting.
    await new Promise((resolve) => setTimeout(resolve, LATE_FIRST_ATTEMPT_MS + 500));
    worker.signal('SIGTERM');
    assert.equal(
      (await worker.waitForExit(15_000, 'its exit after SIGTERM')).code,
      0,
      `the worker exits 0.\nstderr:\n${worker.stderr}`,
    );

    const { rows } = await pool.query(`SELECT event_id, n FROM "${schema}".test_counters`);
    const counts = new Map(rows.map((row: { event_id: string; n: number }) => [row.event_id, row.n]));
    const runs = await db!.runs();
    t.diagnostic(
      `timeout ${LATE_TIMEOUT_MS} ms, first attempt writes after ${LATE_FIRST_ATTEMPT_MS} ms; runs (attempt:outcome) ${JSON.stringify(runs.map((r) => `${r.attempt}:${r.outcome}`))}; counters ${JSON.stringify(histogram([...counts.values()]))}`,
    );
    const wrong = eventIds.filter((id) => counts.get(id) !== 1).map((id) => `${id}=${counts.get(id) ?? 0}`);
    assert.deepEqual(
      wrong,
      [],
      "every event counted exactly once: the timed-out attempt's late write through ctx.transaction did not commit",
    );
    assert.deepEqual(
      runs.filter((r) => r.attempt === 1).map((r) => r.outcome),
      eventIds.map(() => null),
      'no timed-out first attempt recorded a committed finish',
    );
  });
});

function histogram(values: readonly number[]): Record<string, number> {
  const out: Record<string, number> = {};
  for (const value of values) out[value] = (out[value] ?? 0) + 1;
  return out;
}
