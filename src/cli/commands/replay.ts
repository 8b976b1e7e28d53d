import { hostname, userInfo } from 'node:os';
import type {
  ReplayMode,
  ReplayPaceView,
  ReplayParams,
  ReplayPlan,
  ReplayStepResult,
  ReplayView,
} from '../../index.js';
import { MAX_REPLAY_LIVE_WAIT_MS, runReplay } from '../../replay/run-replay.js';
import { MAX_REPLAY_REASON, MAX_REPLAY_STEP } from '../../store/validate-replay.js';
import {
  DATABASE_FLAGS,
  durationFlag,
  HELP_FLAG,
  integerFlag,
  JSON_FLAG,
  parseFlags,
  renderHelp,
  VERBOSE_FLAG,
  type FlagSpecs,
} from '../args.js';
import { withAdminStore } from '../admin-store.js';
import { CliFailure, ExitCode, UsageError, writeLine, type CliContext, type Command } from '../command.js';
import { formatDuration, parseDuration } from '../duration.js';
import { createCliLogger } from '../log.js';
import { createProgress, type Progress } from '../progress.js';
import { onShutdownSignals, SHUTDOWN_SIGNALS, type ShutdownSignal } from '../signals.js';
import { writeTable, type Column } from '../table.js';
import { describeFilter, replayJson, replayProgress, resumeHint } from '../replay-views.js';

/**
 * `relaybus replay backfill|redrive|resume`: start a replay (`store.startReplay`, or only plan it with --dry-run) and
 * drive it to its end (`runReplay`), with progress on stderr; a signal stops driving and says how to go on.
 */

/** How often a progress line is logged when stderr is not a terminal. */
export const PROGRESS_LOG_MS = 5_000;

const DRIVE_FLAGS = {
  batch: {
    type: 'string',
    value: 'n',
    description: `Events taken per step, 1 to ${MAX_REPLAY_STEP.toLocaleString('en-US')}. Default: 500.`,
  },
  'max-outstanding': {
    type: 'string',
    value: 'n',
    description:
      "At most this many of the replay's deliveries unfinished at once (pending or running): the throttle that keeps the workers' backlog bounded. Default: 2000.",
  },
  rate: { type: 'string', value: 'n', description: 'At most this many events per second. Default: no limit.' },
  'live-wait': {
    type: 'string',
    value: 'duration|off',
    description:
      'Yield to live traffic: while a live delivery of another handler has been due this long without starting, the replay slows down (halving its rate, down to 20 events/s), and speeds up again once none has. A duration (20ms, 1s) or off. Default: 20ms.',
  },
} as const satisfies FlagSpecs;

const START_FLAGS = {
  handler: {
    type: 'string',
    multiple: true,
    value: 'name',
    description: 'A handler to replay to (required; repeat the flag for several).',
  },
  type: {
    type: 'string',
    multiple: true,
    value: 'event-type',
    description:
      'Only events of this type (repeatable). Default: every type each handler subscribes to; a type a handler does not subscribe to is refused.',
  },
  since: {
    type: 'string',
    value: 'time',
    description:
      'Only events published at or after this time: ISO 8601 (2025-01-31T00:00:00Z) or a duration back from now (90d, 2h).',
  },
  until: {
    type: 'string',
    value: 'time',
    description: 'Only events published before this time (ISO 8601 or a duration back from now).',
  },
  'from-id': { type: 'string', value: 'id', description: 'Only events whose id is at or after this one (text order).' },
  'to-id': { type: 'string', value: 'id', description: 'Only events whose id is at or before this one (text order).' },
  key: { type: 'string', value: 'key', description: 'Only events of this ordering key.' },
  reason: {
    type: 'string',
    value: 'text',
    description: `Why, for the audit record (relaybus replay list), at most ${MAX_REPLAY_REASON} characters.`,
  },
  'dry-run': {
    type: 'boolean',
    description: 'Print how many deliveries the replay would create per handler, and write nothing.',
  },
  ...DRIVE_FLAGS,
  ...JSON_FLAG,
  ...DATABASE_FLAGS,
  ...VERBOSE_FLAG,
  ...HELP_FLAG,
} as const satisfies FlagSpecs;

const RESUME_FLAGS = {
  ...DRIVE_FLAGS,
  ...JSON_FLAG,
  ...DATABASE_FLAGS,
  ...VERBOSE_FLAG,
  ...HELP_FLAG,
} as const satisfies FlagSpecs;

/** Who asked, for the audit record: `user@host` of the OS. */
export function requestedBy(): string {
  let user: string;
  try {
    user = userInfo().username;
  } catch {
    user = process.env.USER ?? process.env.USERNAME ?? 'unknown';
  }
  return `${user}@${hostname()}`.slice(0, 200);
}

/** A `--since`/`--until` value: ISO 8601 time, or a duration back from `now`. */
export function timeFlag(name: string, raw: string | undefined, now: number): Date | undefined {
  if (raw === undefined) return undefined;
  const back = parseDuration(raw);
  if (back !== undefined) return new Date(now - back);
  const at = /^\d{4}-\d{2}-\d{2}/.test(raw.trim()) ? Date.parse(raw.trim()) : Number.NaN;
  if (Number.isNaN(at))
    throw new UsageError(
      `--${name} must be an ISO 8601 time (2025-01-31T00:00:00Z) or a duration back from now (90d, 2h), got "${raw}"`,
    );
  return new Date(at);
}

/** A positive number flag (`--rate`); undefined when absent. */
function positiveFlag(name: string, raw: string | undefined): number | undefined {
  if (raw === undefined) return undefined;
  const value = /^\d+(\.\d+)?$/.test(raw.trim()) ? Number(raw) : Number.NaN;
  if (!(value > 0) || !Number.isFinite(value))
    throw new UsageError(`--${name} must be a positive number, got "${raw}"`);
  return value;
}

/** A replay id given as an argument; a usage error without one. */
export function replayIdArgument(command: string, positionals: readonly string[]): string {
  const id = positionals[0];
  if (id === undefined) throw new UsageError(`relaybus ${command} needs the replay id: relaybus ${command} <id>`);
  if (!/^[1-9]\d{0,18}$/.test(id))
    throw new UsageError(`the replay id must be a positive number (relaybus replay list shows them), got "${id}"`);
  return id;
}

/** The step size flags, checked. */
function driveOptions(values: {
  readonly batch?: string;
  readonly 'max-outstanding'?: string;
  readonly rate?: string;
  readonly 'live-wait'?: string;
}) {
  const batchSize = integerFlag('batch', values.batch, 1, MAX_REPLAY_STEP);
  const maxOutstanding = integerFlag('max-outstanding', values['max-outstanding'], 1, 10_000_000);
  const rate = positiveFlag('rate', values.rate);
  const rawLiveWait = values['live-wait'];
  const liveWaitMs =
    rawLiveWait?.trim() === 'off'
      ? (false as const)
      : durationFlag('live-wait', rawLiveWait, 1, MAX_REPLAY_LIVE_WAIT_MS);
  return {
    ...(batchSize === undefined ? {} : { batchSize }),
    ...(maxOutstanding === undefined ? {} : { maxOutstanding }),
    ...(rate === undefined ? {} : { rate }),
    ...(liveWaitMs === undefined ? {} : { liveWaitMs }),
  };
}

/** While the replay yields: whose live deliveries it slows down for, and the rate now. */
function yieldNote(step: ReplayStepResult, pace: ReplayPaceView): string {
  if (!pace.yielding) return '';
  const wait = step.liveWaits.find((w) => !pace.leftOut.includes(w.handler));
  const rate = pace.eventsPerSecond === null ? '' : `, ${pace.eventsPerSecond} events/s`;
  return wait === undefined ? '' : `  yielding to ${wait.handler} (waits ${Math.round(wait.ms)} ms${rate})`;
}

/** Progress on stderr: a bar on a terminal, else a line every `PROGRESS_LOG_MS`. */
function progressReporter(
  context: CliContext,
  replay: ReplayView,
): (view: ReplayView, step: ReplayStepResult, pace: ReplayPaceView) => void {
  const label = `replay ${replay.id}`;
  let bar: Progress | undefined;
  let barTotal = -1;
  let lastLine = 0;
  return (view, step, pace) => {
    const suffix = `out ${step.outstanding}${step.waiting === undefined ? '' : `  waiting: ${step.waiting}`}${yieldNote(step, pace)}`;
    if (context.stderr.isTTY) {
      if (bar === undefined || barTotal !== view.total) {
        bar = createProgress(context.stderr, label, view.total);
        barTotal = view.total;
      }
      bar.update(view.created + view.skipped, suffix);
      return;
    }
    const now = performance.now();
    if (now - lastLine < PROGRESS_LOG_MS && view.state === 'running') return;
    lastLine = now;
    writeLine(
      context.stderr,
      `relaybus replay: ${label} ${view.state}: created ${replayProgress(view)}, skipped ${view.skipped}, outstanding ${step.outstanding}${step.waiting === undefined ? '' : `, waiting (${step.waiting})`}${yieldNote(step, pace)}`,
    );
  };
}

/** Drive `replay` to its end; prints the outcome and resolves with the exit code. */
async function drive(
  store: Parameters<typeof runReplay>[0],
  replay: ReplayView,
  options: ReturnType<typeof driveOptions>,
  json: boolean,
  context: CliContext,
): Promise<number> {
  const stop = new AbortController();
  let signalled: ShutdownSignal | undefined;
  const dispose = onShutdownSignals({
    graceful: (signal) => {
      signalled = signal;
      stop.abort();
    },
    force: (signal) => {
      signalled = signal;
      stop.abort();
    },
  });
  const started = performance.now();
  // On a terminal the bar says when the replay yields; in a log, the runner's lines say it (info).
  const logger = createCliLogger({
    level: context.stderr.isTTY ? 'warn' : 'info',
    format: 'pretty',
    stdout: context.stderr,
    stderr: context.stderr,
    prefix: 'relaybus replay',
  });
  let final: ReplayView;
  try {
    final = await runReplay(store, replay.id, {
      ...options,
      signal: stop.signal,
      logger,
      onProgress: progressReporter(context, replay),
    });
  } finally {
    dispose();
  }
  if (context.stderr.isTTY) writeLine(context.stderr);
  if (json) writeLine(context.stdout, JSON.stringify(replayJson(final)));
  const took = formatDuration(performance.now() - started);
  if (final.state === 'running') {
    writeLine(
      context.stderr,
      `relaybus replay: stopped driving replay ${final.id} (${replayProgress(final)} created); it is still running and the live keyed deliveries of ${final.handlers.join(', ')} wait until it ends: ${resumeHint(final.id)}`,
    );
    return signalled === undefined ? ExitCode.failure : SHUTDOWN_SIGNALS[signalled];
  }
  if (final.state === 'cancelled')
    throw new CliFailure(
      `replay ${final.id} was cancelled (by relaybus replay cancel or the dashboard) after creating ${replayProgress(final)} deliveries; they stay`,
    );
  if (!json)
    writeLine(
      context.stdout,
      `replay ${final.id} finished: created ${final.created.toLocaleString('en-US')} deliveries (planned ${final.total.toLocaleString('en-US')}, skipped ${final.skipped}) in ${took}; workers run them, each key's in order`,
    );
  return ExitCode.ok;
}

type PlanRow = { readonly handler: string; readonly deliveries: number };

const PLAN_COLUMNS: readonly Column<PlanRow>[] = [
  { header: 'handler', value: (row) => row.handler },
  { header: 'deliveries', align: 'right', value: (row) => row.deliveries.toLocaleString('en-US') },
];

function printPlan(plan: ReplayPlan, params: ReplayParams, context: CliContext): void {
  writeLine(
    context.stdout,
    `dry run: a ${plan.mode} of ${describeFilter(params)} selects ${plan.events.toLocaleString('en-US')} events and would create:`,
  );
  writeTable(
    context.stdout,
    PLAN_COLUMNS,
    Object.entries(plan.deliveries).map(([handler, deliveries]) => ({ handler, deliveries })),
  );
  writeLine(context.stdout, 'nothing was written (run again without --dry-run to start it)');
}

const MODE_HELP: Readonly<Record<ReplayMode, { summary: string; description: string; example: string }>> = {
  backfill: {
    summary: 'Deliver kept events a handler never had (a new handler), in key order, history before live.',
    description:
      "Create a delivery, for each handler given, of every kept event it subscribes to and never had a delivery of: a handler added after the events were published catches up on their history. Deploy the workers that run the handler first (its subscription must exist). Each key's events are delivered in their original commit order, and while the replay runs the handler's live keyed deliveries wait, so each key's history comes before its live events. The replay is recorded (relaybus replay list) and driven in steps that commit their progress: if this command stops, relaybus replay resume <id> goes on where it stood.",
    example: 'relaybus replay backfill --handler update-search --since 90d --reason "new search index"',
  },
  redrive: {
    summary: 'Run kept events again for handlers that already had them (re-drive a window).',
    description:
      "Create a delivery again, for each handler given, of every selected kept event it had a delivery of and has none pending or dead now (it ran): to run a window of history again after fixing a handler's bug. Start with --dry-run to see how many deliveries it would create. Ordering, the hold of live keyed deliveries, progress and resuming are as for relaybus replay backfill.",
    example: 'relaybus replay redrive --handler send-receipt --since 2h --dry-run',
  },
};

function startCommand(mode: ReplayMode): Command {
  const name = `replay ${mode}`;
  const help = MODE_HELP[mode];
  return {
    name,
    summary: help.summary,
    help: renderHelp({
      usage: [`relaybus ${name} --handler <name> [--type <event-type>] [--since <time>] [--dry-run] [options]`],
      description: help.description,
      flags: START_FLAGS,
      sections: [
        {
          title: 'Exit codes',
          lines: [
            '0    the replay finished (or the dry run printed its plan)',
            '1    refused (a handler has a running replay, a type it does not subscribe to), cancelled, or the database failed',
            '2    usage error',
            '130  stopped driving on SIGINT (the replay stays running: relaybus replay resume <id>)',
            '143  stopped driving on SIGTERM',
          ],
        },
        {
          title: 'Examples',
          lines: [help.example, `relaybus ${name} --handler update-search --type order.placed --json`],
        },
      ],
    }),
    async run(args, context) {
      const { values } = parseFlags(name, args, START_FLAGS);
      const handlers = values.handler;
      if (handlers === undefined || handlers.length === 0)
        throw new UsageError(`relaybus ${name} needs --handler <name> (repeat it for several handlers)`);
      const reason = values.reason;
      if (reason !== undefined && reason.trim() === '')
        throw new UsageError('--reason needs a text, e.g. --reason "new search index" (or leave it out)');
      const now = Date.now();
      const since = timeFlag('since', values.since, now);
      const until = timeFlag('until', values.until, now);
      const throttle = driveOptions(values);
      const params: ReplayParams = {
        mode,
        handlers,
        ...(values.type === undefined ? {} : { eventTypes: values.type }),
        ...(since === undefined ? {} : { since }),
        ...(until === undefined ? {} : { until }),
        ...(values['from-id'] === undefined ? {} : { fromEventId: values['from-id'] }),
        ...(values['to-id'] === undefined ? {} : { toEventId: values['to-id'] }),
        ...(values.key === undefined ? {} : { key: values.key }),
        ...(reason === undefined ? {} : { reason }),
        requestedBy: requestedBy(),
      };
      return withAdminStore(values, context, async ({ store, schema }) => {
        if (values['dry-run']) {
          const plan = await store.planReplay(params);
          if (values.json) writeLine(context.stdout, JSON.stringify({ dryRun: true, ...plan }));
          else printPlan(plan, params, context);
          return ExitCode.ok;
        }
        const replay = await store.startReplay(params);
        writeLine(
          context.stderr,
          `relaybus replay: started replay ${replay.id} in schema "${schema}": ${mode} of ${replay.handlers.join(', ')}, ${replay.total.toLocaleString('en-US')} deliveries planned (${describeFilter(replay.filter)})`,
        );
        return drive(store, replay, throttle, values.json === true, context);
      });
    },
  };
}

/** `relaybus replay backfill`. */
export const replayBackfillCommand = startCommand('backfill');
/** `relaybus replay redrive`. */
export const replayRedriveCommand = startCommand('redrive');

/** `relaybus replay resume`. */
export const replayResumeCommand: Command = {
  name: 'replay resume',
  summary: 'Drive a running replay on from where it stood (after a stop or a crash).',
  help: renderHelp({
    usage: ['relaybus replay resume <id> [--max-outstanding <n>] [options]'],
    description:
      'Drive a running replay to its end from where it stood: its steps committed their progress, so nothing is delivered twice and nothing is left out. A replay that is not running is an error (exit 1).',
    flags: RESUME_FLAGS,
    sections: [
      {
        title: 'Exit codes',
        lines: [
          '0    the replay finished',
          '1    no such replay, it is not running, it was cancelled meanwhile, or the database failed',
          '2    usage error',
          '130  stopped driving on SIGINT (the replay stays running)',
          '143  stopped driving on SIGTERM',
        ],
      },
      { title: 'Examples', lines: ['relaybus replay resume 12', 'relaybus replay resume 12 --rate 200'] },
    ],
  }),
  async run(args, context) {
    const { values, positionals } = parseFlags('replay resume', args, RESUME_FLAGS, { maxPositionals: 1 });
    const id = replayIdArgument('replay resume', positionals);
    const options = driveOptions(values);
    return withAdminStore(values, context, async ({ store, schema }) => {
      const replay = await store.getReplay(id);
      if (replay === null)
        throw new CliFailure(`no replay ${id} in schema "${schema}" (relaybus replay list shows them)`);
      if (replay.state !== 'running')
        throw new CliFailure(`replay ${id} is ${replay.state}, not running; there is nothing to resume`);
      writeLine(
        context.stderr,
        `relaybus replay: resuming replay ${id} (${replay.mode} of ${replay.handlers.join(', ')}): ${replayProgress(replay)} created`,
      );
      return drive(store, replay, options, values.json === true, context);
    });
  },
};
