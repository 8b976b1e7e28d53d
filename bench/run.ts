/**
 * The interleaved benchmark orchestrator.
 *
 *   npm run bench:quick                      # about 17 minutes on 2 cores: every scenario, 3 repetitions (mixed, liveness 6)
 *   npm run bench:full                       # 50k and 200k dispatch, the peers' settings sweep, 5 repetitions
 *   node --import tsx bench/run.ts --scenarios dispatch --contenders relaybus,graphile-worker --deliveries 6000 --reps 1
 *
 * For each repetition, for each scenario cell, every entry (contender variant, keyed or not) runs
 * once, in a fixed order (A B C A B C ...), so slow drifts of a shared machine hit every contender
 * alike. Each run gets a fresh schema in a database of the harness's own (dropped at the end), its
 * own publisher and dispatcher processes, and an exactness check; INVALID runs are kept in the JSON
 * but never enter the medians. relaybus runs from dist/, built first when src/ is newer
 * (lib/build.ts). Results: bench/results/<name>.json, .md and .svg (see report.ts).
 */
import { mkdirSync, readFileSync } from 'node:fs';
import { cpus, loadavg, totalmem } from 'node:os';
import { type ParseArgsConfig, parseArgs } from 'node:util';
import { ensureBuild } from './lib/build.js';
import { CONTENDER_NAMES, loadContender } from './contenders/index.js';
import { settingsOf, type Contender } from './lib/types.js';
import { connect, createBenchDatabase, dropBenchDatabase, tryExtension } from './lib/db.js';
import { writeReport, type BenchResults } from './report.js';
import type { Entry, RunContext, RunRecord } from './scenarios/common.js';
import { dispatchCellName, runDispatch, type DispatchCell } from './scenarios/dispatch.js';
import {
  LIVENESS_ARMS,
  livenessCellName,
  runLiveness,
  type LivenessArm,
  type LivenessCell,
} from './scenarios/liveness.js';
import { mixedCellName, runMixed, type MixedCell } from './scenarios/mixed.js';
import { publishCellName, runPublish, type PublishCell } from './scenarios/publish.js';

interface Plan {
  readonly reps: number;
  readonly publish: readonly PublishCell[];
  readonly publishEntries: readonly Entry[];
  /** Each dispatch cell with its entries; `sweepEntries` run only in the first `sweepReps` repetitions. */
  readonly dispatch: readonly (DispatchCell & {
    readonly entries: readonly Entry[];
    readonly sweepEntries?: readonly Entry[];
  })[];
  readonly sweepReps: number;
  readonly mixed: readonly MixedCell[];
  readonly mixedEntries: readonly Entry[];
  /**
   * Repetitions of the mixed and liveness cells, at least `reps` (the later ones run those cells alone): their verdicts
   * sit near their thresholds, and one build's runs spread widely on a shared 2-core machine (the liveness ratio
   * 0.65-1.27 over 24 repetitions, the mixed p99 8-25 ms), so three medians flipped between runs of the same code.
   */
  readonly thresholdReps: number;
  readonly liveness: readonly LivenessCell[];
  readonly livenessEntries: readonly Entry[];
  readonly livenessArms: readonly LivenessArm[];
  readonly timeoutMs: number;
  /** A liveness run that has not drained by then is INVALID (a stalled lane would otherwise hold the run for timeoutMs). */
  readonly livenessTimeoutMs: number;
}

const e = (contender: string, variant: string, keyed: boolean): Entry => ({ contender, variant, keyed });

/** The 1-process dispatch cell: relaybus keyed and unkeyed, the peers at their best (graphile-worker also ordered), the floor. */
const TUNED: Entry[] = [
  e('relaybus', 'tuned', true),
  e('relaybus', 'tuned', false),
  e('row-lease', 'tuned', true),
  e('pg-boss', 'best', false),
  e('graphile-worker', 'best', false),
  e('raw-sql', 'floor', false),
];
const DEFAULTS: Entry[] = [
  e('relaybus', 'defaults', true),
  e('row-lease', 'defaults', true),
  e('graphile-worker', 'defaults', false),
];
/**
 * What ordering costs, side by side in one cell: relaybus keyed and unkeyed, graphile-worker with a
 * named queue per (key, handler) and at its best unkeyed. graphile-worker's named queues run a few
 * hundred jobs/s here, so quick runs them on a small cell.
 */
const ORDERING: Entry[] = [
  e('relaybus', 'tuned', true),
  e('relaybus', 'tuned', false),
  e('graphile-worker', 'queues', true),
  e('graphile-worker', 'best', false),
];
const MIXED: Entry[] = [
  e('relaybus', 'defaults', true),
  e('relaybus', 'tuned', true),
  e('relaybus', 'tuned', false),
  e('row-lease', 'tuned', true),
  e('pg-boss', 'best', false),
  e('pg-boss', 'notify', false),
  e('graphile-worker', 'best', false),
  e('raw-sql', 'floor', false),
];
/**
 * Publish: every contender's ordinary path, and relaybus's other publish paths keyed next to its
 * default (contenders/relaybus.ts PUBLISH_VARIANTS): with an id per event (an events row each), without
 * NOTIFY, fanned out from the stored subscriptions (no handler in the publishing process), and the SQL
 * function relaybus_publish.
 */
const PUBLISH: Entry[] = [
  e('relaybus', 'default', true),
  e('relaybus', 'default', false),
  e('relaybus', 'ids', true),
  e('relaybus', 'no-notify', true),
  e('relaybus', 'keep-events', true),
  e('relaybus', 'subscriptions', true),
  e('relaybus', 'sql', true),
  e('row-lease', 'default', true),
  e('pg-boss', 'default', false),
  e('graphile-worker', 'default', false),
  e('raw-sql', 'default', false),
  e('raw-fanout', 'default', true),
  e('raw-fanout', 'default', false),
];
const RELAYBUS_TUNED: Entry[] = [e('relaybus', 'tuned', true)];
/**
 * bench:full only: the peers' previous majors (npm aliases pg-boss10 and graphile-worker17, the last releases that ran on
 * Node 20) at their best beside the current ones, so one run on one Node shows what each upgrade changed.
 */
const PREVIOUS_MAJORS: Entry[] = [e('pg-boss-10', 'best', false), e('graphile-worker-0.17', 'best', false)];
const PREVIOUS_MAJORS_PUBLISH: Entry[] = [
  e('pg-boss-10', 'default', false),
  e('graphile-worker-0.17', 'default', false),
];
/**
 * The 1, 2 and 4 process cells: relaybus tuned and graphile-worker at its best, so the cost of more processes on the
 * same cores shows beside a peer's (on 2 cores graphile-worker's 4 against 2 processes read 0.88-1.10x in three runs,
 * relaybus's 0.76-0.91x: bench/README.md, "Diagnosis").
 */
const PROCESSES: Entry[] = [e('relaybus', 'tuned', true), e('graphile-worker', 'best', false)];
/**
 * Liveness at tuned, at c200 (200 slots, batch 200) and at tuned without followers: a retried head waits for the claim
 * in progress and for the batch it returns, which take longer at 500 a claim and longer still with followers, so the
 * retry lag shows beside the throughput setting.
 */
const LIVENESS: Entry[] = [
  e('relaybus', 'tuned', true),
  e('relaybus', 'c200', true),
  e('relaybus', 'no-followers', true),
];
/**
 * relaybus tuned (two claim loops, followers) next to its variants in one process: its earlier setting (c200: 200 slots,
 * batch 200), no-followers (each keyed head brings none of its key's next deliveries), one claim loop (the library's
 * default), and tracing on (the OpenTelemetry SDK recording a span per delivery into a no-op exporter).
 */
const TUNED_VARIANTS: Entry[] = [
  e('relaybus', 'tuned', true),
  e('relaybus', 'no-followers', true),
  e('relaybus', 'c200', true),
  e('relaybus', 'loops1', true),
  e('relaybus', 'traced', true),
];

const PLANS: Record<'quick' | 'full', Plan> = {
  quick: {
    reps: 3,
    publish: [
      { publishers: 1, batch: 1, windowMs: 1_500 },
      // Four concurrent single-event publishers: what NOTIFY costs when commits contend (it serialises them on a lock).
      { publishers: 4, batch: 1, windowMs: 1_500 },
      { publishers: 4, batch: 100, windowMs: 1_500 },
    ],
    publishEntries: PUBLISH,
    dispatch: [
      { deliveries: 50_000, dispatchers: 1, eventsPerKey: 10, entries: TUNED },
      { deliveries: 40_000, dispatchers: 1, eventsPerKey: 10, entries: TUNED_VARIANTS },
      // 1, 2 and 4 processes at 200k: 50k each at 4. At 50k (12.5k each) a process spent much of its run on code not yet
      // compiled (CPU per delivery 30 us at 4 processes against 18 at 1; 18.5 against 16.8 at 200k), which no
      // long-running worker pays. Even at 50k each, one process draining 50k alone pays the CPU per delivery of each of
      // the four (19.0 / 29.8 us against 20.0 / 33.3, dispatcher / server): 100k and 50k with one process are the
      // processes' shares, each process's start-up weighing the same (the report's "one process on a share").
      { deliveries: 100_000, dispatchers: 1, eventsPerKey: 10, entries: RELAYBUS_TUNED },
      { deliveries: 200_000, dispatchers: 1, eventsPerKey: 10, entries: PROCESSES },
      { deliveries: 200_000, dispatchers: 2, eventsPerKey: 10, entries: PROCESSES },
      { deliveries: 200_000, dispatchers: 4, eventsPerKey: 10, entries: PROCESSES },
      { deliveries: 4_000, dispatchers: 1, eventsPerKey: 10, entries: DEFAULTS },
      { deliveries: 2_000, dispatchers: 1, eventsPerKey: 10, entries: ORDERING },
    ],
    sweepReps: 0,
    thresholdReps: 6,
    mixed: [{ ratePerSec: 500, windowMs: 3_000, warmupMs: 2_000, publishers: 2, dispatchers: 1 }],
    mixedEntries: MIXED.filter((entry) => entry.contender !== 'relaybus' || entry.keyed),
    liveness: [
      { failingKeys: 5, eventsPerFailingKey: 300, healthyKeys: 1_000, eventsPerHealthyKey: 10, backoffMs: 500 },
    ],
    livenessEntries: LIVENESS,
    livenessArms: ['failing heads', 'healthy keys only'],
    timeoutMs: 120_000,
    livenessTimeoutMs: 15_000,
  },
  full: {
    reps: 5,
    publish: [
      { publishers: 1, batch: 1, windowMs: 5_000 },
      { publishers: 1, batch: 100, windowMs: 5_000 },
      { publishers: 8, batch: 1, windowMs: 5_000 },
      { publishers: 8, batch: 100, windowMs: 5_000 },
    ],
    publishEntries: [...PUBLISH, e('graphile-worker', 'default', true), ...PREVIOUS_MAJORS_PUBLISH],
    dispatch: [
      {
        deliveries: 50_000,
        dispatchers: 1,
        eventsPerKey: 10,
        entries: [...TUNED, ...PREVIOUS_MAJORS],
        sweepEntries: [],
      },
      { deliveries: 6_000, dispatchers: 1, eventsPerKey: 10, entries: ORDERING },
      { deliveries: 100_000, dispatchers: 1, eventsPerKey: 10, entries: RELAYBUS_TUNED },
      { deliveries: 200_000, dispatchers: 1, eventsPerKey: 10, entries: [...TUNED, ...PREVIOUS_MAJORS] },
      { deliveries: 200_000, dispatchers: 2, eventsPerKey: 10, entries: PROCESSES },
      { deliveries: 200_000, dispatchers: 4, eventsPerKey: 10, entries: TUNED },
      { deliveries: 50_000, dispatchers: 1, eventsPerKey: 10, entries: DEFAULTS },
      { deliveries: 50_000, dispatchers: 4, eventsPerKey: 10, entries: DEFAULTS },
    ],
    sweepReps: 3,
    thresholdReps: 5,
    mixed: [
      { ratePerSec: 500, windowMs: 20_000, warmupMs: 2_000, publishers: 2, dispatchers: 1 },
      { ratePerSec: 1_000, windowMs: 20_000, warmupMs: 2_000, publishers: 2, dispatchers: 1 },
      { ratePerSec: 5_000, windowMs: 20_000, warmupMs: 2_000, publishers: 4, dispatchers: 2 },
    ],
    mixedEntries: MIXED,
    liveness: [
      { failingKeys: 5, eventsPerFailingKey: 2_000, healthyKeys: 1_000, eventsPerHealthyKey: 10, backoffMs: 500 },
    ],
    livenessEntries: LIVENESS,
    livenessArms: LIVENESS_ARMS,
    timeoutMs: 600_000,
    livenessTimeoutMs: 180_000,
  },
};

const { values: args } = parseArgsOrExit({
  options: {
    mode: { type: 'string', default: 'quick' },
    reps: { type: 'string' },
    scenarios: { type: 'string', default: 'publish,dispatch,mixed,liveness' },
    contenders: { type: 'string' },
    deliveries: { type: 'string' },
    dispatchers: { type: 'string', default: '1' },
    variants: { type: 'string' },
    keyed: { type: 'string', default: 'natural' },
    sweep: { type: 'boolean', default: false },
    handler: { type: 'string' }, // ad hoc: dispatch noop (default) | yield; liveness yield (default) | noop
    arms: { type: 'string' }, // liveness arms, comma-separated (ad hoc)
    out: { type: 'string' },
    'no-build': { type: 'boolean', default: false },
    plan: { type: 'boolean', default: false }, // print the plan's cells and entries, run nothing
    help: { type: 'boolean', short: 'h', default: false },
  },
});

/** parseArgs, with a one-line error and the hint to --help instead of a stack trace on a bad option. */
function parseArgsOrExit<T extends ParseArgsConfig>(config: T): ReturnType<typeof parseArgs<T>> {
  try {
    return parseArgs(config);
  } catch (error) {
    console.error(`bench: ${(error as Error).message} (see --help)`);
    process.exit(2);
  }
}

if (args.help) {
  console.log(`usage: node --import tsx bench/run.ts [options]   (bench/README.md explains every cell and rule)
  --mode quick|full          the plan to run (default quick; npm run bench:quick also rewrites the README section)
  --reps <n>                 repetitions of every cell, interleaved
  --scenarios <list>         publish,dispatch,mixed,liveness (default: all four)
  --contenders <list>        ${CONTENDER_NAMES.join(', ')}
  --variants <list>          narrow the chosen contenders' variants (and publish variants)
  --deliveries <n>           ad hoc: one dispatch cell of n deliveries instead of the plan's
  --dispatchers <list>       ad hoc: dispatcher process counts, e.g. 1,2,4 (default 1)
  --keyed natural|both|yes|no  keyed or unkeyed workloads in ad hoc runs (default natural)
  --sweep                    ad hoc: add the peers' sweep points
  --handler noop|yield       ad hoc handler (dispatch default noop; liveness default yield)
  --arms <list>              liveness arms, comma-separated
  --out <name|path>          results file names (default results/<mode> or results/adhoc)
  --no-build                 refuse a stale dist/ instead of building
  --plan                     print the cells and entries, run nothing
environment: BENCH_DATABASE, BENCH_KEEP_SCHEMA=1, BENCH_DEBUG=1, BENCH_CPU_PROF=<dir>, BENCH_DISPATCHER_FLAGS,
  BENCH_PERF=<path>, BENCH_TIMELINE=1, BENCH_HEAP_SAMPLE=<dir>, BENCH_LATENCY_DUMP=<prefix>
  (bench/README.md, "Diagnosis")`);
  process.exit(0);
}

const mode = args.mode === 'full' ? 'full' : 'quick';
const base = PLANS[mode];
const only = args.contenders ? new Set(args.contenders.split(',')) : undefined;
const loaded = new Map<string, Contender>();
const started = Date.now();
const log = (line: string) => console.log(`[bench ${((Date.now() - started) / 1000).toFixed(0).padStart(4)}s] ${line}`);
// Build before loading the relaybus contender (it imports dist/); only the chosen contenders are loaded.
const build =
  (!only || only.has('relaybus')) && !args.plan
    ? ensureBuild(log, { skip: args['no-build'] })
    : { built: false, commit: 'n/a (relaybus not run)', uncommitted: [] };
// relaybus-base (another build, RELAYBUS_BASE_DIST) runs only when named.
for (const name of CONTENDER_NAMES)
  if (only ? only.has(name) : name !== 'relaybus-base') loaded.set(name, await loadContender(name));
const contender = (name: string): Contender => {
  const found = loaded.get(name);
  if (!found) throw new Error(`unknown contender ${name}; known: ${CONTENDER_NAMES.join(', ')}`);
  return found;
};
for (const name of only ?? [])
  if (!CONTENDER_NAMES.includes(name))
    throw new Error(`unknown contender ${name}; known: ${CONTENDER_NAMES.join(', ')}`);
const onlyVariants = args.variants ? new Set(args.variants.split(',')) : undefined;
const keep = (entry: Entry) =>
  (!only || only.has(entry.contender)) && (!onlyVariants || onlyVariants.has(entry.variant));

/** Ad hoc entries: every variant (and, with --sweep or by name, sweep point) of the chosen contenders, keyed per --keyed. */
function adhocEntries(): Entry[] {
  const out: Entry[] = [];
  for (const c of loaded.values()) {
    const names = [...Object.keys(c.variants), ...(args.sweep || onlyVariants ? Object.keys(c.sweep ?? {}) : [])]
      // pg-boss's defaults handle 0.5 jobs/s per queue (bench/README.md): never in a drain.
      .filter((v) => c.name !== 'pg-boss' || v !== 'defaults')
      .filter((v) => !c.namedOnly?.includes(v) || onlyVariants?.has(v));
    for (const variant of names) {
      const natural = c.keyedVariants.includes(variant);
      const modes =
        args.keyed === 'both'
          ? [true, false]
          : args.keyed === 'yes'
            ? [true]
            : args.keyed === 'no'
              ? [false]
              : [natural];
      for (const keyed of modes) if (!keyed || c.keyed) out.push(e(c.name, variant, keyed));
    }
  }
  return out;
}

const dispatchCells = args.deliveries
  ? args.deliveries.split(',').flatMap((n) =>
      args.dispatchers!.split(',').map((d) => ({
        deliveries: Number(n),
        dispatchers: Number(d),
        eventsPerKey: 10,
        entries: adhocEntries(),
        ...(args.handler === 'yield' ? { handler: 'yield' as const } : {}),
      })),
    )
  : base.dispatch;
/** With relaybus-base named, each relaybus entry of the mixed and liveness cells gets its twin over the base build. */
const withBase = (entries: readonly Entry[]): Entry[] =>
  entries.flatMap((entry) =>
    entry.contender === 'relaybus' && loaded.has('relaybus-base')
      ? [entry, { ...entry, contender: 'relaybus-base' }]
      : [entry],
  );
const plan: Plan = {
  ...base,
  reps: args.reps ? Number(args.reps) : base.reps,
  thresholdReps: args.reps ? Number(args.reps) : Math.max(base.reps, base.thresholdReps),
  dispatch: dispatchCells.map((cell) => ({
    ...cell,
    entries: cell.entries.filter(keep),
    // The sweep: every sweep point of every contender that has one, unkeyed (the peers' best is unordered).
    ...('sweepEntries' in cell && cell.sweepEntries
      ? {
          sweepEntries: [...loaded.values()]
            .flatMap((c) => Object.keys(c.sweep ?? {}).map((v) => e(c.name, v, false)))
            .filter(keep),
        }
      : {}),
  })),
  // --variants narrows the publish entries too when it names a publish variant (default, no-notify, subscriptions, sql).
  publishEntries: base.publishEntries.filter(
    (entry) =>
      (!only || only.has(entry.contender)) &&
      (!onlyVariants ||
        !base.publishEntries.some((p) => onlyVariants.has(p.variant)) ||
        onlyVariants.has(entry.variant)),
  ),
  mixedEntries: withBase(base.mixedEntries).filter(keep),
  livenessEntries: withBase(base.livenessEntries).filter(keep),
  liveness: base.liveness.map((cell) => (args.handler === 'noop' ? { ...cell, handler: 'noop' as const } : cell)),
};
const scenarios = new Set(args.scenarios!.split(','));
const outName =
  args.out ??
  (mode === 'quick' && !args.deliveries && !args.contenders && !args.reps && !args.variants && scenarios.size === 4
    ? 'quick'
    : mode === 'full' && !args.deliveries
      ? 'full'
      : 'adhoc');

const entryLabel = (entry: { contender: string; variant: string; keyed?: boolean }) =>
  `${entry.contender}/${entry.variant}${entry.keyed === undefined ? '' : entry.keyed ? ' keyed' : ' unkeyed'}`;

if (args.plan) {
  const list = (entries: readonly Entry[]) => entries.map(entryLabel).join(', ');
  console.log(
    `mode ${mode}, ${plan.reps} repetitions (sweep entries in the first ${plan.sweepReps}; mixed and liveness ${plan.thresholdReps}), scenarios ${[...scenarios].join(', ')}, out ${outName}`,
  );
  for (const cell of scenarios.has('publish') ? plan.publish : [])
    console.log(`${publishCellName(cell)}: ${list(plan.publishEntries)}`);
  for (const cell of scenarios.has('dispatch') ? plan.dispatch : [])
    console.log(
      `${dispatchCellName(cell)}: ${list(cell.entries)}${cell.sweepEntries?.length ? `; sweep: ${list(cell.sweepEntries)}` : ''}`,
    );
  for (const cell of scenarios.has('mixed') ? plan.mixed : [])
    console.log(`${mixedCellName(cell)}: ${list(plan.mixedEntries)}`);
  for (const cell of scenarios.has('liveness') ? plan.liveness : [])
    console.log(`${livenessCellName(cell)} [${plan.livenessArms.join(' | ')}]: ${list(plan.livenessEntries)}`);
  process.exit(0);
}

const { url, created } = await createBenchDatabase();
const admin = await connect(url);
const walinspect = await tryExtension(admin, 'pg_walinspect');
const {
  rows: [server],
} = await admin.query<{ version: string; autovacuum: string; sync: string; sb: string }>(
  `SELECT version(), current_setting('autovacuum') AS autovacuum, current_setting('synchronous_commit') AS sync, current_setting('shared_buffers') AS sb`,
);
const {
  rows: [pss],
} = await admin.query<{ preloaded: boolean }>(
  `SELECT current_setting('shared_preload_libraries') LIKE '%pg_stat_statements%' AS preloaded`,
);
const context: RunContext = { url, admin, walinspect, timeoutMs: plan.timeoutMs, log };
// A mixed run's backlog is small: a drain that has not ended 15 s after the window is stuck.
const mixedContext = (cell: MixedCell): RunContext => ({
  ...context,
  timeoutMs: Math.min(plan.timeoutMs, cell.warmupMs + cell.windowMs + 15_000),
});
const runs: RunRecord[] = [];

function describe(record: RunRecord): string {
  const status = record.valid ? 'VALID' : `INVALID (${record.exactness.reasons.join(', ') || record.error})`;
  const wal = record.db
    ? ` wal/unit ${record.db.walPerUnit.toFixed(0)}${record.db.ownWalPerUnit !== null ? ` (own ${record.db.ownWalPerUnit.toFixed(0)})` : ''} upd/unit ${record.db.updatesPerUnit.toFixed(2)} stmts/unit ${record.db.statementsPerUnit.toFixed(3)}`
    : '';
  const warned = record.warnings?.count ? ` warnings ${record.warnings.count}` : '';
  const extra =
    record.scenario === 'liveness' && record.tag === 'failing heads'
      ? ` retry lag from due p50 ${Number(record.figures.retryDueLagP50Ms).toFixed(0)} max ${Number(record.figures.retryDueLagMaxMs).toFixed(0)} ms (from throw + backoff p50 ${Number(record.figures.retryLagP50Ms).toFixed(0)} max ${Number(record.figures.retryLagMaxMs).toFixed(0)}), all ${Number(record.figures.allDeliveriesPerSec).toFixed(0)}/s`
      : '';
  return `${record.cell}${record.tag ? ` [${record.tag}]` : ''} ${entryLabel(record)} rep ${record.rep}: ${record.rate.toFixed(0)}/s${extra} ${status}${wal}${warned}`;
}

async function attempt(
  label: string,
  body: () => Promise<RunRecord>,
  fallback: Omit<RunRecord, 'valid' | 'exactness' | 'rate' | 'figures' | 'db'>,
): Promise<void> {
  try {
    const record = await body();
    runs.push(record);
    log(describe(record));
  } catch (error) {
    const message = (error as Error).stack ?? String(error);
    log(`${label} FAILED: ${message}`);
    runs.push({
      ...fallback,
      valid: false,
      rate: NaN,
      figures: {},
      db: null,
      error: message,
      exactness: {
        valid: false,
        expected: 0,
        handled: 0,
        lost: 0,
        unexpected: 0,
        duplicates: 0,
        orderViolations: null,
        pending: 0,
        dead: 0,
        reasons: ['run failed'],
      },
    });
  }
}

const settings = (entry: Entry) => {
  const found = settingsOf(contender(entry.contender), entry.variant);
  if (!found) throw new Error(`${entry.contender} has no variant ${entry.variant}`);
  return found;
};

try {
  log(
    `mode ${mode}, ${plan.reps} repetitions (mixed and liveness ${plan.thresholdReps}), database ${new URL(url).pathname.slice(1)}${created ? ' (created)' : ''}, pg_walinspect ${walinspect ? 'on' : 'off'}, relaybus from dist/ (commit ${build.commit}${build.uncommitted.length ? `, ${build.uncommitted.length} uncommitted file(s) in src/schema/sql` : ''}${build.built ? ', rebuilt' : ''})`,
  );
  for (let rep = 1; rep <= plan.thresholdReps; rep += 1) {
    // Past `reps`, only the mixed and liveness cells run (`Plan.thresholdReps`).
    const allCells = rep <= plan.reps;
    if (allCells && scenarios.has('publish')) {
      for (const cell of plan.publish) {
        for (const entry of plan.publishEntries) {
          await attempt(
            `publish ${entryLabel(entry)}`,
            () => runPublish(context, contender(entry.contender), entry, cell, rep),
            {
              scenario: 'publish',
              cell: publishCellName(cell),
              contender: entry.contender,
              variant: entry.variant,
              keyed: entry.keyed,
              rep,
            },
          );
        }
      }
    }
    if (allCells && scenarios.has('dispatch')) {
      for (const cell of plan.dispatch) {
        const entries = [...cell.entries, ...(rep <= plan.sweepReps ? (cell.sweepEntries ?? []) : [])];
        for (const entry of entries) {
          await attempt(
            `dispatch ${entryLabel(entry)}`,
            () => runDispatch(context, contender(entry.contender), entry, settings(entry), cell, rep),
            {
              scenario: 'dispatch',
              cell: dispatchCellName(cell),
              contender: entry.contender,
              variant: entry.variant,
              keyed: entry.keyed,
              rep,
            },
          );
        }
      }
    }
    if (scenarios.has('mixed')) {
      for (const cell of plan.mixed) {
        for (const entry of plan.mixedEntries) {
          await attempt(
            `mixed ${entryLabel(entry)}`,
            () => runMixed(mixedContext(cell), contender(entry.contender), entry, settings(entry), cell, rep),
            {
              scenario: 'mixed',
              cell: mixedCellName(cell),
              contender: entry.contender,
              variant: entry.variant,
              keyed: entry.keyed,
              rep,
            },
          );
        }
      }
    }
    if (scenarios.has('liveness')) {
      for (const cell of plan.liveness) {
        for (const entry of plan.livenessEntries) {
          for (const arm of args.arms
            ? LIVENESS_ARMS.filter((a) => args.arms!.split(',').includes(a))
            : plan.livenessArms) {
            await attempt(
              `liveness ${entryLabel(entry)} ${arm}`,
              () =>
                runLiveness(
                  { ...context, timeoutMs: plan.livenessTimeoutMs },
                  contender(entry.contender),
                  entry,
                  settings(entry),
                  cell,
                  arm,
                  rep,
                ),
              {
                scenario: 'liveness',
                cell: livenessCellName(cell),
                contender: entry.contender,
                variant: entry.variant,
                keyed: true,
                tag: arm,
                rep,
              },
            );
          }
        }
      }
    }
  }
} finally {
  await admin.end();
  if (created && !process.env.BENCH_KEEP_SCHEMA) await dropBenchDatabase(url);
}

/** The installed versions of the peers (and the npm aliases of their previous majors), as the results name them. */
function peerVersions(): Record<string, string> {
  const out: Record<string, string> = {};
  for (const [name, dir] of [
    ['pg-boss', 'pg-boss'],
    ['graphile-worker', 'graphile-worker'],
    ['pg-boss-10', 'pg-boss10'],
    ['graphile-worker-0.17', 'graphile-worker17'],
  ]) {
    try {
      out[name!] = JSON.parse(
        readFileSync(new URL(`../node_modules/${dir}/package.json`, import.meta.url), 'utf8'),
      ).version;
    } catch {
      // not installed: left out
    }
  }
  return out;
}

const results: BenchResults = {
  name: outName,
  mode,
  startedAt: new Date(started).toISOString(),
  durationSeconds: (Date.now() - started) / 1000,
  machine: {
    cpus: cpus().length,
    cpuModel: cpus()[0]?.model ?? 'unknown',
    memoryGiB: Math.round(totalmem() / 2 ** 30),
    node: process.version,
    loadAverageAtEnd: loadavg().map((v) => Number(v.toFixed(2))),
    postgres: server!.version,
    autovacuum: server!.autovacuum,
    synchronousCommit: server!.sync,
    sharedBuffers: server!.sb,
    walinspect,
    pgStatStatements: pss!.preloaded ? 'preloaded' : 'not in shared_preload_libraries: statements counted client-side',
    peers: peerVersions(),
  },
  build,
  plan: { ...plan, scenarios: [...scenarios] },
  contenders: Object.fromEntries(
    [...loaded.values()].map((c) => [c.name, { ordersKeys: c.ordersKeys, variants: c.variants, sweep: c.sweep ?? {} }]),
  ),
  runs,
};
mkdirSync(new URL('./results/', import.meta.url), { recursive: true });
const files = writeReport(results, new URL('./results/', import.meta.url));
log(`done in ${results.durationSeconds.toFixed(0)} s: ${files.join(', ')}`);
const invalid = runs.filter((r) => !r.valid).length;
if (invalid) log(`${invalid} of ${runs.length} runs INVALID (kept in the JSON, left out of the tables)`);
process.exit(0);
