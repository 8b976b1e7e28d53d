/**
 * Turns the runs of one benchmark into bench/results/<name>.json (everything, INVALID runs
 * included), <name>.md (tables of the VALID runs: median with min-max, paired ratios, the issue's
 * targets) and <name>.svg (dispatch throughput and WAL per delivery, hand-written SVG).
 */
import { isAbsolute } from 'node:path';
import { writeFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import type { RunRecord } from './scenarios/common.js';
import { max, min } from './lib/stats.js';
import {
  LIVENESS_REFERENCE,
  type Row,
  bestRow,
  coresBusy,
  dispatcherCpu,
  drainedRate,
  exactnessLine,
  fanoutFloor,
  findRow,
  fmt,
  label,
  lagText,
  med,
  oneProcessOnShare,
  orderedText,
  pairedRatio,
  peerAtProcesses,
  peersText,
  processCells,
  ratioText,
  relaybusRef,
  retryLag,
  rowsOf,
  serverCpu,
  spread,
  validity,
} from './lib/report-rows.js';
import { targets } from './lib/report-targets.js';

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
