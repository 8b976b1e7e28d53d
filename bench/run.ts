/**
 * The interleaved benchmark orchestrator.
 *
 *   npm run bench:quick                      # ~8 minutes on 2 cores: every scenario, 3 repetitions
 *   npm run bench:full                       # 50k and 200k dispatch, more publishers, 5 repetitions
 *   node --import tsx bench/run.ts --scenarios dispatch --contenders relaybus,raw-sql --deliveries 2000 --reps 1
 *
 * For each repetition, for each scenario cell, every contender variant runs once, in a fixed order
 * (A B C A B C ...), so slow drifts of a shared machine hit every contender alike. Each run gets a
 * fresh schema in a database of the harness's own (dropped at the end), its own publisher and
 * dispatcher processes, and an exactness check; INVALID runs are kept in the JSON but never enter
 * the medians. Results: bench/results/<name>.json, .md and .svg (see report.ts).
 */
import { mkdirSync } from 'node:fs';
import { cpus, loadavg, totalmem } from 'node:os';
import { parseArgs } from 'node:util';
import { CONTENDER_NAMES, loadContender } from './contenders/index.js';
import type { Contender } from './lib/types.js';
import { connect, createBenchDatabase, dropBenchDatabase, tryExtension } from './lib/db.js';
import { writeReport, type BenchResults } from './report.js';
import type { RunContext, RunRecord } from './scenarios/common.js';
import { runDispatch, type DispatchCell } from './scenarios/dispatch.js';
import { runMixed, type MixedCell } from './scenarios/mixed.js';
import { runPublish, type PublishCell } from './scenarios/publish.js';

type Variant = readonly [contender: string, variant: string];

interface Plan {
  readonly reps: number;
  readonly publish: readonly PublishCell[];
  /** Each dispatch cell with the contender variants it runs (slow defaults run on smaller cells). */
  readonly dispatch: readonly (DispatchCell & { readonly variants: readonly Variant[] })[];
  readonly mixed: readonly MixedCell[];
  readonly mixedVariants: readonly Variant[];
  readonly publishContenders: readonly string[];
  readonly timeoutMs: number;
}

const TUNED: Variant[] = [['relaybus', 'tuned'], ['row-lease', 'tuned'], ['pg-boss', 'tuned'], ['graphile-worker', 'tuned'], ['raw-sql', 'floor']];
const DEFAULTS: Variant[] = [['relaybus', 'defaults'], ['row-lease', 'defaults'], ['graphile-worker', 'defaults']];

const PLANS: Record<'quick' | 'full', Plan> = {
  quick: {
    reps: 3,
    publish: [
      { publishers: 1, batch: 1, windowMs: 1_500 },
      { publishers: 4, batch: 100, windowMs: 1_500 },
    ],
    dispatch: [
      { deliveries: 50_000, dispatchers: 1, eventsPerKey: 10, variants: TUNED },
      { deliveries: 6_000, dispatchers: 1, eventsPerKey: 10, variants: DEFAULTS },
    ],
    mixed: [{ ratePerSec: 500, windowMs: 3_000, publishers: 2, dispatchers: 1 }],
    mixedVariants: [['relaybus', 'defaults'], ...TUNED],
    publishContenders: ['relaybus', 'row-lease', 'pg-boss', 'graphile-worker', 'raw-sql'],
    timeoutMs: 120_000,
  },
  full: {
    reps: 5,
    publish: [
      { publishers: 1, batch: 1, windowMs: 5_000 },
      { publishers: 1, batch: 100, windowMs: 5_000 },
      { publishers: 8, batch: 1, windowMs: 5_000 },
      { publishers: 8, batch: 100, windowMs: 5_000 },
    ],
    dispatch: [
      { deliveries: 50_000, dispatchers: 1, eventsPerKey: 10, variants: TUNED },
      { deliveries: 200_000, dispatchers: 1, eventsPerKey: 10, variants: TUNED },
      { deliveries: 200_000, dispatchers: 4, eventsPerKey: 10, variants: TUNED },
      { deliveries: 50_000, dispatchers: 1, eventsPerKey: 10, variants: DEFAULTS },
      { deliveries: 50_000, dispatchers: 4, eventsPerKey: 10, variants: DEFAULTS },
    ],
    mixed: [
      { ratePerSec: 1_000, windowMs: 20_000, publishers: 2, dispatchers: 1 },
      { ratePerSec: 5_000, windowMs: 20_000, publishers: 4, dispatchers: 2 },
    ],
    mixedVariants: [['relaybus', 'defaults'], ...TUNED],
    publishContenders: ['relaybus', 'row-lease', 'pg-boss', 'graphile-worker', 'raw-sql'],
    timeoutMs: 600_000,
  },
};

const { values: args } = parseArgs({
  options: {
    mode: { type: 'string', default: 'quick' },
    reps: { type: 'string' },
    scenarios: { type: 'string', default: 'publish,dispatch,mixed' },
    contenders: { type: 'string' },
    deliveries: { type: 'string' },
    variants: { type: 'string' },
    out: { type: 'string' },
  },
});

const mode = args.mode === 'full' ? 'full' : 'quick';
const base = PLANS[mode];
const only = args.contenders ? new Set(args.contenders.split(',')) : undefined;
const loaded = new Map<string, Contender>();
for (const name of CONTENDER_NAMES) loaded.set(name, await loadContender(name));
const contender = (name: string): Contender => {
  const found = loaded.get(name);
  if (!found) throw new Error(`unknown contender ${name}; known: ${CONTENDER_NAMES.join(', ')}`);
  return found;
};
for (const name of only ?? []) contender(name);
const onlyVariants = args.variants ? new Set(args.variants.split(',')) : undefined;
const keep = ([name, variant]: Variant) => (!only || only.has(name)) && (!onlyVariants || onlyVariants.has(variant));
const dispatchCells = args.deliveries
  ? args.deliveries.split(',').map((n) => ({
      ...base.dispatch[0]!, deliveries: Number(n),
      // ad hoc: every variant of every contender (narrowed by --contenders and --variants)
      variants: [...loaded.values()].flatMap((c) => Object.keys(c.variants).filter((v) => c.name !== 'pg-boss' || v !== 'defaults').map((v) => [c.name, v] as const)),
    }))
  : base.dispatch;
const plan: Plan = {
  ...base,
  reps: args.reps ? Number(args.reps) : base.reps,
  dispatch: dispatchCells.map((cell) => ({ ...cell, variants: cell.variants.filter(keep) })),
  mixedVariants: base.mixedVariants.filter(keep),
  publishContenders: base.publishContenders.filter((name) => !only || only.has(name)),
};
const scenarios = new Set(args.scenarios!.split(','));
const outName = args.out ?? (mode === 'quick' && !args.deliveries && !args.contenders && !args.reps && !args.variants ? 'quick' : mode === 'full' ? 'full' : 'adhoc');

const started = Date.now();
const log = (line: string) => console.log(`[bench ${((Date.now() - started) / 1000).toFixed(0).padStart(4)}s] ${line}`);

const { url, created } = await createBenchDatabase();
const admin = await connect(url);
const walinspect = await tryExtension(admin, 'pg_walinspect');
const { rows: [server] } = await admin.query<{ version: string; autovacuum: string; sync: string; sb: string }>(
  `SELECT version(), current_setting('autovacuum') AS autovacuum, current_setting('synchronous_commit') AS sync, current_setting('shared_buffers') AS sb`);
const { rows: [pss] } = await admin.query<{ preloaded: boolean }>(
  `SELECT current_setting('shared_preload_libraries') LIKE '%pg_stat_statements%' AS preloaded`);
const context: RunContext = { url, admin, walinspect, timeoutMs: plan.timeoutMs, log };
// A mixed run's backlog is small: a drain that has not ended 15 s after the window is stuck.
const mixedContext = (cell: MixedCell): RunContext => ({ ...context, timeoutMs: Math.min(plan.timeoutMs, cell.windowMs + 15_000) });
const runs: RunRecord[] = [];

function describe(record: RunRecord): string {
  const status = record.valid ? 'VALID' : `INVALID (${record.exactness.reasons.join(', ') || record.error})`;
  const wal = record.db ? ` wal/unit ${record.db.walPerUnit.toFixed(0)}${record.db.ownWalPerUnit !== null ? ` (own ${record.db.ownWalPerUnit.toFixed(0)})` : ''} upd/unit ${record.db.updatesPerUnit.toFixed(2)} stmts/unit ${record.db.statementsPerUnit.toFixed(3)}` : '';
  return `${record.cell} ${record.contender}/${record.variant} rep ${record.rep}: ${record.rate.toFixed(0)}/s ${status}${wal}`;
}

async function attempt(label: string, body: () => Promise<RunRecord>, fallback: Omit<RunRecord, 'valid' | 'exactness' | 'rate' | 'figures' | 'db'>): Promise<void> {
  try {
    const record = await body();
    runs.push(record);
    log(describe(record));
  } catch (error) {
    const message = (error as Error).stack ?? String(error);
    log(`${label} FAILED: ${message}`);
    runs.push({
      ...fallback, valid: false, rate: NaN, figures: {}, db: null, error: message,
      exactness: { valid: false, expected: 0, handled: 0, lost: 0, unexpected: 0, duplicates: 0, orderViolations: null, pending: 0, dead: 0, reasons: ['run failed'] },
    });
  }
}

try {
  log(`mode ${mode}, ${plan.reps} repetitions, database ${new URL(url).pathname.slice(1)}${created ? ' (created)' : ''}, pg_walinspect ${walinspect ? 'on' : 'off'}`);
  for (let rep = 1; rep <= plan.reps; rep += 1) {
    if (scenarios.has('publish')) {
      for (const cell of plan.publish) {
        for (const name of plan.publishContenders) {
          await attempt(`publish ${name}`, () => runPublish(context, contender(name), cell, rep),
            { scenario: 'publish', cell: `publish P=${cell.publishers} batch=${cell.batch}`, contender: name, variant: 'default', rep });
        }
      }
    }
    if (scenarios.has('dispatch')) {
      for (const cell of plan.dispatch) {
        for (const [name, variant] of cell.variants) {
          const impl = contender(name);
          await attempt(`dispatch ${name}/${variant}`, () => runDispatch(context, impl, variant, impl.variants[variant]!, cell, rep),
            { scenario: 'dispatch', cell: `dispatch N=${cell.deliveries} D=${cell.dispatchers}`, contender: name, variant, rep });
        }
      }
    }
    if (scenarios.has('mixed')) {
      for (const cell of plan.mixed) {
        for (const [name, variant] of plan.mixedVariants) {
          const impl = contender(name);
          await attempt(`mixed ${name}/${variant}`, () => runMixed(mixedContext(cell), impl, variant, impl.variants[variant]!, cell, rep),
            { scenario: 'mixed', cell: `mixed ${cell.ratePerSec} ev/s ${cell.windowMs / 1000}s P=${cell.publishers} D=${cell.dispatchers}`, contender: name, variant, rep });
        }
      }
    }
  }
} finally {
  await admin.end();
  if (created && !process.env.BENCH_KEEP_SCHEMA) await dropBenchDatabase(url);
}

const results: BenchResults = {
  name: outName,
  mode,
  startedAt: new Date(started).toISOString(),
  durationSeconds: (Date.now() - started) / 1000,
  machine: {
    cpus: cpus().length, cpuModel: cpus()[0]?.model ?? 'unknown', memoryGiB: Math.round(totalmem() / 2 ** 30), node: process.version,
    loadAverageAtEnd: loadavg().map((v) => Number(v.toFixed(2))),
    postgres: server!.version, autovacuum: server!.autovacuum, synchronousCommit: server!.sync, sharedBuffers: server!.sb,
    walinspect, pgStatStatements: pss!.preloaded ? 'preloaded' : 'not in shared_preload_libraries: statements counted client-side',
  },
  plan: { ...plan, scenarios: [...scenarios] },
  contenders: Object.fromEntries([...loaded.values()].map((c) => [c.name, { ordered: c.ordered, variants: c.variants }])),
  runs,
};
mkdirSync(new URL('./results/', import.meta.url), { recursive: true });
const files = writeReport(results, new URL('./results/', import.meta.url));
log(`done in ${results.durationSeconds.toFixed(0)} s: ${files.join(', ')}`);
const invalid = runs.filter((r) => !r.valid).length;
if (invalid) log(`${invalid} of ${runs.length} runs INVALID (kept in the JSON, left out of the tables)`);
process.exit(0);
