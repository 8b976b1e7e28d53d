/**
 * Turns the runs of one benchmark into bench/results/<name>.json (everything, INVALID runs
 * included), <name>.md (tables of the VALID runs: median with min-max, paired ratios, the issue's
 * targets) and <name>.svg (dispatch throughput and WAL per delivery, hand-written SVG).
 */
import { isAbsolute } from 'node:path';
import { writeFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import type { RunRecord } from './scenarios/common.js';
import { max, median, min } from './lib/stats.js';

export interface BenchResults {
  readonly name: string;
  readonly mode: string;
  readonly startedAt: string;
  readonly durationSeconds: number;
  readonly machine: Readonly<Record<string, unknown>>;
  readonly build?: unknown;
  readonly plan: unknown;
  readonly contenders: unknown;
  readonly runs: readonly RunRecord[];
}

interface Row {
  readonly cell: string;
  readonly scenario: string;
  readonly contender: string;
  readonly variant: string;
  readonly keyed: boolean;
  readonly tag: string | undefined;
  readonly runs: readonly RunRecord[];
  readonly valid: readonly RunRecord[];
}

const ordering = (row: { keyed: boolean }) => (row.keyed ? 'keyed' : 'unkeyed');
const label = (row: { contender: string; variant: string; keyed: boolean }) =>
  `${row.variant === 'default' ? row.contender : `${row.contender} ${row.variant}`}, ${ordering(row)}`;

function rowsOf(runs: readonly RunRecord[]): Row[] {
  const map = new Map<string, Row>();
  for (const run of runs) {
    const keyed = run.keyed ?? true;
    const key = `${run.cell}|${run.contender}|${run.variant}|${keyed}|${run.tag ?? ''}`;
    const row = map.get(key) ?? {
      cell: run.cell,
      scenario: run.scenario,
      contender: run.contender,
      variant: run.variant,
      keyed,
      tag: run.tag,
      runs: [],
      valid: [],
    };
    (row.runs as RunRecord[]).push(run);
    if (run.valid) (row.valid as RunRecord[]).push(run);
    map.set(key, row);
  }
  return [...map.values()];
}

const fmt = (value: number, digits = 0): string => {
  if (!Number.isFinite(value)) return '-';
  return value.toLocaleString('en-US', { minimumFractionDigits: digits, maximumFractionDigits: digits });
};

function spread(values: readonly number[], digits = 0): string {
  if (values.length === 0) return 'no valid run';
  if (values.length === 1) return `**${fmt(values[0]!, digits)}**`;
  return `**${fmt(median(values), digits)}** (${fmt(min(values), digits)}-${fmt(max(values), digits)})`;
}

const med = (row: Row | undefined, pick: (run: RunRecord) => number | null | undefined): number =>
  row ? median(row.valid.map(pick).filter((v): v is number => typeof v === 'number')) : NaN;

/**
 * Median over repetitions of a / b (of `pick`, the rate unless told), pairing runs of the same repetition (both valid);
 * falls back to ratio of medians.
 */
export function pairedRatio(
  a: Row | undefined,
  b: Row | undefined,
  pick: (run: RunRecord) => number | null | undefined = (r) => r.rate,
): number {
  if (!a || !b) return NaN;
  const ratios: number[] = [];
  for (const run of a.valid) {
    const other = b.valid.find((r) => r.rep === run.rep);
    const [mine, theirs] = [pick(run), other ? pick(other) : undefined];
    if (typeof mine === 'number' && typeof theirs === 'number' && theirs > 0) ratios.push(mine / theirs);
  }
  if (ratios.length) return median(ratios);
  return med(a, pick) / med(b, pick);
}

/** CPU per delivery of a row's runs (medians, µs): its dispatcher processes', and the Postgres server's. */
const dispatcherCpu = (row: Row | undefined) => med(row, (r) => r.figures.dispatcherCpuUsPerDelivery);
const serverCpu = (row: Row | undefined) => med(row, (r) => r.db?.serverCpuUsPerUnit);
const drainedRate = (run: RunRecord) => run.figures.drainedRate;
/**
 * Cores the dispatcher processes and the Postgres server kept busy during a drain (deliveries/s x their CPU per
 * delivery), median over runs: near the machine's core count, more processes cannot add throughput, only their own
 * costs (the bench's own processes and the system come on top).
 */
const coresBusy = (row: Row | undefined) =>
  med(row, (r) =>
    r.db?.serverCpuUsPerUnit == null || r.figures.dispatcherCpuUsPerDelivery == null
      ? undefined
      : (r.rate * (r.figures.dispatcherCpuUsPerDelivery + r.db.serverCpuUsPerUnit)) / 1e6,
  );

const ratioText = (value: number) => (Number.isFinite(value) ? `${value.toFixed(2)}x` : '-');

function validity(row: Row): string {
  return `${row.valid.length}/${row.runs.length}`;
}

function exactnessLine(runs: readonly RunRecord[]): string {
  const valid = runs.filter((r) => r.valid).length;
  const invalid = runs.filter((r) => !r.valid);
  const checked = runs.filter((r) => r.scenario !== 'publish');
  const dup = checked.reduce((s, r) => s + r.exactness.duplicates, 0);
  const order = checked.reduce((s, r) => s + (r.exactness.orderViolations ?? 0), 0);
  const overlaps = checked.reduce((s, r) => s + (r.exactness.overlaps ?? 0), 0);
  const lost = checked.reduce((s, r) => s + r.exactness.lost, 0);
  const published = runs.filter((r) => r.scenario === 'publish');
  const pubBad = published.reduce((s, r) => s + r.exactness.lost + r.exactness.unexpected + r.exactness.duplicates, 0);
  let line = `**Exactness: ${valid} of ${runs.length} runs VALID** (dispatch, mixed and liveness: lost ${lost}, duplicates ${dup}, per-key order violations ${order}, overlapping deliveries of one key ${overlaps} in total; publish: stored (event, handler) pairs equal the published ones, ${pubBad} off; every run also checked nothing pending and no dead letters).`;
  if (invalid.length) {
    line +=
      ' INVALID (left out of every table): ' +
      invalid
        .map(
          (r) =>
            `${r.cell}${r.tag ? ` [${r.tag}]` : ''} ${label({ ...r, keyed: r.keyed ?? true })} rep ${r.rep}: ${r.exactness.reasons.join(', ') || 'failed'}`,
        )
        .join('; ') +
      '.';
  }
  return line;
}

function findRow(
  rows: readonly Row[],
  cell: string,
  contender: string,
  variant: string,
  keyed?: boolean,
  tag?: string,
): Row | undefined {
  return rows.find(
    (r) =>
      r.cell === cell &&
      r.contender === contender &&
      r.variant === variant &&
      (keyed === undefined || r.keyed === keyed) &&
      r.tag === tag,
  );
}

/** A contender at its best in a cell: the row with the highest median rate (any variant but its defaults; `keyed` narrows). */
function bestRow(rows: readonly Row[], cell: string, contender: string, keyed?: boolean): Row | undefined {
  let best: Row | undefined;
  for (const row of rows) {
    if (row.cell !== cell || row.contender !== contender || row.variant === 'defaults' || row.tag !== undefined)
      continue;
    if (keyed !== undefined && row.keyed !== keyed) continue;
    if (!best || (med(row, (r) => r.rate) || 0) > (med(best, (r) => r.rate) || 0)) best = row;
  }
  return best;
}

/** " (pg-boss 12.38.1, graphile-worker 0.18.0, ...)" from the machine record, empty for results that predate it. */
function peersText(peers: unknown): string {
  if (!peers || typeof peers !== 'object') return '';
  const list = Object.entries(peers as Record<string, string>).map(([name, version]) => `${name} ${version}`);
  return list.length ? ` (peers: ${list.join(', ')})` : '';
}

/** A peer's row with the lowest median p99 in a latency cell (its best setting for latency, whatever its rate). */
function lowestLatencyRow(rows: readonly Row[], cell: string, contender: string): Row | undefined {
  let best: Row | undefined;
  for (const row of rows) {
    if (row.cell !== cell || row.contender !== contender || row.variant === 'defaults' || row.valid.length === 0)
      continue;
    const p99 = med(row, (r) => r.figures.latencyP99Ms);
    if (Number.isFinite(p99) && (!best || p99 < med(best, (r) => r.figures.latencyP99Ms))) best = row;
  }
  return best;
}

/** Whether the row's deliveries were ordered per (handler, key). */
function orderedText(row: Row, contenders: Record<string, { ordersKeys?: boolean; ordered?: boolean }>): string {
  if (!row.keyed) return 'unkeyed';
  const c = contenders[row.contender];
  return (c?.ordersKeys ?? c?.ordered) ? 'keyed, ordered' : 'keyed, not ordered';
}

/** What each relaybus publish variant measures (contenders/relaybus.ts PUBLISH_VARIANTS), for the note under the table. */
const PUBLISH_PATHS = {
  default:
    "bus.publish / publishMany without an id (relaybus makes it; the events are written inline, no events row), the publishing process registers the handlers, NOTIFY at commit (the store's default)",
  ids: 'the same with an id per event (an events row each: what an inbox or a caller that needs dedup pays)',
  'no-notify': 'the same with postgresStore({ notify: false })',
  'keep-events':
    'the default path on postgresStore({ keepEvents: true }): an events row for every event, kept until retention',
  subscriptions:
    'bus.publish from a process that registers no handler: the fan-out comes from the subscriptions recorded in the database',
  sql: 'the SQL function relaybus_publish(type, payload, key, id), one SELECT per transaction (a batch over unnest of arrays), fanned out from the recorded subscriptions',
} as const;

/**
 * Publish rows: each against the two raw floors and pg-boss of its cell, and relaybus's other publish
 * paths (variants) against relaybus's default path with the same keyed-ness (paired per repetition).
 * The fan-out floor is taken with the row's keyed-ness where it ran so (else keyed: the work the design must do).
 */
/** The fan-out floor's row of a publish cell: keyed or unkeyed as asked where it ran so, else the keyed one. */
function fanoutFloor(rows: readonly Row[], cell: string, keyed: boolean): Row | undefined {
  const floors = rows.filter((r) => r.scenario === 'publish' && r.cell === cell && r.contender === 'raw-fanout');
  return floors.find((r) => r.keyed === keyed) ?? floors.find((r) => r.keyed);
}

function publishTable(rows: readonly Row[]): string[] {
  const out = [
    '| cell | contender | events/s median (min-max) | vs raw-sql (lean rows) | vs fan-out floor | vs pg-boss | vs relaybus default | call p50 / p99 ms | WAL B/event (own) | stmts/event | valid |',
    '| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |',
  ];
  for (const row of rows.filter((r) => r.scenario === 'publish')) {
    const raw = rows.find((r) => r.cell === row.cell && r.contender === 'raw-sql');
    const fanout = fanoutFloor(rows, row.cell, row.keyed);
    const boss = rows.find((r) => r.cell === row.cell && r.contender === 'pg-boss');
    const base =
      row.contender === 'relaybus' && row.variant !== 'default'
        ? findRow(rows, row.cell, 'relaybus', 'default', row.keyed)
        : undefined;
    out.push(
      `| ${row.cell} | ${label(row)} | ${spread(row.valid.map((r) => r.rate))} | ${ratioText(pairedRatio(row, raw))} | ${ratioText(pairedRatio(row, fanout))} | ${ratioText(pairedRatio(row, boss))} | ${ratioText(pairedRatio(row, base))} | ${fmt(
        med(row, (r) => r.figures.callP50Ms),
        2,
      )} / ${fmt(
        med(row, (r) => r.figures.callP99Ms),
        2,
      )} | ${fmt(med(row, (r) => r.db?.walPerUnit))} (${fmt(med(row, (r) => r.db?.ownWalPerUnit))}) | ${fmt(
        med(row, (r) => r.db?.statementsPerUnit),
        2,
      )} | ${validity(row)} |`,
    );
  }
  const named = [
    ...new Set(rows.filter((r) => r.scenario === 'publish' && r.contender === 'relaybus').map((r) => r.variant)),
  ];
  // The rows' names as label() writes them ("relaybus" for the default path, "relaybus <variant>" for the others).
  const legend = named
    .filter((v): v is keyof typeof PUBLISH_PATHS => Object.hasOwn(PUBLISH_PATHS, v))
    .map((v) => `"${v === 'default' ? 'relaybus' : `relaybus ${v}`}": ${PUBLISH_PATHS[v]}`);
  if (named.some((v) => v !== 'default')) out.push('', `relaybus publish paths: ${legend.join('; ')}.`);
  return out;
}

/** relaybus's reference row for a ratio: same variant family and the same keyed-ness when it ran so, else keyed. */
function relaybusRef(rows: readonly Row[], row: Row): Row | undefined {
  const variant = row.variant === 'defaults' ? 'defaults' : 'tuned';
  return findRow(rows, row.cell, 'relaybus', variant, row.keyed) ?? findRow(rows, row.cell, 'relaybus', variant, true);
}

function dispatchTable(
  rows: readonly Row[],
  contenders: Record<string, { ordersKeys?: boolean }>,
  sweep: ReadonlySet<string>,
): string[] {
  const out = [
    '| cell | contender | ordering | deliveries/s median (min-max) | relaybus / this | to drained: deliveries/s, relaybus / this | WAL B/delivery (own) | delivery updates/delivery | lane HOT % | dead tuples after | stmts/delivery | dispatcher CPU µs/delivery | server CPU µs/delivery | first handler ms | valid |',
    '| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |',
  ];
  for (const row of rows.filter((r) => r.scenario === 'dispatch' && !sweep.has(`${r.contender}|${r.variant}`))) {
    const hot = med(row, (r) => r.db?.laneHotShare);
    out.push(
      `| ${row.cell} | ${label(row)} | ${orderedText(row, contenders)} | ${spread(row.valid.map((r) => r.rate))} | ${ratioText(pairedRatio(relaybusRef(rows, row), row))} | ${fmt(med(row, drainedRate))}, ${ratioText(pairedRatio(relaybusRef(rows, row), row, drainedRate))} | ${fmt(med(row, (r) => r.db?.walPerUnit))} (${fmt(med(row, (r) => r.db?.ownWalPerUnit))}) | ${fmt(
        med(row, (r) => r.db?.updatesPerUnit),
        2,
      )} | ${Number.isFinite(hot) ? fmt(hot * 100, 1) : 'n/a'} | ${fmt(med(row, (r) => r.db?.deadTuplesAfter))} | ${fmt(
        med(row, (r) => r.db?.statementsPerUnit),
        3,
      )} | ${fmt(dispatcherCpu(row), 1)} | ${fmt(serverCpu(row), 1)} | ${fmt(
        med(row, (r) => r.figures.firstHandlerMs),
        0,
      )} | ${validity(row)} |`,
    );
  }
  return out;
}

/** What ordering costs each contender that ran both ways in one cell: keyed / unkeyed at their best. */
function orderingTable(rows: readonly Row[], contenders: Record<string, { ordersKeys?: boolean }>): string[] {
  const out = [
    '| cell | contender | keyed (ordered) deliveries/s | unkeyed deliveries/s | keyed / unkeyed |',
    '| --- | --- | --- | --- | --- |',
  ];
  const cells = [...new Set(rows.filter((r) => r.scenario === 'dispatch').map((r) => r.cell))];
  for (const cell of cells) {
    for (const name of Object.keys(contenders)) {
      if (!contenders[name]?.ordersKeys) continue;
      const keyed = bestRow(rows, cell, name, true);
      const unkeyed = bestRow(rows, cell, name, false);
      if (!keyed || !unkeyed) continue;
      out.push(
        `| ${cell} | ${name} (${keyed.variant} / ${unkeyed.variant}) | ${spread(keyed.valid.map((r) => r.rate))} | ${spread(unkeyed.valid.map((r) => r.rate))} | ${ratioText(pairedRatio(keyed, unkeyed))} |`,
      );
    }
  }
  return out.length > 2 ? out : [];
}

/** The peers' sweep: every point, best first, with its settings. */
function sweepTable(rows: readonly Row[], results: BenchResults): string[] {
  const contenders = results.contenders as Record<
    string,
    { sweep?: Record<string, DispatcherSettingsLike>; variants?: Record<string, DispatcherSettingsLike> }
  >;
  const out = [
    '| cell | contender | variant | settings | deliveries/s median (min-max) | / best of the contender | valid |',
    '| --- | --- | --- | --- | --- | --- | --- |',
  ];
  for (const cell of [...new Set(rows.filter((r) => r.scenario === 'dispatch').map((r) => r.cell))]) {
    for (const name of Object.keys(contenders)) {
      const sweep = contenders[name]?.sweep ?? {};
      const points = rows.filter(
        (r) => r.cell === cell && r.contender === name && !r.keyed && (r.variant in sweep || r.variant === 'best'),
      );
      if (points.length < 2) continue;
      points.sort((a, b) => (med(b, (r) => r.rate) || 0) - (med(a, (r) => r.rate) || 0));
      const top = points[0]!;
      for (const row of points) {
        const s = sweep[row.variant] ?? contenders[name]?.variants?.[row.variant];
        out.push(
          `| ${cell} | ${name} | ${row.variant} | ${s ? settingsText(s) : ''} | ${spread(row.valid.map((r) => r.rate))} | ${ratioText(med(row, (r) => r.rate) / med(top, (r) => r.rate))} | ${validity(row)} |`,
        );
      }
    }
  }
  return out.length > 2 ? out : [];
}

interface DispatcherSettingsLike {
  concurrency: number;
  batchSize: number;
  pollIntervalMs: number;
  poolSize: number;
  extra?: Record<string, number>;
}
const settingsText = (s: DispatcherSettingsLike) =>
  `concurrency ${s.concurrency}, batch ${s.batchSize}, poll ${s.pollIntervalMs} ms, pool ${s.poolSize}${
    s.extra
      ? ', ' +
        Object.entries(s.extra)
          .map(([k, v]) => `${k} ${v}`)
          .join(', ')
      : ''
  }`;

/** Dispatch cells of one N with 1, 2, 4 processes: relaybus tuned keyed. */
function processCells(rows: readonly Row[]): { n: string; byD: Map<number, Row> }[] {
  const groups = new Map<string, Map<number, Row>>();
  for (const row of rows.filter(
    (r) => r.scenario === 'dispatch' && r.contender === 'relaybus' && r.variant === 'tuned' && r.keyed,
  )) {
    const m = /^dispatch N=(\d+) D=(\d+)$/.exec(row.cell);
    if (!m) continue;
    const byD = groups.get(m[1]!) ?? new Map<number, Row>();
    byD.set(Number(m[2]), row);
    groups.set(m[1]!, byD);
  }
  return [...groups.entries()].filter(([, byD]) => byD.size > 1).map(([n, byD]) => ({ n, byD }));
}

/**
 * One process draining a D-th of a process-count cell's backlog (each of its D processes' share), relaybus tuned keyed,
 * from the same run: undefined when the run has no such cell.
 */
function oneProcessOnShare(rows: readonly Row[], deliveries: number, processes: number): Row | undefined {
  if (processes <= 1 || deliveries % processes !== 0) return undefined;
  return findRow(rows, `dispatch N=${deliveries / processes} D=1`, 'relaybus', 'tuned', true);
}

/** graphile-worker at its best in a process-count cell of the same run (the same processes on the same cores), if it ran. */
function peerAtProcesses(rows: readonly Row[], deliveries: string, processes: number): Row | undefined {
  return findRow(rows, `dispatch N=${deliveries} D=${processes}`, 'graphile-worker', 'best', false);
}

function processTable(rows: readonly Row[]): string[] {
  const out = [
    '| deliveries | dispatcher processes | relaybus tuned, keyed: deliveries/s median (min-max) | / previous process count | dispatcher CPU µs/delivery | server CPU µs/delivery | cores busy (CPU per delivery of dispatchers and server x deliveries/s) | one process on a share (N / processes): deliveries/s, CPU µs/delivery dispatcher / server | these processes / that one | graphile-worker best, unkeyed: deliveries/s, / previous process count, CPU µs/delivery dispatcher / server, cores busy | valid |',
    '| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |',
  ];
  for (const { n, byD } of processCells(rows)) {
    const ds = [...byD.keys()].sort((a, b) => a - b);
    ds.forEach((d, k) => {
      const row = byD.get(d)!;
      const prev = k > 0 ? byD.get(ds[k - 1]!) : undefined;
      const one = oneProcessOnShare(rows, Number(n), d);
      const oneText = one
        ? `N=${Number(n) / d}: ${spread(one.valid.map((r) => r.rate))}, ${fmt(dispatcherCpu(one), 1)} / ${fmt(serverCpu(one), 1)}`
        : '-';
      const peer = peerAtProcesses(rows, n, d);
      const peerPrev = k > 0 ? peerAtProcesses(rows, n, ds[k - 1]!) : undefined;
      const peerText = peer
        ? `${spread(peer.valid.map((r) => r.rate))}, ${peerPrev ? ratioText(pairedRatio(peer, peerPrev)) : '-'}, ${fmt(dispatcherCpu(peer), 1)} / ${fmt(serverCpu(peer), 1)}, ${fmt(coresBusy(peer), 2)}`
        : '-';
      out.push(
        `| ${n} | ${d} | ${spread(row.valid.map((r) => r.rate))} | ${prev ? ratioText(pairedRatio(row, prev)) : '-'} | ${fmt(dispatcherCpu(row), 1)} | ${fmt(serverCpu(row), 1)} | ${fmt(coresBusy(row), 2)} | ${oneText} | ${one ? ratioText(pairedRatio(row, one)) : '-'} | ${peerText} | ${validity(row)} |`,
      );
    });
  }
  return out.length > 2 ? out : [];
}

function mixedTable(rows: readonly Row[]): string[] {
  const out = [
    '| cell | contender | achieved deliveries/s (offered) | e2e p50 / p95 / p99 ms | warm-up p99 ms | backlog max | WAL B/delivery (own) | stmts/delivery | valid |',
    '| --- | --- | --- | --- | --- | --- | --- | --- | --- |',
  ];
  for (const row of rows.filter((r) => r.scenario === 'mixed')) {
    out.push(
      `| ${row.cell} | ${label(row)} | ${spread(row.valid.map((r) => r.rate))} (${fmt(med(row, (r) => r.figures.offeredDeliveriesPerSec))}) | ${fmt(
        med(row, (r) => r.figures.latencyP50Ms),
        1,
      )} / ${fmt(
        med(row, (r) => r.figures.latencyP95Ms),
        1,
      )} / ${fmt(
        med(row, (r) => r.figures.latencyP99Ms),
        1,
      )} | ${fmt(
        med(row, (r) => r.figures.startupP99Ms),
        1,
      )} | ${fmt(med(row, (r) => r.figures.backlogMax))} | ${fmt(med(row, (r) => r.db?.walPerUnit))} (${fmt(med(row, (r) => r.db?.ownWalPerUnit))}) | ${fmt(
        med(row, (r) => r.db?.statementsPerUnit),
        3,
      )} | ${validity(row)} |`,
    );
  }
  return out;
}

/** The liveness arm every other arm is compared with (scenarios/liveness.ts LIVENESS_REFERENCE). */
const LIVENESS_REFERENCE = 'healthy keys only';

/** A liveness row's retry lag, p50 (median over runs) and max (over runs): from the due time its library set, or else
 * from the throw + backoff (`from: 'throw'`). */
function retryLag(row: Row, from: 'due' | 'throw'): { p50: number; max: number } {
  const [p50Of, maxOf] =
    from === 'due'
      ? (['retryDueLagP50Ms', 'retryDueLagMaxMs'] as const)
      : (['retryLagP50Ms', 'retryLagMaxMs'] as const);
  return {
    p50: med(row, (r) => r.figures[p50Of]),
    max: max(row.valid.map((r) => r.figures[maxOf]).filter((v): v is number => typeof v === 'number')),
  };
}

const lagText = (lag: { p50: number; max: number }): string => `${fmt(lag.p50, 1)} / ${fmt(lag.max, 1)}`;

function livenessTable(rows: readonly Row[]): string[] {
  const out = [
    `| cell | contender | arm | healthy keys: deliveries/s median (min-max) | / ${LIVENESS_REFERENCE} | failed head due -> retry start p50 / max ms | throw + backoff -> retry start p50 / max ms | poll interval ms | all deliveries/s | valid |`,
    '| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |',
  ];
  for (const row of rows.filter((r) => r.scenario === 'liveness')) {
    const base = findRow(rows, row.cell, row.contender, row.variant, row.keyed, LIVENESS_REFERENCE);
    const failing = row.tag === 'failing heads';
    out.push(
      `| ${row.cell} | ${label(row)} | ${row.tag} | ${spread(row.valid.map((r) => r.rate))} | ${row.tag === LIVENESS_REFERENCE ? '-' : ratioText(pairedRatio(row, base))} | ${
        failing ? lagText(retryLag(row, 'due')) : '-'
      } | ${failing ? lagText(retryLag(row, 'throw')) : '-'} | ${fmt(med(row, (r) => r.figures.pollIntervalMs))} | ${fmt(med(row, (r) => r.figures.allDeliveriesPerSec))} | ${validity(row)} |`,
    );
  }
  return out;
}

interface Target {
  readonly issue: string;
  readonly what: string;
  readonly measured: string;
  readonly pass: boolean | null;
}

/** CPU per delivery (dispatcher + server, µs) of relaybus and a peer, where both were measured: what bounds the ratio. */
function cpuText(relaybus: Row, peer: Row): string {
  const total = (row: Row) => dispatcherCpu(row) + serverCpu(row);
  const [own, theirs] = [total(relaybus), total(peer)];
  if (!Number.isFinite(own) || !Number.isFinite(theirs)) return '';
  return ` (CPU per delivery, dispatcher + server: relaybus ${fmt(own, 1)} µs, ${peer.contender} ${fmt(theirs, 1)} µs, ${ratioText(theirs / own)} relaybus's)`;
}

const verdict = (value: number, ok: (v: number) => boolean): boolean | null =>
  Number.isFinite(value) ? ok(value) : null;

function targets(rows: readonly Row[]): Target[] {
  const out: Target[] = [];
  // The throughput cells: one process, relaybus tuned and the raw floor side by side (not the small ordering cell).
  const d1 = [
    ...new Set(
      rows
        .filter((r) => r.scenario === 'dispatch' && r.cell.endsWith(' D=1') && r.contender === 'raw-sql')
        .map((r) => r.cell),
    ),
  ].filter((cell) => rows.some((r) => r.cell === cell && r.contender === 'relaybus' && r.variant === 'tuned'));
  for (const cell of d1) {
    const keyed = findRow(rows, cell, 'relaybus', 'tuned', true);
    const unkeyed = findRow(rows, cell, 'relaybus', 'tuned', false);
    const gw = bestRow(rows, cell, 'graphile-worker');
    const boss = bestRow(rows, cell, 'pg-boss');
    if (keyed && gw) {
      const r = pairedRatio(keyed, gw);
      out.push({
        issue: '10, 51',
        what: `${cell}: relaybus tuned keyed >= 2x graphile-worker at its best (${label(gw)})`,
        measured: `${ratioText(r)}${cpuText(keyed, gw)}`,
        pass: verdict(r, (v) => v >= 2),
      });
    }
    if (keyed && boss) {
      const r = pairedRatio(keyed, boss);
      out.push({
        issue: '10',
        what: `${cell}: relaybus tuned keyed ahead of pg-boss at its best (${label(boss)})`,
        measured: ratioText(r),
        pass: verdict(r, (v) => v > 1),
      });
      out.push({
        issue: '51',
        what: `${cell}: relaybus tuned keyed >= 2x pg-boss at its best (${label(boss)})`,
        measured: ratioText(r),
        pass: verdict(r, (v) => v >= 2),
      });
    }
    if (keyed) {
      // Half the CPU a keyed delivery cost when the round began (25 µs: dispatcher + server, the cell's CPU columns).
      const cpu = dispatcherCpu(keyed) + serverCpu(keyed);
      out.push({
        issue: '51',
        what: `${cell}: relaybus tuned keyed CPU per delivery (dispatcher + server) <= 12.5 µs`,
        measured: `${fmt(cpu, 1)} µs (dispatcher ${fmt(dispatcherCpu(keyed), 1)} + server ${fmt(serverCpu(keyed), 1)})`,
        pass: verdict(cpu, (v) => v <= 12.5),
      });
    }
    if (unkeyed) {
      for (const peer of ['pg-boss', 'graphile-worker']) {
        const other = bestRow(rows, cell, peer, false);
        if (!other) continue;
        const r = pairedRatio(unkeyed, other);
        out.push({
          issue: '10',
          what: `${cell}: relaybus tuned unkeyed ahead of ${label(other)}`,
          measured: ratioText(r),
          pass: verdict(r, (v) => v > 1),
        });
      }
    }
    if (keyed) {
      const raw = findRow(rows, cell, 'raw-sql', 'floor');
      if (raw) {
        const r = pairedRatio(keyed, raw);
        out.push({
          issue: '6',
          what: `${cell}: relaybus tuned keyed >= 0.6x raw-sql floor`,
          measured: ratioText(r),
          pass: verdict(r, (v) => v >= 0.6),
        });
        out.push({
          issue: '51',
          what: `${cell}: relaybus tuned keyed >= 0.5x raw-sql floor`,
          measured: ratioText(r),
          pass: verdict(r, (v) => v >= 0.5),
        });
      }
      if (boss) {
        const r = pairedRatio(keyed, boss);
        out.push({
          issue: '6',
          what: `${cell}: relaybus tuned keyed >= 3x pg-boss at its best`,
          measured: ratioText(r),
          pass: verdict(r, (v) => v >= 3),
        });
      }
      const own = med(keyed, (r) => r.db?.ownWalPerUnit);
      const wal = Number.isFinite(own) ? own : med(keyed, (r) => r.db?.walPerUnit);
      out.push({
        issue: '6',
        what: `${cell}: relaybus WAL <= 120 B/delivery`,
        measured: `${fmt(wal)} B${Number.isFinite(own) ? ' (own)' : ''}`,
        pass: verdict(wal, (v) => v <= 120),
      });
      const upd = med(keyed, (r) => r.db?.updatesPerUnit);
      out.push({
        issue: '6',
        what: `${cell}: relaybus delivery updates = 0`,
        measured: fmt(upd, 3),
        pass: verdict(upd, (v) => v === 0),
      });
      const hot = med(keyed, (r) => r.db?.laneHotShare);
      out.push({
        issue: '6',
        what: `${cell}: relaybus lane updates >= 95% HOT`,
        measured: `${fmt(hot * 100, 1)}%`,
        pass: verdict(hot, (v) => v >= 0.95),
      });
    }
  }
  for (const { n, byD } of processCells(rows)) {
    const ds = [...byD.keys()].sort((a, b) => a - b);
    for (let k = 1; k < ds.length; k += 1) {
      const r = pairedRatio(byD.get(ds[k]!), byD.get(ds[k - 1]!));
      const peer = peerAtProcesses(rows, n, ds[k]!);
      const peerPrev = peerAtProcesses(rows, n, ds[k - 1]!);
      out.push({
        issue: '10, 51',
        what: `dispatch N=${n}: relaybus tuned keyed, ${ds[k]} processes >= ${ds[k - 1]} processes (throughput does not fall)`,
        measured: `${ratioText(r)} (${[
          ...(peer && peerPrev
            ? [`graphile-worker best on the same cores: ${ratioText(pairedRatio(peer, peerPrev))}`]
            : []),
          `cores busy at ${ds[k - 1]} / ${ds[k]} processes: relaybus ${fmt(coresBusy(byD.get(ds[k - 1]!)), 2)} / ${fmt(coresBusy(byD.get(ds[k]!)), 2)}${
            peer && peerPrev ? `, graphile-worker ${fmt(coresBusy(peerPrev), 2)} / ${fmt(coresBusy(peer), 2)}` : ''
          }`,
        ].join('; ')})`,
        pass: verdict(r, (v) => v >= 1),
      });
    }
  }
  for (const traced of rows.filter(
    (r) => r.scenario === 'dispatch' && r.contender === 'relaybus' && r.variant === 'traced' && r.keyed,
  )) {
    const r = pairedRatio(traced, findRow(rows, traced.cell, 'relaybus', 'tuned', true));
    out.push({
      issue: '16',
      what: `${traced.cell}: relaybus tracing on (SDK recording every span, no-op exporter) within 5% of off (tuned)`,
      measured: ratioText(r),
      pass: verdict(r, (v) => v >= 0.95),
    });
  }
  const small = d1.find((c) => c.includes('N=50000 '));
  const large = d1.find((c) => c.includes('N=200000 '));
  if (small && large) {
    const a = med(findRow(rows, small, 'relaybus', 'tuned', true), (r) => r.rate);
    const b = med(findRow(rows, large, 'relaybus', 'tuned', true), (r) => r.rate);
    out.push({
      issue: '6',
      what: 'relaybus tuned keyed: no slowdown from 50k to 200k (>= 0.9x)',
      measured: `200k / 50k = ${ratioText(b / a)}`,
      pass: verdict(b / a, (v) => v >= 0.9),
    });
  }
  for (const row of rows.filter(
    (r) => r.scenario === 'mixed' && r.contender === 'relaybus' && r.variant === 'tuned' && r.keyed,
  )) {
    if (med(row, (r) => r.figures.offeredDeliveriesPerSec) !== 1_000) continue;
    const p50 = med(row, (r) => r.figures.latencyP50Ms);
    const p99 = med(row, (r) => r.figures.latencyP99Ms);
    out.push({
      issue: '10',
      what: `${row.cell} (1,000 deliveries/s): relaybus tuned keyed p50 <= 2 ms and p99 <= 10 ms`,
      measured: `p50 ${fmt(p50, 1)} ms, p99 ${fmt(p99, 1)} ms`,
      pass: Number.isFinite(p50) && Number.isFinite(p99) ? p50 <= 2 && p99 <= 10 : null,
    });
    out.push({
      issue: '51',
      what: `${row.cell} (1,000 deliveries/s): relaybus tuned keyed p50 <= 1 ms and p99 <= 5 ms`,
      measured: `p50 ${fmt(p50, 2)} ms, p99 ${fmt(p99, 2)} ms`,
      pass: Number.isFinite(p50) && Number.isFinite(p99) ? p50 <= 1 && p99 <= 5 : null,
    });
    // "At or below every peer's": each peer's row with the lowest p99 in the same cell (medians of the runs, as above).
    for (const peer of ['graphile-worker', 'pg-boss']) {
      const best = lowestLatencyRow(rows, row.cell, peer);
      if (!best) continue;
      const peerP50 = med(best, (r) => r.figures.latencyP50Ms);
      const peerP99 = med(best, (r) => r.figures.latencyP99Ms);
      out.push({
        issue: '10, 51',
        what: `${row.cell}: relaybus tuned keyed p50 and p99 at or below ${peer}'s (${label(best)})`,
        // Two decimals: at this rate both sit near a millisecond, and one decimal showed a 0.01 ms loss as a tie.
        measured: `p50 ${fmt(p50, 2)} / ${fmt(peerP50, 2)} ms, p99 ${fmt(p99, 2)} / ${fmt(peerP99, 2)} ms`,
        pass: [p50, p99, peerP50, peerP99].every(Number.isFinite) ? p50 <= peerP50 && p99 <= peerP99 : null,
      });
    }
  }
  for (const row of rows.filter((r) => r.scenario === 'liveness' && r.tag === 'failing heads')) {
    const base = findRow(rows, row.cell, row.contender, row.variant, row.keyed, LIVENESS_REFERENCE);
    // A stalled lane shows as runs that never drain (INVALID): that is the failure measured, so "not met".
    const stalled =
      row.valid.length === 0
        ? `no valid run (${row.runs
            .flatMap((r) => r.exactness.reasons)
            .filter((v, k, a) => a.indexOf(v) === k)
            .slice(0, 3)
            .join('; ')})`
        : '';
    const r = pairedRatio(row, base);
    out.push({
      issue: '10, 51',
      what: `${row.cell}, ${label(row)}: healthy keys >= 0.8x their throughput with the ${LIVENESS_REFERENCE}`,
      measured: stalled || ratioText(r),
      pass: stalled ? false : verdict(r, (v) => v >= 0.8),
    });
    const due = retryLag(row, 'due');
    const thrown = retryLag(row, 'throw');
    const poll = med(row, (x) => x.figures.pollIntervalMs);
    out.push({
      issue: '10, 51',
      what: `${row.cell}, ${label(row)}: failed head retried within one poll interval of being due (max over runs)`,
      measured:
        stalled ||
        `due -> start max ${fmt(due.max, 1)} ms (p50 ${fmt(due.p50, 1)}); throw + backoff -> start max ${fmt(thrown.max, 1)} (p50 ${fmt(thrown.p50, 1)}); poll ${fmt(poll)} ms`,
      pass: stalled ? false : Number.isFinite(due.max) && Number.isFinite(poll) ? due.max <= poll : null,
    });
  }
  // The issue's publish targets read relaybus's ordinary path (bus.publish, NOTIFY on); the other paths are in the publish table.
  const p1 = rows.find(
    (r) =>
      r.scenario === 'publish' &&
      r.cell === 'publish P=1 batch=1' &&
      r.contender === 'relaybus' &&
      r.variant === 'default' &&
      r.keyed,
  );
  if (p1) {
    const r = pairedRatio(
      p1,
      rows.find((x) => x.cell === p1.cell && x.contender === 'raw-sql'),
    );
    out.push({
      issue: '6',
      what: 'publish P=1 batch=1: relaybus keyed >= 0.9x raw BEGIN/INSERT/COMMIT',
      measured: ratioText(r),
      pass: verdict(r, (v) => v >= 0.9),
    });
  }
  // The fan-out floor writes what the design must write (a delivery row per (event, handler) with relaybus's indexes,
  // the key-order locks and sequence): relaybus's ordinary path against it in every publish cell, keyed like for like.
  for (const row of rows.filter(
    (r) => r.scenario === 'publish' && r.contender === 'relaybus' && r.variant === 'default' && r.keyed,
  )) {
    const floor = fanoutFloor(rows, row.cell, true);
    if (!floor) continue;
    const r = pairedRatio(row, floor);
    out.push({
      issue: '48',
      what: `${row.cell}: relaybus keyed >= 0.9x the fan-out floor`,
      measured: ratioText(r),
      pass: verdict(r, (v) => v >= 0.9),
    });
  }
  for (const row of rows.filter(
    (r) =>
      r.scenario === 'publish' && r.contender === 'relaybus' && r.variant === 'default' && r.cell.endsWith('batch=100'),
  )) {
    const r = pairedRatio(
      row,
      rows.find((x) => x.cell === row.cell && x.contender === 'pg-boss'),
    );
    out.push({
      issue: '6',
      what: `${row.cell}: relaybus ${ordering(row)} >= 1.5x pg-boss`,
      measured: ratioText(r),
      pass: verdict(r, (v) => v >= 1.5),
    });
  }
  return out;
}

function profileSection(rows: readonly Row[]): string[] {
  const out: string[] = [];
  for (const row of rows.filter((r) => r.contender === 'relaybus' && r.scenario === 'dispatch')) {
    const sorted = [...row.valid].sort((a, b) => a.rate - b.rate);
    const mid = sorted[Math.floor(sorted.length / 2)];
    if (!mid?.profile) continue;
    out.push(
      `Client-side statement time of the median ${row.cell} ${label(row)} run (${fmt(mid.rate)} deliveries/s; time from send to result, summed over concurrent calls):`,
      '',
    );
    out.push('| statement | calls | total ms | ms/call | share |', '| --- | --- | --- | --- | --- |');
    for (const p of mid.profile)
      out.push(
        `| ${p.name.replace(/\|/g, '\\|')} | ${fmt(p.count)} | ${fmt(p.ms)} | ${fmt(p.msPerCall, 2)} | ${fmt(p.share * 100, 0)}% |`,
      );
    out.push('');
  }
  return out;
}

function warningsSection(rows: readonly Row[]): string[] {
  const out: string[] = [];
  for (const row of rows) {
    const count = row.runs.reduce((sum, r) => sum + (r.warnings?.count ?? 0), 0);
    if (!count) continue;
    const first = row.runs.flatMap((r) => r.warnings?.first ?? [])[0] ?? '';
    out.push(
      `- ${row.cell}${row.tag ? ` [${row.tag}]` : ''} ${label(row)}: ${count} in ${row.runs.length} runs; first: \`${first.slice(0, 200).replace(/`/g, "'")}\``,
    );
  }
  return out;
}

/** Section titles, shared with bench/readme.ts. */
export const SECTIONS = {
  dispatch: 'Dispatch (preloaded deliveries, two handlers per event, no-op handler)',
  ordering: 'What ordering costs (same cell, keyed and ordered against unkeyed)',
  processes: 'Dispatcher processes (relaybus tuned, keyed)',
  sweep: 'Peers at their best (settings sweep)',
  publish: 'Publish (one caller transaction per call)',
  mixed: 'Mixed (fixed offered rate, commit-to-handler-start latency)',
  liveness: 'Liveness (failing heads with a backlog, healthy keys in the same lanes)',
  targets: 'Targets',
} as const;

function markdown(results: BenchResults): string {
  const rows = rowsOf(results.runs);
  const m = results.machine as Record<string, unknown>;
  const contenders = results.contenders as Record<string, { ordersKeys?: boolean; sweep?: Record<string, unknown> }>;
  const sweepNames = new Set(
    Object.entries(contenders).flatMap(([name, c]) => Object.keys(c.sweep ?? {}).map((v) => `${name}|${v}`)),
  );
  const build = results.build as { commit?: string; uncommitted?: readonly string[]; built?: boolean } | undefined;
  const lines = [
    `# relaybus benchmark: ${results.name}`,
    '',
    `Generated by \`bench/run.ts --mode ${results.mode}\` on ${results.startedAt.slice(0, 10)} in ${fmt(results.durationSeconds)} s. Machine: ${m.cpus} x ${m.cpuModel}, ${m.memoryGiB} GiB, Node ${m.node}${peersText(m.peers)}, ${String(m.postgres).split(' on ')[0]} on the same cores (autovacuum ${m.autovacuum}, synchronous_commit ${m.synchronousCommit}, shared_buffers ${m.sharedBuffers}); load average at the end ${(m.loadAverageAtEnd as number[]).join(' ')}. relaybus ran from dist/${build?.commit ? ` built from ${build.commit}${build.uncommitted?.length ? ` plus ${build.uncommitted.length} uncommitted file(s)` : ''}` : ''}. The machine is shared: read the ratios (paired per repetition, contenders interleaved), not the absolute rates.`,
    '',
    exactnessLine(results.runs),
    '',
    'Timing: every process loads its code, opens its pool\'s connections and runs its library\'s own start-up (migration or version checks) before "go"; the clock starts at "go" (bench/README.md, "When the clock starts"). "first handler ms" is go to the first handler start. WAL: "B/..." is the server-wide LSN delta over the run; "(own)" counts only the WAL records of the benchmark database and the commits of their transactions (pg_walinspect), which excludes other sessions of the shared server. Statements are counted client-side (pg_stat_statements is not in shared_preload_libraries here), BEGIN and COMMIT included. Server CPU is the CPU time of the Postgres processes between the snapshots, from /proc (bench/README.md).',
    '',
  ];
  if (rows.some((r) => r.scenario === 'dispatch')) {
    lines.push(`## ${SECTIONS.dispatch}`, '', ...dispatchTable(rows, contenders, sweepNames), '');
    const ord = orderingTable(rows, contenders);
    if (ord.length) lines.push(`## ${SECTIONS.ordering}`, '', ...ord, '');
    const proc = processTable(rows);
    if (proc.length) lines.push(`## ${SECTIONS.processes}`, '', ...proc, '');
    const sw = sweepTable(rows, results);
    if (sw.length) lines.push(`## ${SECTIONS.sweep}`, '', ...sw, '');
  }
  if (rows.some((r) => r.scenario === 'publish')) lines.push(`## ${SECTIONS.publish}`, '', ...publishTable(rows), '');
  if (rows.some((r) => r.scenario === 'mixed')) lines.push(`## ${SECTIONS.mixed}`, '', ...mixedTable(rows), '');
  if (rows.some((r) => r.scenario === 'liveness'))
    lines.push(`## ${SECTIONS.liveness}`, '', ...livenessTable(rows), '');
  const t = targets(rows);
  if (t.length) {
    lines.push(`## ${SECTIONS.targets}`, '', '| issue | target | measured | |', '| --- | --- | --- | --- |');
    for (const target of t)
      lines.push(
        `| ${target.issue} | ${target.what} | ${target.measured} | ${target.pass === null ? 'n/a' : target.pass ? 'met' : '**not met**'} |`,
      );
    lines.push('');
  }
  const prof = profileSection(rows);
  if (prof.length) lines.push('## Where relaybus spends its time (dispatch)', '', ...prof);
  const warned = warningsSection(rows);
  if (warned.length) lines.push('## Library warnings and errors logged during runs', '', ...warned, '');
  lines.push('Contender settings: see `contenders` in the JSON and bench/README.md.', '');
  return lines.join('\n');
}

const escapeXml = (text: string) => text.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;');

/** Horizontal bars: dispatch deliveries/s (median, min-max whisker) and WAL bytes per delivery, first dispatch cell. */
function svg(results: BenchResults): string {
  const contenders = results.contenders as Record<string, { sweep?: Record<string, unknown> }>;
  const rows = rowsOf(results.runs).filter(
    (r) => r.scenario === 'dispatch' && !(r.variant in (contenders[r.contender]?.sweep ?? {})),
  );
  const cell = rows[0]?.cell ?? 'dispatch';
  const bars = rows
    .filter((r) => r.cell === cell)
    .map((r) => ({
      name: label(r),
      rate: med(r, (x) => x.rate),
      lo: min(r.valid.map((x) => x.rate)),
      hi: max(r.valid.map((x) => x.rate)),
      wal: (() => {
        const own = med(r, (x) => x.db?.ownWalPerUnit);
        return Number.isFinite(own) ? own : med(r, (x) => x.db?.walPerUnit);
      })(),
      relaybus: r.contender === 'relaybus',
    }));
  const width = 900;
  const rowH = 26;
  const top = 64;
  const left = 190;
  const panel = 300;
  const gap = 60;
  const height = top + bars.length * rowH + 50;
  const maxRate = Math.max(1, ...bars.map((b) => (Number.isFinite(b.hi) ? b.hi : 0)));
  const maxWal = Math.max(1, ...bars.map((b) => (Number.isFinite(b.wal) ? b.wal : 0)));
  const parts = [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="${height}" viewBox="0 0 ${width} ${height}" font-family="Helvetica, Arial, sans-serif" font-size="12">`,
    `<rect width="${width}" height="${height}" fill="#ffffff"/>`,
    `<text x="${left}" y="22" font-size="15" font-weight="bold">${escapeXml(`${cell}: deliveries/s and WAL per delivery`)}</text>`,
    `<text x="${left}" y="40" fill="#555">${escapeXml(`median of valid runs, whiskers min-max; ${results.name}, ${results.startedAt.slice(0, 10)}`)}</text>`,
    `<text x="${left}" y="${top - 6}" font-weight="bold">deliveries/s (higher is better)</text>`,
    `<text x="${left + panel + gap}" y="${top - 6}" font-weight="bold">WAL bytes per delivery (lower is better)</text>`,
  ];
  bars.forEach((b, index) => {
    const y = top + index * rowH;
    const color = b.relaybus ? '#1f6feb' : '#8c959f';
    parts.push(`<text x="${left - 8}" y="${y + 16}" text-anchor="end">${escapeXml(b.name)}</text>`);
    if (Number.isFinite(b.rate)) {
      const w = (b.rate / maxRate) * panel;
      parts.push(`<rect x="${left}" y="${y + 4}" width="${w.toFixed(1)}" height="${rowH - 10}" fill="${color}"/>`);
      const lo = left + (b.lo / maxRate) * panel;
      const hi = left + (b.hi / maxRate) * panel;
      parts.push(
        `<line x1="${lo.toFixed(1)}" x2="${hi.toFixed(1)}" y1="${y + rowH / 2 - 1}" y2="${y + rowH / 2 - 1}" stroke="#24292f" stroke-width="1.5"/>`,
      );
      parts.push(
        `<text x="${(Math.max(left + w, hi) + 4).toFixed(1)}" y="${y + 16}" fill="#24292f">${fmt(b.rate)}</text>`,
      );
    } else {
      parts.push(`<text x="${left + 4}" y="${y + 16}" fill="#cf222e">no valid run</text>`);
    }
    if (Number.isFinite(b.wal)) {
      const w = (b.wal / maxWal) * (panel - 50);
      parts.push(
        `<rect x="${left + panel + gap}" y="${y + 4}" width="${w.toFixed(1)}" height="${rowH - 10}" fill="${color}"/>`,
      );
      parts.push(
        `<text x="${(left + panel + gap + w + 4).toFixed(1)}" y="${y + 16}" fill="#24292f">${fmt(b.wal)}</text>`,
      );
    }
  });
  parts.push(`<line x1="${left}" x2="${left}" y1="${top}" y2="${top + bars.length * rowH}" stroke="#24292f"/>`);
  parts.push(
    `<line x1="${left + panel + gap}" x2="${left + panel + gap}" y1="${top}" y2="${top + bars.length * rowH}" stroke="#24292f"/>`,
  );
  parts.push(
    `<text x="${left}" y="${height - 16}" fill="#555">${escapeXml('Exactness validated in every run; INVALID runs are not drawn. Same machine, interleaved runs: compare ratios.')}</text>`,
  );
  parts.push('</svg>', '');
  return parts.join('\n');
}

/** Write <name>.json, .md, .svg into `dir` (or at `name` itself when it is an absolute path); returns the paths. */
export function writeReport(results: BenchResults, dir: URL): string[] {
  const base = isAbsolute(results.name) ? results.name : fileURLToPath(new URL(`./${results.name}`, dir));
  const json = base + '.json';
  const md = base + '.md';
  const chart = base + '.svg';
  writeFileSync(json, JSON.stringify(results, null, 1) + '\n');
  writeFileSync(md, markdown(results));
  writeFileSync(chart, svg(results));
  return [json, md, chart];
}
