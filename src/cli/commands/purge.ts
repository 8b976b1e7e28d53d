import {
  DATABASE_FLAGS,
  durationFlag,
  HELP_FLAG,
  JSON_FLAG,
  parseFlags,
  renderHelp,
  VERBOSE_FLAG,
  type FlagSpecs,
} from '../args.js';
import { withAdminStore } from '../admin-store.js';
import { ExitCode, writeLine, type Command } from '../command.js';
import { formatDuration } from '../duration.js';

/**
 * `relaybus purge`: retention (`store.purgeExpired()`). Completed deliveries are already deleted;
 * what accumulates is events whose deliveries are all gone, completion history, and dead letters.
 */

/** Default retention of events without deliveries and of completion history. */
export const DEFAULT_COMPLETED_RETENTION = '7d';
/** Default retention of dead deliveries. */
export const DEFAULT_DEAD_RETENTION = '30d';

const MAX_RETENTION_MS = 100 * 365 * 86_400_000;

const FLAGS = {
  'completed-retention': {
    type: 'string',
    value: 'time',
    description: `Delete events with no delivery left, and completion history, older than this. Default: ${DEFAULT_COMPLETED_RETENTION}.`,
  },
  'dead-retention': {
    type: 'string',
    value: 'time',
    description: `Delete dead deliveries that died longer ago than this. Default: ${DEFAULT_DEAD_RETENTION}.`,
  },
  ...JSON_FLAG,
  ...DATABASE_FLAGS,
  ...VERBOSE_FLAG,
  ...HELP_FLAG,
} as const satisfies FlagSpecs;

/** `relaybus purge`. */
export const purgeCommand: Command = {
  name: 'purge',
  summary: 'Delete old events, completion history and dead letters (retention).',
  help: renderHelp({
    usage: ['relaybus purge [--completed-retention 7d] [--dead-retention 30d] [options]'],
    description:
      'Apply retention. Completed deliveries are deleted when they complete; what remains to clean up is events whose deliveries are all gone (kept for inbox deduplication: publishing the same event id again within the retention adds no duplicate), completion history (with completionHistory on), and dead deliveries. Durations: 500ms, 30s, 15m, 12h, 7d, 2w, or combined like 1d12h. Run it from cron.',
    flags: FLAGS,
    sections: [
      {
        title: 'Exit codes',
        lines: ['0  purged (also when nothing was old enough)', '1  the database failed', '2  usage error'],
      },
      {
        title: 'Examples',
        lines: ['relaybus purge', 'relaybus purge --completed-retention 2d --dead-retention 90d --json'],
      },
    ],
  }),
  async run(args, context) {
    const { values } = parseFlags('purge', args, FLAGS);
    const completedRetentionMs = durationFlag(
      'completed-retention',
      values['completed-retention'] ?? DEFAULT_COMPLETED_RETENTION,
      0,
      MAX_RETENTION_MS,
    )!;
    const deadRetentionMs = durationFlag(
      'dead-retention',
      values['dead-retention'] ?? DEFAULT_DEAD_RETENTION,
      0,
      MAX_RETENTION_MS,
    )!;
    return withAdminStore(values, context, async ({ store, schema }) => {
      const result = await store.purgeExpired({ completedRetentionMs, deadRetentionMs });
      if (values.json) {
        writeLine(context.stdout, JSON.stringify({ ...result, completedRetentionMs, deadRetentionMs }));
      } else {
        writeLine(
          context.stdout,
          `purged from schema "${schema}": ${result.events} events, ${result.deadDeliveries} dead deliveries, ${result.history} completion-history rows ` +
            `(completed retention ${formatDuration(completedRetentionMs)}, dead retention ${formatDuration(deadRetentionMs)})`,
        );
      }
      return ExitCode.ok;
    });
  },
};
