import { setTimeout as sleep } from 'node:timers/promises';
import {
  SchemaMismatchError,
  type HandlerStatistics,
  type PausedHandler,
  type Statistics,
  type Store,
  type SubscriptionView,
} from '../../index.js';
import {
  DATABASE_FLAGS,
  durationFlag,
  HELP_FLAG,
  JSON_FLAG,
  optionalValue,
  parseFlags,
  renderHelp,
  VERBOSE_FLAG,
  wrap,
  type FlagSpecs,
} from '../args.js';
import { withAdminStore } from '../admin-store.js';
import { ExitCode, writeLine, type Command, type OutputStream } from '../command.js';
import { formatDuration, parseDuration } from '../duration.js';
import { onShutdownSignals } from '../signals.js';
import { renderTable, truncate, type Column } from '../table.js';
import { replayJson, runningReplays, runningReplaysNote } from '../replay-views.js';
import { isStale, STALE_AFTER_MS } from './subscriptions.js';

/**
 * `relaybus stats`: per-handler counts from `store.statistics()` as an aligned table or JSON;
 * `--watch` refreshes them in place (a TTY) or prints one block (one JSON line) per refresh.
 */

/** Refresh interval of `--watch` without a value. */
export const DEFAULT_WATCH_MS = 2_000;

const FLAGS = {
  ...DATABASE_FLAGS,
  ...JSON_FLAG,
  watch: {
    type: 'string',
    value: 'interval',
    description: `Refresh every interval until Ctrl-C (the value is optional: --watch alone refreshes every ${DEFAULT_WATCH_MS / 1000}s; --watch 500ms), within 100 columns, with a warning when deliveries are due and no lane is leased (no worker is claiming). With --json: one JSON line per refresh, with "warning" then.`,
  },
  ...VERBOSE_FLAG,
  ...HELP_FLAG,
} as const satisfies FlagSpecs;

type Row = { readonly handler: string; readonly paused?: boolean } & HandlerStatistics;

/** What follows the name of a paused handler in the table. */
const PAUSED_LABEL = ' (paused)';

const COLUMNS: readonly Column<Row>[] = [
  {
    header: 'handler',
    value: (row) => (row.paused === true ? `${row.handler}${PAUSED_LABEL}` : row.handler),
    shrink: true,
  },
  { header: 'pending', align: 'right', value: (row) => String(row.pending) },
  { header: 'due', align: 'right', value: (row) => String(row.due) },
  { header: 'scheduled', align: 'right', value: (row) => String(row.scheduled) },
  { header: 'in flight', align: 'right', value: (row) => String(row.inFlight) },
  { header: 'dead', align: 'right', value: (row) => String(row.dead) },
  {
    header: 'oldest due',
    align: 'right',
    value: (row) => (row.oldestDueAgeMs === null ? '-' : formatDuration(row.oldestDueAgeMs)),
  },
];

/** Width `--watch` keeps every line within. */
export const WATCH_WIDTH = 100;

/**
 * The warning `--watch` shows when deliveries are due and no lane is leased: no worker is claiming
 * (none runs, or every one is stuck, e.g. on an unreachable database). Undefined otherwise.
 */
export function noWorkerWarning(stats: Statistics): string | undefined {
  if (stats.due === 0 || stats.lanesLeased > 0) return undefined;
  const age = stats.oldestDueAgeMs === null ? '' : `, the oldest for ${formatDuration(stats.oldestDueAgeMs)}`;
  return `WARNING: ${stats.due} ${stats.due === 1 ? 'delivery is' : 'deliveries are'} due${age}, and no lane is leased: no worker is claiming. Start one (relaybus worker), or check the workers' logs: they may all be stuck.`;
}

/** What marks the rows of handlers no live worker runs, and starts the note below the table. */
const NO_LIVE_WORKER_MARK = '*';

/**
 * The statistics as table lines: one row per handler, then a total row when there are several; the handler column is
 * cut to fit `maxWidth`. The rows of the `marked` handlers end in a mark (see `noLiveWorker`); the names of the `paused`
 * ones are followed by "(paused)".
 */
export function statisticsTable(
  stats: Statistics,
  maxWidth?: number,
  marked: ReadonlySet<string> = new Set(),
  paused: ReadonlySet<string> = new Set(),
): string[] {
  const rows: Row[] = Object.entries(stats.handlers)
    .sort(([a], [b]) => a.localeCompare(b))
    .map(([handler, counts]) => ({ handler, ...counts, paused: paused.has(handler) }));
  if (rows.length === 0) return ['no deliveries: nothing pending, in flight or dead'];
  // Lines 1..handlers are the handlers' rows (a handler may be called "total" too: the total row is never marked).
  const handlers = rows.length;
  if (rows.length > 1) rows.push({ handler: 'total', ...stats });
  const isMarked = (line: number) => line >= 1 && line <= handlers && marked.has(rows[line - 1]!.handler);
  const mark = rows.some((_, i) => isMarked(i + 1));
  const lines = renderTable(
    COLUMNS,
    rows,
    mark && maxWidth !== undefined ? maxWidth - NO_LIVE_WORKER_MARK.length - 1 : maxWidth,
  );
  // Every line of the table has the same length (the last column is right-aligned), so the marks line up.
  return lines.map((line, i) => (isMarked(i) ? `${line} ${NO_LIVE_WORKER_MARK}` : line));
}

/**
 * The handlers with pending deliveries that no live worker runs: none of their subscriptions was refreshed within
 * `STALE_AFTER_MS` of `now`, or they have none. Undefined when that cannot be told: no subscription at all
 * (no worker of a relaybus that records them has started, e.g. during a rolling upgrade).
 */
export function noLiveWorker(
  stats: Statistics,
  subscriptions: readonly SubscriptionView[],
  now: number,
): string[] | undefined {
  if (subscriptions.length === 0) return undefined;
  const live = new Set(
    subscriptions.filter((subscription) => !isStale(subscription, now)).map((subscription) => subscription.handler),
  );
  return Object.entries(stats.handlers)
    .filter(([handler, counts]) => counts.pending > 0 && !live.has(handler))
    .map(([handler]) => handler)
    .sort((a, b) => a.localeCompare(b));
}

/** The note below the table naming the handlers no live worker runs; undefined when there are none. */
export function noLiveWorkerNote(handlers: readonly string[] | undefined): string | undefined {
  if (handlers === undefined || handlers.length === 0) return undefined;
  const one = handlers.length === 1;
  return (
    `${NO_LIVE_WORKER_MARK} no live worker runs ${handlers.join(', ')}: ${one ? 'its' : 'their'} deliveries wait, and no worker has refreshed a subscription of ${one ? 'it' : 'them'} ` +
    `in the last ${formatDuration(STALE_AFTER_MS)} (relaybus subscriptions list shows them). Start a worker that registers ${one ? 'it' : 'them'}.`
  );
}

/** The subscriptions, or undefined for a schema older than the subscriptions table: stats then shows no mark. */
async function recordedSubscriptions(
  store: Pick<Store<unknown>, 'listSubscriptions'>,
): Promise<SubscriptionView[] | undefined> {
  try {
    return await store.listSubscriptions();
  } catch (error) {
    if (error instanceof SchemaMismatchError) return undefined;
    throw error;
  }
}

/**
 * The paused handlers (`relaybus handlers pause`), or undefined for a schema older than their table (migration 0004):
 * stats then marks none.
 */
export async function pausedHandlers(
  store: Pick<Store<unknown>, 'listPausedHandlers'>,
): Promise<PausedHandler[] | undefined> {
  try {
    return await store.listPausedHandlers();
  } catch (error) {
    if (error instanceof SchemaMismatchError) return undefined;
    throw error;
  }
}

/** The note below the table naming the paused handlers (those without deliveries too); undefined when none is. */
export function pausedNote(paused: readonly PausedHandler[] | undefined): string | undefined {
  if (paused === undefined || paused.length === 0) return undefined;
  const names = paused.map((entry) => entry.handler).join(', ');
  return `paused: ${names}: no worker claims ${paused.length === 1 ? 'its' : 'their'} deliveries, which wait until relaybus handlers resume (relaybus handlers list says since when and why).`;
}

/** One handler's figures in `relaybus stats --json` (and the dashboard's API). */
export interface HandlerStatisticsJson extends Omit<HandlerStatistics, 'completed'> {
  /**
   * Deliveries in the completion history; null while that history holds no row. Completed deliveries are deleted, and
   * only workers whose store has `completionHistory: true` record them: without it the count would always read 0.
   */
  readonly completed: number | null;
  /** Present, true, when the handler is paused (`relaybus handlers pause`). */
  readonly paused?: true;
}

/** What `relaybus stats --json` prints: the totals, then per handler. */
export interface StatisticsJson extends HandlerStatisticsJson {
  readonly schema: string;
  /** When the figures were read (ISO 8601). */
  readonly at: string;
  readonly lanesLeased: number;
  readonly handlers: Readonly<Record<string, HandlerStatisticsJson>>;
}

/**
 * Statistics as JSON-ready data (plain numbers, no Dates). `completed` is null everywhere while the completion history
 * is empty: the admin commands cannot know whether the workers keep one (it is an option of their store), and a 0
 * there would read as "nothing completed".
 */
export function statisticsJson(
  stats: Statistics,
  schema: string,
  at: Date,
  paused: ReadonlySet<string> = new Set(),
): StatisticsJson {
  const recorded = stats.completed > 0;
  const completed = (count: number): number | null => (recorded ? count : null);
  const { handlers, ...totals } = stats;
  return {
    schema,
    at: at.toISOString(),
    ...totals,
    completed: completed(totals.completed),
    handlers: Object.fromEntries(
      Object.entries(handlers).map(([name, counts]) => [
        name,
        { ...counts, completed: completed(counts.completed), ...(paused.has(name) ? { paused: true as const } : {}) },
      ]),
    ),
  };
}

function isInterval(arg: string): boolean {
  return parseDuration(arg) !== undefined;
}

/** Rewrites what was printed last time on a TTY (counting lines the terminal wrapped); appends elsewhere. */
function screen(stream: OutputStream): (lines: readonly string[]) => void {
  let previous = 0;
  return (lines) => {
    if (stream.isTTY) {
      const columns = stream.columns !== undefined && stream.columns > 0 ? stream.columns : 80;
      if (previous > 0) stream.write(`\x1b[${previous}A\r\x1b[J`);
      previous = lines.reduce((rows, line) => rows + Math.max(1, Math.ceil(line.length / columns)), 0);
    } else if (previous++ > 0) {
      stream.write('\n');
    }
    stream.write(lines.join('\n') + '\n');
  };
}

/** `relaybus stats`. */
export const statsCommand: Command = {
  name: 'stats',
  summary: 'Per handler: pending, due, in flight, dead, oldest due age.',
  help: renderHelp({
    usage: ['relaybus stats [options]', 'relaybus stats --watch [interval] [--json]'],
    description:
      'Count the deliveries of every handler: pending (not in flight: due now or scheduled for later, e.g. backing off), due, scheduled, in flight (claimed by a worker), dead (out of attempts, waiting for relaybus dead requeue) and the age of the oldest due delivery, the lag to watch. The header names the leased lanes (workers holding live leases). ' +
      `A handler with pending deliveries whose subscriptions are all stale (no worker refreshed them in the last ${formatDuration(STALE_AFTER_MS)}) or missing is marked ${NO_LIVE_WORKER_MARK}: no live worker runs it (with --json: its name in "noLiveWorker"). There is no mark, and no "noLiveWorker", while no subscription at all is recorded. ` +
      'The name of a paused handler (relaybus handlers pause) is followed by "(paused)", and a note below the table names every paused handler (with --json: "paused": true on the handler, and their names in "paused"). ' +
      'Running replays (relaybus replay) are listed below the table with their deliveries created of those planned, and a warning when one has not moved for a minute: nobody drives it, and the live keyed deliveries of its handlers wait (with --json: "replays"). ' +
      'With --json also "completed": the deliveries in the completion history, null while it holds none (completed deliveries are deleted; workers record them only with completionHistory: true).',
    flags: FLAGS,
    sections: [
      {
        title: 'Exit codes',
        lines: ['0  printed (or --watch stopped with Ctrl-C)', '1  the database failed', '2  usage error'],
      },
      {
        title: 'Examples',
        lines: ['relaybus stats', 'relaybus stats --json | jq .handlers', 'relaybus stats --watch 1s'],
      },
    ],
  }),
  async run(args, context) {
    const { values } = parseFlags('stats', optionalValue(args, '--watch', String(DEFAULT_WATCH_MS), isInterval), FLAGS);
    const watchMs = durationFlag('watch', values.watch, 100, 86_400_000);
    return withAdminStore(values, context, async ({ store, schema, target }) => {
      const show = screen(context.stdout);
      const render = async (): Promise<void> => {
        const at = new Date();
        const stats = await store.statistics();
        const subscriptions = await recordedSubscriptions(store);
        const unrun = subscriptions === undefined ? undefined : noLiveWorker(stats, subscriptions, at.getTime());
        const pausedList = await pausedHandlers(store);
        const paused = new Set(pausedList?.map((entry) => entry.handler));
        const pauseNote = pausedNote(pausedList);
        const replays = await runningReplays(store);
        const replayNote = runningReplaysNote(replays, at.getTime());
        if (values.json) {
          const warning = watchMs === undefined ? undefined : noWorkerWarning(stats);
          const json = {
            ...statisticsJson(stats, schema, at, paused),
            ...(pausedList === undefined ? {} : { paused: pausedList.map((entry) => entry.handler) }),
            ...(unrun === undefined ? {} : { noLiveWorker: unrun }),
            ...(replays === undefined ? {} : { replays: replays.map(replayJson) }),
            ...(warning === undefined ? {} : { warning }),
          };
          writeLine(context.stdout, JSON.stringify(json, null, watchMs === undefined ? 2 : undefined));
          return;
        }
        const marked = new Set(unrun);
        const note = noLiveWorkerNote(unrun);
        if (watchMs === undefined) {
          show([
            `relaybus stats  schema "${schema}" on ${target}  ${at.toISOString()}  lanes leased: ${stats.lanesLeased}`,
            '',
            ...statisticsTable(stats, undefined, marked, paused),
            ...(note === undefined ? [] : ['', ...wrap(note, WATCH_WIDTH)]),
            ...(pauseNote === undefined ? [] : ['', ...wrap(pauseNote, WATCH_WIDTH)]),
            ...(replayNote.length === 0 ? [] : ['', ...replayNote.flatMap((line) => wrap(line, WATCH_WIDTH))]),
          ]);
          return;
        }
        const warning = noWorkerWarning(stats);
        show([
          truncate(`relaybus stats  schema "${schema}" on ${target}  lanes leased: ${stats.lanesLeased}`, WATCH_WIDTH),
          `${at.toISOString()}  every ${formatDuration(watchMs)}; Ctrl-C stops`,
          '',
          ...(warning === undefined ? [] : [...wrap(warning, WATCH_WIDTH), '']),
          ...statisticsTable(stats, WATCH_WIDTH, marked, paused).map((line) => truncate(line, WATCH_WIDTH)),
          ...(note === undefined ? [] : ['', ...wrap(note, WATCH_WIDTH).map((line) => truncate(line, WATCH_WIDTH))]),
          ...(pauseNote === undefined
            ? []
            : ['', ...wrap(pauseNote, WATCH_WIDTH).map((line) => truncate(line, WATCH_WIDTH))]),
          ...(replayNote.length === 0
            ? []
            : [
                '',
                ...replayNote.flatMap((line) => wrap(line, WATCH_WIDTH)).map((line) => truncate(line, WATCH_WIDTH)),
              ]),
        ]);
      };
      if (watchMs === undefined) {
        await render();
        return ExitCode.ok;
      }
      const stop = new AbortController();
      const dispose = onShutdownSignals({ graceful: () => stop.abort(), force: () => stop.abort() });
      try {
        while (!stop.signal.aborted) {
          await render();
          await sleep(watchMs, undefined, { signal: stop.signal }).catch(() => {});
        }
      } finally {
        dispose();
      }
      return ExitCode.ok;
    });
  },
};
