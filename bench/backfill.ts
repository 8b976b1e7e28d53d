/**
 * The backfill cell: what a replay (`store.startReplay({ mode: 'backfill' })` driven by `runReplay`) of a new handler
 * over the retained history costs, and what it does to live traffic. Three cells, interleaved round by round (the
 * machine is shared and noisy: read the ratios of one round):
 *
 * - `dispatch`: one dispatcher process (relaybus tuned) drains the history's N keyed deliveries of `h1`: the
 *   reference rate;
 * - `mixed`: a publisher process offers --rate keyed events/s (one per transaction, the history's keys) fanning out to
 *   `h1` and `indexer`, both run by one dispatcher process; after a warm-up, --window seconds: commit -> handler
 *   start latency of `h1`'s live deliveries;
 * - `mixed + backfill`: the same, and at the window's start a backfill of `indexer` over the history (in this
 *   process): its rate (history events / time from start to finished) against the dispatch rate, `h1`'s live
 *   latency while it runs against the mixed cell's, and `indexer`'s live latency (it waits for the history by
 *   design).
 *
 * Each cell gets a fresh schema (a keepEvents Postgres store) holding --history keyed events (`{ i }`, key
 * `k<i mod keys>`) published in transactions of 5,000 before `indexer` exists (fanned out to `h1` only); the mixed
 * cells delete those deliveries first, so the tables hold history only, and ANALYZE after the delete (`--stats empty`)
 * or before it (`--stats loaded`). Exactness is checked every round.
 *
 *   node --import tsx bench/backfill.ts [--history 200000] [--rate 1000] [--window 20] [--rounds 3]
 *                                       [--keys 2000] [--warmup 2] [--stats empty|loaded] [--out backfill]
 *                                       [--replay-rate n] [--max-outstanding n] [--live-wait ms|off]
 */
import { randomBytes } from 'node:crypto';
import { mkdirSync, writeFileSync } from 'node:fs';
import { cpus, loadavg, totalmem } from 'node:os';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import pg from 'pg';
import {
  BACKFILL_HANDLERS,
  type BackfillHandler,
  type BackfillPublisherResult,
  type BackfillPublishPlan,
  backfillBus,
  keyOfEvent,
  loadRelaybus,
  TUNED,
} from './lib/backfill-bus.js';
import { backfillTimeline, committedBetween, historyStarts, latency } from './lib/backfill-latency.js';
import { Proc, stopDispatcher } from './lib/backfill-proc.js';
import {
  type BackfillResults,
  backfillMarkdown,
  type DbDelta,
  type DispatchRun,
  type MixedRun,
  type Round,
} from './lib/backfill-report.js';
import { type BackfillVerdict, validateBackfill } from './lib/backfill-validate.js';
import { ensureBuild } from './lib/build.js';
import { connect, createBenchDatabase, dropBenchDatabase, snapshot, type Snapshot, walBytes } from './lib/db.js';
import { type DrivenReplay, driveReplay } from './lib/drive-replay.js';
import { machineNow, wallClockOffset } from './lib/recorder.js';
import { analyzeSchema } from './scenarios/common.js';
import { sleep } from './lib/stats.js';

const { values: args } = parseArgs({
  options: {
    history: { type: 'string', default: '200000' },
    rate: { type: 'string', default: '1000' },
    window: { type: 'string', default: '20' },
    rounds: { type: 'string', default: '3' },
    keys: { type: 'string', default: '2000' },
    warmup: { type: 'string', default: '2' },
    out: { type: 'string', default: 'backfill' },
    stats: { type: 'string', default: 'empty' },
    /** The backfill's throttle (runReplay's `rate`, events/s, and `maxOutstanding`); unset: runReplay's defaults. */
    'replay-rate': { type: 'string' },
    'max-outstanding': { type: 'string' },
    /** runReplay's `liveWaitMs`: the yield's target in ms, or `off`; unset: its default. */
    'live-wait': { type: 'string' },
    'no-build': { type: 'boolean', default: false },
  },
});
const positive = (name: string, value: string | undefined): number => {
  const n = Number(value);
  if (!Number.isInteger(n) || n < 1) throw new Error(`--${name} must be a positive integer, got ${value}`);
  return n;
};
const HISTORY = positive('history', args.history);
const RATE = positive('rate', args.rate);
const WINDOW_MS = positive('window', args.window) * 1000;
const ROUNDS = positive('rounds', args.rounds);
const KEYS = positive('keys', args.keys);
const WARMUP_MS = Number(args.warmup) * 1000;
if (args.stats !== 'empty' && args.stats !== 'loaded')
  throw new Error(`--stats must be empty or loaded, got ${args.stats}`);
/** The mixed cells' deliveries statistics: analyzed empty (after the delete), or loaded (before it). */
const STATS: 'empty' | 'loaded' = args.stats;
/** The backfill's throttle; what is not given is runReplay's default. */
const THROTTLE = {
  ...(args['replay-rate'] === undefined ? {} : { rate: positive('replay-rate', args['replay-rate']) }),
  ...(args['max-outstanding'] === undefined
    ? {}
    : { maxOutstanding: positive('max-outstanding', args['max-outstanding']) }),
  ...(args['live-wait'] === undefined
    ? {}
    : { liveWaitMs: args['live-wait'] === 'off' ? (false as const) : positive('live-wait', args['live-wait']) }),
};
/** The throttle flags given, as the report's command line repeats them. */
const throttleFlags = (): string =>
  (['replay-rate', 'max-outstanding', 'live-wait', 'out'] as const)
    .filter((flag) => args[flag] !== undefined && !(flag === 'out' && args.out === 'backfill'))
    .map((flag) => ` --${flag} ${args[flag]}`)
    .join('');
/** The yield's target as the report states it (the default is runReplay's, read from the build at load). */
const yieldText = (api: { DEFAULT_REPLAY_LIVE_WAIT_MS: number }): string =>
  THROTTLE.liveWaitMs === false
    ? 'no yield'
    : `yielding to live waits over ${THROTTLE.liveWaitMs ?? api.DEFAULT_REPLAY_LIVE_WAIT_MS} ms${THROTTLE.liveWaitMs === undefined ? " (runReplay's default)" : ''}`;
const PUBLISH_BATCH = 5_000;
/** A drain (or a backfill) that has not ended by then is stuck: the run is INVALID. */
const TIMEOUT_MS = Math.max(120_000, HISTORY * 2);

const started = Date.now();
const log = (line: string) =>
  console.log(`[backfill ${((Date.now() - started) / 1000).toFixed(0).padStart(4)}s] ${line}`);
const build = ensureBuild(log, { skip: args['no-build'] });
const { api, pgApi } = await loadRelaybus();

// --- schema with history ---------------------------------------------------------------------------------------------

const { url, created } = await createBenchDatabase('relaybus_bench_backfill');
const admin = await connect(url);

async function remaining(schema: string): Promise<{ pending: number; dead: number }> {
  const {
    rows: [row],
  } = await admin.query<{ pending: string; dead: string }>(
    `SELECT count(*) FILTER (WHERE status = 'pending') AS pending, count(*) FILTER (WHERE status = 'dead') AS dead
     FROM "${schema}".relaybus_deliveries`,
  );
  return { pending: Number(row!.pending), dead: Number(row!.dead) };
}

/**
 * A fresh schema with the history: HISTORY keyed events fanned out to `h1` only (the publishing bus registers `h1`;
 * nobody has subscribed `indexer` yet). `keepDeliveries: false` deletes h1's deliveries (the mixed cells).
 */
async function schemaWithHistory(keepDeliveries: boolean): Promise<string> {
  const schema = `bench_backfill_${randomBytes(3).toString('hex')}`;
  const pool = new pg.Pool({ connectionString: url, max: 2 });
  try {
    const { store, bus, Event } = await backfillBus(pool, schema, ['h1'], () => {});
    await store.setup();
    const t0 = Date.now();
    for (let first = 0; first < HISTORY; first += PUBLISH_BATCH) {
      const items = Array.from({ length: Math.min(PUBLISH_BATCH, HISTORY - first) }, (_, k) => ({
        event: Event,
        payload: { i: first + k },
        options: { key: keyOfEvent(first + k, KEYS) },
      }));
      await store.transaction((tx) => bus.publishMany(tx, items));
    }
    if (keepDeliveries) await analyzeSchema(admin, schema);
    else if (STATS === 'empty') {
      // The state autovacuum leaves a delete-on-complete table in once its work is done: vacuumed, analyzed empty.
      await admin.query(`DELETE FROM "${schema}".relaybus_deliveries`);
      await admin.query(`VACUUM "${schema}".relaybus_deliveries`);
      await analyzeSchema(admin, schema);
    } else {
      // --stats loaded: analyzed while the history's deliveries were there, deleted afterwards (stale statistics).
      await analyzeSchema(admin, schema);
      await admin.query(`DELETE FROM "${schema}".relaybus_deliveries`);
    }
    log(`${schema}: ${HISTORY} events published in ${((Date.now() - t0) / 1000).toFixed(1)} s`);
  } finally {
    await pool.end();
  }
  // As every cell of bench/run.ts: a checkpoint after the load, so no run meets one started by another's WAL.
  await admin.query('CHECKPOINT').catch((error: unknown) => log(`CHECKPOINT failed: ${String(error)}`));
  return schema;
}

async function dropSchema(schema: string): Promise<void> {
  if (process.env.BENCH_KEEP_SCHEMA) log(`kept schema ${schema} (BENCH_KEEP_SCHEMA)`);
  else await admin.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
}

/** Wait until `done()` or the deadline; false on timeout. */
async function until(done: () => boolean | Promise<boolean>, deadline: number, pollMs = 20): Promise<boolean> {
  while (!(await done())) {
    if (Date.now() > deadline) return false;
    await sleep(pollMs);
  }
  return true;
}

async function dbDelta(before: Snapshot, after: Snapshot): Promise<DbDelta> {
  return {
    walBytes: await walBytes(admin, before.lsn, after.lsn),
    serverCpuMs:
      before.serverCpuMs === undefined || after.serverCpuMs === undefined
        ? null
        : after.serverCpuMs - before.serverCpuMs,
  };
}

// --- the cells -------------------------------------------------------------------------------------------------------

async function dispatchCell(): Promise<DispatchRun> {
  const schema = await schemaWithHistory(true);
  const dispatcher = new Proc({ role: 'dispatcher', url, schema, handlers: ['h1'] });
  try {
    await dispatcher.next('ready');
    const before = await snapshot(admin, schema);
    const go = machineNow();
    dispatcher.send({ type: 'go' });
    const deadline = Date.now() + TIMEOUT_MS;
    const handled = await until(() => dispatcher.handled >= HISTORY, deadline, 50);
    await until(async () => (await remaining(schema)).pending === 0, Date.now() + 10_000);
    const out = await stopDispatcher(dispatcher);
    await sleep(300);
    const after = await snapshot(admin, schema);
    const last = out.records.t.reduce((m, t) => Math.max(m, t), go);
    const verdict = validateBackfill({
      kind: 'dispatch',
      history: HISTORY,
      keys: KEYS,
      live: new Int32Array(0),
      heldLive: new Int32Array(0),
      records: out.records,
      remaining: await remaining(schema),
      replay: null,
      extra: [
        ...(handled ? [] : [`timeout after ${TIMEOUT_MS} ms`]),
        ...(out.error ? [`dispatcher: ${out.error}`] : []),
      ],
    });
    const seconds = (last - go) / 1000;
    return {
      rate: out.records.i.length / seconds,
      seconds,
      dispatcherCpuUsPerDelivery: (out.cpuMs * 1000) / Math.max(1, out.records.i.length),
      db: await dbDelta(before, after),
      verdict,
    };
  } finally {
    dispatcher.kill();
    await dropSchema(schema);
  }
}

async function mixedCell(withBackfill: boolean): Promise<MixedRun> {
  const schema = await schemaWithHistory(false);
  const handlers: BackfillHandler[] = [...BACKFILL_HANDLERS];
  const dispatcher = new Proc({ role: 'dispatcher', url, schema, handlers });
  const publisher = new Proc({ role: 'publisher', url, schema, handlers });
  const pool = new pg.Pool({ connectionString: url, max: 4 });
  const store = pgApi.postgresStore({ driver: pgApi.fromPg(pool), schema, keepEvents: true });
  try {
    await Promise.all([dispatcher.next('ready'), publisher.next('ready')]);
    const before = await snapshot(admin, schema);
    // The dispatcher's start records the subscriptions of h1 and indexer (the backfill's types come from them).
    dispatcher.send({ type: 'go' });
    const result = publisher.next<BackfillPublisherResult>('result');
    const plan: BackfillPublishPlan = {
      firstI: HISTORY,
      keys: KEYS,
      ratePerSec: RATE,
      durationMs: WARMUP_MS + WINDOW_MS,
    };
    const goAt = machineNow();
    publisher.send({ type: 'go', plan });
    let replay:
      | Promise<{ startedAt: number; endedAt: number; driven: DrivenReplay } | { startedAt: number; error: string }>
      | undefined;
    // The replay's id and when startReplay returned (live events committed after it must follow their key's history).
    const started: { id?: string; at: number } = { at: Number.POSITIVE_INFINITY };
    const abort = new AbortController();
    if (withBackfill) {
      await sleep(Math.max(0, goAt + WARMUP_MS - machineNow()));
      const startedAt = machineNow();
      replay = (async () => {
        try {
          const view = await store.startReplay({
            mode: 'backfill',
            handlers: ['indexer'],
            requestedBy: 'bench/backfill.ts',
            reason: 'benchmark',
          });
          started.id = view.id;
          started.at = machineNow();
          const driven = await driveReplay(api, store, view.id, THROTTLE, abort.signal);
          return { startedAt, endedAt: machineNow(), driven };
        } catch (error) {
          return { startedAt, error: error instanceof Error ? error.message : String(error) };
        }
      })();
    }
    const pub = await result;
    const deadline = Date.now() + TIMEOUT_MS;
    let replayed = replay
      ? await Promise.race([replay, sleep(Math.max(0, deadline - Date.now())).then(() => undefined)])
      : undefined;
    let stuck: string | undefined;
    if (replay && replayed === undefined) {
      // Where it stands (a step of 0 creates nothing), then stop driving it.
      const id = started.id;
      const where =
        id === undefined ? undefined : await store.replayStep({ replayId: id, limit: 0 }).catch(() => undefined);
      stuck = where
        ? `backfill still ${where.replay.state} after ${TIMEOUT_MS} ms (created ${where.replay.created} of ${where.replay.total}, outstanding ${where.outstanding}${where.waiting ? `, waiting: ${where.waiting}` : ''})`
        : `backfill did not finish within ${TIMEOUT_MS} ms`;
      abort.abort();
      replayed = await replay;
    }
    // A backfill that failed creates no history deliveries: wait for the live ones only.
    const backfilled = replayed !== undefined && 'driven' in replayed && stuck === undefined;
    const expected = pub.commitI.length * 2 + (backfilled ? HISTORY : 0);
    const handled = await until(() => dispatcher.handled >= expected, deadline, 50);
    await until(async () => (await remaining(schema)).pending === 0, Date.now() + 10_000);
    const out = await stopDispatcher(dispatcher);
    await publisher.exited();
    await sleep(300);
    const after = await snapshot(admin, schema);

    const extra = [
      ...(handled ? [] : [`timeout after ${TIMEOUT_MS} ms`]),
      ...(out.error ? [`dispatcher: ${out.error}`] : []),
      ...(pub.error ? [`publisher: ${pub.error}`] : []),
      ...(stuck ? [stuck] : []),
      ...(replayed && 'error' in replayed ? [`backfill: ${replayed.error}`] : []),
    ];
    const driven = replayed && 'driven' in replayed && stuck === undefined ? replayed : undefined;
    const heldLive = pub.commitI.filter((_, k) => pub.commitT[k]! > started.at);
    const verdict = validateBackfill({
      kind: withBackfill ? 'backfill' : 'mixed',
      history: HISTORY,
      keys: KEYS,
      live: pub.commitI,
      heldLive,
      records: out.records,
      remaining: await remaining(schema),
      replay: driven ? driven.driven.view : null,
      extra,
    });

    const commitOf = new Map<number, number>();
    for (let k = 0; k < pub.commitI.length; k += 1) commitOf.set(pub.commitI[k]!, pub.commitT[k]!);
    const windowStart = pub.startedAt + WARMUP_MS;
    const windowEnd = pub.endedAt;
    // With a backfill, h1's figures are those of the live events committed while it ran (within the window).
    const h1From = driven ? Math.max(windowStart, driven.startedAt) : windowStart;
    const h1To = driven ? Math.min(windowEnd, driven.endedAt) : windowEnd;
    const historyStarted = historyStarts(out.records, 1, HISTORY);
    const seconds = driven ? (driven.endedAt - driven.startedAt) / 1000 : Number.NaN;
    if (process.env.BENCH_TIMELINE)
      for (const line of backfillTimeline(out.records, commitOf, HISTORY, h1From, h1To)) log(line);
    // Wall-clock ms, as the claim log (BENCH_CLAIM_LOG) writes them.
    const offset = wallClockOffset();
    if (process.env.BENCH_LIVE_DUMP && driven)
      writeFileSync(
        process.env.BENCH_LIVE_DUMP,
        committedBetween(out.records, 0, commitOf, h1From, h1To)
          .map(([committed, started]) => `${committed + offset} ${started + offset}`)
          .join('\n'),
      );
    return {
      published: pub.commitI.length,
      h1: latency(out.records, 0, commitOf, h1From, h1To),
      indexer: latency(out.records, 1, commitOf, windowStart, windowEnd),
      backfill: driven
        ? {
            seconds,
            rate: HISTORY / seconds,
            rateWhileLive:
              historyStarted.filter((t) => t >= driven.startedAt && t <= windowEnd).length /
              Math.max(0.001, (windowEnd - driven.startedAt) / 1000),
            lastHistoryStartSeconds:
              (historyStarted.reduce((last, t) => Math.max(last, t), Number.NEGATIVE_INFINITY) - driven.startedAt) /
              1000,
            steps: driven.driven.steps,
            waits: driven.driven.waits,
            yielding: driven.driven.yielding,
            view: {
              state: driven.driven.view.state,
              total: driven.driven.view.total,
              created: driven.driven.view.created,
              skipped: driven.driven.view.skipped,
            },
          }
        : null,
      db: await dbDelta(before, after),
      verdict,
    };
  } finally {
    dispatcher.kill();
    publisher.kill();
    await pool.end();
    await dropSchema(schema);
  }
}

// --- rounds ----------------------------------------------------------------------------------------------------------

const {
  rows: [server],
} = await admin.query<{ version: string; autovacuum: string; sync: string; sb: string }>(
  `SELECT version(), current_setting('autovacuum') AS autovacuum, current_setting('synchronous_commit') AS sync, current_setting('shared_buffers') AS sb`,
);
log(
  `history ${HISTORY} events (${KEYS} keys), live ${RATE} ev/s, window ${WINDOW_MS / 1000} s (+${WARMUP_MS / 1000} s warm-up), ${ROUNDS} rounds; database ${new URL(url).pathname.slice(1)}${created ? ' (created)' : ''}; relaybus from dist/ (commit ${build.commit}${build.built ? ', rebuilt' : ''})`,
);
const rounds: Round[] = [];
const verdictText = (v: BackfillVerdict) => (v.valid ? 'VALID' : `INVALID (${v.reasons.join('; ')})`);
try {
  for (let round = 1; round <= ROUNDS; round += 1) {
    const dispatch = await dispatchCell();
    log(`round ${round} dispatch: ${dispatch.rate.toFixed(0)} deliveries/s ${verdictText(dispatch.verdict)}`);
    // The two mixed cells alternate their order, so neither always runs right after the dispatch cell.
    const pair: MixedRun[] = [];
    for (const withBackfill of round % 2 === 1 ? [false, true] : [true, false]) {
      const run = await mixedCell(withBackfill);
      pair[withBackfill ? 1 : 0] = run;
      log(
        `round ${round} ${withBackfill ? 'mixed + backfill' : 'mixed'}: h1 p50/p99 ${run.h1.p50.toFixed(1)}/${run.h1.p99.toFixed(1)} ms (${run.h1.count})${run.backfill ? `, backfill ${run.backfill.rate.toFixed(0)} events/s in ${run.backfill.seconds.toFixed(1)} s (${run.backfill.steps} steps, ${run.backfill.waits} waiting, ${run.backfill.yielding} yielding), indexer live p50/p99 ${run.indexer.p50.toFixed(0)}/${run.indexer.p99.toFixed(0)} ms` : ''} ${verdictText(run.verdict)}`,
      );
    }
    const [mixed, backfill] = pair as [MixedRun, MixedRun];
    rounds.push({
      round,
      dispatch,
      mixed,
      backfill,
      valid: dispatch.verdict.valid && mixed.verdict.valid && backfill.verdict.valid,
      ratios: {
        backfillVsDispatch: (backfill.backfill?.rate ?? Number.NaN) / dispatch.rate,
        h1P50: backfill.h1.p50 / mixed.h1.p50,
        h1P99: backfill.h1.p99 / mixed.h1.p99,
      },
    });
  }
} finally {
  await admin.end();
  if (created && !process.env.BENCH_KEEP_SCHEMA) await dropBenchDatabase(url);
}

// --- report ----------------------------------------------------------------------------------------------------------

const machine = {
  cpus: cpus().length,
  cpuModel: cpus()[0]?.model ?? 'unknown',
  memoryGiB: Math.round(totalmem() / 2 ** 30),
  node: process.version,
  loadAverageAtEnd: loadavg().map((v) => Number(v.toFixed(2))),
  postgres: server!.version,
  autovacuum: server!.autovacuum,
  synchronousCommit: server!.sync,
  sharedBuffers: server!.sb,
};
const durationSeconds = (Date.now() - started) / 1000;
const params = {
  history: HISTORY,
  keys: KEYS,
  ratePerSec: RATE,
  windowMs: WINDOW_MS,
  warmupMs: WARMUP_MS,
  rounds: ROUNDS,
  publishBatch: PUBLISH_BATCH,
  deliveriesStatistics: STATS,
  dispatcher: TUNED,
};
const results: BackfillResults = {
  name: args.out,
  startedAt: new Date(started).toISOString(),
  durationSeconds,
  machine,
  build,
  params,
  rounds,
};

const dir = new URL('./results/', import.meta.url);
mkdirSync(dir, { recursive: true });
const out = (ext: string) =>
  args.out.startsWith('/') ? `${args.out}.${ext}` : fileURLToPath(new URL(`${args.out}.${ext}`, dir));
writeFileSync(out('json'), `${JSON.stringify(results, null, 2)}\n`);
const lines = backfillMarkdown(results, {
  flags: throttleFlags(),
  driving: `${THROTTLE.rate === undefined ? 'no rate limit' : `rate ${THROTTLE.rate.toLocaleString('en-US')} events/s`}, ${THROTTLE.maxOutstanding === undefined ? 'default outstanding cap' : `at most ${THROTTLE.maxOutstanding.toLocaleString('en-US')} outstanding`}, ${yieldText(api)}`,
});
writeFileSync(out('md'), lines.join('\n'));
console.log(lines.join('\n'));
log(`done in ${durationSeconds.toFixed(0)} s: ${out('md')}, ${out('json')}`);
process.exit(rounds.every((r) => r.valid) ? 0 : 1);
