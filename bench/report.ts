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
  readonly plan: unknown;
  readonly contenders: unknown;
  readonly runs: readonly RunRecord[];
}

interface Row {
  readonly cell: string;
  readonly scenario: string;
  readonly contender: string;
  readonly variant: string;
  readonly runs: readonly RunRecord[];
  readonly valid: readonly RunRecord[];
}

const label = (row: { contender: string; variant: string }) => (row.variant === 'default' ? row.contender : `${row.contender} ${row.variant}`);

function rowsOf(runs: readonly RunRecord[]): Row[] {
  const map = new Map<string, Row>();
  for (const run of runs) {
    const key = `${run.cell}|${run.contender}|${run.variant}`;
    const row = map.get(key) ?? { cell: run.cell, scenario: run.scenario, contender: run.contender, variant: run.variant, runs: [], valid: [] };
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

const med = (row: Row, pick: (run: RunRecord) => number | null | undefined): number =>
  median(row.valid.map(pick).filter((v): v is number => typeof v === 'number'));

/** Median over repetitions of a / b, pairing runs of the same repetition (both valid); falls back to ratio of medians. */
export function pairedRatio(a: Row | undefined, b: Row | undefined): number {
  if (!a || !b) return NaN;
  const ratios: number[] = [];
  for (const run of a.valid) {
    const other = b.valid.find((r) => r.rep === run.rep);
    if (other && other.rate > 0) ratios.push(run.rate / other.rate);
  }
  if (ratios.length) return median(ratios);
  return med(a, (r) => r.rate) / med(b, (r) => r.rate);
}

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
  const lost = checked.reduce((s, r) => s + r.exactness.lost, 0);
  let line = `**Exactness: ${valid} of ${runs.length} runs VALID** (dispatch and mixed: lost ${lost}, duplicates ${dup}, per-key order violations ${order} in total; every run also checked nothing pending and no dead letters).`;
  if (invalid.length) {
    line += ' INVALID (left out of every table): ' + invalid.map((r) => `${r.cell} ${label(r)} rep ${r.rep}: ${r.exactness.reasons.join(', ') || 'failed'}`).join('; ') + '.';
  }
  return line;
}

function findRow(rows: readonly Row[], cell: string, contender: string, variant: string): Row | undefined {
  return rows.find((r) => r.cell === cell && r.contender === contender && r.variant === variant);
}

function publishTable(rows: readonly Row[]): string[] {
  const out = ['| cell | contender | events/s median (min-max) | vs raw-sql | call p50 / p99 ms | WAL B/event (own) | stmts/event | valid |', '| --- | --- | --- | --- | --- | --- | --- | --- |'];
  for (const row of rows.filter((r) => r.scenario === 'publish')) {
    const raw = findRow(rows, row.cell, 'raw-sql', 'default');
    out.push(`| ${row.cell} | ${label(row)} | ${spread(row.valid.map((r) => r.rate))} | ${ratioText(pairedRatio(row, raw))} | ${fmt(med(row, (r) => r.figures.callP50Ms), 2)} / ${fmt(med(row, (r) => r.figures.callP99Ms), 2)} | ${fmt(med(row, (r) => r.db?.walPerUnit))} (${fmt(med(row, (r) => r.db?.ownWalPerUnit))}) | ${fmt(med(row, (r) => r.db?.statementsPerUnit), 2)} | ${validity(row)} |`);
  }
  return out;
}

function dispatchTable(rows: readonly Row[]): string[] {
  const out = [
    '| cell | contender | deliveries/s median (min-max) | relaybus (same settings) / this | WAL B/delivery (own) | delivery updates/delivery | lane HOT % | dead tuples after | stmts/delivery | dispatcher CPU µs/delivery | valid |',
    '| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |',
  ];
  for (const row of rows.filter((r) => r.scenario === 'dispatch')) {
    const ref = findRow(rows, row.cell, 'relaybus', row.variant) ?? findRow(rows, row.cell, 'relaybus', 'tuned');
    const hot = med(row, (r) => r.db?.laneHotShare);
    out.push(`| ${row.cell} | ${label(row)} | ${spread(row.valid.map((r) => r.rate))} | ${ratioText(pairedRatio(ref, row))} | ${fmt(med(row, (r) => r.db?.walPerUnit))} (${fmt(med(row, (r) => r.db?.ownWalPerUnit))}) | ${fmt(med(row, (r) => r.db?.updatesPerUnit), 2)} | ${Number.isFinite(hot) ? fmt(hot * 100, 1) : 'n/a'} | ${fmt(med(row, (r) => r.db?.deadTuplesAfter))} | ${fmt(med(row, (r) => r.db?.statementsPerUnit), 3)} | ${fmt(med(row, (r) => r.figures.dispatcherCpuUsPerDelivery), 1)} | ${validity(row)} |`);
  }
  return out;
}

function mixedTable(rows: readonly Row[]): string[] {
  const out = [
    '| cell | contender | achieved deliveries/s (offered) | e2e p50 / p95 / p99 ms | backlog max | WAL B/delivery (own) | stmts/delivery | valid |',
    '| --- | --- | --- | --- | --- | --- | --- | --- |',
  ];
  for (const row of rows.filter((r) => r.scenario === 'mixed')) {
    out.push(`| ${row.cell} | ${label(row)} | ${spread(row.valid.map((r) => r.rate))} (${fmt(med(row, (r) => r.figures.offeredDeliveriesPerSec))}) | ${fmt(med(row, (r) => r.figures.latencyP50Ms), 1)} / ${fmt(med(row, (r) => r.figures.latencyP95Ms), 1)} / ${fmt(med(row, (r) => r.figures.latencyP99Ms), 1)} | ${fmt(med(row, (r) => r.figures.backlogMax))} | ${fmt(med(row, (r) => r.db?.walPerUnit))} (${fmt(med(row, (r) => r.db?.ownWalPerUnit))}) | ${fmt(med(row, (r) => r.db?.statementsPerUnit), 3)} | ${validity(row)} |`);
  }
  return out;
}

interface Target { readonly what: string; readonly measured: string; readonly pass: boolean | null }

function targets(rows: readonly Row[]): Target[] {
  const out: Target[] = [];
  const cells = [...new Set(rows.filter((r) => r.scenario === 'dispatch' && r.cell.endsWith('D=1') && r.contender === 'raw-sql').map((r) => r.cell))];
  for (const cell of cells) {
    const rb = findRow(rows, cell, 'relaybus', 'tuned');
    if (!rb) continue;
    const check = (what: string, other: Row | undefined, need: number) => {
      const ratio = pairedRatio(rb, other);
      out.push({ what: `${cell}: relaybus tuned >= ${need}x ${other ? label(other) : what}`, measured: ratioText(ratio), pass: Number.isFinite(ratio) ? ratio >= need : null });
    };
    check('graphile-worker tuned', findRow(rows, cell, 'graphile-worker', 'tuned'), 2);
    check('pg-boss tuned', findRow(rows, cell, 'pg-boss', 'tuned'), 3);
    check('raw-sql floor', findRow(rows, cell, 'raw-sql', 'floor'), 0.6);
    const own = med(rb, (r) => r.db?.ownWalPerUnit);
    const wal = Number.isFinite(own) ? own : med(rb, (r) => r.db?.walPerUnit);
    out.push({ what: `${cell}: relaybus WAL <= 120 B/delivery`, measured: `${fmt(wal)} B${Number.isFinite(own) ? ' (own)' : ''}`, pass: Number.isFinite(wal) ? wal <= 120 : null });
    const upd = med(rb, (r) => r.db?.updatesPerUnit);
    out.push({ what: `${cell}: relaybus delivery updates = 0`, measured: fmt(upd, 3), pass: Number.isFinite(upd) ? upd === 0 : null });
    const hot = med(rb, (r) => r.db?.laneHotShare);
    out.push({ what: `${cell}: relaybus lane updates >= 95% HOT`, measured: `${fmt(hot * 100, 1)}%`, pass: Number.isFinite(hot) ? hot >= 0.95 : null });
  }
  const small = cells.find((c) => c.includes('N=50000 '));
  const large = cells.find((c) => c.includes('N=200000 '));
  if (small && large) {
    const a = med(findRow(rows, small, 'relaybus', 'tuned')!, (r) => r.rate);
    const b = med(findRow(rows, large, 'relaybus', 'tuned')!, (r) => r.rate);
    out.push({ what: 'relaybus tuned: no slowdown from 50k to 200k', measured: `200k / 50k = ${ratioText(b / a)}`, pass: Number.isFinite(a / b) ? b / a >= 0.9 : null });
  }
  const p1 = rows.find((r) => r.scenario === 'publish' && r.cell === 'publish P=1 batch=1' && r.contender === 'relaybus');
  if (p1) {
    const ratio = pairedRatio(p1, findRow(rows, p1.cell, 'raw-sql', 'default'));
    out.push({ what: 'publish P=1 batch=1: relaybus >= 0.9x raw BEGIN/INSERT/COMMIT', measured: ratioText(ratio), pass: Number.isFinite(ratio) ? ratio >= 0.9 : null });
  }
  for (const row of rows.filter((r) => r.scenario === 'publish' && r.contender === 'relaybus' && r.cell.endsWith('batch=100'))) {
    const ratio = pairedRatio(row, findRow(rows, row.cell, 'pg-boss', 'default'));
    out.push({ what: `${row.cell}: relaybus >= 1.5x pg-boss`, measured: ratioText(ratio), pass: Number.isFinite(ratio) ? ratio >= 1.5 : null });
  }
  return out;
}

function profileSection(rows: readonly Row[]): string[] {
  const out: string[] = [];
  for (const row of rows.filter((r) => r.contender === 'relaybus' && r.scenario === 'dispatch')) {
    const sorted = [...row.valid].sort((a, b) => a.rate - b.rate);
    const mid = sorted[Math.floor(sorted.length / 2)];
    if (!mid?.profile) continue;
    out.push(`Client-side statement time of the median ${row.cell} ${label(row)} run (${fmt(mid.rate)} deliveries/s; time from send to result, summed over concurrent calls):`, '');
    out.push('| statement | calls | total ms | ms/call | share |', '| --- | --- | --- | --- | --- |');
    for (const p of mid.profile) out.push(`| ${p.name.replace(/\|/g, '\\|')} | ${fmt(p.count)} | ${fmt(p.ms)} | ${fmt(p.msPerCall, 2)} | ${fmt(p.share * 100, 0)}% |`);
    out.push('');
  }
  return out;
}

function markdown(results: BenchResults): string {
  const rows = rowsOf(results.runs);
  const m = results.machine as Record<string, unknown>;
  const lines = [
    `# relaybus benchmark: ${results.name}`,
    '',
    `Generated by \`bench/run.ts --mode ${results.mode}\` on ${results.startedAt.slice(0, 10)} in ${fmt(results.durationSeconds)} s. Machine: ${m.cpus} x ${m.cpuModel}, ${m.memoryGiB} GiB, Node ${m.node}, ${String(m.postgres).split(' on ')[0]} on the same cores (autovacuum ${m.autovacuum}, synchronous_commit ${m.synchronousCommit}, shared_buffers ${m.sharedBuffers}); load average at the end ${(m.loadAverageAtEnd as number[]).join(' ')}. The machine is shared: read the ratios (paired per repetition, contenders interleaved), not the absolute rates.`,
    '',
    exactnessLine(results.runs),
    '',
    'WAL: "B/..." is the server-wide LSN delta over the run; "(own)" counts only the WAL records of the benchmark database and the commits of their transactions (pg_walinspect), which excludes other sessions of the shared server. Statements are counted client-side (pg_stat_statements is not in shared_preload_libraries here), BEGIN and COMMIT included.',
    '',
  ];
  if (rows.some((r) => r.scenario === 'dispatch')) lines.push('## Dispatch (preloaded deliveries, two handlers per event, keyed, no-op handler)', '', ...dispatchTable(rows), '');
  if (rows.some((r) => r.scenario === 'publish')) lines.push('## Publish (keyed events, one caller transaction per call)', '', ...publishTable(rows), '');
  if (rows.some((r) => r.scenario === 'mixed')) lines.push('## Mixed (fixed offered rate, commit-to-handler-start latency)', '', ...mixedTable(rows), '');
  const t = targets(rows);
  if (t.length) {
    lines.push('## Issue 6 targets', '', '| target | measured | |', '| --- | --- | --- |');
    for (const target of t) lines.push(`| ${target.what} | ${target.measured} | ${target.pass === null ? 'n/a' : target.pass ? 'met' : '**not met**'} |`);
    lines.push('');
  }
  const prof = profileSection(rows);
  if (prof.length) lines.push('## Where relaybus spends its time (dispatch)', '', ...prof);
  lines.push('Contender settings: see `contenders` in the JSON and bench/README.md.', '');
  return lines.join('\n');
}

const escapeXml = (text: string) => text.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;');

/** Horizontal bars: dispatch deliveries/s (median, min-max whisker) and WAL bytes per delivery, first dispatch cell. */
function svg(results: BenchResults): string {
  const rows = rowsOf(results.runs).filter((r) => r.scenario === 'dispatch');
  const cell = rows[0]?.cell ?? 'dispatch';
  const bars = rows.filter((r) => r.cell === cell).map((r) => ({
    name: label(r), rate: med(r, (x) => x.rate), lo: min(r.valid.map((x) => x.rate)), hi: max(r.valid.map((x) => x.rate)),
    wal: (() => { const own = med(r, (x) => x.db?.ownWalPerUnit); return Number.isFinite(own) ? own : med(r, (x) => x.db?.walPerUnit); })(),
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
      parts.push(`<line x1="${lo.toFixed(1)}" x2="${hi.toFixed(1)}" y1="${y + rowH / 2 - 1}" y2="${y + rowH / 2 - 1}" stroke="#24292f" stroke-width="1.5"/>`);
      parts.push(`<text x="${(Math.max(left + w, hi) + 4).toFixed(1)}" y="${y + 16}" fill="#24292f">${fmt(b.rate)}</text>`);
    } else {
      parts.push(`<text x="${left + 4}" y="${y + 16}" fill="#cf222e">no valid run</text>`);
    }
    if (Number.isFinite(b.wal)) {
      const w = (b.wal / maxWal) * (panel - 50);
      parts.push(`<rect x="${left + panel + gap}" y="${y + 4}" width="${w.toFixed(1)}" height="${rowH - 10}" fill="${color}"/>`);
      parts.push(`<text x="${(left + panel + gap + w + 4).toFixed(1)}" y="${y + 16}" fill="#24292f">${fmt(b.wal)}</text>`);
    }
  });
  parts.push(`<line x1="${left}" x2="${left}" y1="${top}" y2="${top + bars.length * rowH}" stroke="#24292f"/>`);
  parts.push(`<line x1="${left + panel + gap}" x2="${left + panel + gap}" y1="${top}" y2="${top + bars.length * rowH}" stroke="#24292f"/>`);
  parts.push(`<text x="${left}" y="${height - 16}" fill="#555">${escapeXml('Exactness validated in every run; INVALID runs are not drawn. Same machine, interleaved runs: compare ratios.')}</text>`);
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
