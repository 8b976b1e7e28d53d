/**
 * The rows of a benchmark's report (the runs of one cell, contender, variant and ordering) and the figures read from
 * them: shared by the tables (bench/report.ts) and the targets (report-targets.ts).
 */
import type { RunRecord } from '../scenarios/common.js';
import { max, median, min } from './stats.js';

export interface Row {
  readonly cell: string;
  readonly scenario: string;
  readonly contender: string;
  readonly variant: string;
  readonly keyed: boolean;
  readonly tag: string | undefined;
  readonly runs: readonly RunRecord[];
  readonly valid: readonly RunRecord[];
}

export const ordering = (row: { keyed: boolean }) => (row.keyed ? 'keyed' : 'unkeyed');
export const label = (row: { contender: string; variant: string; keyed: boolean }) =>
  `${row.variant === 'default' ? row.contender : `${row.contender} ${row.variant}`}, ${ordering(row)}`;

export function rowsOf(runs: readonly RunRecord[]): Row[] {
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

export const fmt = (value: number, digits = 0): string => {
  if (!Number.isFinite(value)) return '-';
  return value.toLocaleString('en-US', { minimumFractionDigits: digits, maximumFractionDigits: digits });
};

export function spread(values: readonly number[], digits = 0): string {
  if (values.length === 0) return 'no valid run';
  if (values.length === 1) return `**${fmt(values[0]!, digits)}**`;
  return `**${fmt(median(values), digits)}** (${fmt(min(values), digits)}-${fmt(max(values), digits)})`;
}

export const med = (row: Row | undefined, pick: (run: RunRecord) => number | null | undefined): number =>
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
export const dispatcherCpu = (row: Row | undefined) => med(row, (r) => r.figures.dispatcherCpuUsPerDelivery);
export const serverCpu = (row: Row | undefined) => med(row, (r) => r.db?.serverCpuUsPerUnit);
export const drainedRate = (run: RunRecord) => run.figures.drainedRate;
/**
 * Cores the dispatcher processes and the Postgres server kept busy during a drain (deliveries/s x their CPU per
 * delivery), median over runs: near the machine's core count, more processes cannot add throughput, only their own
 * costs (the bench's own processes and the system come on top).
 */
export const coresBusy = (row: Row | undefined) =>
  med(row, (r) =>
    r.db?.serverCpuUsPerUnit == null || r.figures.dispatcherCpuUsPerDelivery == null
      ? undefined
      : (r.rate * (r.figures.dispatcherCpuUsPerDelivery + r.db.serverCpuUsPerUnit)) / 1e6,
  );

export const ratioText = (value: number) => (Number.isFinite(value) ? `${value.toFixed(2)}x` : '-');

export function validity(row: Row): string {
  return `${row.valid.length}/${row.runs.length}`;
}

export function exactnessLine(runs: readonly RunRecord[]): string {
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

export function findRow(
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
export function bestRow(rows: readonly Row[], cell: string, contender: string, keyed?: boolean): Row | undefined {
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
export function peersText(peers: unknown): string {
  if (!peers || typeof peers !== 'object') return '';
  const list = Object.entries(peers as Record<string, string>).map(([name, version]) => `${name} ${version}`);
  return list.length ? ` (peers: ${list.join(', ')})` : '';
}

/** A peer's row with the lowest median p99 in a latency cell (its best setting for latency, whatever its rate). */
export function lowestLatencyRow(rows: readonly Row[], cell: string, contender: string): Row | undefined {
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
export function orderedText(row: Row, contenders: Record<string, { ordersKeys?: boolean; ordered?: boolean }>): string {
  if (!row.keyed) return 'unkeyed';
  const c = contenders[row.contender];
  return (c?.ordersKeys ?? c?.ordered) ? 'keyed, ordered' : 'keyed, not ordered';
}

/**
 * Publish rows: each against the two raw floors and pg-boss of its cell, and relaybus's other publish
 * paths (variants) against relaybus's default path with the same keyed-ness (paired per repetition).
 * The fan-out floor is taken with the row's keyed-ness where it ran so (else keyed: the work the design must do).
 */
/** The fan-out floor's row of a publish cell: keyed or unkeyed as asked where it ran so, else the keyed one. */
export function fanoutFloor(rows: readonly Row[], cell: string, keyed: boolean): Row | undefined {
  const floors = rows.filter((r) => r.scenario === 'publish' && r.cell === cell && r.contender === 'raw-fanout');
  return floors.find((r) => r.keyed === keyed) ?? floors.find((r) => r.keyed);
}

/** relaybus's reference row for a ratio: same variant family and the same keyed-ness when it ran so, else keyed. */
export function relaybusRef(rows: readonly Row[], row: Row): Row | undefined {
  const variant = row.variant === 'defaults' ? 'defaults' : 'tuned';
  return findRow(rows, row.cell, 'relaybus', variant, row.keyed) ?? findRow(rows, row.cell, 'relaybus', variant, true);
}

/** Dispatch cells of one N with 1, 2, 4 processes: relaybus tuned keyed. */
export function processCells(rows: readonly Row[]): { n: string; byD: Map<number, Row> }[] {
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
export function oneProcessOnShare(rows: readonly Row[], deliveries: number, processes: number): Row | undefined {
  if (processes <= 1 || deliveries % processes !== 0) return undefined;
  return findRow(rows, `dispatch N=${deliveries / processes} D=1`, 'relaybus', 'tuned', true);
}

/** graphile-worker at its best in a process-count cell of the same run (the same processes on the same cores), if it ran. */
export function peerAtProcesses(rows: readonly Row[], deliveries: string, processes: number): Row | undefined {
  return findRow(rows, `dispatch N=${deliveries} D=${processes}`, 'graphile-worker', 'best', false);
}

/** The liveness arm every other arm is compared with (scenarios/liveness.ts LIVENESS_REFERENCE). */
export const LIVENESS_REFERENCE = 'healthy keys only';

/** A liveness row's retry lag, p50 (median over runs) and max (over runs): from the due time its library set, or else
 * from the throw + backoff (`from: 'throw'`). */
export function retryLag(row: Row, from: 'due' | 'throw'): { p50: number; max: number } {
  const [p50Of, maxOf] =
    from === 'due'
      ? (['retryDueLagP50Ms', 'retryDueLagMaxMs'] as const)
      : (['retryLagP50Ms', 'retryLagMaxMs'] as const);
  return {
    p50: med(row, (r) => r.figures[p50Of]),
    max: max(row.valid.map((r) => r.figures[maxOf]).filter((v): v is number => typeof v === 'number')),
  };
}

export const lagText = (lag: { p50: number; max: number }): string => `${fmt(lag.p50, 1)} / ${fmt(lag.max, 1)}`;
