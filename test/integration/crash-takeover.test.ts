/**
 * Crash takeover with real processes: three worker processes drain 2,000 keyed events (100 keys)
 * with two handlers each (one plain, one transactional); one worker is killed with SIGKILL mid-run.
 * The survivors take its lanes over once the (short) lease expires. Checked from the runs every
 * handler recorded (see fixtures/app.ts):
 * - every (event, handler) ran to completion at least once, and nothing is left pending or dead;
 * - per (handler, key), runs never overlapped in time and started in sequence order (re-runs of the
 *   killed worker's in-flight deliveries come before any later sequence: followers wait for the head);
 * - every delivery the killed worker had in flight was charged exactly one attempt by the takeover
 *   (its re-run is attempt 2), and a transactional run whose finish committed never ran again.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { findPostgres } from '../support/databases.js';
import { HANDLER_NAMES } from './fixtures/app.js';
import { openTestDatabase, type Run, type TestDatabase } from './fixtures/database.js';
import { killAll, pollUntil, spawnWorker, unexpectedExit, type WorkerProcess } from './fixtures/processes.js';

const found = await findPostgres();

const EVENTS = 2_000;
const KEYS = 100;
const LEASE_MS = 1_500;
const POLL_MS = 50;

describe('crash takeover: three worker processes, one SIGKILLed mid-run', {
  skip: 'skip' in found ? found.skip : undefined,
}, () => {
  let db: TestDatabase | undefined;
  const workers: WorkerProcess[] = [];

  before(async () => {
    db = await openTestDatabase('url' in found ? found.url : '', 'crash_takeover', 'crash');
  });
  after(async () => {
    await killAll(workers);
    await db?.drop();
  });

  it("drains every (event, handler) at least once, in per-key order, charging the killed worker's in-flight deliveries one attempt", {
    timeout: 90_000,
  }, async (t) => {
    const { store, pool, schema, url } = db!;
    const handlers = HANDLER_NAMES.crash;
    const total = EVENTS * handlers.length;
    const eventIds = await db!.publish(EVENTS, (n) => `k-${n % KEYS}`);
    assert.equal(new Set(eventIds).size, EVENTS);

    const began = Date.now();
    for (let i = 0; i < 3; i += 1) {
      workers.push(
        spawnWorker(`w${i}`, {
          url,
          schema,
          scenario: 'crash',
          leaseMs: LEASE_MS,
          pollMs: POLL_MS,
          concurrency: 8,
          minMs: 1,
          maxMs: 5,
        }),
      );
    }
    await Promise.all(workers.map((w) => w.ready()));

    // Mid-run: a quarter of the deliveries done; the victim is the worker running the most handlers right now.
    const progress = await pollUntil(
      async () => {
        const exit = unexpectedExit(workers);
        if (exit) throw exit;
        const { rows } = await pool.query(
          `SELECT pid, count(*) FILTER (WHERE finished_at IS NULL)::int AS running, count(*)::int AS runs,
                sum(count(*) FILTER (WHERE finished_at IS NOT NULL)) OVER ()::int AS done
         FROM "${schema}".test_runs GROUP BY pid ORDER BY running DESC, runs DESC`,
        );
        const busiest = rows[0] as { pid: number; running: number; runs: number; done: number } | undefined;
        return busiest !== undefined && busiest.done >= total / 4 && busiest.running >= 2 ? busiest : undefined;
      },
      'a quarter of the deliveries done while some worker runs at least two handlers',
      40_000,
      { intervalMs: 20 },
    );
    const victim = workers.find((w) => w.pid === progress.pid)!;
    const survivors = workers.filter((w) => w !== victim);

    victim.signal('SIGKILL'); // at once: its handlers take only 1-5 ms
    const killAt = await db!.now();
    const exit = await victim.waitForExit(10_000, 'its death by SIGKILL');
    assert.equal(exit.signal, 'SIGKILL');
    const deadAt = await db!.now();
    const victimOwner = String(victim.messages.find((m) => m.type === 'ready')?.owner);
    const { rows: victimLanes } = await pool.query(
      `SELECT count(*)::int AS lanes, count(*) FILTER (WHERE cardinality(in_flight) > 0)::int AS busy,
              sum(cardinality(in_flight))::int AS listed, max(lease_expires_at) AS expires
       FROM "${schema}".relaybus_lanes WHERE lease_owner = $1`,
      [victimOwner],
    );
    const held = victimLanes[0] as { lanes: number; busy: number; listed: number | null; expires: Date | null };
    const expiresAt = held.expires === null ? undefined : held.expires.getTime();
    t.diagnostic(
      `killed worker ${victim.label} (pid ${victim.pid}) after ${Date.now() - began} ms: ${progress.done} of ${total} runs finished, the victim had started ${progress.runs} (${progress.running} running at the check)`,
    );

    await pollUntil(
      async () => {
        const exited = unexpectedExit(survivors);
        if (exited) throw exited;
        const stats = await store.statistics();
        return stats.pending + stats.inFlight + stats.dead === 0 ? stats : undefined;
      },
      'the survivors to drain every delivery (pending + in flight + dead = 0)',
      45_000,
      {
        intervalMs: 200,
        detail: () =>
          `lease-lost events so far: ${survivors.reduce((n, w) => n + w.messages.filter((m) => m.type === 'lease-lost').length, 0)}`,
      },
    );
    const drainedMs = Date.now() - began;

    // Graceful stop of the survivors: exit 0, every lane handed back.
    for (const worker of survivors) worker.signal('SIGTERM');
    for (const worker of survivors) {
      const stopped = await worker.waitForExit(20_000, 'a clean exit after SIGTERM');
      assert.equal(stopped.code, 0, `survivor ${worker.label} exits 0 after SIGTERM.\nstderr:\n${worker.stderr}`);
    }
    const stats = await store.statistics();
    assert.deepEqual(
      { pending: stats.pending, inFlight: stats.inFlight, dead: stats.dead, lanesLeased: stats.lanesLeased },
      { pending: 0, inFlight: 0, dead: 0, lanesLeased: 0 },
      'nothing pending, in flight or dead; no lane leased',
    );

    const runs = await db!.runs();
    const leaseLost = survivors.flatMap((w) => w.messages.filter((m) => m.type === 'lease-lost'));
    const report = analyse(runs, { eventIds, handlers, victimPid: victim.pid, killAt, deadAt });

    t.diagnostic(
      `runs recorded: ${runs.length} for ${total} deliveries; per worker: ${workers.map((w) => `${w.label}(pid ${w.pid})=${runs.filter((r) => r.pid === w.pid).length}`).join(', ')}`,
    );
    t.diagnostic(
      `killed worker: ${report.victimRuns} runs, ${report.inFlightAtKill} in flight at the kill (started, not finished), ${report.claimedNotStarted} claimed but not yet started, ${report.plainFinishedNotCompleted} plain runs finished whose completion had not committed`,
    );
    t.diagnostic(
      `re-runs after the takeover: ${report.reruns} deliveries, attempts of their re-run: ${JSON.stringify(report.rerunAttempts)}`,
    );
    t.diagnostic(
      `victim's lanes at its death: ${held.lanes} held, ${held.busy} with deliveries listed in flight (${held.listed ?? 0} ids), last lease expiring ${expiresAt === undefined ? '-' : expiresAt - killAt} ms after the kill`,
    );
    t.diagnostic(
      `time to takeover (kill to first re-run start): ${report.takeoverMs ?? 'none'} ms (lease ${LEASE_MS} ms, poll ${POLL_MS} ms); last re-run started ${report.lastRerunMs ?? 'none'} ms after the kill`,
    );
    t.diagnostic(
      `drained all ${total} deliveries in ${drainedMs} ms from the workers' spawn; lease-lost events on survivors: ${leaseLost.length}`,
    );

    assert.deepEqual(report.missing, [], 'every (event, handler) ran to completion at least once');
    assert.deepEqual(
      report.orderViolations.slice(0, 10),
      [],
      `per (handler, key): runs never overlap and start in sequence order (${report.orderViolations.length} violations; lease-lost events: ${leaseLost.length})`,
    );
    assert.deepEqual(
      report.attemptViolations.slice(0, 10),
      [],
      `attempt accounting (${report.attemptViolations.length} violations)`,
    );
    assert.ok(
      report.reruns > 0,
      'the victim had deliveries in flight at the kill, so the takeover charging was exercised',
    );
    assert.deepEqual(
      Object.keys(report.rerunAttempts),
      ['2'],
      'every re-run after the takeover is attempt 2: exactly one attempt charged',
    );
    assert.ok(
      report.takeoverMs !== undefined && report.takeoverMs >= LEASE_MS / 3,
      `no re-run before the victim's lease could have expired (first re-run ${report.takeoverMs} ms after the kill, lease ${LEASE_MS} ms renewed every ${LEASE_MS / 3} ms)`,
    );
    // A survivor may lose a lane too when this 2-core machine starves its event loop past the 1.5 s lease (a busy
    // worker takes expired lanes once per lease duration): that is fencing at work, not a fault, so it is reported
    // above, and the assertions on completeness, order and attempts must hold either way.
  });
});

interface Analysis {
  missing: string[];
  orderViolations: string[];
  attemptViolations: string[];
  victimRuns: number;
  inFlightAtKill: number;
  claimedNotStarted: number;
  plainFinishedNotCompleted: number;
  reruns: number;
  rerunAttempts: Record<string, number>;
  takeoverMs: number | undefined;
  lastRerunMs: number | undefined;
}

function analyse(
  runs: readonly Run[],
  context: {
    eventIds: readonly string[];
    handlers: readonly string[];
    victimPid: number;
    killAt: number;
    deadAt: number;
  },
): Analysis {
  const { victimPid, killAt, deadAt } = context;
  const describe = (r: Run) =>
    `${r.handler}/${r.key}#${r.sequence} delivery ${r.deliveryId} attempt ${r.attempt} pid ${r.pid} [${r.startedAt}..${r.finishedAt ?? 'unfinished'}]`;

  // Coverage: a finished ('ok') run per (event, handler).
  const finished = new Set(runs.filter((r) => r.outcome === 'ok').map((r) => `${r.eventId}/${r.handler}`));
  const missing = context.eventIds
    .flatMap((id) => context.handlers.map((h) => `${id}/${h}`))
    .filter((pair) => !finished.has(pair));

  // Order: per (handler, key), by start time: no overlap, sequence never goes back.
  const orderViolations: string[] = [];
  const bySlot = new Map<string, Run[]>();
  for (const run of runs) {
    const slot = `${run.handler}/${run.key}`;
    const list = bySlot.get(slot) ?? [];
    list.push(run);
    bySlot.set(slot, list);
  }
  for (const list of bySlot.values()) {
    list.sort((a, b) => a.startedAt - b.startedAt || a.id - b.id);
    let previous: Run | undefined;
    let busyUntil = -Infinity;
    for (const run of list) {
      if (previous !== undefined) {
        if (run.startedAt < busyUntil)
          orderViolations.push(`overlap: ${describe(run)} started before ${describe(previous)} ended`);
        if ((run.sequence ?? 0) < (previous.sequence ?? 0))
          orderViolations.push(`order: ${describe(run)} started after ${describe(previous)}`);
      }
      // A run of the killed worker that never finished ended at its death; any other unfinished run never ended.
      const end = run.finishedAt ?? (run.pid === victimPid ? Math.max(run.startedAt, deadAt) : Infinity);
      busyUntil = Math.max(busyUntil, end);
      previous = run;
    }
  }

  // Attempts: per delivery, in start order.
  const attemptViolations: string[] = [];
  const byDelivery = new Map<string, Run[]>();
  for (const run of runs) {
    const list = byDelivery.get(run.deliveryId) ?? [];
    list.push(run);
    byDelivery.set(run.deliveryId, list);
  }
  let victimRuns = 0;
  let inFlightAtKill = 0;
  let claimedNotStarted = 0;
  let plainFinishedNotCompleted = 0;
  let reruns = 0;
  const rerunAttempts: Record<string, number> = {};
  const rerunStarts: number[] = [];
  for (const list of byDelivery.values()) {
    list.sort((a, b) => a.startedAt - b.startedAt || a.id - b.id);
    const victim = list.filter((r) => r.pid === victimPid);
    const others = list.filter((r) => r.pid !== victimPid);
    victimRuns += victim.length;
    if (victim.length > 1) attemptViolations.push(`the victim ran ${list[0]!.deliveryId} ${victim.length} times`);
    if (others.length > 1)
      attemptViolations.push(`survivors ran ${describe(others[1]!)} again after ${describe(others[0]!)}`);
    const first = list[0]!;
    if (victim.length === 0) {
      // Never started by the victim: attempt 1, or attempt 2 when the victim had claimed it but died before the handler's first statement.
      if (first.attempt === 2) {
        claimedNotStarted += 1;
        reruns += 1;
        rerunAttempts['2'] = (rerunAttempts['2'] ?? 0) + 1;
        rerunStarts.push(first.startedAt);
        if (first.startedAt < deadAt) attemptViolations.push(`attempt 2 before the kill: ${describe(first)}`);
      } else if (first.attempt !== 1) {
        attemptViolations.push(`unexpected attempt: ${describe(first)}`);
      }
      continue;
    }
    const victimRun = victim[0]!;
    if (victimRun.attempt !== 1) attemptViolations.push(`the victim's run is not attempt 1: ${describe(victimRun)}`);
    const rerun = others[0];
    if (victimRun.finishedAt === null) {
      inFlightAtKill += 1;
      if (rerun === undefined) attemptViolations.push(`never re-run after the kill: ${describe(victimRun)}`);
    } else if (victimRun.handler === 'tx' && rerun !== undefined) {
      attemptViolations.push(
        `a transactional run whose finish committed (with its completion) ran again: ${describe(victimRun)} then ${describe(rerun)}`,
      );
    } else if (rerun !== undefined) {
      plainFinishedNotCompleted += 1;
    }
    if (rerun !== undefined) {
      reruns += 1;
      rerunAttempts[String(rerun.attempt)] = (rerunAttempts[String(rerun.attempt)] ?? 0) + 1;
      rerunStarts.push(rerun.startedAt);
      if (rerun.attempt !== victimRun.attempt + 1)
        attemptViolations.push(
          `re-run not charged exactly one attempt: ${describe(victimRun)} then ${describe(rerun)}`,
        );
      if (rerun.startedAt < deadAt) attemptViolations.push(`re-run started before the victim died: ${describe(rerun)}`);
    }
  }
  for (const run of runs) {
    if (run.pid !== victimPid && run.finishedAt === null)
      attemptViolations.push(`a survivor's run never finished: ${describe(run)}`);
  }
  return {
    missing,
    orderViolations,
    attemptViolations,
    victimRuns,
    inFlightAtKill,
    claimedNotStarted,
    plainFinishedNotCompleted,
    reruns,
    rerunAttempts,
    takeoverMs: rerunStarts.length === 0 ? undefined : Math.min(...rerunStarts) - killAt,
    lastRerunMs: rerunStarts.length === 0 ? undefined : Math.max(...rerunStarts) - killAt,
  };
}
