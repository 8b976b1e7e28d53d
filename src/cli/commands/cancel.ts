import type { CancelResult } from '../../index.js';
import { DATABASE_FLAGS, HELP_FLAG, JSON_FLAG, parseFlags, renderHelp, VERBOSE_FLAG, type FlagSpecs } from '../args.js';
import { withAdminStore } from '../admin-store.js';
import { CliFailure, ExitCode, UsageError, writeLine, type Command } from '../command.js';

/**
 * `relaybus cancel`: withdraw an event's pending deliveries that no worker runs (`store.cancel()`), and say what became
 * of each handler's delivery, so an operator knows whether the event ran anyway.
 */

const FLAGS = {
  'event-id': { type: 'string', value: 'id', description: 'The event whose pending deliveries to cancel (required).' },
  handler: { type: 'string', value: 'name', description: "Cancel only this handler's delivery." },
  ...JSON_FLAG,
  ...DATABASE_FLAGS,
  ...VERBOSE_FLAG,
  ...HELP_FLAG,
} as const satisfies FlagSpecs;

/** What each outcome means, as the command prints it. */
const SAYS = {
  cancelled: 'cancelled: it will not run',
  running: 'not cancelled: a worker is running it (it runs to its end)',
  dead: 'not cancelled: a dead letter (relaybus dead requeue runs it again, relaybus purge removes it)',
  finished: 'nothing to cancel: it already ran (or was cancelled before)',
} as const;

function print(result: CancelResult, write: (line: string) => void): void {
  for (const delivery of result.deliveries)
    write(
      `${delivery.handler}${delivery.deliveryId === null ? '' : ` (delivery ${delivery.deliveryId})`}: ${SAYS[delivery.outcome]}`,
    );
}

/** `relaybus cancel`. */
export const cancelCommand: Command = {
  name: 'cancel',
  summary: "Cancel an event's pending deliveries (a scheduled event, a delivery waiting for its turn or a retry).",
  help: renderHelp({
    usage: ['relaybus cancel --event-id <id> [--handler <name>] [options]'],
    description:
      "Withdraw the pending deliveries of an event that no worker is running: a scheduled event that is not due yet, a delivery waiting behind its key's earlier ones, one waiting for a retry. A delivery a worker claims at the same moment either runs or is cancelled, never both. For each handler the event has, says what became of its delivery: cancelled, running (a worker holds it: it runs to its end), dead (a dead letter, left alone) or already finished. Publishing the same event id again does not bring a cancelled delivery back.",
    flags: FLAGS,
    sections: [
      {
        title: 'Exit codes',
        lines: [
          '0  every delivery of the event (of --handler) that had not run was cancelled',
          '1  no such event, or a delivery could not be cancelled (it runs, ran, or is dead), or the database failed',
          '2  usage error',
        ],
      },
      {
        title: 'Examples',
        lines: [
          'relaybus cancel --event-id reminder-o-1',
          'relaybus cancel --event-id order-o-1 --handler send-receipt --json',
        ],
      },
    ],
  }),
  async run(args, context) {
    const { values } = parseFlags('cancel', args, FLAGS);
    const eventId = values['event-id'];
    if (eventId === undefined) throw new UsageError('relaybus cancel needs --event-id <id>: the event to cancel.');
    const handler = values.handler;
    return withAdminStore(values, context, async ({ store, schema }) => {
      const result = await store.cancel({ eventId, ...(handler === undefined ? {} : { handler }) });
      if (values.json) writeLine(context.stdout, JSON.stringify({ eventId, ...result }));
      else print(result, (line) => writeLine(context.stdout, line));
      const which = handler === undefined ? `event ${eventId}` : `a delivery of event ${eventId} to handler ${handler}`;
      if (!result.found)
        throw new CliFailure(
          `no ${which} in schema "${schema}": the id is unknown, retention purged it, or it was published without an id of yours and has finished (such an event keeps no record once delivered)`,
        );
      const notCancelled = result.deliveries.filter((delivery) => delivery.outcome !== 'cancelled');
      if (notCancelled.length > 0)
        throw new CliFailure(
          `${notCancelled.length} of the ${result.deliveries.length} deliveries of ${which} could not be cancelled (see above)`,
        );
      return ExitCode.ok;
    });
  },
};
