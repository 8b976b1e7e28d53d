import { MAX_PAUSE_REASON } from '../../store/validate.js';
import { DATABASE_FLAGS, HELP_FLAG, JSON_FLAG, parseFlags, renderHelp, VERBOSE_FLAG, type FlagSpecs } from '../args.js';
import { withAdminStore } from '../admin-store.js';
import { CliFailure, ExitCode, UsageError, writeLine, type Command } from '../command.js';
import { formatDuration } from '../duration.js';
import { writeTable, type Column } from '../table.js';

/**
 * `relaybus handlers pause`, `relaybus handlers resume` and `relaybus handlers list`: pause a handler for every worker
 * (`store.pauseHandler()`: no claim takes its deliveries, which keep being published and wait in order), resume it, and
 * list the paused ones.
 */

const PAUSE_FLAGS = {
  reason: {
    type: 'string',
    value: 'text',
    description: `Why, for whoever looks (relaybus handlers list), at most ${MAX_PAUSE_REASON} characters.`,
  },
  ...JSON_FLAG,
  ...DATABASE_FLAGS,
  ...VERBOSE_FLAG,
  ...HELP_FLAG,
} as const satisfies FlagSpecs;

const RESUME_FLAGS = {
  ...JSON_FLAG,
  ...DATABASE_FLAGS,
  ...VERBOSE_FLAG,
  ...HELP_FLAG,
} as const satisfies FlagSpecs;

const LIST_FLAGS = RESUME_FLAGS;

/** The handler named after the subcommand; a usage error without it. */
function handlerArgument(command: string, positionals: readonly string[]): string {
  const handler = positionals[0];
  if (handler === undefined || handler.trim() === '')
    throw new UsageError(`relaybus ${command} needs the handler name: relaybus ${command} <name>`);
  return handler;
}

/** `relaybus handlers pause`. */
export const handlersPauseCommand: Command = {
  name: 'handlers pause',
  summary: 'Pause a handler for every worker: its deliveries wait, in order, until resumed.',
  help: renderHelp({
    usage: ['relaybus handlers pause <name> [--reason <text>] [options]'],
    description:
      "Stop every worker from claiming the handler's deliveries, from each worker's next claim on, without stopping or redeploying them: during a downstream outage, or to hold a handler back while a fix is deployed. Publishing is unchanged: its deliveries are still created and wait, in each key's order; the handler's deliveries a worker already claimed run to their end, and other handlers' deliveries of the same events keep flowing. relaybus handlers resume lets them run again. Pausing a handler that is already paused changes nothing (its first pause and reason are kept).",
    flags: PAUSE_FLAGS,
    sections: [
      {
        title: 'Exit codes',
        lines: ['0  paused, or already paused', '1  the database failed', '2  usage error'],
      },
      {
        title: 'Examples',
        lines: ['relaybus handlers pause send-sms --reason "SMS provider outage"', 'relaybus handlers resume send-sms'],
      },
    ],
  }),
  async run(args, context) {
    const { values, positionals } = parseFlags('handlers pause', args, PAUSE_FLAGS, { maxPositionals: 1 });
    const handler = handlerArgument('handlers pause', positionals);
    const reason = values.reason;
    if (reason !== undefined && reason.trim() === '')
      throw new UsageError('--reason needs a text, e.g. --reason "SMS provider outage" (or leave it out)');
    if (reason !== undefined && reason.length > MAX_PAUSE_REASON)
      throw new UsageError(`--reason must be at most ${MAX_PAUSE_REASON} characters, got ${reason.length}`);
    return withAdminStore(values, context, async ({ store, schema }) => {
      const paused = await store.pauseHandler({ handler, ...(reason === undefined ? {} : { reason }) });
      const current = (await store.listPausedHandlers()).find((entry) => entry.handler === handler);
      if (values.json) {
        writeLine(
          context.stdout,
          JSON.stringify({
            handler,
            paused,
            pausedAt: current?.pausedAt.toISOString() ?? null,
            reason: current?.reason ?? null,
          }),
        );
        return ExitCode.ok;
      }
      if (paused)
        writeLine(
          context.stdout,
          `paused ${handler} in schema "${schema}": no worker claims its deliveries from its next claim on; they wait, in order, until relaybus handlers resume ${handler}`,
        );
      else
        writeLine(
          context.stdout,
          `${handler} was already paused${current === undefined ? '' : ` (since ${current.pausedAt.toISOString()}${current.reason === null ? '' : `: ${current.reason}`})`}; nothing changed`,
        );
      return ExitCode.ok;
    });
  },
};

/** `relaybus handlers resume`. */
export const handlersResumeCommand: Command = {
  name: 'handlers resume',
  summary: "Resume a paused handler: its deliveries are claimed again, in each key's order.",
  help: renderHelp({
    usage: ['relaybus handlers resume <name> [options]'],
    description:
      "Let every worker claim the paused handler's deliveries again, from its next claim on: the ones that waited run in each key's order. A handler that is not paused is an error (exit 1): relaybus handlers list shows the paused ones.",
    flags: RESUME_FLAGS,
    sections: [
      {
        title: 'Exit codes',
        lines: [
          '0  resumed',
          '1  the handler is not paused (nothing changed), or the database failed',
          '2  usage error',
        ],
      },
      { title: 'Examples', lines: ['relaybus handlers resume send-sms'] },
    ],
  }),
  async run(args, context) {
    const { values, positionals } = parseFlags('handlers resume', args, RESUME_FLAGS, { maxPositionals: 1 });
    const handler = handlerArgument('handlers resume', positionals);
    return withAdminStore(values, context, async ({ store, schema }) => {
      const resumed = await store.resumeHandler({ handler });
      if (values.json) writeLine(context.stdout, JSON.stringify({ handler, resumed }));
      if (!resumed)
        throw new CliFailure(
          `${handler} is not paused in schema "${schema}"; nothing changed (relaybus handlers list shows the paused handlers)`,
        );
      if (!values.json)
        writeLine(context.stdout, `resumed ${handler}: workers claim its deliveries again from their next claim on`);
      return ExitCode.ok;
    });
  },
};

type Row = { readonly handler: string; readonly pausedAt: Date; readonly reason: string | null; readonly now: number };

const COLUMNS: readonly Column<Row>[] = [
  { header: 'handler', value: (row) => row.handler },
  { header: 'paused at', value: (row) => row.pausedAt.toISOString() },
  {
    header: 'for',
    align: 'right',
    value: (row) => formatDuration(Math.max(0, row.now - row.pausedAt.getTime())),
  },
  { header: 'reason', value: (row) => row.reason ?? '-', shrink: true },
];

/** `relaybus handlers list`. */
export const handlersListCommand: Command = {
  name: 'handlers list',
  summary: 'The paused handlers, with when and why each was paused.',
  help: renderHelp({
    usage: ['relaybus handlers list [--json] [options]'],
    description:
      'List the paused handlers by name, with when each was paused, for how long, and the reason given. relaybus stats marks them too.',
    flags: LIST_FLAGS,
    sections: [
      {
        title: 'Exit codes',
        lines: ['0  listed (also when none is paused)', '1  the database failed', '2  usage error'],
      },
      { title: 'Examples', lines: ['relaybus handlers list', 'relaybus handlers list --json'] },
    ],
  }),
  async run(args, context) {
    const { values } = parseFlags('handlers list', args, LIST_FLAGS);
    return withAdminStore(values, context, async ({ store, schema }) => {
      const paused = await store.listPausedHandlers();
      if (values.json) {
        writeLine(
          context.stdout,
          JSON.stringify(
            paused.map((entry) => ({ ...entry, pausedAt: entry.pausedAt.toISOString() })),
            null,
            2,
          ),
        );
        return ExitCode.ok;
      }
      if (paused.length === 0) {
        writeLine(context.stdout, `no paused handler in schema "${schema}"`);
        return ExitCode.ok;
      }
      const now = Date.now();
      writeTable(
        context.stdout,
        COLUMNS,
        paused.map((entry) => ({ ...entry, now })),
      );
      return ExitCode.ok;
    });
  },
};
